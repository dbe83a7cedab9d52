// SyntheticWeights (synthetic_weights.h): deterministic random weights, any row range on demand.
// The generator is counter-based (the header says the formula): Highway runs it on the widest
// SIMD target the CPU has, 8-16 elements a step, and any thread can make any range; Value() is
// the plain reference, also used for the few elements past the last whole vector.

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "synthetic_weights.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// clang-format off
#include "hwy/highway.h"
// clang-format on

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/core/half.h"
#include "edgeseek/internal/core/thread_pool.h"
#include "edgeseek/internal/models/presets.h"
#include "synthetic_weights.h"

// ---- The scalar parts: hashing and the reference (compiled once).
#ifndef ES_SYNTHETIC_WEIGHTS_ONCE
#define ES_SYNTHETIC_WEIGHTS_ONCE
namespace es::synthetic {

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ull;
constexpr float kUnitStep = 1.0f / 8388608.0f;  // 2^-23

inline uint32_t Mix32(uint32_t x) {  // lowbias32 (C. Wellons, "Prospecting for hash functions")
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

inline uint64_t SplitMix64(uint64_t z) {  // SplitMix64's output function
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

inline uint64_t Fnv1a64(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (const char c : s) {
    h ^= uint8_t(c);
    h *= 1099511628211ull;
  }
  return h;
}

// The keys of elements [block << 32, (block + 1) << 32) of a tensor.
struct Keys {
  uint32_t k1, k2;
  Keys(uint64_t key, uint64_t block) {
    const uint64_t z = SplitMix64(key + block + 1);
    k1 = uint32_t(z);
    k2 = uint32_t(z >> 32);
  }
};

// u in [-1, 1) of counter c.
inline float Uniform(uint32_t c, const Keys& k) {
  const uint32_t z = Mix32(Mix32(c + k.k1) ^ k.k2);
  return float(int32_t(z >> 8)) * kUnitStep - 1.0f;
}

}  // namespace es::synthetic
#endif  // ES_SYNTHETIC_WEIGHTS_ONCE

// ---- The SIMD body, once per Highway target.
HWY_BEFORE_NAMESPACE();
namespace es::synthetic {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

template <class D>
hn::Vec<D> MixV(D d, hn::Vec<D> x) {
  x = hn::Xor(x, hn::ShiftRight<16>(x));
  x = hn::Mul(x, hn::Set(d, 0x7feb352du));
  x = hn::Xor(x, hn::ShiftRight<15>(x));
  x = hn::Mul(x, hn::Set(d, 0x846ca68bu));
  return hn::Xor(x, hn::ShiftRight<16>(x));
}

// Elements c0 .. c0 + n - 1 of one 2^32 block (c0 + n <= 2^32) as `Out` (float, or uint16_t
// holding bf16 / f16 bits per `dtype`), whole vectors only; returns how many were written.
template <typename Out>
size_t FillVectors(uint32_t c0, size_t n, const Keys& keys, float center, float scale, DType dtype,
                   Out* out) {
  const hn::ScalableTag<uint32_t> du;
  const hn::Rebind<int32_t, decltype(du)> di;
  const hn::Rebind<float, decltype(du)> df;
  const hn::Rebind<uint16_t, decltype(du)> du16;
  const size_t N = hn::Lanes(du);
  const auto k1 = hn::Set(du, keys.k1), k2 = hn::Set(du, keys.k2);
  const auto step = hn::Set(df, kUnitStep), one = hn::Set(df, 1.0f);
  const auto vc = hn::Set(df, center), vs = hn::Set(df, scale);
  auto ctr = hn::Add(hn::Iota(du, 0), hn::Set(du, c0));
  const auto n_lanes = hn::Set(du, uint32_t(N));
  HWY_ALIGN float tmp[HWY_MAX_BYTES / sizeof(float)];
  size_t o = 0;
  for (; o + N <= n; o += N) {
    const auto z = MixV(du, hn::Xor(MixV(du, hn::Add(ctr, k1)), k2));
    const auto u =
        hn::Sub(hn::Mul(hn::ConvertTo(df, hn::BitCast(di, hn::ShiftRight<8>(z))), step), one);
    const auto w = hn::Add(vc, hn::Mul(vs, u));  // two roundings, as the reference (no FMA)
    if constexpr (sizeof(Out) == 4) {
      hn::StoreU(w, df, out + o);
    } else if (dtype == DType::kBF16) {  // round to nearest even; w is finite
      const auto b = hn::BitCast(du, w);
      const auto odd = hn::And(hn::ShiftRight<16>(b), hn::Set(du, 1u));
      const auto r = hn::ShiftRight<16>(hn::Add(b, hn::Add(hn::Set(du, 0x7fffu), odd)));
      hn::StoreU(hn::DemoteTo(du16, hn::BitCast(di, r)), du16, out + o);
    } else {  // f16: the scalar conversion (rounding subnormals alike on every target)
      hn::Store(w, df, tmp);
      for (size_t j = 0; j < N; ++j) out[o + j] = F32ToF16(tmp[j]);
    }
    ctr = hn::Add(ctr, n_lanes);
  }
  return o;
}

size_t FillRunT(uint32_t c0, size_t n, const Keys& keys, float center, float scale, DType dtype,
                void* dst) {
  if (dtype == DType::kF32)
    return FillVectors(c0, n, keys, center, scale, dtype, static_cast<float*>(dst));
  return FillVectors(c0, n, keys, center, scale, dtype, static_cast<uint16_t*>(dst));
}

}  // namespace HWY_NAMESPACE
}  // namespace es::synthetic
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace es {

namespace synthetic {
HWY_EXPORT(FillRunT);
}  // namespace synthetic

ModelConfig SyntheticConfig(const std::string& name_or_config, std::string* name) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(name_or_config, ec) && !fs::is_directory(name_or_config, ec)) {
    *name = fs::path(name_or_config).stem().string();
    return LoadHfConfig(name_or_config);
  }
  *name = name_or_config;
  return PresetConfig(name_or_config);
}

