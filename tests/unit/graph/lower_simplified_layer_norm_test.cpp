// LowerSimplifiedLayerNorm against onnxruntime's definitions of SimplifiedLayerNormalization and
// SkipSimplifiedLayerNormalization (normalized output and input_skip_bias_sum).
#include <gtest/gtest.h>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/graph/passes/passes.h"
#include "op_eval_util.h"

namespace es::test {
namespace {

TEST(LowerSimplifiedLayerNorm, BothFormsLowerAndComputeTheSame) {
  GraphMaker m;
  const std::string x = m.Input("x"), r = m.Input("residual");
  const std::string w = m.Const("w", {6}, RandomVal({6}, 9).v);
  const std::string h =
      m.Op("SimplifiedLayerNormalization", {x, w}, {{"epsilon", 1e-6f}, {"axis", int64_t(-1)}});
  OpNode skip;
  skip.name = "/skip";
  skip.op = "SkipSimplifiedLayerNormalization";
  skip.domain = "com.microsoft";
  skip.inputs = {h, r, w};
  skip.outputs = {"normed", "", "", "sum"};
  skip.attrs["epsilon"] = 1e-6f;
  m.g.nodes.push_back(skip);
  m.Output("normed");
  m.Output("sum");
  const std::map<std::string, Val> in = {{"x", RandomVal({2, 6}, 1)},
                                         {"residual", RandomVal({2, 6}, 2)}};
  const auto before = Evaluate(m.g, in);
  EXPECT_EQ(LowerSimplifiedLayerNorm(m.g), 2);
  m.g.RemoveDead();
  EXPECT_EQ(m.Count("RmsNorm"), 2);
  EXPECT_EQ(m.Count("Add"), 1);
  const auto after = Evaluate(m.g, in);
  EXPECT_LE(MaxDiff(after.at("normed"), before.at("normed")), 1e-6);
  EXPECT_LE(MaxDiff(after.at("sum"), before.at("sum")), 1e-6);
}

TEST(LowerSimplifiedLayerNorm, ReadingTheStatisticsIsAnError) {
  GraphMaker m;
  const std::string x = m.Input("x");
  OpNode n;
  n.name = "/ln";
  n.op = "SimplifiedLayerNormalization";
  n.inputs = {x, m.Const("w", {4}, {1, 1, 1, 1})};
  n.outputs = {"y", "inv_std"};
  m.g.nodes.push_back(n);
  m.Output("inv_std");
  m.g.Reindex();
  EXPECT_THROW(LowerSimplifiedLayerNorm(m.g), Error);
}

}  // namespace
}  // namespace es::test
