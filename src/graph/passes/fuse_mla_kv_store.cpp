// FuseMlaKvStores (passes/fusions.h): MLA's kv_a chain of one layer, store(rms_norm(slice(kva, 0,
// r))) and store(rope(slice(kva, r, dr))) with the rope already folded into its store
// (FoldRopeStores), becomes one store at the second, reading kva: five dispatches and two barrier
// steps fewer per layer on the GPU (mla_kv_store.comp).
#include <algorithm>

#include "edgeseek/internal/graph/passes/fusions.h"

namespace es {

namespace {
// The latent store of s1's layer that pairs with it: store(rms_norm(slice(kva, 0, r))), the
// slice ending where s1's rope part starts and both widths even; -1 if none.
int LatentStore(const Graph& g, const FusionPlan& f, int j, int kva, const SliceParams& pes) {
  const auto& nodes = g.nodes();
  for (int i = 0; i < j; ++i) {
    const Node& s0 = nodes[size_t(i)];
    if (s0.op != Op::kKvStore || s0.layer != nodes[size_t(j)].layer || f.rope_of[size_t(i)] >= 0)
      continue;
    const int cn = s0.src[0];
    const Node& norm = nodes[size_t(cn)];
    if (norm.op != Op::kRmsNorm || f.uses[size_t(cn)] != 1) continue;
    const Node& cr = nodes[size_t(norm.src[0])];
    if (cr.op != Op::kSlice || f.uses[size_t(norm.src[0])] != 1 || cr.src[0] != kva) continue;
    const SliceParams& crs = cr.Params<SliceParams>();
    if (crs.col0 != 0 || pes.col0 != crs.width ||
        nodes[size_t(kva)].shape[1] != crs.width + pes.width || crs.width % 2 != 0 ||
        pes.width % 2 != 0)
      continue;
    return i;
  }
  return -1;
}
}  // namespace

void FuseMlaKvStores(const Graph& g, const FusionCaps& caps, FusionPlan& f) {
  if (!caps.MlaKvStore()) return;
  const auto& nodes = g.nodes();
  for (int j = 0; j < int(nodes.size()); ++j) {
    const Node& s1 = nodes[size_t(j)];
    if (s1.op != Op::kKvStore || f.rope_of[size_t(j)] < 0) continue;
    const Node& rope = nodes[size_t(f.rope_of[size_t(j)])];
    const int raw = rope.src[0];
    const Node& pe = nodes[size_t(raw)];
    const RopeParams& rp = rope.Params<RopeParams>();
    if (rp.heads != 1 || rp.offset != 0 || rp.head_dim != s1.shape[1] || pe.op != Op::kSlice ||
        f.uses[size_t(raw)] != 1)
      continue;
    const int kva = pe.src[0];
    const int i = LatentStore(g, f, j, kva, pe.Params<SliceParams>());
    if (i < 0) continue;
    const int cn = nodes[size_t(i)].src[0];
    f.mla_c_store[size_t(j)] = i;
    f.mla_norm[size_t(j)] = cn;
    f.skip[size_t(i)] = f.skip[size_t(cn)] = f.skip[size_t(nodes[size_t(cn)].src[0])] =
        f.skip[size_t(raw)] = 1;
    f.live_until[size_t(kva)] = std::max(f.live_until[size_t(kva)], j);
  }
}

}  // namespace es
