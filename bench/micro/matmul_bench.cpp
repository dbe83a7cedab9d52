// Micro benchmarks of the CPU matmul kernels (src/backends/cpu/kernels), next to this machine's
// read bandwidth, the floor that decode (GEMV) cannot beat:
//   BM_ReadBandwidth/threads       streaming sum over 1 GiB: bytes/s the memory delivers
//   BM_Gemv/type/K/N/threads       R = 1: weight bytes/s (GB/s) and GFLOP/s
//   BM_Gemm/type/K/N/R/threads     R = 512 (prefill): GFLOP/s
// type: 0 f32, 1 f16, 2 bf16, 3 q8_0, 4 q4_0, 5 q4_k, 6 q5_k, 7 q6_k (GB/s counts the bytes of
// the stored weights).
// Shapes are DeepSeek-R1-Distill-Qwen-1.5B's: [8960, 1536] gate/up, [1536, 8960] down and the
// [151936, 1536] lm_head (weight [N, K], K the reduction). Run:
//   build/bench/matmul_bench --benchmark_counters_tabular=true
// ES_BENCH_TARGET=AVX2 (or AVX3, AVX3_DL, SSE4, ... as Highway names them) times the path that
// target takes (hwy::SetSupportedTargetsForTest, as the targets test forces them); the label
// names the target that ran.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "backends/cpu/kernels/matmul.h"
#include "edgeseek/internal/core/dtype.h"
#include "edgeseek/internal/core/thread_pool.h"
#include "edgeseek/internal/quant/blocks.h"
#include "hwy/aligned_allocator.h"
// matmul.cpp compiles Highway's AVX3_DL target too: list it, so that ES_BENCH_TARGET can name it.
#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL 1
#endif
#include "hwy/targets.h"

