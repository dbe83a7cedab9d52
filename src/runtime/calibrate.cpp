// `edgeseek devices --calibrate`: measures this machine into a device profile (device_profile.h).
// Everything runs through the backend's own kernels (Backend::Compute over small graphs), so the
// rates are what a model's matmuls reach, not a synthetic peak:
//  - bandwidth: the CPU's streaming read sum (bench.h MeasureReadBandwidth) or the Vulkan
//    device's copy probe (bytes read + written a second);
//  - GEMV bytes/s per weight type: one row against a 1 GiB weight (far larger than the caches);
//  - GEMM FLOP/s per weight type: prefill-shaped rows against a square weight;
//  - both again at the presets' matmul shapes (CurveShapes), each with its own per-op cost
//    (a CPU matmul's parallel region fork / join) inside: the rate curves plan interpolates;
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
#include <utility>
#include <vector>

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

// The matmul shapes [n, k] of the presets' layers (1.5B: hidden 1536, FFN 8960, KV 256; 7B:
// 3584 / 18944 / 512; V2-Lite: 2048, experts 1408, shared 2816, dense FFN 10944, MLA latent
// 576), so plan interpolates between rates measured where the models' matmuls are.
std::vector<std::pair<int64_t, int64_t>> CurveShapes(bool quick) {
  if (quick) return {{64, 256}, {256, 512}, {512, 256}};
  return {{256, 1536},  {1536, 1536},  {8960, 1536}, {1536, 8960},  {576, 2048},
          {1408, 2048}, {2816, 2048},  {2048, 1408}, {10944, 2048}, {512, 3584},
          {3584, 3584}, {18944, 3584}, {3584, 18944}};
}

// Times `rows` x k by random [n, k] weights of type t through the backend, less the step's own
// time and each matmul's per-op cost (plan charges those per step and per graph node).
// GEMM (rows > 1): one weight, FLOP/s. GEMV (rows = 1): as a model's layers do, a chain of
// distinct weights alternating [n, k] and [k, n], `chain_bytes` of them in all (so they stream
// from memory, not the caches; each matmul pays its own parallel region), weight bytes/s.
struct MatMulProbe {
  Backend& be;
  KvStorage& kv;
  double budget, step_s, dispatch_s;
  size_t chain_bytes;
  std::string tag;

