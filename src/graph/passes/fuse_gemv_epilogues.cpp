// FuseGemvEpilogues (passes/fusions.h): a matmul whose only consumer is a residual add writes the
// sum itself (the add is skipped); gate and up matmuls of one x whose only consumer is the SwiGLU
// become one dual GEMV writing silu(gate) * up at the later of the two (the earlier and the
// SwiGLU are skipped). The fused output is then written at the matmul's position: its lifetime
// starts there.
#include <algorithm>

#include "edgeseek/internal/graph/passes/fusions.h"

namespace es {

namespace {
bool NoBias(const Node& m) { return m.src.size() < 3 || m.src[2] < 0; }
}  // namespace

void FuseGemvEpilogues(const Graph& g, const FusionCaps& caps, FusionPlan& f) {
  const auto& nodes = g.nodes();
  const int N = int(nodes.size());
  auto fusable = [&](int a) {
    if (a < 0 || a == N - 1 || f.uses[size_t(a)] != 1 || f.out_node[size_t(a)] >= 0) return false;
    const Node& m = nodes[size_t(a)];
    return (m.op == Op::kMatMul || m.op == Op::kMoE) && caps.Epilogue(g, m);
  };
  for (int j = 0; j < N; ++j) {
    const Node& n = nodes[size_t(j)];
    if (n.op == Op::kAdd) {
      for (int k = 0; k < 2; ++k) {
        const int a = n.src[size_t(k)], b = n.src[size_t(1 - k)];
        if (b >= a || !fusable(a)) continue;
        f.out_node[size_t(a)] = j;
        f.res_node[size_t(a)] = b;
        f.write_at[size_t(j)] = a;
        f.skip[size_t(j)] = 1;
        break;
      }
    } else if (n.op == Op::kSwiGLU) {
      const int gi = n.src[0], ui = n.src[1];
      if (gi == ui || !fusable(gi) || !fusable(ui) || nodes[size_t(gi)].op != Op::kMatMul ||
          nodes[size_t(ui)].op != Op::kMatMul)
        continue;
      const Node& gn = nodes[size_t(gi)];
      const Node& un = nodes[size_t(ui)];
      const Tensor& gw = *g.node(gn.src[1]).weight;
      const Tensor& uw = *g.node(un.src[1]).weight;
      if (!NoBias(gn) || !NoBias(un) || gn.src[0] != un.src[0] || gw.dtype != uw.dtype ||
          gw.shape != uw.shape)
        continue;
      const int late = std::max(gi, ui), early = std::min(gi, ui);
      f.out_node[size_t(late)] = j;
      f.gate_node[size_t(late)] = gi;
      f.up_node[size_t(late)] = ui;
      f.write_at[size_t(j)] = late;
      f.skip[size_t(early)] = 1;
      f.skip[size_t(j)] = 1;
    }
  }
}

}  // namespace es
