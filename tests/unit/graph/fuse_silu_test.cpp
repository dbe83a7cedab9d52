// FuseSilu against x * Sigmoid(x) (both operand orders), and not for x * Sigmoid(y).
#include <gtest/gtest.h>

#include "edgeseek/internal/graph/passes/passes.h"
#include "op_eval_util.h"

namespace es::test {
namespace {

TEST(FuseSilu, FusesAndComputesTheSame) {
  for (bool swapped : {false, true}) {
    GraphMaker m;
    const std::string x = m.Input("x");
    const std::string s = m.Op("Sigmoid", {x});
    m.Output(swapped ? m.Op("Mul", {s, x}) : m.Op("Mul", {x, s}));
    const std::map<std::string, Val> in = {{"x", RandomVal({2, 5}, 3, 4.0f)}};
    const Val before = Evaluate(m.g, in).begin()->second;
    EXPECT_EQ(FuseSilu(m.g), 1);
    m.g.RemoveDead();
    EXPECT_EQ(m.Count("Sigmoid"), 0);
    EXPECT_EQ(m.Count("Silu"), 1);
    EXPECT_LE(MaxDiff(Evaluate(m.g, in).begin()->second, before), 1e-6);
  }
}

TEST(FuseSilu, NotForAGateOfAnotherValue) {
  GraphMaker m;
  const std::string x = m.Input("x"), y = m.Input("y");
  m.Output(m.Op("Mul", {x, m.Op("Sigmoid", {y})}));
  EXPECT_EQ(FuseSilu(m.g), 0);
}

}  // namespace
}  // namespace es::test
