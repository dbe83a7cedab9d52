// What the CPU backend fuses (graph/passes/fusions.h), asked by PlanFusions per candidate node.
// On a CPU a fusion pays where it removes a pass over an activation or a parallel region (a
// barrier: ~250 regions a decode token on the 2-core machine, each a wait for the slower thread):
//   Epilogue     matmul + residual add: the add done on the matmul's output block in the same
//                item; gate + up + SwiGLU: one dual GEMV (x quantized once for both, MatMulPair)
//                with silu(gate) · up on the block; kMoE + residual: added as the experts' sum is
//                written (CombineExperts). Steps of more than kFoldNormMaxRows rows (prefill) run
//                the fused parts whole on the pool, one after the other (column blocks would each
//                quantize every row of x).
//   FoldsNorm    RMSNorm into the matmuls reading it, for steps of at most kFoldNormMaxRows rows
//                (decode): each item normalizes the rows itself, which costs nothing at one row
//                and saves the norm's region; a prefill's norm stays one pass over its rows
//                (folded, every item of q, k and v would normalize all of them). kMoE: no (its
//                router and its gather read the normalized rows anyway).
//   RopeIntoStore  k's rope written straight into the cache rows (no rotated copy, one region).
// The Vulkan-only ones are off: the MLA kv store and the attention taking raw rows fuse kernels
// the CPU runs as loops over the cache; QuantizedX / QuantizeXOnce / WritesQuantizedX are the
// GPU's shared copies of an int8 x (the CPU kernels quantize x inside each matmul call; a
// gate/up pair shares it through MatMulPair).
#pragma once

#include <cstdint>

#include "edgeseek/internal/graph/passes/fusions.h"

namespace es::cpu {

// Steps of at most this many rows fold RMSNorms into their matmuls (see the header comment).
constexpr int64_t kFoldNormMaxRows = 4;

class CpuFusionCaps final : public FusionCaps {
 public:
  bool Epilogue(const Graph& g, const Node& n) const override;
  bool FoldsNorm(const Graph& g, const Node& n) const override;
  bool RopeIntoStore() const override { return true; }
  bool MlaKvStore() const override { return false; }
  bool AttentionTakesRawRows(const Graph&, const Node&) const override { return false; }
  bool MlaFoldsQRope(const Graph&, const Node&) const override { return false; }
  int QuantizedX(const Graph&, const Node&) const override { return -1; }
  bool QuantizeXOnce(const Graph&, const Node&, bool) const override { return false; }
  bool WritesQuantizedX(const Graph&, const Node&, const Node&) const override { return false; }
};

}  // namespace es::cpu