  CurvePoint Measure(DType t, int64_t n, int64_t k, int rows) {
    const std::string tn(Name(t));
    const Tensor w0 = RandomWeight("w_" + tn, t, n, k, 2 + uint64_t(rows));
    const size_t bytes = w0.nbytes;
    int links = 1;  // GEMM, or a GEMV weight as large as half the chain
    if (rows == 1 && 2 * bytes <= chain_bytes)
      links = n == k ? int(std::min<size_t>(chain_bytes / bytes, 512))
                     : 2 * int(std::clamp<size_t>(chain_bytes / bytes / 2, 1, 256));
    // Odd links are [k, n] (same bytes; the values do not matter): copies of w1.
    const Tensor w1 = n == k || links == 1 ? w0 : RandomWeight("w_" + tn, t, k, n, 7);
    std::vector<Tensor> ws;
    ws.reserve(size_t(links));
    for (int i = 0; i < links; ++i) {
      const Tensor& src = i % 2 ? w1 : w0;
      if (i == 0 || (i == 1 && n != k)) {
        ws.push_back(src);
      } else {
        ws.push_back(AllocTensor(src.name, t, src.shape));
        std::memcpy(MutableData(ws.back()), src.data, bytes);
      }
    }
    for (const Tensor& w : ws) be.PrepareWeight(w);
    Tensor x = RandomWeight("x", DType::kF32, rows, k, 3 + uint64_t(rows));
    Graph g;
    int h = InputNode(g, x, rows);
    for (const Tensor& w : ws) h = MatMulNode(g, h, w, rows);
    const double s =
        std::max(TimeGraph(be, g, RowsBatch(rows), kv, budget) - step_s - links * dispatch_s, 1e-9);
    CurvePoint c;
    c.k = k;
    c.n = n;
    c.weight_bytes = double(bytes);
    const std::string shape = std::to_string(rows) + " x " + std::to_string(k) + " by [" +
                              std::to_string(n) + ", " + std::to_string(k) + "] " + tn;
    if (rows == 1)
      c.rate = Measured(double(bytes) * links / s,
                        tag + shape +
                            (links > 1 ? " (a chain of " + std::to_string(links) +
                                             " distinct weights, [n, k] and [k, n])"
                                       : std::string()) +
                            ", weight bytes / (median - step - per op x links)");
    else
      c.rate = Measured(2.0 * rows * double(n) * double(k) / s,
                        tag + shape + ", 2RNK / (median - step - per op)");
    return c;
  }
};

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

  // GEMV and GEMM per weight type: one large shape, then the presets' matmul shapes.
  const int64_t K = o.quick ? 512 : 4096;
  // Like the read probe: far larger than any cache, as a model's weight stream is (a 64 MiB
  // weight read 30-40% faster here than the 8-15 GB models did, docs/plan.md).
  // A GPU's buffers are bounded by its heap (lavapipe reports 2 GiB): an eighth of it at most.
  size_t gemv_bytes = o.quick ? (size_t(4) << 20) : (size_t(1) << 30);
  if (o.backend == "vulkan")
    gemv_bytes = std::min(gemv_bytes, std::max(size_t(4) << 20, size_t(p.memory_bytes.value / 8)));
  const int gemm_rows = o.quick ? 32 : 256;
  const int64_t gemm_n = o.quick ? 512 : 2048;
  const size_t chain_bytes =
      std::min(gemv_bytes, o.quick ? (size_t(4) << 20) : (size_t(256) << 20));
  MatMulProbe probe{*be,         *kv, o.seconds_per_case, p.step_s.value, p.dispatch_s.value,
                    chain_bytes, tag};
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0}) {
    const int64_t N = std::max<int64_t>(64, int64_t(gemv_bytes / RowBytes(t, K)));
    const CurvePoint gemv = probe.Measure(t, N, K, 1);
    const CurvePoint gemm = probe.Measure(t, gemm_n, K, gemm_rows);
    p.gemv_bytes_per_s[t] = gemv.rate;
    p.gemm_flops[t] = gemm.rate;
    // A slow device (lavapipe) gets a shorter chain, and skips the GEMMs that would take more
    // than a few cases' time a run: each case stays near seconds_per_case.
    probe.chain_bytes = std::min(chain_bytes, size_t(gemv.rate.value * o.seconds_per_case));
    for (const auto& [n, k] : CurveShapes(o.quick)) {
      if (RowBytes(t, k) * size_t(n) > gemv_bytes) continue;
      p.gemv_curve[t].push_back(probe.Measure(t, n, k, 1));
      if (2.0 * gemm_rows * double(n) * double(k) / gemm.rate.value <= 4 * o.seconds_per_case)
        p.gemm_curve[t].push_back(probe.Measure(t, n, k, gemm_rows));
    }
    p.gemv_curve[t].push_back(gemv);
    p.gemm_curve[t].push_back(gemm);
    for (auto* c : {&p.gemv_curve[t], &p.gemm_curve[t]})
      std::stable_sort(c->begin(), c->end(), [](const CurvePoint& a, const CurvePoint& b) {
        return a.weight_bytes < b.weight_bytes;
      });
  }
  // The class rates the plan falls back to for types not measured.
  p.fp32_flops = p.gemm_flops[DType::kF32];
  p.int8_dot_ops = p.gemm_flops[DType::kQ8_0];
  if (o.backend == "vulkan") p.f16_matrix_flops = p.gemm_flops[DType::kF16];
  return p;
}

}  // namespace es
