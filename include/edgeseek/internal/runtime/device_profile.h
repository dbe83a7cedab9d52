// Device profiles: what `edgeseek plan` knows about a machine (configs/devices/NAME.json, checked
// against configs/devices.schema.json). Every number carries its source (a datasheet, a
// published measurement, `edgeseek devices --calibrate`) and whether it was measured on the
// device (calibrated) or taken from a datasheet / estimated (nominal).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "edgeseek/internal/core/dtype.h"

namespace es {

struct ProfileValue {
  double value = 0;
  std::string source;
  bool calibrated = false;
  bool present = false;
};
// A value measured on this machine: `source` says how (calibrated and present).
ProfileValue MeasuredValue(double value, const std::string& source);

// One calibrated matmul shape: a [n, k] weight (weight_bytes of it) and the rate measured over
// it (GEMV: weight bytes/s; GEMM: FLOP/s), with the rate's source.
struct CurvePoint {
  int64_t k = 0, n = 0;
  double weight_bytes = 0;
  ProfileValue rate;
};

// A rate curve over weight sizes: the points sorted by weight_bytes. Rate(b) interpolates the
// rate linearly in log(weight bytes) between the two points around b (points of equal size
// count as their mean); outside the points it takes the nearest end. 0 when empty.
double CurveRate(const std::vector<CurvePoint>& curve, double weight_bytes);

// One model-shaped probe (issue 20, session 29): `layers` dense GQA decoder layers of one shape,
// every matrix of `type`, run as ONE graph of `rows` rows whose first row sits at KV position
// `depth` — what a backend records for a model's layers (norms, the matmuls with the x their
// producers hand them, rope, KV stores, attention, SwiGLU, residual adds, and whatever the
// backend does between them: a CPU parallel region per op, a GPU's dispatches and barriers).
// `seconds` is the median of one Compute of that graph. Plan predicts the same graph with its
// roofline and charges the difference to each layer of a model (LayerProbeExcess, plan.h).
struct LayerProbe {
  int64_t hidden = 0, heads = 0, kv_heads = 0, head_dim = 0, ffn = 0;
  DType type = DType::kF32;     // every matrix (the norms are f32)
  DType kv_type = DType::kF32;  // the cache the backend made (its default_kv_type)
  int rows = 1, layers = 1;
  int64_t depth = 0;
  ProfileValue seconds;
};

// The head of a decode step as a model runs it (session 29): the final norm and the lm_head
// [vocab, hidden] of `type` over one row, as one graph; `seconds` the median of one Compute.
// Plan charges each step what this took beyond its roofline (HeadExcess, plan.h).
struct HeadProbe {
  int64_t hidden = 0, vocab = 0;
  DType type = DType::kF32;
  ProfileValue seconds;
};

// A routed-expert probe (session 41): `layers` MoE FFN halves of one shape as ONE graph of `rows`
// rows — an RMS norm, the MoE node (the f32 router [experts, hidden], top-k routing, the rows
// compacted per expert, each expert's gate / up [ffn, hidden], SwiGLU and down [hidden, ffn] over
// its own rows, the weighted combine) and the residual add — every expert of `type`, distinct
// weights per layer. Each expert gets about rows · top_k / experts rows (6 of a 64-row prompt
// for V2-Lite's 64 experts, top 6): the few-row GEMMs a CPU prefill runs, which the GEMM curve
// (256 rows against one weight) does not time. `seconds`: the median of one Compute. Plan takes
// the routed experts' FLOP rate from it (MoeProbeRate, plan.h).
struct MoeProbe {
  int64_t hidden = 0, ffn = 0;  // ffn: one expert's width (moe_intermediate_size)
  int experts = 0, top_k = 0;
  DType type = DType::kF32;  // every expert matrix (the router and the norm are f32)
  int rows = 1, layers = 1;
  ProfileValue seconds;
};

struct DeviceProfile {
  std::string name, description;
  std::string backend = "cpu";  // cpu | vulkan: which kernels a matmul of each type takes
  std::string path;             // where it was read from ("" when made in memory)
  bool calibrated = false;      // every rate the plan uses was measured on this device
  ProfileValue memory_bytes;    // memory the model may use: RAM (CPU, unified SoC) or VRAM
  ProfileValue reserved_bytes;  // of that, what the OS / driver / runtime keep
  ProfileValue bandwidth;       // effective read bandwidth, bytes/s (decode's weight stream)
  ProfileValue f16_matrix_flops, int8_dot_ops, fp32_flops;  // effective matmul rates
  ProfileValue dispatch_s;        // per op of a step (a GPU dispatch, a CPU parallel region)
  ProfileValue step_s;            // per step (submit + wait, host work between steps)
  ProfileValue link_bytes_per_s;  // between two devices (--devices N), optional
  // Calibrated per weight type (optional; preferred over the class rates above when present):
  std::map<DType, ProfileValue> gemm_flops;        // prefill-shaped matmul (hundreds of rows)
  std::map<DType, ProfileValue> gemv_bytes_per_s;  // decode-shaped matmul, weight bytes / s
  // Calibrated per weight type at several matmul shapes (optional; preferred over the single
  // rates above for a matmul whose weight size is known): GEMV bytes/s and GEMM FLOP/s.
  std::map<DType, std::vector<CurvePoint>> gemv_curve, gemm_curve;
  // Model-shaped layer chains (optional): what a layer costs beyond plan's roofline of it.
  std::vector<LayerProbe> layer_probes;
  std::vector<HeadProbe> head_probes;  // the presets' heads (optional)
  std::vector<MoeProbe> moe_probes;    // routed experts at a prompt's rows (optional; CPU)

