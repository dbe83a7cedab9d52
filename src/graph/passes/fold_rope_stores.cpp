// FoldRopeStores (passes/fusions.h): a rope whose only consumer is a kv_store is folded into it;
// the store reads the rope's input and rotates while writing the cache (one dispatch and one
// barrier step fewer per layer on the GPU).
#include <algorithm>

#include "edgeseek/internal/graph/passes/fusions.h"

namespace es {

void FoldRopeStores(const Graph& g, const FusionCaps& caps, FusionPlan& f) {
  if (!caps.RopeIntoStore()) return;
  const auto& nodes = g.nodes();
  for (int j = 0; j < int(nodes.size()); ++j) {
    const Node& n = nodes[size_t(j)];
    if (n.op != Op::kKvStore) continue;
    const int r = n.src[0];
    if (r < 0 || nodes[size_t(r)].op != Op::kRope || f.uses[size_t(r)] != 1) continue;
    f.rope_of[size_t(j)] = r;
    f.skip[size_t(r)] = 1;
    const int x = nodes[size_t(r)].src[0];
    f.live_until[size_t(x)] = std::max(f.live_until[size_t(x)], j);
  }
}

}  // namespace es
