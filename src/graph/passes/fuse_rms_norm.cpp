// Pass: decomposed RMSNorm -> es.RmsNorm(x, w). The torch exports of Llama/Qwen2's RMSNorm
// (hidden.float(); var = hidden.pow(2).mean(-1, keepdim=True); hidden * rsqrt(var + eps); w * h):
//   w * (x * Reciprocal(Sqrt(ReduceMean(Pow(x, 2)) + eps)))      TorchScript
//   w * (x * (1 / Sqrt(...)))  or  w * (x / Sqrt(...))             other spellings of rsqrt
// with Mul(x, x) for the square, any operand order and Casts anywhere in between.
#include "edgeseek/internal/graph/passes/passes.h"

namespace es {
namespace {

using pattern::Def;
using pattern::EitherOrder;
using pattern::Through;

// mean(x^2) + eps: returns x (through casts) and eps, or false.
bool MatchMeanSquarePlusEps(const OpGraph& g, const std::string& v, std::string* x, float* eps) {
  const OpNode* add = Def(g, v, "Add");
  if (!add) return false;
  return EitherOrder(*add, [&](const std::string& a, const std::string& b) {
    const auto e = g.Scalar(Through(g, b));
    const OpNode* mean = Def(g, a, "ReduceMean");
    if (!e || !mean || mean->Int("keepdims", 1) != 1) return false;
    std::vector<int64_t> axes = mean->Ints("axes");
    if (axes.empty() && !mean->In(1).empty())
      axes = g.IntValues(mean->In(1)).value_or(std::vector<int64_t>{});
    if (axes.size() != 1 || !(axes[0] == -1 || axes[0] >= 2)) return false;
    const std::string sq = mean->In(0);
    if (const OpNode* pw = Def(g, sq, "Pow"); pw && pattern::ScalarIs(g, pw->In(1), 2.0)) {
      *x = Through(g, pw->In(0));
    } else if (const OpNode* mul = Def(g, sq, "Mul");
               mul && Through(g, mul->In(0)) == Through(g, mul->In(1))) {
      *x = Through(g, mul->In(0));
    } else {
      return false;
    }
    *eps = float(*e);
    return true;
  });
}

// x * rsqrt(mean(x^2) + eps) in one of its spellings: returns x and eps.
bool MatchNormalized(const OpGraph& g, const std::string& v, std::string* x, float* eps) {
  if (const OpNode* div = Def(g, v, "Div")) {  // x / Sqrt(...)
    const OpNode* sq = Def(g, div->In(1), "Sqrt");
    return sq && MatchMeanSquarePlusEps(g, sq->In(0), x, eps) && Through(g, div->In(0)) == *x;
  }
  const OpNode* mul = Def(g, v, "Mul");
  if (!mul) return false;
  return EitherOrder(*mul, [&](const std::string& a, const std::string& r) {
    std::string sqrt_in;
    if (const OpNode* rec = Def(g, r, "Reciprocal")) {
      const OpNode* sq = Def(g, rec->In(0), "Sqrt");
      if (!sq) return false;
      sqrt_in = sq->In(0);
    } else if (const OpNode* d = Def(g, r, "Div"); d && pattern::ScalarIs(g, d->In(0), 1.0)) {
      const OpNode* sq = Def(g, d->In(1), "Sqrt");
      if (!sq) return false;
      sqrt_in = sq->In(0);
    } else {
      return false;
    }
    return MatchMeanSquarePlusEps(g, sqrt_in, x, eps) && Through(g, a) == *x;
  });
}

}  // namespace

int FuseRmsNorm(OpGraph& g) {
  int rewrites = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const OpNode& root = g.nodes[i];
    if (!root.Is("Mul") || root.outputs.size() != 1) continue;
    std::string x, w;
    float eps = 0;
    const bool ok = EitherOrder(root, [&](const std::string& a, const std::string& b) {
      const Tensor* wt = g.Constant(Through(g, a));
      if (!wt || wt->shape.size() != 1) return false;
      w = Through(g, a);
      return MatchNormalized(g, b, &x, &eps);
    });
    if (!ok) continue;
    OpNode& n = pattern::Fuse(g, int(i), "RmsNorm", {x, w});
    n.attrs["epsilon"] = eps;
    ++rewrites;
  }
  return rewrites;
}

}  // namespace es
