// Plain reference ops (see reference.h). Accumulation in double where it is free to do so:
// these are the yardstick, not the fast path.
#include "cpu/reference.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/quant/blocks.h"

namespace es::ref {
namespace {
// Row n of a weight tensor as f32.
void WeightRow(const Tensor& W, int64_t n, float* dst) {
  const int64_t K = W.cols();
  const void* src = W.bytes() + size_t(n) * W.row_bytes();
  if (IsQuantized(W.dtype))
    Dequantize(W.dtype, src, dst, K);
  else
    ConvertRowToF32(W.dtype, src, dst, K);
}
float Silu(float x) { return x / (1.0f + std::exp(-x)); }
}  // namespace

void Embed(const Tensor& E, const int32_t* ids, int64_t T, float* out) {
  const int64_t D = E.cols();
  for (int64_t t = 0; t < T; ++t) {
    ES_CHECK(ids[t] >= 0 && ids[t] < E.rows(), "token id ", ids[t], " is outside the vocabulary (",
             E.rows(), " tokens)");
    WeightRow(E, ids[t], out + t * D);
  }
}

void RmsNorm(const float* x, const float* w, int64_t R, int64_t D, float eps, float* out) {
  for (int64_t r = 0; r < R; ++r) {
    const float* xr = x + r * D;
    double ss = 0;
    for (int64_t i = 0; i < D; ++i) ss += double(xr[i]) * xr[i];
    const float inv = float(1.0 / std::sqrt(ss / double(D) + eps));
    for (int64_t i = 0; i < D; ++i) out[r * D + i] = w[i] * (xr[i] * inv);
  }
}

void MatMul(const float* x, int64_t R, int64_t K, const Tensor& W, const float* bias, float* y) {
  ES_ASSERT(W.cols() == K);
  const int64_t N = W.rows();
  std::vector<float> row(static_cast<size_t>(K));
  for (int64_t n = 0; n < N; ++n) {
    WeightRow(W, n, row.data());
    for (int64_t r = 0; r < R; ++r) {
      double acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += double(x[r * K + k]) * row[size_t(k)];
      y[r * N + n] = float(acc + (bias ? bias[n] : 0.0f));
    }
  }
}

void Add(const float* a, const float* b, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void SwiGLU(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = Silu(gate[i]) * up[i];
}

void Rope(const float* x, int64_t R, int64_t H, int64_t hd, int64_t off, const RopeTable& rope,
          const int32_t* pos, float* out) {
  const int64_t half = rope.dim / 2;
  if (out != x) std::copy(x, x + R * H * hd, out);
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t h = 0; h < H; ++h) {
      float* v = out + r * H * hd + h * hd + off;
      for (int64_t i = 0; i < half; ++i) {
        const float angle = float(pos[r]) * rope.inv_freq[size_t(i)];
        const float c = std::cos(angle) * rope.attention_factor;
        const float s = std::sin(angle) * rope.attention_factor;
        float *a, *b;
        if (rope.mode == RopeMode::kNeox) {
          a = v + i;
          b = v + i + half;
        } else {
          a = v + 2 * i;
          b = v + 2 * i + 1;
        }
        const float x0 = *a, x1 = *b;
        *a = x0 * c - x1 * s;
        *b = x1 * c + x0 * s;
      }
    }
  }
}

void AttentionRow(const float* q, const float* K, const float* V, int64_t n_ctx, int64_t Hq,
                  int64_t Hkv, int64_t dk, int64_t dv, float scale, float* out) {
  const int64_t group = Hq / Hkv;
  std::vector<double> p(static_cast<size_t>(n_ctx));
  for (int64_t h = 0; h < Hq; ++h) {
    const int64_t kh = h / group;
    const float* qh = q + h * dk;
    double mx = -INFINITY;
    for (int64_t s = 0; s < n_ctx; ++s) {
      const float* ks = K + s * Hkv * dk + kh * dk;
      double d = 0;
      for (int64_t i = 0; i < dk; ++i) d += double(qh[i]) * ks[i];
      p[size_t(s)] = d * scale;
      mx = std::max(mx, p[size_t(s)]);
    }
    double sum = 0;
    for (auto& v : p) sum += (v = std::exp(v - mx));
    for (int64_t j = 0; j < dv; ++j) {
      double acc = 0;
      for (int64_t s = 0; s < n_ctx; ++s) acc += p[size_t(s)] * V[s * Hkv * dv + kh * dv + j];
      out[h * dv + j] = float(acc / sum);
    }
  }
}

void MlaAttentionRow(const float* q, const float* C, const float* KPE, int64_t n_ctx, int64_t H,
                     int64_t dn, int64_t dr, int64_t dv, int64_t r, const Tensor& WukT,
                     const Tensor& Wuv, float scale, float* out) {
  std::vector<float> qlat(static_cast<size_t>(r)), olat(static_cast<size_t>(r));
  std::vector<double> p(static_cast<size_t>(n_ctx));
  for (int64_t h = 0; h < H; ++h) {
    const float* qn = q + h * (dn + dr);
    const float* qp = qn + dn;
    // q_lat[j] = Σ_i Wuk[h][i, j] q_nope[i] = (WukT[h] q_nope)[j]
    Tensor wk = WukT;
    wk.shape = {r, dn};
    wk.data = WukT.bytes() + size_t(h * r) * WukT.row_bytes();
    MatMul(qn, 1, dn, wk, nullptr, qlat.data());
    double mx = -INFINITY;
    for (int64_t s = 0; s < n_ctx; ++s) {
      double d = 0;
      for (int64_t j = 0; j < r; ++j) d += double(qlat[size_t(j)]) * C[s * r + j];
      for (int64_t j = 0; j < dr; ++j) d += double(qp[j]) * KPE[s * dr + j];
      p[size_t(s)] = d * scale;
      mx = std::max(mx, p[size_t(s)]);
    }
    double sum = 0;
    for (auto& v : p) sum += (v = std::exp(v - mx));
    for (int64_t j = 0; j < r; ++j) {
      double acc = 0;
      for (int64_t s = 0; s < n_ctx; ++s) acc += p[size_t(s)] * C[s * r + j];
      olat[size_t(j)] = float(acc / sum);
    }
    Tensor wv = Wuv;
    wv.shape = {dv, r};
    wv.data = Wuv.bytes() + size_t(h * dv) * Wuv.row_bytes();
    MatMul(olat.data(), 1, r, wv, nullptr, out + h * dv);
  }
}

