// What the CPU backend fuses (graph/passes/fusions.h), asked by PlanFusions per candidate node.
// On a CPU a fusion pays where it removes a pass over an activation or a parallel region (a
// barrier: ~250 regions a decode token on the 2-core machine, each a wait for the slower thread),
// and only if the fused kernel keeps the plain kernel's partition of the work (session 29's
// column-block regions around the kernels cost more than they saved):
//   Epilogue     matmul + residual add, and gate + up + SwiGLU (a dual matmul, x quantized once
//                for both, MatMulPairEpi), run in the matmul kernels' own regions: each block of
//                outputs gets the add or silu(gate) · up from the thread that computed it, while
//                it is in cache (matmul.h MatMulEpilogue) — for steps of at least
//                kEpilogueMinRows rows (prefill). Decode-sized steps run the plain nodes: in
//                session 33's pairs on the 2-core machine the fused 1.5B Q4_K_M decode was ~1%
//                slower (tg16 lower in 8 of 10 pairs against main, the same binary's plain graph
//                ahead in 3 of 4 tg128 pairs), though the dual GEMV with its SwiGLU alone was
//                faster than gate, up and SwiGLU in a kernel micro-benchmark (see
//                docs/cpu_kernels.md "Fused ops"). kMoE + residual: added as the experts' sum is
//                written (CombineExperts), every step.
//   RopeIntoStore  k's rope written straight into the cache rows (no rotated copy, one region).
// Not taken:
//   FoldsNorm    the CPU has no pass to save: a step of one row normalizes it on the calling
//                thread either way (a region of one chunk runs inline), and folded into q, k and
//                v every one of them would normalize it again (session 33, one --profile pair
//                of the 1.5B Q4_K_M decode: q, k and v with the norm folded 3.28 ms a step
//                against 3.11 for them and the norm node).
// The Vulkan-only ones are off: the MLA kv store and the attention taking raw rows fuse kernels
// the CPU runs as loops over the cache; QuantizedX / QuantizeXOnce / WritesQuantizedX are the
// GPU's shared copies of an int8 x (the CPU kernels quantize x inside each matmul call; a
// gate/up pair shares it through MatMulPairEpi).
#pragma once

#include <cstdint>

#include "edgeseek/internal/graph/passes/fusions.h"

namespace es::cpu {

// Steps of at least this many rows fuse matmul epilogues (see the header comment); fewer rows are
// the GEMV / skinny GEMM of a decode step.
constexpr int64_t kEpilogueMinRows = 5;

class CpuFusionCaps final : public FusionCaps {
 public:
  bool Epilogue(const Graph& g, const Node& n) const override;
  bool FoldsNorm(const Graph&, const Node&) const override { return false; }
  bool RopeIntoStore() const override { return true; }
  bool MlaKvStore() const override { return false; }
  bool AttentionTakesRawRows(const Graph&, const Node&) const override { return false; }
  bool MlaFoldsQRope(const Graph&, const Node&) const override { return false; }
  int QuantizedX(const Graph&, const Node&) const override { return -1; }
  bool QuantizeXOnce(const Graph&, const Node&, bool) const override { return false; }
  bool WritesQuantizedX(const Graph&, const Node&, const Node&) const override { return false; }
};

}  // namespace es::cpu
