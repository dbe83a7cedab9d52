// Pass: decomposed scaled dot-product attention -> es.Attention(q, k, v[, mask]), attr scale.
//   MatMul(Softmax(S, axis=-1), v),  S = scores * scale [+ mask]  (mask by Add)
//   scores * scale: Mul(MatMul(q, kᵀ), c) | Div(MatMul(q, kᵀ), c) | MatMul(q·a, kᵀ·b) (torch's
//   SDPA decomposition puts sqrt(scale) on both) | MatMul(q, kᵀ) (scale 1)
//   kᵀ = Transpose(k, perm=[0, 1, 3, 2])
// Casts anywhere in between (eager attention upcasts the softmax to f32).
#include "edgeseek/internal/graph/passes/passes.h"

namespace es {
namespace {

using pattern::Def;
using pattern::Through;

// v * c or v / c with a scalar constant c: returns the factor and v; else factor 1, v itself.
std::string StripScale(const OpGraph& g, const std::string& v, double* factor) {
  const std::string t = Through(g, v);
  const OpNode* p = g.ProducerNode(t);
  if (p && (p->Is("Mul") || p->Is("Div"))) {
    for (int side = 0; side < 2; ++side) {
      if (p->Is("Div") && side == 0) continue;  // c / v is not a scale of v
      const auto c = g.Scalar(Through(g, p->In(size_t(side))));
      if (!c) continue;
      *factor *= p->Is("Div") ? 1.0 / *c : *c;
      return p->In(size_t(1 - side));
    }
  }
  return v;
}

}  // namespace

int FuseAttention(OpGraph& g) {
  int rewrites = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const OpNode& root = g.nodes[i];
    if (!root.Is("MatMul") || root.outputs.size() != 1) continue;
    const OpNode* sm = Def(g, root.In(0), "Softmax");
    if (!sm) continue;
    const int64_t axis = sm->Int("axis", -1);
    if (axis != -1 && axis != 3) continue;
    std::string s = sm->In(0), mask;
    if (const OpNode* add = Def(g, s, "Add")) {
      // The scores side is the one a MatMul (possibly scaled) produces.
      for (int side = 0; side < 2 && mask.empty(); ++side) {
        double f = 1.0;
        const std::string core = StripScale(g, add->In(size_t(side)), &f);
        if (Def(g, core, "MatMul")) {
          mask = add->In(size_t(1 - side));
          s = add->In(size_t(side));
        }
      }
      if (mask.empty()) continue;
    }
    double scale = 1.0;
    const OpNode* qk = Def(g, StripScale(g, s, &scale), "MatMul");
    if (!qk) continue;
    const std::string q = StripScale(g, qk->In(0), &scale);
    std::string kt = StripScale(g, qk->In(1), &scale);
    const OpNode* tr = Def(g, kt, "Transpose");
    if (!tr || tr->Ints("perm") != std::vector<int64_t>{0, 1, 3, 2}) continue;
    const std::string k = StripScale(g, tr->In(0), &scale);
    std::vector<std::string> inputs = {q, k, root.In(1)};
    if (!mask.empty()) inputs.push_back(mask);
    OpNode& n = pattern::Fuse(g, int(i), "Attention", std::move(inputs));
    n.attrs["scale"] = float(scale);
    ++rewrites;
  }
  return rewrites;
}

}  // namespace es
