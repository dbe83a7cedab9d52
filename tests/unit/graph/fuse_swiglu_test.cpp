// FuseSwiGlu against Silu(gate) * up (after FuseSilu, as the pipeline runs them).
#include <gtest/gtest.h>

#include "edgeseek/internal/graph/passes/passes.h"
#include "op_eval_util.h"

namespace es::test {
namespace {

TEST(FuseSwiGlu, FusesAndComputesTheSame) {
  GraphMaker m;
  const std::string g = m.Input("gate"), u = m.Input("up");
  m.Output(m.Op("Mul", {u, m.Op("Mul", {g, m.Op("Sigmoid", {g})})}));
  const std::map<std::string, Val> in = {{"gate", RandomVal({3, 6}, 4, 3.0f)},
                                         {"up", RandomVal({3, 6}, 5)}};
  const Val before = Evaluate(m.g, in).begin()->second;
  EXPECT_EQ(FuseSilu(m.g), 1);
  EXPECT_EQ(FuseSwiGlu(m.g), 1);
  m.g.RemoveDead();
  ASSERT_EQ(m.g.nodes.size(), 1u);
  EXPECT_EQ(m.g.nodes[0].op, "SwiGLU");
  EXPECT_EQ(m.g.nodes[0].inputs, (std::vector<std::string>{"gate", "up"}));
  EXPECT_LE(MaxDiff(Evaluate(m.g, in).begin()->second, before), 1e-6);
}

}  // namespace
}  // namespace es::test