  // The FLOP rate a matmul over weights of type `t` runs at in prefill (GEMM) and decode (GEMV).
  // With `weight_bytes` (one matrix's bytes, > 0) and a curve for `t`, the curve's rate there.
  double GemmRate(DType t, double weight_bytes = 0) const;
  double GemvComputeRate(DType t) const;
  // Bytes/s a decode matmul streams weights of type `t` at (the curve's rate at `weight_bytes`
  // where the profile has one for `t`).
  double GemvBytesRate(DType t, double weight_bytes = 0) const;
  // The class rate a type takes on this backend: "f16_matrix", "int8_dot" or "fp32".
  std::string RateClass(DType t, bool prefill) const;
};

// Checks `doc` against the schema (errors name the JSON path) and reads it. `where` names the
// file in errors.
DeviceProfile ParseDeviceProfile(const nlohmann::json& doc, const std::string& where);
// A profile name (looked up in DeviceProfileDirs(), NAME.json) or a path to a .json file.
// Unknown names list the known ones.
DeviceProfile LoadDeviceProfile(const std::string& name_or_path);
// Where profiles are looked for, in order: $ES_DEVICES_DIR, <executable>/../share/edgeseek/devices,
// /usr/local/share/edgeseek/devices, /usr/share/edgeseek/devices, ./configs/devices, the source
// tree's configs/devices.
std::vector<std::string> DeviceProfileDirs();
std::vector<std::string> DeviceProfileNames();
// configs/devices.schema.json (same search, one level up from each devices folder).
std::string DeviceProfileSchemaPath();
nlohmann::json DeviceProfileToJson(const DeviceProfile& p);

// ---- calibration (`edgeseek devices --calibrate`) ---------------------------------------------
struct CalibrateOptions {
  std::string backend = "cpu";  // cpu | vulkan
  std::string device;           // vulkan: index or name
  int threads = 0;              // cpu: 0 = all
  double seconds_per_case = 0.3;
  bool quick = false;  // small shapes (tests)
};
// Measures this machine into a profile (calibrated values; memory from /proc/meminfo or the
// device's heaps): read bandwidth, per-op and per-step overhead, GEMV bytes/s and GEMM FLOP/s
// for f32, f16, bf16, q8_0, q4_0 weights through the backend's own kernels — one large shape
// (gemv_bytes_per_s, gemm_flops) and the presets' matmul shapes (gemv_curve, gemm_curve) — and
// chains of the dense presets' layers in f16, q8_0 and q4_0, one row and a prefill's rows
// (layer_probes), and on the CPU V2-Lite's routed experts in q8_0 and q4_0 at 16, 64 and 256 rows
// (moe_probes).
DeviceProfile CalibrateDevice(const CalibrateOptions& o);

// A probe that repeats one working set reads it from the caches when it fits there, where a
// model's weights stream from memory: calibration's chains are at least this many times the
// last-level cache (the dev Xeon's 260 MiB L3 held the 256 MiB chains: Q8_0 GEMVs at 46 GB/s
// against 20 from memory, layer probes ~20% faster than the model's layers; session 35).
constexpr size_t kCacheMultiple = 4;
// The largest data or unified cache's bytes under a sysfs cache folder (index*/level, size,
// type), 0 when none is readable.
size_t LastLevelCacheBytes(const std::string& cache_dir = "/sys/devices/system/cpu/cpu0/cache");
// Layers of a prefill layer probe of `layer_bytes` weights whose one layer takes about `layer_s`:
// as many as take `seconds` (1-4, as before session 41), and on a CPU (chain_bytes > 0: the GEMV
// and decode chains' bytes, ProbeChainBytes) at least as many as fill chain_bytes (at most 28),
// so that its repeats stream the weights from memory as a model's prefill does, as the decode
// chains do (the 7B Q8_0 prefill probe of 1 layer, 248 MB, sat inside the dev Xeon's 260 MiB L3;
// session 35). A GPU passes 0: its prefill probes stay sized by time.
int PrefillProbeLayers(double layer_bytes, double layer_s, size_t chain_bytes, double seconds);
// The bytes of the GEMV and layer chains: kCacheMultiple x the last-level cache, at least 256 MiB
// (the size before session 35), at most max_bytes (the large GEMV probe's weight).
size_t ProbeChainBytes(size_t llc_bytes, size_t max_bytes);
// A CPU's memory bandwidth: the faster of the streaming read sum and the large GEMV probes'
// weight reads (one weight each, at least twice the last-level cache: from memory), the source
// saying which.
ProfileValue StreamBandwidth(const ProfileValue& read, const std::map<DType, ProfileValue>& gemv);

// How every calibration probe is timed (session 31: the H200's f16 layer probe ran 2.5x slower
// than the model's own layers): untimed warm-up runs until `warmup_s` has passed (at least one:
// pipelines compiled and programs recorded, buffers touched, a GPU's clocks up), then timed runs
// for about `budget_s` (at least `min_runs`, at most 1000), and their median with the spread.
// `now` is the clock in seconds (steady_clock in calibration; a fake one in tests).
struct ProbeTiming {
  double median_s = 0, min_s = 0, max_s = 0;
  int warmups = 0, runs = 0;
  // "median of N runs after W warm-ups, min .. max": the spread, for the value's source.
  std::string Describe() const;
};
ProbeTiming TimeRepeated(const std::function<void()>& run, const std::function<double()>& now,
                         double budget_s, double warmup_s, int min_runs = 5);

}  // namespace es
