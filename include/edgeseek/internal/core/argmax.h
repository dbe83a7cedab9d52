// The lowest index of a row's largest value, in one pass that also checks each value: the
// sampler's greedy pick (-inf legal: a masked token) and the host argmax of a backend's output
// rows (only finite values legal) share it.
#pragma once

#include <cmath>
#include <cstdint>

namespace es {

// Finite: |x| <= FLT_MAX is false for NaN and both infinities.
inline bool IsFiniteLogit(float x) { return std::fabs(x) <= 3.402823466e38f; }

// The lowest i in [0, n) with x[i] == max(x), n >= 1; *ok is false when some value fails
// `legal` (then the index means nothing). One pass keeps a running maximum per lane of 16 (a
// select the compiler turns into vector max instructions) and `legal` folded with `&` (no
// branch per element), then the first index holding that maximum: the scalar `x[i] > best`
// loop carries a dependency from one element to the next (~0.12 ms a 151,936-value row on an
// EPYC core, ~0.6 ms where it compared with x[best], a load on the compare's result).
template <class Legal>
int64_t ArgmaxFirst(const float* x, int64_t n, Legal legal, bool* ok) {
  constexpr int kLanes = 16;
  float lane_max[kLanes];
  for (float& m : lane_max) m = -INFINITY;
  bool all = true;
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) {
      const float v = x[i + j];
      all &= legal(v);
      lane_max[j] = v > lane_max[j] ? v : lane_max[j];
    }
  float mx = -INFINITY;
  for (; i < n; ++i) {
    all &= legal(x[i]);
    mx = x[i] > mx ? x[i] : mx;
  }
  for (float m : lane_max) mx = m > mx ? m : mx;
  *ok = all;
  int64_t best = 0;
  while (best < n - 1 && !(x[best] == mx)) ++best;
  return best;
}

}  // namespace es
