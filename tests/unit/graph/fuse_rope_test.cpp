// FuseRope against x * cos + Concat(Neg(x[..., d/2:]), x[..., :d/2]) * sin, operands in either
// order; a Concat of the halves in the wrong order (not rotate_half) is left alone.
#include <gtest/gtest.h>

#include "edgeseek/internal/graph/passes/passes.h"
#include "op_eval_util.h"

namespace es::test {
namespace {

GraphMaker Decomposed(bool swapped, bool wrong_halves) {
  GraphMaker m;
  const std::string x = m.Input("x"), c = m.Input("cos"), s = m.Input("sin");
  const std::string x1 =
      m.Op("Slice", {x, m.Ints("s0", {0}), m.Ints("e0", {4}), m.Ints("a0", {-1})});
  const std::string x2 =
      m.Op("Slice", {x, m.Ints("s1", {4}), m.Ints("e1", {INT64_MAX}), m.Ints("a1", {-1})});
  const std::string rh = wrong_halves
                             ? m.Op("Concat", {m.Op("Neg", {x1}), x2}, {{"axis", int64_t(-1)}})
                             : m.Op("Concat", {m.Op("Neg", {x2}), x1}, {{"axis", int64_t(-1)}});
  const std::string a = m.Op("Mul", {x, c}),
                    b = swapped ? m.Op("Mul", {s, rh}) : m.Op("Mul", {rh, s});
  m.Output(swapped ? m.Op("Add", {b, a}) : m.Op("Add", {a, b}));
  return m;
}

TEST(FuseRope, FusesAndComputesTheSame) {
  for (bool swapped : {false, true}) {
    GraphMaker m = Decomposed(swapped, false);
    const std::map<std::string, Val> in = {{"x", RandomVal({1, 2, 3, 8}, 1)},
                                           {"cos", RandomVal({1, 1, 3, 8}, 2)},
                                           {"sin", RandomVal({1, 1, 3, 8}, 3)}};
    const Val before = Evaluate(m.g, in).begin()->second;
    EXPECT_EQ(FuseRope(m.g), 1);
    m.g.RemoveDead();
    ASSERT_EQ(m.g.nodes.size(), 1u);
    EXPECT_EQ(m.g.nodes[0].op, "Rope");
    EXPECT_LE(MaxDiff(Evaluate(m.g, in).begin()->second, before), 1e-6);
  }
}

TEST(FuseRope, NotForOtherRotations) {
  GraphMaker m = Decomposed(false, true);
  EXPECT_EQ(FuseRope(m.g), 0);
}

}  // namespace
}  // namespace es::test
