// FuseMoeSharedExperts (passes/fusions.h): DeepSeek's MoE block adds the shared experts to the
// residual stream first and the routed experts to that, (x + shared(h)) + moe(h) (models/arch.cpp
// MlpBlock); after FuseGemvEpilogues the shared FFN is a dual gate/up GEMV and a down GEMV adding
// x, and the kMoE node's down projection adds their sum. Where the backend can run the shared
// experts inside the kMoE node's own expert GEMVs, the node takes x as its residual instead and
// the shared dual and down GEMVs are skipped: the layer's output is written once.
#include <algorithm>

#include "edgeseek/internal/graph/passes/fusions.h"

namespace es {

namespace {
// The shared experts' down matmul whose fused residual add kMoE node m adds, or -1.
int SharedDown(const Graph& g, const FusionPlan& f, int m) {
  const auto& nodes = g.nodes();
  const int a = f.res_node[size_t(m)];
  if (a < 0 || nodes[size_t(a)].op != Op::kAdd || !f.skip[size_t(a)] || f.uses[size_t(a)] != 1)
    return -1;
  const int d = f.write_at[size_t(a)];
  if (d == a || nodes[size_t(d)].op != Op::kMatMul || f.out_node[size_t(d)] != a ||
      f.res_node[size_t(d)] < 0)
    return -1;
  const Node& dn = nodes[size_t(d)];
  if (dn.src.size() >= 3 && dn.src[2] >= 0) return -1;  // a bias
  const int s = dn.src[0];
  if (nodes[size_t(s)].op != Op::kSwiGLU || !f.skip[size_t(s)]) return -1;
  const int u = f.write_at[size_t(s)];
  if (u == s || f.gate_node[size_t(u)] < 0) return -1;
  const int h = nodes[size_t(m)].src[0];
  return nodes[size_t(f.gate_node[size_t(u)])].src[0] == h &&
                 nodes[size_t(f.up_node[size_t(u)])].src[0] == h
             ? d
             : -1;
}
}  // namespace

void FuseMoeSharedExperts(const Graph& g, const FusionCaps& caps, FusionPlan& f) {
  const auto& nodes = g.nodes();
  for (int m = 0; m < int(nodes.size()); ++m) {
    if (nodes[size_t(m)].op != Op::kMoE) continue;
    const int d = SharedDown(g, f, m);
    if (d < 0) continue;
    const int u = f.write_at[size_t(nodes[size_t(d)].src[0])];  // the dual GEMV
    const Node& gate = nodes[size_t(f.gate_node[size_t(u)])];
    const Node& up = nodes[size_t(f.up_node[size_t(u)])];
    if (!caps.MoeRunsShared(g, nodes[size_t(m)], gate, up, nodes[size_t(d)])) continue;
    const int x = f.res_node[size_t(d)];
    f.moe_shared[size_t(m)] = d;
    f.res_node[size_t(m)] = x;
    f.skip[size_t(u)] = 1;
    f.skip[size_t(d)] = 1;
    f.live_until[size_t(x)] = std::max(f.live_until[size_t(x)], m);
  }
}

}  // namespace es
