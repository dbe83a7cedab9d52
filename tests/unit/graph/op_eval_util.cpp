// The pass tests' evaluator (op_eval_util.h).
#include "op_eval_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>

#include "edgeseek/internal/core/error.h"

namespace es::test {
namespace {

int64_t Numel(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::vector<int64_t> Strides(const std::vector<int64_t>& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (int i = int(s.size()) - 2; i >= 0; --i) st[size_t(i)] = st[size_t(i + 1)] * s[size_t(i + 1)];
  return st;
}

Val Broadcast2(const Val& a, const Val& b, const std::function<float(float, float)>& f) {
  const size_t r = std::max(a.shape.size(), b.shape.size());
  auto pad = [&](std::vector<int64_t> s) {
    s.insert(s.begin(), r - s.size(), 1);
    return s;
  };
  const auto sa = pad(a.shape), sb = pad(b.shape);
  Val o;
  for (size_t i = 0; i < r; ++i) {
    ES_CHECK(sa[i] == sb[i] || sa[i] == 1 || sb[i] == 1, "broadcast mismatch");
    o.shape.push_back(std::max(sa[i], sb[i]));
  }
  o.v.resize(size_t(Numel(o.shape)));
  const auto so = Strides(o.shape), ta = Strides(sa), tb = Strides(sb);
  for (int64_t i = 0; i < int64_t(o.v.size()); ++i) {
    int64_t ia = 0, ib = 0, rem = i;
    for (size_t d = 0; d < r; ++d) {
      const int64_t c = rem / so[d];
      rem %= so[d];
      ia += (sa[d] == 1 ? 0 : c) * ta[d];
      ib += (sb[d] == 1 ? 0 : c) * tb[d];
    }
    o.v[size_t(i)] = f(a.v[size_t(ia)], b.v[size_t(ib)]);
  }
  return o;
}

Val Map(const Val& a, const std::function<float(float)>& f) {
  Val o = a;
  for (float& x : o.v) x = f(x);
  return o;
}

// Applies f to each row (last axis) of a.
Val Rows(const Val& a, const std::function<void(const float*, float*, int64_t)>& f) {
  Val o = a;
  const int64_t n = a.shape.back();
  for (int64_t r = 0; r < Numel(a.shape) / n; ++r) f(a.v.data() + r * n, o.v.data() + r * n, n);
  return o;
}

Val MatMul(const Val& a, const Val& b) {
  const size_t ra = a.shape.size(), rb = b.shape.size();
  const int64_t M = a.shape[ra - 2], K = a.shape[ra - 1], N = b.shape[rb - 1];
  ES_CHECK(b.shape[rb - 2] == K, "matmul K mismatch");
  std::vector<int64_t> batch(a.shape.begin(), a.shape.end() - 2);
  const int64_t nb = Numel(batch),
                bb = Numel(std::vector<int64_t>(b.shape.begin(), b.shape.end() - 2));
  Val o;
  o.shape = batch;
  o.shape.push_back(M);
  o.shape.push_back(N);
  o.v.assign(size_t(nb * M * N), 0.0f);
  for (int64_t x = 0; x < nb; ++x)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k)
          s += double(a.v[size_t((x * M + m) * K + k)]) *
               b.v[size_t(((bb == 1 ? 0 : x) * K + k) * N + n)];
        o.v[size_t((x * M + m) * N + n)] = float(s);
      }
  return o;
}

Val Transpose(const Val& a, const std::vector<int64_t>& perm) {
  Val o;
  for (int64_t p : perm) o.shape.push_back(a.shape[size_t(p)]);
  o.v.resize(a.v.size());
  const auto sa = Strides(a.shape), so = Strides(o.shape);
  for (int64_t i = 0; i < int64_t(o.v.size()); ++i) {
    int64_t rem = i, src = 0;
    for (size_t d = 0; d < perm.size(); ++d) {
      src += (rem / so[d]) * sa[size_t(perm[d])];
      rem %= so[d];
    }
    o.v[size_t(i)] = a.v[size_t(src)];
  }
  return o;
}

// Slice or concat along the last axis only (what the decompositions use).
Val SliceLast(const Val& a, int64_t s, int64_t e) {
  const int64_t n = a.shape.back();
  e = std::min(e, n);
  Val o = a;
  o.shape.back() = e - s;
  o.v.clear();
  for (int64_t r = 0; r < Numel(a.shape) / n; ++r)
    for (int64_t i = s; i < e; ++i) o.v.push_back(a.v[size_t(r * n + i)]);
  return o;
}

Val ConcatLast(const Val& a, const Val& b) {
  const int64_t na = a.shape.back(), nb = b.shape.back();
  Val o = a;
  o.shape.back() = na + nb;
  o.v.clear();
  for (int64_t r = 0; r < Numel(a.shape) / na; ++r) {
    for (int64_t i = 0; i < na; ++i) o.v.push_back(a.v[size_t(r * na + i)]);
    for (int64_t i = 0; i < nb; ++i) o.v.push_back(b.v[size_t(r * nb + i)]);
  }
  return o;
}

Val RmsNorm(const Val& x, const Val& w, float eps) {
  return Rows(x, [&](const float* in, float* out, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += double(in[i]) * in[i];
    const float r = 1.0f / std::sqrt(float(s / double(n)) + eps);
    for (int64_t i = 0; i < n; ++i) out[i] = in[i] * r * w.v[size_t(i)];
  });
}

float Sig(float x) { return 1.0f / (1.0f + std::exp(-x)); }

Val Softmax(const Val& x) {
  return Rows(x, [](const float* in, float* out, int64_t n) {
    const float m = *std::max_element(in, in + n);
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += std::exp(double(in[i] - m));
    for (int64_t i = 0; i < n; ++i) out[i] = float(std::exp(double(in[i] - m)) / s);
  });
}

}  // namespace

