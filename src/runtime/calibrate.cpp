// `edgeseek devices --calibrate`: measures this machine into a device profile (device_profile.h).
// Everything runs through the backend's own kernels (Backend::Compute over small graphs), so the
// rates are what a model's matmuls reach, not a synthetic peak:
//  - bandwidth: the CPU's streaming read sum (bench.h MeasureReadBandwidth) or the Vulkan
//    device's copy probe (bytes read + written a second);
//  - GEMV bytes/s per weight type: one row against a 1 GiB weight (far larger than the caches);
//  - GEMM FLOP/s per weight type: prefill-shaped rows against a square weight;
//  - per-op overhead: a chain of 257 tiny adds against a chain of 1 (the difference / 256);
//  - per-step overhead: the chain of 1.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <random>
#include <string>

#include "edgeseek/internal/backends/backend.h"
#include "edgeseek/internal/backends/vulkan.h"
#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/core/half.h"
#include "edgeseek/internal/quant/blocks.h"
#include "edgeseek/internal/runtime/bench.h"
#include "edgeseek/internal/runtime/device_profile.h"

namespace es {
namespace {

using Clock = std::chrono::steady_clock;

// A [rows, cols] weight of `t` with values in [-0.5, 0.5): 64 distinct rows quantized, repeated
// (the kernels' speed does not depend on the values; a GiB of Q4_0 quantized row by row would
// take most of a minute).
Tensor RandomWeight(const std::string& name, DType t, int64_t rows, int64_t cols, uint64_t seed) {
  Tensor w = AllocTensor(name, t, {rows, cols});
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  std::vector<float> row(static_cast<size_t>(cols));
  auto* dst = static_cast<uint8_t*>(MutableData(w));
  const size_t rb = RowBytes(t, cols);
  const int64_t distinct = std::min<int64_t>(rows, 64);
  for (int64_t r = 0; r < distinct; ++r) {
    for (float& v : row) v = u(rng);
    Quantize(t, row.data(), dst + size_t(r) * rb, cols);
  }
  for (int64_t r = distinct; r < rows; ++r)
    std::memcpy(dst + size_t(r) * rb, dst + size_t(r % distinct) * rb, rb);
  return w;
}

Batch RowsBatch(int rows) {
  Batch b;
  std::vector<int32_t> toks(static_cast<size_t>(rows));
  for (int i = 0; i < rows; ++i) toks[size_t(i)] = i;
  b.Add(0, 0, toks, true);
  b.Finalize();
  return b;
}

int MatMulNode(Graph& g, int x, const Tensor& w, int64_t rows) {
  Node n;
  n.op = Op::kMatMul;
  n.name = "matmul";
  n.src = {x, g.AddWeight(w), -1};
  n.shape = {rows, w.rows()};
  return g.Add(std::move(n));
}

// Input rows enter through kEmbed over an f32 table (the backend-resident activations).
int InputNode(Graph& g, const Tensor& table, int64_t rows) {
  Node n;
  n.op = Op::kEmbed;
  n.name = "input";
  n.src = {g.AddWeight(table)};
  n.shape = {rows, table.cols()};
  return g.Add(std::move(n));
}

// Median seconds of one Compute of `g`, repeated for about `budget` seconds (at least 3 runs,
// after one untimed run).
double TimeGraph(Backend& be, const Graph& g, const Batch& b, KvStorage& kv, double budget) {
  const Node& out = g.node(g.output());
  std::vector<float> result(size_t(out.shape[0] * out.shape[1]));
  be.Compute(g, b, kv, result.data());
  std::vector<double> t;
  const auto start = Clock::now();
  while (t.size() < 3 || (std::chrono::duration<double>(Clock::now() - start).count() < budget &&
                          t.size() < 1000)) {
    const auto t0 = Clock::now();
    be.Compute(g, b, kv, result.data());
    t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

ProfileValue Measured(double v, const std::string& how) {
  ProfileValue p;
  p.value = v;
  p.source = how;
  p.calibrated = true;
  p.present = true;
  return p;
}

std::string Today() {
  char buf[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(buf, sizeof buf, "%Y-%m-%d", std::gmtime(&now));
  return buf;
}

size_t MemTotalBytes() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  size_t kb = 0;
  std::string unit;
  while (f >> key >> kb >> unit)
    if (key == "MemTotal:") return kb * 1024;
  return 0;
}

}  // namespace

DeviceProfile CalibrateDevice(const CalibrateOptions& o) {
  ES_CHECK(o.backend == "cpu" || o.backend == "vulkan", "--backend must be cpu or vulkan (got '",
           o.backend, "')");
  BackendOptions bo;
  bo.threads = o.threads;
  bo.device = o.device;
  std::unique_ptr<Backend> be = CreateBackend(o.backend, bo);
  const std::string tag =
      "edgeseek devices --calibrate --backend " + o.backend + ", " + Today() + ": ";
  DeviceProfile p;
  p.backend = o.backend;
  p.calibrated = true;
  p.description = be->description();
  p.name = o.backend == "cpu" ? "calibrated-cpu" : "calibrated-vulkan";

  // Memory and bandwidth.
  if (o.backend == "cpu") {
    p.memory_bytes = Measured(double(MemTotalBytes()), tag + "/proc/meminfo MemTotal");
    const size_t bytes = o.quick ? (size_t(64) << 20) : (size_t(1) << 30);
    p.bandwidth = Measured(
        MeasureReadBandwidth(o.threads, bytes) * 1e9,
        tag + "streaming read sum over " + std::to_string(bytes >> 20) + " MiB, best of 3");
  } else {
    ES_CHECK(ListVulkanDevices && MeasureVulkanCopyBandwidth, "this build has no Vulkan backend");
    uint64_t heap = 0;
    for (const auto& d : ListVulkanDevices()) {
      if (!o.device.empty() && std::to_string(d.index) != o.device &&
          d.name.find(o.device) == std::string::npos)
        continue;
      for (const auto& h : d.heaps) heap = std::max(heap, h.device_local ? h.bytes : uint64_t(0));
      break;
    }
    p.memory_bytes = Measured(
        double(heap), tag + "largest device-local heap (vkGetPhysicalDeviceMemoryProperties)");
    const uint64_t bytes = o.quick ? (uint64_t(32) << 20) : (uint64_t(256) << 20);
    p.bandwidth = Measured(MeasureVulkanCopyBandwidth(o.device, bytes),
                           tag + "buffer copy of " + std::to_string(bytes >> 20) +
                               " MiB, bytes read + written a second");
  }
  p.reserved_bytes =
      Measured(o.backend == "cpu" ? double(128 << 20) : double(512 << 20),
               "nominal: process / driver share, not measured (CPU 128 MiB, Vulkan 512 MiB)");
  p.reserved_bytes.calibrated = false;

  KvSpec spec;
  spec.n_layers = 1;
  spec.width[0] = spec.width[1] = 32;
  auto kv = be->CreateKv(spec, 1, 1024);

  // Per-op and per-step overhead: chains of tiny adds.
  {
    Tensor table = RandomWeight("table", DType::kF32, 1, 64, 1);
    auto chain = [&](int n) {
      Graph g;
      int x = InputNode(g, table, 1);
      for (int i = 0; i < n; ++i) {
        Node a;
        a.op = Op::kAdd;
        a.name = "add" + std::to_string(i);
        a.src = {x, x};
        a.shape = {1, 64};
        x = g.Add(std::move(a));
      }
      return g;
    };
    const Batch b = RowsBatch(1);
    const double t1 = TimeGraph(*be, chain(1), b, *kv, o.seconds_per_case);
    const double t257 = TimeGraph(*be, chain(257), b, *kv, o.seconds_per_case);
    p.step_s = Measured(t1, tag + "one Compute of a 2-op graph (submit + wait + host), median");
    p.dispatch_s = Measured(std::max(0.0, (t257 - t1) / 256.0),
                            tag + "(a 257-add chain - a 1-add chain) / 256, medians");
  }

  // GEMV and GEMM per weight type.
  const int64_t K = o.quick ? 512 : 4096;
  // Like the read probe: far larger than any cache, as a model's weight stream is (a 64 MiB
  // weight read 30-40% faster here than the 8-15 GB models did, docs/plan.md).
  // A GPU's buffers are bounded by its heap (lavapipe reports 2 GiB): an eighth of it at most.
  size_t gemv_bytes = o.quick ? (size_t(4) << 20) : (size_t(1) << 30);
  if (o.backend == "vulkan")
    gemv_bytes = std::min(gemv_bytes, std::max(size_t(4) << 20, size_t(p.memory_bytes.value / 8)));
  const int gemm_rows = o.quick ? 32 : 256;
  const int64_t gemm_n = o.quick ? 512 : 2048;
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0}) {
    const std::string tn(Name(t));
    {
      const int64_t N = std::max<int64_t>(64, int64_t(gemv_bytes / RowBytes(t, K)));
      Tensor w = RandomWeight("w_" + tn, t, N, K, 2);
      Tensor x = RandomWeight("x", DType::kF32, 1, K, 3);
      be->PrepareWeight(w);
      Graph g;
      const int in = InputNode(g, x, 1);
      MatMulNode(g, in, w, 1);
      const double s = TimeGraph(*be, g, RowsBatch(1), *kv, o.seconds_per_case) - p.step_s.value;
      p.gemv_bytes_per_s[t] =
          Measured(double(w.nbytes) / std::max(s, 1e-9),
                   tag + "1 x " + std::to_string(K) + " by [" + std::to_string(N) + ", " +
                       std::to_string(K) + "] " + tn + ", weight bytes / (median - step)");
    }
    {
      Tensor w = RandomWeight("w_" + tn, t, gemm_n, K, 4);
      Tensor x = RandomWeight("x", DType::kF32, gemm_rows, K, 5);
      be->PrepareWeight(w);
      Graph g;
      const int in = InputNode(g, x, gemm_rows);
      MatMulNode(g, in, w, gemm_rows);
      const double s =
          TimeGraph(*be, g, RowsBatch(gemm_rows), *kv, o.seconds_per_case) - p.step_s.value;
      p.gemm_flops[t] = Measured(2.0 * gemm_rows * double(gemm_n) * double(K) / std::max(s, 1e-9),
                                 tag + std::to_string(gemm_rows) + " x " + std::to_string(K) +
                                     " by [" + std::to_string(gemm_n) + ", " + std::to_string(K) +
                                     "] " + tn + ", 2RNK / (median - step)");
    }
  }
  // The class rates the plan falls back to for types not measured.
  p.fp32_flops = p.gemm_flops[DType::kF32];
  p.int8_dot_ops = p.gemm_flops[DType::kQ8_0];
  if (o.backend == "vulkan") p.f16_matrix_flops = p.gemm_flops[DType::kF16];
  return p;
}

}  // namespace es