void MoeRoute(const float* logits, const float* bias, const MoeParams& p, int32_t* experts,
              float* weights) {
  const int E = p.n_experts;
  std::vector<float> scores(static_cast<size_t>(E));
  if (p.scoring == ScoringFunc::kSoftmax) {
    const float mx = *std::max_element(logits, logits + E);
    double sum = 0;
    for (int e = 0; e < E; ++e) sum += (scores[size_t(e)] = std::exp(logits[e] - mx));
    for (auto& s : scores) s = float(s / sum);
  } else {
    for (int e = 0; e < E; ++e) scores[size_t(e)] = 1.0f / (1.0f + std::exp(-logits[e]));
  }
  // Scores used for choosing (noaux_tc adds the correction bias; the weights stay unbiased).
  std::vector<float> choice = scores;
  if (bias)
    for (int e = 0; e < E; ++e) choice[size_t(e)] += bias[e];
  if (p.topk_method != TopkMethod::kGreedy && p.n_group > 1) {
    const int per = E / p.n_group;
    std::vector<float> gscore(size_t(p.n_group));
    for (int g = 0; g < p.n_group; ++g) {
      std::vector<float> grp(choice.begin() + g * per, choice.begin() + (g + 1) * per);
      std::sort(grp.begin(), grp.end(), std::greater<float>());
      gscore[size_t(g)] =
          p.topk_method == TopkMethod::kNoauxTc ? grp[0] + (per > 1 ? grp[1] : 0.0f) : grp[0];
    }
    std::vector<int> gidx(size_t(p.n_group));
    std::iota(gidx.begin(), gidx.end(), 0);
    std::stable_sort(gidx.begin(), gidx.end(),
                     [&](int a, int b) { return gscore[size_t(a)] > gscore[size_t(b)]; });
    std::vector<bool> keep(size_t(p.n_group), false);
    for (int i = 0; i < p.topk_group; ++i) keep[size_t(gidx[size_t(i)])] = true;
    // transformers masks the other groups with 0.0 for V2's group_limited_greedy and with -inf
    // for V3's noaux_tc.
    const float masked = p.topk_method == TopkMethod::kNoauxTc ? -INFINITY : 0.0f;
    for (int e = 0; e < E; ++e)
      if (!keep[size_t(e / per)]) choice[size_t(e)] = masked;
  }
  std::vector<int> idx(static_cast<size_t>(E));
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(),
                   [&](int a, int b) { return choice[size_t(a)] > choice[size_t(b)]; });
  double wsum = 0;
  for (int j = 0; j < p.top_k; ++j) {
    experts[j] = idx[size_t(j)];
    weights[j] = scores[size_t(idx[size_t(j)])];
    wsum += weights[j];
  }
  for (int j = 0; j < p.top_k; ++j) {
    if (p.norm_topk_prob) weights[j] = float(weights[j] / (wsum + 1e-20));
    weights[j] *= p.routed_scaling_factor;
  }
}

void MoE(const float* x, int64_t R, int64_t D, const Tensor& gate, const Tensor* bias,
         const std::vector<const Tensor*>& experts, const MoeParams& p, float* out) {
  const int E = p.n_experts;
  ES_ASSERT(int(experts.size()) == 3 * E);
  std::vector<float> logits(static_cast<size_t>(E)), bvals;
  if (bias) bvals = ToF32(*bias);
  std::vector<int32_t> chosen(size_t(p.top_k));
  std::vector<float> w(size_t(p.top_k));
  const int64_t I = p.ffn_dim;
  std::vector<float> g(static_cast<size_t>(I)), u(static_cast<size_t>(I)),
      h(static_cast<size_t>(I)), o(static_cast<size_t>(D));
  for (int64_t r = 0; r < R; ++r) {
    const float* xr = x + r * D;
    MatMul(xr, 1, D, gate, nullptr, logits.data());
    MoeRoute(logits.data(), bias ? bvals.data() : nullptr, p, chosen.data(), w.data());
    float* yr = out + r * D;
    std::fill(yr, yr + D, 0.0f);
    for (int j = 0; j < p.top_k; ++j) {
      const int e = chosen[size_t(j)];
      MatMul(xr, 1, D, *experts[size_t(3 * e)], nullptr, g.data());
      MatMul(xr, 1, D, *experts[size_t(3 * e + 1)], nullptr, u.data());
      SwiGLU(g.data(), u.data(), I, h.data());
      MatMul(h.data(), 1, I, *experts[size_t(3 * e + 2)], nullptr, o.data());
      for (int64_t i = 0; i < D; ++i) yr[i] += w[size_t(j)] * o[size_t(i)];
    }
  }
}

}  // namespace es::ref
