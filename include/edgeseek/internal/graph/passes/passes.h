// Graph passes over an OpGraph (edgeseek/internal/graph/op_graph.h): each pass finds one decomposed
// pattern and rewrites it into one fused "es" op, in place, and says how many it rewrote. One
// pass a file in src/graph/passes/, each tested against its decomposition
// (tests/unit/graph/). The ONNX importer runs ImportPasses() before it lifts a graph into a
// model; the rewritten patterns' leftover nodes are dropped by RemoveDead.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "edgeseek/internal/graph/op_graph.h"

namespace es {

struct GraphPass {
  const char* name;
  int (*run)(OpGraph& g);  // returns the number of rewrites
};

// com.microsoft SimplifiedLayerNormalization -> es.RmsNorm; SkipSimplifiedLayerNormalization ->
// Add (its input_skip_bias_sum output) + es.RmsNorm.
int LowerSimplifiedLayerNorm(OpGraph& g);
// x * 1/sqrt(mean(x^2) + eps) * w (Pow or Mul for the square, Reciprocal∘Sqrt, 1/Sqrt or
// x/Sqrt, Casts between) -> es.RmsNorm(x, w).
int FuseRmsNorm(OpGraph& g);
// x * sigmoid(x) -> es.Silu(x).
int FuseSilu(OpGraph& g);
// es.Silu(gate) * up -> es.SwiGLU(gate, up).
int FuseSwiGlu(OpGraph& g);
// x * cos + Concat(-x[..., d/2:], x[..., :d/2]) * sin -> es.Rope(x, cos, sin).
int FuseRope(OpGraph& g);
// Softmax((q kᵀ) * scale [+ mask]) v, the scale as Mul, Div or split sqrt factors on q and kᵀ
// -> es.Attention(q, k, v[, mask]).
int FuseAttention(OpGraph& g);

// The importer's pipeline, in order.
const std::vector<GraphPass>& ImportPasses();
// Runs `passes` in order (each followed by RemoveDead); returns "name: count" per pass.
std::vector<std::pair<std::string, int>> RunPasses(OpGraph& g,
                                                   const std::vector<GraphPass>& passes);

// ---- pattern helpers (shared by the passes) ------------------------------------------------
namespace pattern {
// `v` with value-preserving producers (Cast, Identity, one-input Concat) skipped backwards.
std::string Through(const OpGraph& g, std::string v);
// The node producing Through(v) if its op type is `op` (domain "" or `domain`), else null.
const OpNode* Def(const OpGraph& g, const std::string& v, std::string_view op,
                  std::string_view domain = {});
// True when Through(v) is a one-element constant equal to x (relative tolerance `tol`).
bool ScalarIs(const OpGraph& g, const std::string& v, double x, double tol = 1e-6);
// Calls f(a, b), then f(b, a), for the first two inputs of n; true when one call is.
bool EitherOrder(const OpNode& n,
                 const std::function<bool(const std::string&, const std::string&)>& f);
// Replaces the matched root, node `index`, by the fused op es.`op`(inputs) under the root's name
// and writing its outputs, and reindexes the graph; returns the new node (for its attributes).
OpNode& Fuse(OpGraph& g, int index, std::string op, std::vector<std::string> inputs);
}  // namespace pattern

}  // namespace es
