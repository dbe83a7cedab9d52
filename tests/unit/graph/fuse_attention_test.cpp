// FuseAttention against Softmax(q kᵀ * scale + mask) v in its spellings: Mul by the scale, Div by
// sqrt(d), and torch's SDPA decomposition with sqrt(scale) on q and on kᵀ.
#include <gtest/gtest.h>

#include <cmath>

#include "edgeseek/internal/graph/passes/passes.h"
#include "op_eval_util.h"

namespace es::test {
namespace {

GraphMaker Decomposed(int variant, bool mask) {
  GraphMaker m;
  const std::string q = m.Input("q"), k = m.Input("k"), v = m.Input("v");
  const float d = 8;
  std::string s;
  const std::string kt = m.Op("Transpose", {k}, {{"perm", std::vector<int64_t>{0, 1, 3, 2}}});
  if (variant == 0)
    s = m.Op("Mul", {m.Op("MatMul", {q, kt}), m.Const("scale", {}, {1.0f / std::sqrt(d)})});
  if (variant == 1)
    s = m.Op("Div", {m.Op("MatMul", {q, kt}), m.Const("sqrt_d", {}, {std::sqrt(d)})});
  if (variant == 2) {
    const std::string f = m.Const("sqrt_scale", {}, {1.0f / std::sqrt(std::sqrt(d))});
    s = m.Op("MatMul", {m.Op("Mul", {q, f}), m.Op("Mul", {kt, f})});
  }
  if (mask) s = m.Op("Add", {s, m.Input("mask")});
  m.Output(m.Op("MatMul", {m.Op("Softmax", {s}, {{"axis", int64_t(-1)}}), v}));
  return m;
}

TEST(FuseAttention, EverySpellingFusesAndComputesTheSame) {
  for (int variant = 0; variant < 3; ++variant) {
    for (bool mask : {false, true}) {
      GraphMaker m = Decomposed(variant, mask);
      std::map<std::string, Val> in = {{"q", RandomVal({1, 2, 3, 8}, 1)},
                                       {"k", RandomVal({1, 2, 5, 8}, 2)},
                                       {"v", RandomVal({1, 2, 5, 8}, 3)}};
      if (mask) in["mask"] = RandomVal({1, 1, 3, 5}, 4, 3.0f);
      const Val before = Evaluate(m.g, in).begin()->second;
      EXPECT_EQ(FuseAttention(m.g), 1) << variant;
      m.g.RemoveDead();
      EXPECT_EQ(m.Count("Softmax"), 0);
      EXPECT_EQ(m.Count("Attention"), 1);
      EXPECT_NEAR(m.g.nodes.back().Float("scale", 0), 1.0 / std::sqrt(8.0), 1e-6);
      EXPECT_LE(MaxDiff(Evaluate(m.g, in).begin()->second, before), 1e-5) << variant << " " << mask;
    }
  }
}

TEST(FuseAttention, NotWithoutTheKeyTranspose) {
  GraphMaker m;
  const std::string q = m.Input("q"), k = m.Input("k"), v = m.Input("v");
  m.Output(m.Op("MatMul", {m.Op("Softmax", {m.Op("MatMul", {q, k})}, {{"axis", int64_t(-1)}}), v}));
  EXPECT_EQ(FuseAttention(m.g), 0);
}

}  // namespace
}  // namespace es::test
