// ShareQuantizedX (passes/fusions.h): where integer-dot GEMVs read x quantized per block. x from
// a split decode attention read by one GEMV alone (the output projection): the attention writes
// it quantized. x from a dual gate/up GEMV read by one GEMV alone (the down projection), in the
// same format: the dual GEMV writes it quantized. Otherwise one copy per (x, folded norm,
// format), kept until its last reader: written by the matmul whose epilogue writes the folded
// norm's input where the backend says so (WritesNormedQuantizedX: the output projection writing
// the FFN's normed x), else, where the backend quantizes x once, filled by its first reader.
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
// The matmul writing folded norm nm's input (its epilogue: the residual stream), where it also
// writes the norm's output quantized for m (i), else -1.
int NormQuantizingProducer(const Graph& g, const FusionCaps& caps, const FusionPlan& f, int i,
                           int nm) {
  const int xs = g.node(nm).src[0], p = f.write_at[size_t(xs)];
  if (p < 0 || p == xs || g.node(p).op != Op::kMatMul || f.out_node[size_t(p)] != xs ||
      f.norm_of[size_t(p)] >= 0 || f.gate_node[size_t(p)] >= 0)
    return -1;
  return caps.WritesNormedQuantizedX(g, g.node(p), g.node(nm), g.node(i)) ? p : -1;
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
    const int nm = f.norm_of[size_t(i)];
    const int writer = nm >= 0 ? NormQuantizingProducer(g, caps, f, i, nm) : -1;
    if (writer < 0 && !caps.QuantizeXOnce(g, n, f.gate_node[size_t(i)] >= 0)) continue;
    const std::tuple<int, int, int> key{nm >= 0 ? nodes[size_t(nm)].src[0] : n.src[0], nm, format};
    auto it = copy_of.find(key);
    if (it == copy_of.end()) {
      it = copy_of.emplace(key, int(f.quantized_x.size())).first;
      f.quantized_x.push_back({writer, i, i, format});
    }
    f.quantized_x[size_t(it->second)].last = i;
    f.xq_of[size_t(i)] = it->second;
  }
}

}  // namespace es
