// ShareQuantizedX (passes/fusions.h): where integer-dot GEMVs read x quantized per block. x from
// a split decode attention read by one GEMV alone (the output projection): the attention writes
// it quantized. x from a dual gate/up GEMV read by one GEMV alone (the down projection), in the
// same format: the dual GEMV writes it quantized. Otherwise, where the backend quantizes x once,
// one copy per (x, folded norm, format), filled by its first reader and kept until the last.
#include <map>
#include <tuple>

#include "edgeseek/internal/graph/passes/fusions.h"

namespace es {

namespace {
// m's x is written quantized by its producer (the attention, or the dual GEMV it comes from).
int QuantizingProducer(const Graph& g, const FusionCaps& caps, const FusionPlan& f, int i) {
  const Node& n = g.node(i);
  const int xs = n.src[0];
  const Node& xn = g.node(xs);
  if (f.norm_of[size_t(i)] >= 0 || f.uses[size_t(xs)] != 1) return -1;
  if (xn.op == Op::kAttention && !f.skip[size_t(xs)] && caps.WritesQuantizedX(g, xn, n)) return xs;
  const int dual = xn.op == Op::kSwiGLU ? f.write_at[size_t(xs)] : -1;  // the fused gate/up GEMV
  if (dual >= 0 && f.gate_node[size_t(dual)] >= 0 &&
      caps.WritesQuantizedX(g, g.node(f.gate_node[size_t(dual)]), n))
    return dual;
  return -1;
}
}  // namespace

void ShareQuantizedX(const Graph& g, const FusionCaps& caps, FusionPlan& f) {
  const auto& nodes = g.nodes();
  std::map<std::tuple<int, int, int>, int> copy_of;  // (x node, norm node or -1, format) -> copy
  for (int i = 0; i < int(nodes.size()); ++i) {
    const Node& n = nodes[size_t(i)];
    if (n.op != Op::kMatMul || f.skip[size_t(i)] || n.src.size() < 2 || n.src[1] < 0 ||
        !g.node(n.src[1]).weight)
      continue;
    const int format = caps.QuantizedX(g, n);
    if (format < 0) continue;
    const int producer = QuantizingProducer(g, caps, f, i);
    if (producer >= 0) {
      f.xq_of[size_t(i)] = int(f.quantized_x.size());
      f.quantized_x.push_back({producer, i, i, format});
      continue;
    }
    if (!caps.QuantizeXOnce(g, n, f.gate_node[size_t(i)] >= 0)) continue;
    const int nm = f.norm_of[size_t(i)];
    const std::tuple<int, int, int> key{nm >= 0 ? nodes[size_t(nm)].src[0] : n.src[0], nm, format};
    auto it = copy_of.find(key);
    if (it == copy_of.end()) {
      it = copy_of.emplace(key, int(f.quantized_x.size())).first;
      f.quantized_x.push_back({-1, i, i, format});
    }
    f.quantized_x[size_t(it->second)].last = i;
    f.xq_of[size_t(i)] = it->second;
  }
}

}  // namespace es
