// Device profiles: what `edgeseek plan` knows about a machine (configs/devices/NAME.json, checked
// against configs/devices.schema.json). Every number carries its source (a datasheet, a
// published measurement, `edgeseek devices --calibrate`) and whether it was measured on the
// device (calibrated) or taken from a datasheet / estimated (nominal).
#pragma once

#include <cstdint>
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
// (gemv_bytes_per_s, gemm_flops) and the presets' matmul shapes (gemv_curve, gemm_curve).
DeviceProfile CalibrateDevice(const CalibrateOptions& o);

}  // namespace es