std::map<std::string, Val> Evaluate(const OpGraph& g, const std::map<std::string, Val>& inputs) {
  std::map<std::string, Val> env = inputs;
  for (const auto& [name, t] : g.constants) env[name] = Val{t.shape, ToF32(t)};
  for (const auto& [name, v] : g.int_constants)
    env[name] = Val{{int64_t(v.size())}, std::vector<float>(v.begin(), v.end())};
  auto in = [&](const OpNode& n, size_t i) -> const Val& {
    auto it = env.find(n.In(i));
    ES_CHECK(it != env.end(), n.Where(), ": input ", i, " '", n.In(i), "' has no value");
    return it->second;
  };
  auto ints = [&](const OpNode& n, size_t i) { return g.IntValues(n.In(i)).value(); };
  for (const OpNode& n : g.nodes) {
    Val o;
    const std::string& op = n.op;
    if (op == "Add")
      o = Broadcast2(in(n, 0), in(n, 1), [](float a, float b) { return a + b; });
    else if (op == "Sub")
      o = Broadcast2(in(n, 0), in(n, 1), [](float a, float b) { return a - b; });
    else if (op == "Mul")
      o = Broadcast2(in(n, 0), in(n, 1), [](float a, float b) { return a * b; });
    else if (op == "Div")
      o = Broadcast2(in(n, 0), in(n, 1), [](float a, float b) { return a / b; });
    else if (op == "Pow")
      o = Broadcast2(in(n, 0), in(n, 1), [](float a, float b) { return std::pow(a, b); });
    else if (op == "Sqrt")
      o = Map(in(n, 0), [](float a) { return std::sqrt(a); });
    else if (op == "Reciprocal")
      o = Map(in(n, 0), [](float a) { return 1.0f / a; });
    else if (op == "Neg")
      o = Map(in(n, 0), [](float a) { return -a; });
    else if (op == "Sigmoid")
      o = Map(in(n, 0), Sig);
    else if (op == "Cast" || op == "Identity")
      o = in(n, 0);
    else if (op == "ReduceMean") {
      o = Rows(in(n, 0), [](const float* a, float* out, int64_t k) {
        double s = 0;
        for (int64_t i = 0; i < k; ++i) s += a[i];
        out[0] = float(s / double(k));
      });
      o = SliceLast(o, 0, 1);
    } else if (op == "Slice")
      o = SliceLast(in(n, 0), ints(n, 1)[0], ints(n, 2)[0]);
    else if (op == "Concat")
      o = ConcatLast(in(n, 0), in(n, 1));
    else if (op == "MatMul")
      o = MatMul(in(n, 0), in(n, 1));
    else if (op == "Transpose")
      o = Transpose(in(n, 0), n.Ints("perm"));
    else if (op == "Softmax")
      o = Softmax(in(n, 0));
    else if (op == "RmsNorm" || op == "SimplifiedLayerNormalization")
      o = RmsNorm(in(n, 0), in(n, 1), n.Float("epsilon", 1e-5f));
    else if (op == "SkipSimplifiedLayerNormalization") {
      const Val s = Broadcast2(in(n, 0), in(n, 1), [](float a, float b) { return a + b; });
      env[n.outputs[0]] = RmsNorm(s, in(n, 2), n.Float("epsilon", 1e-5f));
      if (n.outputs.size() > 3 && !n.outputs[3].empty()) env[n.outputs[3]] = s;
      continue;
    } else if (op == "Silu")
      o = Map(in(n, 0), [](float a) { return a * Sig(a); });
    else if (op == "SwiGLU")
      o = Broadcast2(in(n, 0), in(n, 1), [](float a, float b) { return a * Sig(a) * b; });
    else if (op == "Rope") {
      const Val& x = in(n, 0);
      const int64_t d = x.shape.back();
      const Val rh = ConcatLast(Map(SliceLast(x, d / 2, d), [](float a) { return -a; }),
                                SliceLast(x, 0, d / 2));
      o = Broadcast2(Broadcast2(x, in(n, 1), [](float a, float b) { return a * b; }),
                     Broadcast2(rh, in(n, 2), [](float a, float b) { return a * b; }),
                     [](float a, float b) { return a + b; });
    } else if (op == "Attention") {
      const float scale = n.Float("scale", 1.0f);
      Val s = Map(MatMul(in(n, 0), Transpose(in(n, 1), {0, 1, 3, 2})),
                  [&](float a) { return a * scale; });
      if (!n.In(3).empty()) s = Broadcast2(s, in(n, 3), [](float a, float b) { return a + b; });
      o = MatMul(Softmax(s), in(n, 2));
    } else {
      Fail("evaluator: ", n.Where(), " is not implemented");
    }
    env[n.outputs[0]] = std::move(o);
  }
  std::map<std::string, Val> out;
  for (const OpValueInfo& v : g.outputs) out[v.name] = env.at(v.name);
  return out;
}

