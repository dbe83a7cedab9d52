// Pass: x * Sigmoid(x) -> es.Silu(x) (how both torch exporters and ORT-GenAI's builder spell SiLU).
#include "edgeseek/internal/graph/passes/passes.h"

namespace es {

int FuseSilu(OpGraph& g) {
  int rewrites = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const OpNode& root = g.nodes[i];
    if (!root.Is("Mul") || root.outputs.size() != 1) continue;
    std::string x;
    const bool ok = pattern::EitherOrder(root, [&](const std::string& a, const std::string& s) {
      const OpNode* sig = pattern::Def(g, s, "Sigmoid");
      if (!sig || pattern::Through(g, sig->In(0)) != pattern::Through(g, a)) return false;
      x = a;
      return true;
    });
    if (!ok) continue;
    pattern::Fuse(g, int(i), "Silu", {x});
    ++rewrites;
  }
  return rewrites;
}

}  // namespace es
