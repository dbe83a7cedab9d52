// ArgmaxFirst (core/argmax.h) against the plain loop over odd lengths: ties (lowest index),
// the maximum in the lanes' body and in the tail, -inf values, and the legality flag for a bad
// value at every position.
#include "edgeseek/internal/core/argmax.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace es {
namespace {

int64_t PlainArgmax(const std::vector<float>& x) {
  int64_t best = 0;
  for (size_t i = 1; i < x.size(); ++i)
    if (x[i] > x[size_t(best)]) best = int64_t(i);
  return best;
}

bool FiniteOrMinusInf(float x) { return IsFiniteLogit(x) || x == -INFINITY; }

TEST(ArgmaxFirst, EqualsThePlainLoopOverOddLengths) {
  std::mt19937 rng(7);
  // Few distinct values: most rows hold the maximum several times.
  std::uniform_int_distribution<int> value(-8, 8);
  for (int64_t n : {1, 2, 15, 16, 17, 31, 33, 47, 64, 65, 100, 151936}) {
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<float> x(static_cast<size_t>(n));
      for (float& v : x) v = value(rng) == -8 ? -INFINITY : float(value(rng)) * 0.25f;
      bool ok = false;
      EXPECT_EQ(ArgmaxFirst(x.data(), n, FiniteOrMinusInf, &ok), PlainArgmax(x)) << "n=" << n;
      EXPECT_TRUE(ok);
    }
  }
}

TEST(ArgmaxFirst, MaximumAtEachPositionAndAllMinusInf) {
  for (int64_t n : {1, 5, 16, 17, 40}) {
    for (int64_t at = 0; at < n; ++at) {
      std::vector<float> x(size_t(n), -1.0f);
      x[size_t(at)] = 2.0f;
      if (at + 1 < n) x[size_t(n - 1)] = 2.0f;  // a later tie never wins
      bool ok = false;
      EXPECT_EQ(ArgmaxFirst(x.data(), n, FiniteOrMinusInf, &ok), at) << "n=" << n;
    }
    std::vector<float> masked(size_t(n), -INFINITY);
    bool ok = false;
    EXPECT_EQ(ArgmaxFirst(masked.data(), n, FiniteOrMinusInf, &ok), 0);
    EXPECT_TRUE(ok);
    EXPECT_EQ(ArgmaxFirst(masked.data(), n, IsFiniteLogit, &ok), 0);
    EXPECT_FALSE(ok);  // -inf is not finite
  }
}

TEST(ArgmaxFirst, FlagsABadValueAtEveryPosition) {
  for (float bad : {NAN, INFINITY, -INFINITY}) {
    for (int64_t n : {1, 16, 17, 35}) {
      for (int64_t at = 0; at < n; ++at) {
        std::vector<float> x(size_t(n), 0.5f);
        x[size_t(at)] = bad;
        bool ok = true;
        ArgmaxFirst(x.data(), n, IsFiniteLogit, &ok);
        EXPECT_FALSE(ok) << "bad=" << bad << " n=" << n << " at=" << at;
        ArgmaxFirst(x.data(), n, FiniteOrMinusInf, &ok);
        EXPECT_EQ(ok, bad == -INFINITY) << "bad=" << bad << " n=" << n << " at=" << at;
      }
    }
  }
}

}  // namespace
}  // namespace es