namespace es {
namespace {

// ES_BENCH_TARGET, applied before the first benchmark runs.
const bool kTargetForced = [] {
  const char* name = std::getenv("ES_BENCH_TARGET");
  if (name == nullptr || *name == 0) return false;
  for (int64_t t : hwy::SupportedAndGeneratedTargets()) {
    if (std::string(hwy::TargetName(t)) == name) {
      hwy::SetSupportedTargetsForTest(t);
      return true;
    }
  }
  std::fprintf(stderr, "ES_BENCH_TARGET=%s: not a target this CPU and binary have\n", name);
  std::exit(2);
}();

ThreadPool& Pool(int threads) {
  static std::map<int, std::unique_ptr<ThreadPool>> pools;
  auto& p = pools[threads];
  if (!p) p = std::make_unique<ThreadPool>(threads);
  return *p;
}

// Copies of the weight bytes of a type and shape, enough of them to span >= 512 MB so that a
// benchmark cycling through them reads from DRAM as decode does (one layer's weights are long
// evicted from the 32 MB L3 when its turn comes again). Only the latest set is kept.
const std::vector<const uint8_t*>& Weights(DType type, int64_t N, int64_t K) {
  static std::tuple<int, int64_t, int64_t> key{-1, 0, 0};
  static std::vector<hwy::AlignedFreeUniquePtr<uint8_t[]>> copies;
  static std::vector<const uint8_t*> ptrs;
  if (key != std::tuple<int, int64_t, int64_t>{int(type), N, K}) {
    key = {int(type), N, K};
    copies.clear();
    ptrs.clear();
    const size_t bytes = RowBytes(type, K) * size_t(N);
    const size_t n_copies = std::max<size_t>(1, (size_t(512) << 20) / bytes + 1);
    // One quantized copy, then byte copies of it: the K-quant quantizers search their scales and
    // would take minutes for 512 MB; the kernels' speed does not depend on the values.
    for (size_t c = 0; c < n_copies; ++c) {
      copies.push_back(hwy::AllocateAligned<uint8_t>(bytes));
      uint8_t* w = copies.back().get();
      if (c > 0) {
        std::memcpy(w, copies[0].get(), bytes);
        ptrs.push_back(w);
        continue;
      }
      uint32_t s = 12345;
      std::vector<float> row(static_cast<size_t>(K));
      for (int64_t n = 0; n < N; ++n) {
        for (float& v : row) {
          s = s * 1664525u + 1013904223u;
          v = float(int32_t(s >> 8) - (1 << 23)) * (1.0f / (1 << 23)) * 0.05f;
        }
        Quantize(type, row.data(), w + size_t(n) * RowBytes(type, K), K);
      }
      ptrs.push_back(w);
    }
  }
  return ptrs;
}

std::vector<float> Activations(int64_t n) {
  std::vector<float> x(static_cast<size_t>(n));
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(int(i * 7919 % 2001) - 1000) * 1e-3f;
  return x;
}

// Sum of 1 GiB of u64 words, split over the pool's threads; 4 independent sums per thread.
void BM_ReadBandwidth(benchmark::State& state) {
  const int threads = int(state.range(0));
  const size_t words = (size_t(1) << 30) / 8;
  static hwy::AlignedFreeUniquePtr<uint64_t[]> buf;
  if (!buf) {
    buf = hwy::AllocateAligned<uint64_t>(words);
    for (size_t i = 0; i < words; ++i) buf[i] = i * 0x9e3779b97f4a7c15ull;
  }
  ThreadPool& pool = Pool(threads);
  std::vector<uint64_t> sums(size_t(threads) * 8);
  for (auto _ : state) {
    pool.ParallelFor(
        int64_t(words / 4),
        [&](int64_t b, int64_t e, int t) {
          const uint64_t* p = buf.get();
          uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
          for (int64_t i = b * 4; i < e * 4; i += 4) {
            s0 += p[i];
            s1 += p[i + 1];
            s2 += p[i + 2];
            s3 += p[i + 3];
          }
          sums[size_t(t) * 8] = s0 + s1 + s2 + s3;
        },
        1024);
    benchmark::DoNotOptimize(sums.data());
  }
  state.counters["GB/s"] =
      benchmark::Counter(double(words * 8) / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_ReadBandwidth)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);

void RunMatMul(benchmark::State& state, DType type, int64_t R, int64_t K, int64_t N, int threads) {
  const auto& w = Weights(type, N, K);
  const auto x = Activations(R * K);
  std::vector<float> y(size_t(R * N));
  ThreadPool& pool = Pool(threads);
  size_t i = 0;
  for (auto _ : state) {
    cpu::MatMul(x.data(), R, K, w[i++ % w.size()], type, N, nullptr, y.data(), N, pool);
    benchmark::DoNotOptimize(y.data());
  }
  const double wbytes = double(RowBytes(type, K)) * double(N);
  state.counters["GB/s"] =
      benchmark::Counter(wbytes / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * double(R * K * N) / 1e9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(Name(type)) + " " + cpu::SimdTargetName());
}

const DType kTypes[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ8_0,
                        DType::kQ4_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};

// args: type index, K, N, threads
void BM_Gemv(benchmark::State& state) {
  RunMatMul(state, kTypes[state.range(0)], 1, state.range(1), state.range(2), int(state.range(3)));
}
BENCHMARK(BM_Gemv)
    ->ArgsProduct({{2, 1, 0}, {1536}, {8960}, {1, 2}})
    ->ArgsProduct({{2, 1, 0}, {8960}, {1536}, {1, 2}})
    ->ArgsProduct({{2}, {1536}, {151936}, {1, 2}})
    ->ArgsProduct({{3, 4}, {1536}, {8960}, {1, 2}})
    ->ArgsProduct({{3, 4}, {8960}, {1536}, {1, 2}})
    ->ArgsProduct({{5, 6, 7}, {1536}, {8960}, {1, 2}})
    ->ArgsProduct({{5, 6, 7}, {8960}, {1536}, {1, 2}})
    ->ArgsProduct({{7}, {1536}, {151936}, {1, 2}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// args: type index, K, N, R, threads
void BM_Gemm(benchmark::State& state) {
  RunMatMul(state, kTypes[state.range(0)], state.range(3), state.range(1), state.range(2),
            int(state.range(4)));
}
BENCHMARK(BM_Gemm)
    ->ArgsProduct({{2, 0}, {1536}, {8960}, {512}, {1, 2}})
    ->ArgsProduct({{2, 3, 4}, {8960}, {1536}, {512}, {1, 2}})
    ->ArgsProduct({{3, 4}, {1536}, {8960}, {512}, {1, 2}})
    ->ArgsProduct({{4, 5, 6, 7}, {1536}, {8960}, {64}, {1, 2}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace es

BENCHMARK_MAIN();
