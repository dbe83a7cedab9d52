// Pass: com.microsoft SimplifiedLayerNormalization(x, w) -> es.RmsNorm(x, w), and
// SkipSimplifiedLayerNormalization(x, skip, w[, bias]) -> s = x + skip (+ bias) ; es.RmsNorm(s, w),
// where s is the node's 4th output (input_skip_bias_sum, the residual stream ORT-GenAI's builder
// carries on). The mean / inv_std_var outputs must be unused (training outputs).
#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/graph/passes/passes.h"

namespace es {

int LowerSimplifiedLayerNorm(OpGraph& g) {
  int rewrites = 0;
  std::vector<OpNode> out;
  out.reserve(g.nodes.size());
  for (OpNode& n : g.nodes) {
    const bool plain = n.op == "SimplifiedLayerNormalization";
    const bool skip = n.op == "SkipSimplifiedLayerNormalization" && n.domain == "com.microsoft";
    if (!plain && !skip) {
      out.push_back(std::move(n));
      continue;
    }
    for (size_t o = 1; o < n.outputs.size() && o < 3; ++o)
      ES_CHECK(
          n.outputs[o].empty() ||
              (g.Consumers(n.outputs[o]).empty() && !g.IsGraphOutput(n.outputs[o])),
          n.Where(), ": output ", o,
          " (mean / inv_std_var) is read; only the normalized output and the sum are supported");
    const int64_t axis = n.Int("axis", -1);
    ES_CHECK(axis == -1, n.Where(), ": axis ", axis, " is not the last axis");
    OpNode rms;
    rms.name = n.name;
    rms.op = "RmsNorm";
    rms.domain = "es";
    rms.attrs["epsilon"] = n.Float("epsilon", 1e-5f);
    rms.outputs = {n.outputs.empty() ? std::string() : n.outputs[0]};
    if (plain) {
      rms.inputs = {n.In(0), n.In(1)};
    } else {
      std::string sum =
          n.outputs.size() > 3 && !n.outputs[3].empty() ? n.outputs[3] : n.name + "/input_skip_sum";
      OpNode add;
      add.name = n.name + "/skip_add";
      add.op = "Add";
      add.inputs = {n.In(0), n.In(1)};
      if (!n.In(3).empty()) {
        add.outputs = {sum + "/no_bias"};
        OpNode bias;
        bias.name = n.name + "/skip_bias";
        bias.op = "Add";
        bias.inputs = {add.outputs[0], n.In(3)};
        bias.outputs = {sum};
        out.push_back(std::move(add));
        out.push_back(std::move(bias));
      } else {
        add.outputs = {sum};
        out.push_back(std::move(add));
      }
      rms.inputs = {sum, n.In(2)};
    }
    out.push_back(std::move(rms));
    ++rewrites;
  }
  g.nodes = std::move(out);
  g.Reindex();
  return rewrites;
}

}  // namespace es
