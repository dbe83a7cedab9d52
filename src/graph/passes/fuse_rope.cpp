// Pass: decomposed rotary embedding (Llama/Qwen2, rotate halves) -> es.Rope(x, cos, sin):
//   x * cos + Concat(Neg(x2), x1, axis=-1) * sin,  x1 = x[..., :d/2], x2 = x[..., d/2:]
// with the halves made by two Slices of x or one Split of x; operands in any order.
#include "edgeseek/internal/graph/passes/passes.h"

namespace es {
namespace {

using pattern::Def;
using pattern::Through;

// Which half of x the value v is: 0 first, 1 second, -1 not a half of x.
int HalfOf(const OpGraph& g, const std::string& v, const std::string& x) {
  const std::string t = Through(g, v);
  const OpNode* p = g.ProducerNode(t);
  if (!p) return -1;
  if (p->Is("Split") && Through(g, p->In(0)) == x && p->outputs.size() == 2) {
    if (p->Int("axis", 0) != -1 && p->Int("axis", 0) < 2) return -1;
    return t == p->outputs[0] ? 0 : 1;
  }
  if (!p->Is("Slice") || Through(g, p->In(0)) != x) return -1;
  // starts: 0 for the first half; a positive start for the second. A start computed at run time
  // (Shape -> Div) is the second half when the end is the constant "to the end" (INT64_MAX).
  const auto starts = g.IntValues(p->In(1));
  if (starts && starts->size() == 1) return (*starts)[0] == 0 ? 0 : 1;
  const auto ends = g.IntValues(p->In(2));
  if (ends && ends->size() == 1 && (*ends)[0] > (int64_t(1) << 40)) return 1;
  return 0;
}

}  // namespace

int FuseRope(OpGraph& g) {
  int rewrites = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const OpNode& root = g.nodes[i];
    if (!root.Is("Add") || root.outputs.size() != 1) continue;
    std::string x, cos, sin;
    const bool ok = pattern::EitherOrder(root, [&](const std::string& a, const std::string& b) {
      const OpNode* mc = Def(g, a, "Mul");
      const OpNode* ms = Def(g, b, "Mul");
      if (!mc || !ms) return false;
      // ms = rotate_half(x) * sin: find the Concat operand.
      return pattern::EitherOrder(*ms, [&](const std::string& rh, const std::string& s) {
        const OpNode* cat = Def(g, rh, "Concat");
        if (!cat || cat->inputs.size() != 2) return false;
        if (cat->Int("axis", 0) != -1 && cat->Int("axis", 0) < 2) return false;
        const OpNode* neg = Def(g, cat->In(0), "Neg");
        if (!neg) return false;
        // mc = x * cos with the same x the halves come from.
        return pattern::EitherOrder(*mc, [&](const std::string& xv, const std::string& c) {
          const std::string xt = Through(g, xv);
          if (HalfOf(g, neg->In(0), xt) != 1 || HalfOf(g, cat->In(1), xt) != 0) return false;
          x = xv;
          cos = c;
          sin = s;
          return true;
        });
      });
    });
    if (!ok) continue;
    pattern::Fuse(g, int(i), "Rope", {x, cos, sin});
    ++rewrites;
  }
  return rewrites;
}

}  // namespace es
