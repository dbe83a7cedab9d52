// Dot and axpy over f32 with Highway dynamic dispatch (see vec.h). Lanes accumulate separately
// (two vectors of accumulators), the tail is added in order, then the lanes are summed.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/kernels/vec.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "cpu/kernels/vec.h"

HWY_BEFORE_NAMESPACE();
namespace es::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

float DotT(const float* a, const float* b, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t L = int64_t(hn::Lanes(d));
  auto acc0 = hn::Zero(d), acc1 = hn::Zero(d);
  int64_t i = 0;
  for (; i + 2 * L <= n; i += 2 * L) {
    acc0 = hn::MulAdd(hn::LoadU(d, a + i), hn::LoadU(d, b + i), acc0);
    acc1 = hn::MulAdd(hn::LoadU(d, a + i + L), hn::LoadU(d, b + i + L), acc1);
  }
  for (; i + L <= n; i += L) acc0 = hn::MulAdd(hn::LoadU(d, a + i), hn::LoadU(d, b + i), acc0);
  float tail = 0.0f;
  for (; i < n; ++i) tail += a[i] * b[i];
  return hn::GetLane(hn::SumOfLanes(d, hn::Add(acc0, acc1))) + tail;
}

void AxpyT(float w, const float* x, float* y, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t L = int64_t(hn::Lanes(d));
  const auto vw = hn::Set(d, w);
  int64_t i = 0;
  for (; i + L <= n; i += L) hn::StoreU(hn::MulAdd(vw, hn::LoadU(d, x + i), hn::LoadU(d, y + i)), d, y + i);
  for (; i < n; ++i) y[i] += w * x[i];
}

}  // namespace HWY_NAMESPACE
}  // namespace es::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace es::cpu {
HWY_EXPORT(DotT);
HWY_EXPORT(AxpyT);
float Dot(const float* a, const float* b, int64_t n) { return HWY_DYNAMIC_DISPATCH(DotT)(a, b, n); }
void Axpy(float w, const float* x, float* y, int64_t n) { HWY_DYNAMIC_DISPATCH(AxpyT)(w, x, y, n); }
}  // namespace es::cpu
#endif  // HWY_ONCE
