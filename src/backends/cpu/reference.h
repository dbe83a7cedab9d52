// Plain reference implementations of every graph op over f32 host arrays: the truth that the
// SIMD kernels, the Vulkan shaders and the tests compare against. Written for clarity: one loop
// nest per op, no threads, no SIMD. Shapes are row-major; see edgeseek/internal/graph/graph.h for
// the op contracts.
#pragma once

#include <cstdint>
#include <vector>

#include "edgeseek/internal/core/tensor.h"
#include "edgeseek/internal/graph/graph.h"

namespace es::ref {

// out[t, :] = E[ids[t], :]          E: [V, D] of any dense type
void Embed(const Tensor& E, const int32_t* ids, int64_t T, float* out);
// x, out: [R, D]; w: [D]
void RmsNorm(const float* x, const float* w, int64_t R, int64_t D, float eps, float* out);
// y[r, n] = Σ_k x[r, k] W[n, k] + bias[n]   (W: Tensor [N, K], dense or quantized)
void MatMul(const float* x, int64_t R, int64_t K, const Tensor& W, const float* bias, float* y);
void Add(const float* a, const float* b, int64_t n, float* out);
// out = silu(gate) * up, elementwise over n
void SwiGLU(const float* gate, const float* up, int64_t n, float* out);
// x: [R, H*hd]; rotates dims [off, off + rope.dim) of each head at positions pos[r].
void Rope(const float* x, int64_t R, int64_t H, int64_t hd, int64_t off, const RopeTable& rope,
          const int32_t* pos, float* out);

// Attention of one query row against a sequence's cache (positions 0..n_ctx-1 all visible).
// q: [Hq*dk]; K: [n_ctx, Hkv*dk]; V: [n_ctx, Hkv*dv]; out: [Hq*dv]. GQA: q head h reads kv head
// h / (Hq / Hkv).
void AttentionRow(const float* q, const float* K, const float* V, int64_t n_ctx, int64_t Hq,
                  int64_t Hkv, int64_t dk, int64_t dv, float scale, float* out);
// Absorbed MLA for one query row. q: [H*(dn+dr)] (pe part already rotated); C: [n_ctx, r];
// KPE: [n_ctx, dr]; WukT: [H*r, dn] (per head h rows h*r..: Wuk[h]ᵀ); Wuv: [H*dv, r];
// out: [H*dv].
void MlaAttentionRow(const float* q, const float* C, const float* KPE, int64_t n_ctx, int64_t H,
                     int64_t dn, int64_t dr, int64_t dv, int64_t r, const Tensor& WukT,
                     const Tensor& Wuv, float scale, float* out);

// MoE routing for one token: router logits [E] (+ bias [E] or null) -> chosen experts and their
// weights (top_k each), as transformers' DeepSeek-V2/V3 gates compute them.
void MoeRoute(const float* logits, const float* bias, const MoeParams& p, int32_t* experts,
              float* weights);
// out[r, :] = Σ_j weight_j * down_e(silu(gate_e x) * up_e x) over the chosen experts e.
void MoE(const float* x, int64_t R, int64_t D, const Tensor& gate, const Tensor* bias,
         const std::vector<const Tensor*>& experts /* 3 per expert: gate, up, down */,
         const MoeParams& p, float* out);

}  // namespace es::ref
