// FoldRmsNorms (passes/fusions.h): an RMSNorm whose consumers all read it as their x (matmuls or
// kMoE nodes, each able to fold it) is folded into them: each takes the norm's input, weight and
// eps, and the norm is skipped; its input must then live until the last of them.
#include <algorithm>

#include "edgeseek/internal/graph/passes/fusions.h"

namespace es {

void FoldRmsNorms(const Graph& g, const FusionCaps& caps, FusionPlan& f) {
  const auto& nodes = g.nodes();
  const int N = int(nodes.size());
  for (int m = 0; m < N - 1; ++m) {
    const Node& n = nodes[size_t(m)];
    if (n.op != Op::kRmsNorm || f.uses[size_t(m)] == 0) continue;
    std::vector<int> consumers;
    bool ok = true;
    for (int j = m + 1; j < N && ok; ++j) {
      const Node& c = nodes[size_t(j)];
      if (std::find(c.src.begin(), c.src.end(), m) == c.src.end()) continue;
      // The op first: a kv_store reading the norm (MLA's latent) has one input.
      ok = (c.op == Op::kMatMul || c.op == Op::kMoE) && c.src[0] == m && c.src[1] != m &&
           caps.FoldsNorm(g, c);
      consumers.push_back(j);
    }
    if (!ok || consumers.empty()) continue;
    f.skip[size_t(m)] = 1;
    for (int j : consumers) f.norm_of[size_t(j)] = m;
    f.live_until[size_t(n.src[0])] = std::max(f.live_until[size_t(n.src[0])], consumers.back());
  }
}

}  // namespace es
