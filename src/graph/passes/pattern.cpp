// Pattern helpers shared by the passes, and the importer's pipeline (passes.h).
#include <cmath>

#include "edgeseek/internal/graph/passes/passes.h"

namespace es {
namespace pattern {

std::string Through(const OpGraph& g, std::string v) {
  for (int guard = 0; guard < 16; ++guard) {
    const OpNode* p = g.ProducerNode(v);
    // Cast, Identity and a Concat of one input (TorchScript writes one for a cache's first
    // update) pass their input on.
    const bool same =
        p && (p->Is("Cast") || p->Is("Identity") || (p->Is("Concat") && p->inputs.size() == 1));
    if (!same || p->inputs.empty()) break;
    v = p->inputs[0];
  }
  return v;
}

const OpNode* Def(const OpGraph& g, const std::string& v, std::string_view op,
                  std::string_view domain) {
  const OpNode* p = g.ProducerNode(Through(g, v));
  if (!p || p->op != op) return nullptr;
  if (!(p->domain == domain || p->domain.empty())) return nullptr;
  return p;
}

bool ScalarIs(const OpGraph& g, const std::string& v, double x, double tol) {
  const auto s = g.Scalar(Through(g, v));
  return s && std::fabs(*s - x) <= tol * std::max(1.0, std::fabs(x));
}

bool EitherOrder(const OpNode& n,
                 const std::function<bool(const std::string&, const std::string&)>& f) {
  if (n.inputs.size() < 2) return false;
  return f(n.inputs[0], n.inputs[1]) || f(n.inputs[1], n.inputs[0]);
}

OpNode& Fuse(OpGraph& g, int index, std::string op, std::vector<std::string> inputs) {
  OpNode& root = g.nodes[size_t(index)];
  OpNode n;
  n.name = root.name;
  n.op = std::move(op);
  n.domain = "es";
  n.inputs = std::move(inputs);
  n.outputs = root.outputs;
  root = std::move(n);
  g.Reindex();
  return root;
}

}  // namespace pattern

const std::vector<GraphPass>& ImportPasses() {
  static const std::vector<GraphPass> kPasses = {
      {"lower_simplified_layer_norm", LowerSimplifiedLayerNorm},
      {"fuse_rms_norm", FuseRmsNorm},
      {"fuse_silu", FuseSilu},
      {"fuse_swiglu", FuseSwiGlu},
      {"fuse_rope", FuseRope},
      {"fuse_attention", FuseAttention},
  };
  return kPasses;
}

std::vector<std::pair<std::string, int>> RunPasses(OpGraph& g,
                                                   const std::vector<GraphPass>& passes) {
  std::vector<std::pair<std::string, int>> out;
  g.Reindex();
  for (const GraphPass& p : passes) {
    const int n = p.run(g);
    g.RemoveDead();
    out.emplace_back(p.name, n);
  }
  return out;
}

}  // namespace es
