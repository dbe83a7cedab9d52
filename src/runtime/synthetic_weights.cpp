// SyntheticWeights (synthetic_weights.h): deterministic random weights, any row range on demand.
#include "synthetic_weights.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/core/half.h"
#include "edgeseek/internal/core/thread_pool.h"
#include "edgeseek/internal/models/presets.h"

namespace es {

namespace {

constexpr int64_t kUnit = 4096;  // the ParallelFor grain the weights were first made with
constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ull;
constexpr uint64_t kChunkStep = 0xbf58476d1ce4e5b9ull;

// The chunks of [0, n) that ThreadPool::ParallelFor(n, fn, kUnit) makes on `splits` threads.
struct Chunks {
  int64_t n, units;
  int nt;
  Chunks(int64_t n_, int splits) : n(n_), units((n_ + kUnit - 1) / kUnit) {
    nt = int(std::min<int64_t>(splits, units));
    if (nt < 1) nt = 1;
  }
  int64_t Begin(int t) const { return nt == 1 ? 0 : (units * t / nt) * kUnit; }
  int64_t End(int t) const { return nt == 1 ? n : std::min(n, (units * (t + 1) / nt) * kUnit); }
  int Of(int64_t i) const {  // the chunk holding element i
    if (nt == 1) return 0;
    const int64_t u = i / kUnit;
    int t = int(u * nt / units);
    while (t + 1 < nt && Begin(t + 1) <= i) ++t;
    while (t > 0 && Begin(t) > i) --t;
    return t;
  }
};

}  // namespace

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

int SyntheticWeights::DefaultSplits() {
  return int(std::max(1u, std::thread::hardware_concurrency()));
}

SyntheticWeights::SyntheticWeights(const ModelConfig& c, DType dtype, uint64_t seed, int splits)
    : specs_(ExpectedWeights(c)), splits_(splits > 0 ? splits : DefaultSplits()) {
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
    g.seed = std::hash<std::string>{}(s.name) ^ (seed * kGolden);
    g.scale = s.is_norm ? 0.1f : float(std::sqrt(3.0 / double(s.shape.back())));
    g.center = s.is_norm ? 1.0f : 0.0f;
    gen_.push_back(g);
  }
}

namespace {
// Elements [begin, stop) of one ParallelFor chunk, x the splitmix64 state before `begin`, in type
// T's encoding (a loop per type: no per-element type test).
template <typename Encode>
void FillRun(uint64_t x, int64_t n, float center, float scale, Encode put) {
  for (int64_t o = 0; o < n; ++o) {
    x += kGolden;  // splitmix64
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    const float u = float(z >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f;
    put(o, center + scale * u);
  }
}
}  // namespace

void SyntheticWeights::FillElements(size_t i, int64_t begin, int64_t end, void* dst) const {
  const Tensor& t = tensors_[i];
  const Gen& g = gen_[i];
  const Chunks ch(t.numel(), splits_);
  const DType dt = t.dtype;
  for (int c = ch.Of(begin); begin < end; ++c) {
    const int64_t b = ch.Begin(c), stop = std::min(end, ch.End(c));
    const uint64_t x = g.seed + uint64_t(b) * kChunkStep + uint64_t(begin - b) * kGolden;
    const int64_t n = stop - begin;
    if (dt == DType::kF32) {
      float* d = static_cast<float*>(dst);
      FillRun(x, n, g.center, g.scale, [d](int64_t o, float v) { d[o] = v; });
    } else if (dt == DType::kF16) {
      uint16_t* d = static_cast<uint16_t*>(dst);
      FillRun(x, n, g.center, g.scale, [d](int64_t o, float v) { d[o] = F32ToF16(v); });
    } else {
      uint16_t* d = static_cast<uint16_t*>(dst);
      FillRun(x, n, g.center, g.scale, [d](int64_t o, float v) { d[o] = F32ToBF16(v); });
    }
    dst = static_cast<uint8_t*>(dst) + size_t(n) * RowBytes(dt, 1);
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
  pool.ParallelFor((row_end - row_begin) * cols,
                   [&](int64_t b, int64_t e, int) {
                     FillElements(i, first + b, first + e,
                                  static_cast<uint8_t*>(dst) + size_t(b) * es);
                   },
                   kUnit);
}

Tensor SyntheticWeights::Make(size_t i, ThreadPool& pool) const {
  const Tensor& m = tensors_[i];
  Tensor t = AllocTensorForWrite(m.name, m.dtype, m.shape);  // every byte filled below
  Fill(i, 0, m.rows(), MutableData(t), pool);
  return t;
}

}  // namespace es