std::string GraphMaker::Input(const std::string& name) {
  OpValueInfo v;
  v.name = name;
  g.inputs.push_back(v);
  return name;
}

std::string GraphMaker::Const(const std::string& name, const std::vector<int64_t>& shape,
                              const std::vector<float>& v) {
  Tensor t = AllocTensor(name, DType::kF32, shape);
  std::copy(v.begin(), v.end(), static_cast<float*>(MutableData(t)));
  g.constants[name] = std::move(t);
  return name;
}

std::string GraphMaker::Ints(const std::string& name, const std::vector<int64_t>& v) {
  g.int_constants[name] = v;
  return name;
}

std::string GraphMaker::Op(const std::string& op, const std::vector<std::string>& in,
                           std::map<std::string, OpAttr> attrs, const std::string& domain) {
  OpNode n;
  n.name = "/" + op + "_" + std::to_string(next_);
  n.op = op;
  n.domain = domain;
  n.inputs = in;
  n.outputs = {"t" + std::to_string(next_++)};
  n.attrs = std::move(attrs);
  g.nodes.push_back(n);
  g.Reindex();
  return n.outputs[0];
}

void GraphMaker::Output(const std::string& v) {
  OpValueInfo o;
  o.name = v;
  g.outputs.push_back(o);
  g.Reindex();
}

int GraphMaker::Count(const std::string& op) const {
  int c = 0;
  for (const OpNode& n : g.nodes) c += n.op == op;
  return c;
}

Val RandomVal(const std::vector<int64_t>& shape, uint64_t seed, float scale) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(-scale, scale);
  Val v{shape, {}};
  v.v.resize(size_t(Numel(shape)));
  for (float& x : v.v) x = d(rng);
  return v;
}

double MaxDiff(const Val& a, const Val& b) {
  EXPECT_EQ(a.shape, b.shape);
  double m = 0;
  for (size_t i = 0; i < std::min(a.v.size(), b.v.size()); ++i)
    m = std::max(m, double(std::fabs(a.v[i] - b.v[i])));
  return m;
}

}  // namespace es::test
