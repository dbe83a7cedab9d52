// Repacking at load and the matmul over repacked weights (repack.h). Highway compiles the
// per-target part once per target, with the same target list as matmul.cpp, and
// HWY_DYNAMIC_DISPATCH picks the one MatMul picks; the kernels are matmul_lanes-inl.h's.

// The same targets as matmul.cpp (AVX3_DL included), so both dispatch to the same one.
#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL 1
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/kernels/repack.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// clang-format off
#include "hwy/highway.h"
#include "cpu/kernels/matmul_quant-inl.h"  // the activation quantizers, then matmul_lanes-inl.h
// clang-format on

#include <sys/mman.h>

#include <algorithm>
#include <memory>

#include "cpu/kernels/matmul.h"
#include "cpu/kernels/repack.h"
#include "edgeseek/internal/core/error.h"

HWY_BEFORE_NAMESPACE();
namespace es::cpu {
namespace HWY_NAMESPACE {

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
template <class Kern>
size_t PackedBytesT(size_t N, size_t K) {
  return (N + kLaneCols - 1) / kLaneCols * LanePackedGroupBytes<Kern>(K / kQK);
}

template <class Kern>
void RepackT(const void* w, size_t N, size_t K, uint8_t* out, ThreadPool& pool) {
  const size_t groups = (N + kLaneCols - 1) / kLaneCols;
  pool.ParallelFor(int64_t(groups), [&](int64_t g0, int64_t g1, int) {
    LanePackGroups<Kern>(static_cast<const typename Kern::Block*>(w), N, K / kQK, size_t(g0),
                         size_t(g1), out);
  });
}
#endif

bool SupportsT(DType type) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
  return type == DType::kQ4_0 || type == DType::kQ8_0;
#else
  (void)type;
  return false;
#endif
}

size_t PackedBytes(DType type, int64_t N, int64_t K) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
  if (type == DType::kQ4_0) return PackedBytesT<Q40Kernel>(size_t(N), size_t(K));
  if (type == DType::kQ8_0) return PackedBytesT<Q80Kernel>(size_t(N), size_t(K));
#endif
  Fail("Repack: no repacked layout for ", Name(type), " on SIMD target ",
       hwy::TargetName(HWY_TARGET));
}

void RepackInto(const void* w, DType type, int64_t N, int64_t K, uint8_t* out, ThreadPool& pool) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
  if (type == DType::kQ4_0) return RepackT<Q40Kernel>(w, size_t(N), size_t(K), out, pool);
  if (type == DType::kQ8_0) return RepackT<Q80Kernel>(w, size_t(N), size_t(K), out, pool);
#endif
  (void)w, (void)N, (void)K, (void)out, (void)pool;
  Fail("Repack: no repacked layout for ", Name(type), " on SIMD target ",
       hwy::TargetName(HWY_TARGET));
}

void PackedMatMulT(const float* x, int64_t R, int64_t K, const uint8_t* packed, DType type,
                   int64_t N, const float* bias, float* y, int64_t ldy, ThreadPool& pool,
                   const MatMulEpilogue* epi) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
  const size_t r = size_t(R), k = size_t(K), n = size_t(N), l = size_t(ldy);
  if (type == DType::kQ4_0)
    return LanePackedMatMul<Q40Kernel>(x, r, k, packed, n, bias, y, l, pool, epi);
  if (type == DType::kQ8_0)
    return LanePackedMatMul<Q80Kernel>(x, r, k, packed, n, bias, y, l, pool, epi);
#endif
  (void)x, (void)R, (void)K, (void)packed, (void)N, (void)bias, (void)y, (void)ldy, (void)pool,
      (void)epi;
  Fail("PackedMatMul: weights repacked as ", Name(type), " but SIMD target ",
       hwy::TargetName(HWY_TARGET), " has no kernel for them");
}

}  // namespace HWY_NAMESPACE
}  // namespace es::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace es::cpu {

namespace {

// `bytes` of fresh anonymous memory starting on a 2 MiB boundary, its whole 2 MiB pages advised
// as huge pages (a hint: without transparent huge pages it is plain memory). The tail past the
// last whole 2 MiB stays in 4 KiB pages: a huge page there would commit up to 2 MiB for a few
// bytes (measured: +0.2 GB over the 198 tensors of the 1.5B model). Null when mmap fails.
std::shared_ptr<uint8_t> AllocHuge(size_t bytes) {
  constexpr size_t kHuge = size_t(2) << 20;
  const size_t len = std::max<size_t>(bytes, 1) + kHuge;  // room to start on a 2 MiB boundary
  void* base = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) return nullptr;
  const uintptr_t a = (reinterpret_cast<uintptr_t>(base) + kHuge - 1) / kHuge * kHuge;
  auto* p = reinterpret_cast<uint8_t*>(a);
  if (bytes >= kHuge) madvise(p, bytes / kHuge * kHuge, MADV_HUGEPAGE);
  return std::shared_ptr<uint8_t>(p, [base, len](uint8_t*) { munmap(base, len); });
}

}  // namespace

HWY_EXPORT(SupportsT);
HWY_EXPORT(PackedBytes);
HWY_EXPORT(RepackInto);
HWY_EXPORT(PackedMatMulT);

bool RepackSupports(DType type) { return HWY_DYNAMIC_DISPATCH(SupportsT)(type); }

PackedWeight Repack(const void* w, DType type, int64_t N, int64_t K, ThreadPool& pool) {
  ES_CHECK(RepackSupports(type), "Repack: no repacked layout for ", Name(type),
           " on this CPU (SIMD ", SimdTargetName(), ")");
  ES_CHECK(N >= 0 && K >= 0 && K % kQK == 0, "Repack: bad shape N=", N, " K=", K);
  PackedWeight p;
  p.type = type;
  p.N = N;
  p.K = K;
  p.bytes = HWY_DYNAMIC_DISPATCH(PackedBytes)(type, N, K);
  p.data = AllocHuge(p.bytes);
  ES_CHECK(p.data, "out of memory repacking ", p.bytes, " bytes of ", Name(type), " weights");
  HWY_DYNAMIC_DISPATCH(RepackInto)(w, type, N, K, p.data.get(), pool);
  return p;
}

void PackedMatMul(const float* x, int64_t R, const PackedWeight& w, const float* bias, float* y,
                  int64_t ldy, ThreadPool& pool, const MatMulEpilogue* epi) {
  ES_CHECK(R >= 0, "PackedMatMul: negative R=", R);
  ES_CHECK(ldy >= w.N, "PackedMatMul: ldy=", ldy, " is smaller than N=", w.N);
  if (R == 0 || w.N == 0) return;
  const MatMulEpilogue* e = epi && *epi ? epi : nullptr;  // an empty one: none
  HWY_DYNAMIC_DISPATCH(PackedMatMulT)(x, R, w.K, w.data.get(), w.type, w.N, bias, y, ldy, pool, e);
}

}  // namespace es::cpu
#endif  // HWY_ONCE
