// Pass: es.Silu(gate) * up -> es.SwiGLU(gate, up) (the gated MLP of Llama/Qwen2: down(silu(gate) *
// up)).
#include "edgeseek/internal/graph/passes/passes.h"

namespace es {

int FuseSwiGlu(OpGraph& g) {
  int rewrites = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const OpNode& root = g.nodes[i];
    if (!root.Is("Mul") || root.outputs.size() != 1) continue;
    std::string gate, up;
    const bool ok = pattern::EitherOrder(root, [&](const std::string& s, const std::string& u) {
      const OpNode* silu = pattern::Def(g, s, "Silu", "es");
      if (!silu || silu->domain != "es") return false;
      gate = silu->In(0);
      up = u;
      return true;
    });
    if (!ok) continue;
    pattern::Fuse(g, int(i), "SwiGLU", {gate, up});
    ++rewrites;
  }
  return rewrites;
}

}  // namespace es
