// Dot and axpy over f32 with Highway dynamic dispatch (see vec.h). Lanes accumulate separately
// (two vectors of accumulators), the tail is added in order, then the lanes are summed.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/kernels/vec.cpp"
#include "cpu/kernels/vec.h"

#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

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
  for (; i + L <= n; i += L)
    hn::StoreU(hn::MulAdd(vw, hn::LoadU(d, x + i), hn::LoadU(d, y + i)), d, y + i);
  for (; i < n; ++i) y[i] += w * x[i];
}

// DotT for up to 4 rows of a at once: per row the same accumulators, chunks and order. (Named
// vectors, not arrays: SVE's vectors are sizeless.)
template <int kG>
void Dot4(const float* a, int64_t lda, const float* b, int64_t n, float* out) {
  const hn::ScalableTag<float> d;
  const int64_t L = int64_t(hn::Lanes(d));
  const float* a0 = a;
  const float* a1 = kG > 1 ? a + lda : a;
  const float* a2 = kG > 2 ? a + 2 * lda : a;
  const float* a3 = kG > 3 ? a + 3 * lda : a;
  auto p0 = hn::Zero(d), p1 = p0, p2 = p0, p3 = p0, q0 = p0, q1 = p0, q2 = p0, q3 = p0;
  int64_t i = 0;
  for (; i + 2 * L <= n; i += 2 * L) {
    const auto b0 = hn::LoadU(d, b + i), b1 = hn::LoadU(d, b + i + L);
    p0 = hn::MulAdd(hn::LoadU(d, a0 + i), b0, p0);
    q0 = hn::MulAdd(hn::LoadU(d, a0 + i + L), b1, q0);
    if (kG > 1) p1 = hn::MulAdd(hn::LoadU(d, a1 + i), b0, p1);
    if (kG > 1) q1 = hn::MulAdd(hn::LoadU(d, a1 + i + L), b1, q1);
    if (kG > 2) p2 = hn::MulAdd(hn::LoadU(d, a2 + i), b0, p2);
    if (kG > 2) q2 = hn::MulAdd(hn::LoadU(d, a2 + i + L), b1, q2);
    if (kG > 3) p3 = hn::MulAdd(hn::LoadU(d, a3 + i), b0, p3);
    if (kG > 3) q3 = hn::MulAdd(hn::LoadU(d, a3 + i + L), b1, q3);
  }
  for (; i + L <= n; i += L) {
    const auto b0 = hn::LoadU(d, b + i);
    p0 = hn::MulAdd(hn::LoadU(d, a0 + i), b0, p0);
    if (kG > 1) p1 = hn::MulAdd(hn::LoadU(d, a1 + i), b0, p1);
    if (kG > 2) p2 = hn::MulAdd(hn::LoadU(d, a2 + i), b0, p2);
    if (kG > 3) p3 = hn::MulAdd(hn::LoadU(d, a3 + i), b0, p3);
  }
  const auto finish = [&](const float* ag, decltype(p0) p, decltype(p0) q) {
    float tail = 0.0f;
    for (int64_t k = i; k < n; ++k) tail += ag[k] * b[k];
    return hn::GetLane(hn::SumOfLanes(d, hn::Add(p, q))) + tail;
  };
  out[0] = finish(a0, p0, q0);
  if (kG > 1) out[1] = finish(a1, p1, q1);
  if (kG > 2) out[2] = finish(a2, p2, q2);
  if (kG > 3) out[3] = finish(a3, p3, q3);
}

void DotRowsT(const float* a, int64_t lda, int64_t G, const float* b, int64_t n, float* out) {
  int64_t g = 0;
  for (; g + 4 <= G; g += 4) Dot4<4>(a + g * lda, lda, b, n, out + g);
  switch (G - g) {
    case 3:
      Dot4<3>(a + g * lda, lda, b, n, out + g);
      break;
    case 2:
      Dot4<2>(a + g * lda, lda, b, n, out + g);
      break;
    case 1:
      Dot4<1>(a + g * lda, lda, b, n, out + g);
      break;
    default:
      break;
  }
}

// AxpyT into up to 4 rows of y at once: per element the same single fused multiply-add.
template <int kG>
void Axpy4(const float* w, const float* x, float* y, int64_t ldy, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t L = int64_t(hn::Lanes(d));
  float* y0 = y;
  float* y1 = kG > 1 ? y + ldy : y;
  float* y2 = kG > 2 ? y + 2 * ldy : y;
  float* y3 = kG > 3 ? y + 3 * ldy : y;
  const auto w0 = hn::Set(d, w[0]), w1 = hn::Set(d, kG > 1 ? w[1] : 0.0f),
             w2 = hn::Set(d, kG > 2 ? w[2] : 0.0f), w3 = hn::Set(d, kG > 3 ? w[3] : 0.0f);
  int64_t i = 0;
  for (; i + L <= n; i += L) {
    const auto vx = hn::LoadU(d, x + i);
    hn::StoreU(hn::MulAdd(w0, vx, hn::LoadU(d, y0 + i)), d, y0 + i);
    if (kG > 1) hn::StoreU(hn::MulAdd(w1, vx, hn::LoadU(d, y1 + i)), d, y1 + i);
    if (kG > 2) hn::StoreU(hn::MulAdd(w2, vx, hn::LoadU(d, y2 + i)), d, y2 + i);
    if (kG > 3) hn::StoreU(hn::MulAdd(w3, vx, hn::LoadU(d, y3 + i)), d, y3 + i);
  }
  for (int g = 0; g < kG; ++g)
    for (int64_t k = i; k < n; ++k) y[g * ldy + k] += w[g] * x[k];
}

void AxpyRowsT(const float* w, const float* x, float* y, int64_t ldy, int64_t G, int64_t n) {
  int64_t g = 0;
  for (; g + 4 <= G; g += 4) Axpy4<4>(w + g, x, y + g * ldy, ldy, n);
  switch (G - g) {
    case 3:
      Axpy4<3>(w + g, x, y + g * ldy, ldy, n);
      break;
    case 2:
      Axpy4<2>(w + g, x, y + g * ldy, ldy, n);
      break;
    case 1:
      Axpy4<1>(w + g, x, y + g * ldy, ldy, n);
      break;
    default:
      break;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace es::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace es::cpu {
HWY_EXPORT(DotT);
HWY_EXPORT(AxpyT);
HWY_EXPORT(DotRowsT);
HWY_EXPORT(AxpyRowsT);
float Dot(const float* a, const float* b, int64_t n) { return HWY_DYNAMIC_DISPATCH(DotT)(a, b, n); }
void Axpy(float w, const float* x, float* y, int64_t n) { HWY_DYNAMIC_DISPATCH(AxpyT)(w, x, y, n); }
void DotRows(const float* a, int64_t lda, int64_t G, const float* b, int64_t n, float* out) {
  HWY_DYNAMIC_DISPATCH(DotRowsT)(a, lda, G, b, n, out);
}
void AxpyRows(const float* w, const float* x, float* y, int64_t ldy, int64_t G, int64_t n) {
  HWY_DYNAMIC_DISPATCH(AxpyRowsT)(w, x, y, ldy, G, n);
}
}  // namespace es::cpu
#endif  // HWY_ONCE
