// `edgeseek devices`: lists the Vulkan devices with driver, API version, memory heaps, subgroup
// size and the features edgeseek uses (fp16, int8, 16/8-bit storage, integer dot product,
// cooperative matrix, bfloat16), and whether each is usable. Without any Vulkan driver it says
// so and exits 1 (the CPU backend is unaffected). `--tuning` prints the Vulkan backend's knobs
// (backends/vulkan/tuning.h) with their effective values, `--tuning --markdown` the registry's
// table that docs/vulkan.md carries.
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include "backends/vulkan/tuning.h"
#include "edgeseek/internal/backends/backend.h"
#include "edgeseek/internal/backends/vulkan.h"
#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/runtime/device_profile.h"
#include "edgeseek/internal/runtime/plan.h"
#include "verb.h"

namespace es::tools {
namespace {

std::string Bytes(uint64_t b) {
  char buf[32];
  if (b >= (1ull << 30))
    std::snprintf(buf, sizeof(buf), "%.1f GiB", double(b) / double(1ull << 30));
  else
    std::snprintf(buf, sizeof(buf), "%.0f MiB", double(b) / double(1ull << 20));
  return buf;
}
const char* YesNo(bool b) { return b ? "yes" : "no"; }

// `devices --calibrate`: the measured profile, as a table and optionally a profile file.
int Calibrate(const CalibrateOptions& o, const std::string& out, const std::string& name) {
  DeviceProfile p = CalibrateDevice(o);
  if (!name.empty()) p.name = name;
  std::printf("%s (%s backend)\n", p.description.c_str(), p.backend.c_str());
  std::printf("  memory          %s\n", Bytes(uint64_t(p.memory_bytes.value)).c_str());
  std::printf("  bandwidth       %.1f GB/s\n", p.bandwidth.value / 1e9);
  std::printf("  per op          %.2f us\n", p.dispatch_s.value * 1e6);
  std::printf("  per step        %.2f us\n", p.step_s.value * 1e6);
  std::printf("  type     GEMV GB/s   GEMM GFLOP/s\n");
  for (const auto& [t, v] : p.gemv_bytes_per_s)
    std::printf("  %-8s %9.1f %14.1f\n", std::string(Name(t)).c_str(), v.value / 1e9,
                p.gemm_flops[t].value / 1e9);
  for (const auto& [t, curve] : p.gemv_curve) {
    std::printf("  %-8s GEMV at %zu shapes:", std::string(Name(t)).c_str(), curve.size());
    for (const CurvePoint& c : curve)
      std::printf(" %.1fMB:%.1f", c.weight_bytes / 1e6, c.rate.value / 1e9);
    std::printf(" GB/s\n");
  }
  for (const auto& [t, curve] : p.gemm_curve) {
    std::printf("  %-8s GEMM at %zu shapes:", std::string(Name(t)).c_str(), curve.size());
    for (const CurvePoint& c : curve)
      std::printf(" %.1fMB:%.0f", c.weight_bytes / 1e6, c.rate.value / 1e9);
    std::printf(" GFLOP/s\n");
  }
  // The layer chains: measured, plan's roofline of the same graph, the excess per layer.
  // The spread is the end of the value's source (ProbeTiming::Describe).
  for (const LayerProbe& l : p.layer_probes) {
    const size_t at = l.seconds.source.rfind("median of");
    std::printf(
        "  layers   D %lld FFN %lld %-5s %3d rows x %2d layers: %8.3f ms, roofline %8.3f ms, "
        "excess %7.3f ms a layer (%s)\n",
        (long long)l.hidden, (long long)l.ffn, std::string(Name(l.type)).c_str(), l.rows, l.layers,
        l.seconds.value * 1e3, LayerProbeRoofline(l, p) * 1e3, LayerProbeExcess(l, p) * 1e3,
        at == std::string::npos ? "" : l.seconds.source.c_str() + at);
  }
  // The routed-expert probes: measured, the expert FLOP rate plan takes from them, and the GEMM
  // curve's rate at one expert's matrix that a prefill's experts took without them.
  for (const MoeProbe& m : p.moe_probes) {
    const size_t at = m.seconds.source.rfind("median of");
    const double expert_bytes = double(RowBytes(m.type, m.hidden)) * double(m.ffn);
    std::printf(
        "  experts  D %lld %d x %lld top %d %-5s %3d rows x %d layers: %8.3f ms, %.1f rows an "
        "expert at %.0f GFLOP/s (GEMM curve %.0f) (%s)\n",
        (long long)m.hidden, m.experts, (long long)m.ffn, m.top_k,
        std::string(Name(m.type)).c_str(), m.rows, m.layers, m.seconds.value * 1e3,
        double(m.rows) * m.top_k / m.experts, MoeProbeRate(m, p) / 1e9,
        p.GemmRate(m.type, expert_bytes) / 1e9,
        at == std::string::npos ? "" : m.seconds.source.c_str() + at);
  }
  if (!out.empty()) {
    std::ofstream f(out);
    ES_CHECK(f, "--json ", out, ": cannot write");
    f << DeviceProfileToJson(p).dump(2) << "\n";
    ES_CHECK(f.good(), "--json ", out, ": write failed");
    std::printf("profile written to %s (use: edgeseek plan --device %s)\n", out.c_str(),
                out.c_str());
  }
  return 0;
}

VerbRun Setup(CLI::App& sub) {
  auto bandwidth = std::make_shared<bool>(false);
  auto device = std::make_shared<std::string>();
  auto calibrate = std::make_shared<bool>(false);
  auto cal = std::make_shared<CalibrateOptions>();
  auto out = std::make_shared<std::string>();
  auto name = std::make_shared<std::string>();
  auto tuning = std::make_shared<bool>(false);
  auto markdown = std::make_shared<bool>(false);
  sub.add_flag("--bandwidth", *bandwidth, "also measure the copy bandwidth of the chosen device");
  sub.add_option("--device", *device,
                 "device for --bandwidth / --calibrate (index or name; default: first GPU)");
  sub.add_flag("--calibrate", *calibrate,
               "measure this machine (bandwidth, per-op overhead, GEMV/GEMM per type) into a "
               "device profile");
  sub.add_option("--backend", cal->backend, "--calibrate: cpu | vulkan");
  sub.add_option("-t,--threads", cal->threads, "--calibrate on the CPU: threads (0 = all)");
  sub.add_option("--json", *out,
                 "--calibrate: write the profile to this file (configs/devices/NAME.json)");
  sub.add_option("--name", *name, "--calibrate: the profile's name");
  sub.add_option("--seconds", cal->seconds_per_case, "--calibrate: seconds per measurement");
  sub.add_flag("--quick", cal->quick, "--calibrate: small shapes (tests)");
  sub.add_flag("--tuning", *tuning,
               "print the Vulkan knobs (ES_VK_*): value, default, source (default / env), when "
               "read");
  sub.add_flag("--markdown", *markdown, "--tuning: the knob registry as a Markdown table");
  return [=] {
    ES_CHECK(!*markdown || *tuning, "--markdown goes with --tuning");
    if (*tuning) {
      if (!VulkanBackendBuilt() || !vk::TuningText) {
        std::printf("this build has no Vulkan backend (cpu only)\n");
        return 1;
      }
      std::fputs(vk::TuningText(*markdown).c_str(), stdout);
      return 0;
    }
    if (*calibrate) {
      cal->device = *device;
      return Calibrate(*cal, *out, *name);
    }
    if (!VulkanBackendBuilt() || !ListVulkanDevices) {
      std::printf("this build has no Vulkan backend (cpu only)\n");
      return 1;
    }
    const auto devices = ListVulkanDevices();  // es::Error without loader/driver -> main
    if (devices.empty()) {
      std::printf("no Vulkan devices found (the loader found no driver); --backend cpu works\n");
      return 1;
    }
    for (const auto& d : devices) {
      std::printf("[%d] %s (%s)\n", d.index, d.name.c_str(), d.type.c_str());
      std::printf("    driver: %s, Vulkan %s, vendor 0x%04x device 0x%04x\n", d.driver.c_str(),
                  VulkanVersionString(d.api_version).c_str(), d.vendor_id, d.device_id);
      std::printf("    memory heaps:");
      for (const auto& h : d.heaps)
        std::printf(" %s%s", Bytes(h.bytes).c_str(), h.device_local ? " (device-local)" : "");
      std::printf("\n    subgroup: %u (min %u, max %u), arithmetic %s, shuffle %s, clustered %s\n",
                  d.subgroup_size, d.min_subgroup_size, d.max_subgroup_size,
                  YesNo(d.subgroup_arithmetic), YesNo(d.subgroup_shuffle),
                  YesNo(d.subgroup_clustered));
      std::printf("    fp16 %s, int8 %s, storage16 %s, storage8 %s, int-dot %s, bf16 %s\n",
                  YesNo(d.fp16), YesNo(d.int8), YesNo(d.storage16), YesNo(d.storage8),
                  d.int_dot_mixed_accel ? "yes (4x8 in hardware, mixed signedness too)"
                  : d.int_dot_accel     ? "yes (4x8 in hardware)"
                                        : YesNo(d.int_dot),
                  YesNo(d.bf16));
      std::printf("    cooperative matrix: KHR %s, NV %s, NV2 %s\n", YesNo(d.coopmat_khr),
                  YesNo(d.coopmat_nv), YesNo(d.coopmat2_nv));
      std::printf("    limits: storage range %s, allocation %s, shared memory %u KiB, push %u B\n",
                  Bytes(d.max_storage_buffer_range).c_str(), Bytes(d.max_memory_allocation).c_str(),
                  d.max_shared_memory / 1024, d.max_push_constants);
      if (d.missing_required.empty()) {
        std::printf("    usable: yes\n");
      } else {
        std::printf("    usable: no, lacks");
        for (const auto& m : d.missing_required) std::printf(" [%s]", m.c_str());
        std::printf("\n");
      }
    }
    if (*bandwidth) {
      const double bw = MeasureVulkanCopyBandwidth(*device, 1ull << 30);
      std::printf("copy bandwidth: %.1f GB/s (bytes read + written)\n", bw / 1e9);
    }
    return 0;
  };
}

const VerbRegistrar kReg("devices", "list Vulkan devices and the features edgeseek uses", Setup);

}  // namespace
}  // namespace es::tools
