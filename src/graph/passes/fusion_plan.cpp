// FusionPlan (passes/fusions.h): the empty plan of a graph, and every fusion pass in order.
#include "edgeseek/internal/graph/passes/fusions.h"

namespace es {

FusionPlan::FusionPlan(const Graph& g) {
  const size_t N = g.nodes().size();
  for (auto* v : {&out_node, &res_node, &gate_node, &up_node, &norm_of, &live_until, &rope_of,
                  &mla_c_store, &mla_norm, &attn_rope, &attn_k, &attn_v, &xq_of})
    v->assign(N, -1);
  uses.assign(N, 0);
  skip.assign(N, 0);
  write_at.resize(N);
  for (size_t i = 0; i < N; ++i) write_at[i] = int(i);
  for (const Node& n : g.nodes())
    for (int s : n.src)
      if (s >= 0) ++uses[size_t(s)];
}

FusionPlan PlanFusions(const Graph& g, const FusionCaps& caps) {
  FusionPlan f(g);
  FuseGemvEpilogues(g, caps, f);
  FoldRmsNorms(g, caps, f);
  FoldRopeStores(g, caps, f);
  FuseMlaKvStores(g, caps, f);
  FuseDecodeAttention(g, caps, f);
  ShareQuantizedX(g, caps, f);
  return f;
}

}  // namespace es
