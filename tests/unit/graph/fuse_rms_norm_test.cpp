// FuseRmsNorm against its decompositions: the TorchScript spelling (Pow, ReduceMean, Add, Sqrt,
// Reciprocal, Mul, Mul with Casts) and the x / Sqrt and Mul(x, x) spellings.
#include <gtest/gtest.h>

#include "edgeseek/internal/graph/passes/passes.h"
#include "op_eval_util.h"

namespace es::test {
namespace {

// variant 0: Pow + Reciprocal; 1: Mul(x, x) + Div(1, Sqrt); 2: Div(x, Sqrt), weight first.
GraphMaker Decomposed(int variant) {
  GraphMaker m;
  const std::string x = m.Input("x");
  const std::string xf = m.Op("Cast", {x}, {{"to", int64_t(1)}});
  const std::string sq =
      variant == 1 ? m.Op("Mul", {xf, xf}) : m.Op("Pow", {xf, m.Const("two", {}, {2.0f})});
  const std::string mean =
      m.Op("ReduceMean", {sq}, {{"axes", std::vector<int64_t>{-1}}, {"keepdims", int64_t(1)}});
  const std::string s = m.Op("Sqrt", {m.Op("Add", {mean, m.Const("eps", {}, {1e-5f})})});
  std::string y;
  if (variant == 0) y = m.Op("Mul", {xf, m.Op("Reciprocal", {s})});
  if (variant == 1) y = m.Op("Mul", {m.Op("Div", {m.Const("one", {}, {1.0f}), s}), xf});
  if (variant == 2) y = m.Op("Div", {xf, s});
  const std::vector<float> w = RandomVal({8}, 7).v;
  const std::string out =
      variant == 2 ? m.Op("Mul", {m.Const("w", {8}, w), m.Op("Cast", {y}, {{"to", int64_t(1)}})})
                   : m.Op("Mul", {y, m.Const("w", {8}, w)});
  m.Output(out);
  return m;
}

TEST(FuseRmsNorm, EverySpellingFusesAndComputesTheSame) {
  for (int variant = 0; variant < 3; ++variant) {
    GraphMaker m = Decomposed(variant);
    const std::map<std::string, Val> in = {{"x", RandomVal({3, 8}, 1, 2.0f)}};
    const Val before = Evaluate(m.g, in).begin()->second;
    EXPECT_EQ(FuseRmsNorm(m.g), 1) << variant;
    m.g.RemoveDead();
    EXPECT_EQ(m.Count("RmsNorm"), 1);
    EXPECT_EQ(m.Count("ReduceMean"), 0);
    EXPECT_EQ(m.Count("Sqrt"), 0);
    EXPECT_NEAR(m.g.nodes.back().Float("epsilon", 0), 1e-5f, 1e-12);
    EXPECT_LE(MaxDiff(Evaluate(m.g, in).begin()->second, before), 1e-5) << variant;
  }
}

TEST(FuseRmsNorm, LeavesOtherNormsAlone) {
  // mean(x) instead of mean(x^2): a layer norm's first half, not RMSNorm.
  GraphMaker m;
  const std::string x = m.Input("x");
  const std::string mean = m.Op("ReduceMean", {x}, {{"axes", std::vector<int64_t>{-1}}});
  const std::string r =
      m.Op("Reciprocal", {m.Op("Sqrt", {m.Op("Add", {mean, m.Const("eps", {}, {1e-5f})})})});
  m.Output(m.Op("Mul", {m.Op("Mul", {x, r}), m.Const("w", {4}, {1, 1, 1, 1})}));
  EXPECT_EQ(FuseRmsNorm(m.g), 0);
}

}  // namespace
}  // namespace es::test