SyntheticWeights::SyntheticWeights(const ModelConfig& c, DType dtype, uint64_t seed)
    : specs_(ExpectedWeights(c)) {
  ES_CHECK(dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16,
           "synthetic weights: type ", Name(dtype), " is not f32, f16 or bf16");
  for (const WeightSpec& s : specs_) {
    Tensor t;
    t.name = s.name;
    t.dtype = s.is_norm || s.shape.size() == 1 ? DType::kF32 : dtype;
    t.shape = s.shape;
    t.nbytes = t.row_bytes() * size_t(t.rows());
    tensors_.push_back(std::move(t));
    Gen g;
    g.key = synthetic::Fnv1a64(s.name) ^ (seed * synthetic::kGolden);
    g.scale = s.is_norm ? 0.1f : float(std::sqrt(3.0 / double(s.shape.back())));
    g.center = s.is_norm ? 1.0f : 0.0f;
    gen_.push_back(g);
  }
}

float SyntheticWeights::Value(size_t i, int64_t index) const {
  ES_ASSERT(i < gen_.size() && index >= 0 && index < tensors_[i].numel());
  const Gen& g = gen_[i];
  const synthetic::Keys keys(g.key, uint64_t(index) >> 32);
  return g.center + g.scale * synthetic::Uniform(uint32_t(index), keys);
}

void SyntheticWeights::FillElements(size_t i, int64_t begin, int64_t end, void* dst) const {
  ES_ASSERT(i < tensors_.size() && 0 <= begin && begin <= end && end <= tensors_[i].numel());
  const Gen& g = gen_[i];
  const DType dt = tensors_[i].dtype;
  const size_t es = RowBytes(dt, 1);
  auto* out = static_cast<uint8_t*>(dst);
  while (begin < end) {  // one run per 2^32-element block of the counter
    const uint64_t block = uint64_t(begin) >> 32;
    const int64_t stop = std::min<int64_t>(end, int64_t((block + 1) << 32));
    const synthetic::Keys keys(g.key, block);
    const size_t n = size_t(stop - begin);
    size_t o = HWY_DYNAMIC_DISPATCH(synthetic::FillRunT)(uint32_t(begin), n, keys, g.center,
                                                         g.scale, dt, out);
    for (; o < n; ++o) {  // the tail, by the reference
      const float v = g.center + g.scale * synthetic::Uniform(uint32_t(begin) + uint32_t(o), keys);
      if (dt == DType::kF32)
        reinterpret_cast<float*>(out)[o] = v;
      else if (dt == DType::kF16)
        reinterpret_cast<uint16_t*>(out)[o] = F32ToF16(v);
      else
        reinterpret_cast<uint16_t*>(out)[o] = F32ToBF16(v);
    }
    out += n * es;
    begin = stop;
  }
}

void SyntheticWeights::Fill(size_t i, int64_t row_begin, int64_t row_end, void* dst,
                            ThreadPool& pool) const {
  ES_ASSERT(i < tensors_.size());
  const Tensor& t = tensors_[i];
  ES_ASSERT(row_begin >= 0 && row_begin <= row_end && row_end <= t.rows());
  const int64_t cols = t.cols(), first = row_begin * cols;
  const size_t es = RowBytes(t.dtype, 1);
  constexpr int64_t kGrain = 1 << 14;  // elements: pieces of whole pages (32 or 64 KB)
  pool.ParallelFor((row_end - row_begin) * cols,
                   [&](int64_t b, int64_t e, int) {
                     FillElements(i, first + b, first + e,
                                  static_cast<uint8_t*>(dst) + size_t(b) * es);
                   },
                   kGrain);
}

Tensor SyntheticWeights::Make(size_t i, ThreadPool& pool) const {
  const Tensor& m = tensors_[i];
  Tensor t = AllocTensorForWrite(m.name, m.dtype, m.shape);  // every byte filled below
  Fill(i, 0, m.rows(), MutableData(t), pool);
  return t;
}

}  // namespace es
#endif  // HWY_ONCE
