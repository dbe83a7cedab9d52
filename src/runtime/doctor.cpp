// `edgeseek doctor` checks (see doctor.h). Sections: helpers → Vulkan (loader, devices,
// features, drivers) → memory against a plan → CPU (SIMD, governor, hugepages) → boards
// (Jetson L4T, RK3588 Mali) → output.
#include "edgeseek/internal/runtime/doctor.h"

#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "edgeseek/internal/backends/backend.h"
#include "edgeseek/internal/core/error.h"

namespace es {
namespace fs = std::filesystem;

const char* SeverityName(Severity s) {
  switch (s) {
    case Severity::kOk:
      return "ok";
    case Severity::kInfo:
      return "info";
    case Severity::kWarn:
      return "warn";
    case Severity::kFail:
      return "fail";
  }
  return "?";
}

std::string FirstVersion(const std::string& s) {
  for (size_t i = 0; i < s.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(s[i]))) continue;
    size_t j = i;
    while (j < s.size() && (std::isdigit(static_cast<unsigned char>(s[j])) || s[j] == '.')) ++j;
    if (s.find('.', i) < j) return s.substr(i, j - i);
    i = j;
  }
  return "";
}

bool VersionLess(const std::string& a, const std::string& b) {
  std::istringstream sa(a), sb(b);
  std::string x, y;
  while (true) {
    const bool ha = bool(std::getline(sa, x, '.')), hb = bool(std::getline(sb, y, '.'));
    if (!ha && !hb) return false;
    const long va = ha && !x.empty() ? std::atol(x.c_str()) : 0,
               vb = hb && !y.empty() ? std::atol(y.c_str()) : 0;
    if (va != vb) return va < vb;
  }
}

std::vector<KnownBadDriver> BuiltinKnownBadDrivers() {
  // Only releases with a reason edgeseek has seen; none is confirmed yet (docs/plan.md "doctor").
  return {};
}

DoctorEnv SystemDoctorEnv() {
  DoctorEnv env;
  env.vulkan_built = VulkanBackendBuilt() && ListVulkanDevices != nullptr;
  if (env.vulkan_built) {
    try {
      env.devices = ListVulkanDevices();
    } catch (const Error& e) {
      env.vulkan_error = e.what();
    }
  }
  env.known_bad = BuiltinKnownBadDrivers();
  return env;
}

namespace {

std::string ReadText(const DoctorEnv& env, const std::string& path) {
  std::ifstream f(fs::path(env.root) / path.substr(1));
  if (!f) return "";
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

bool Exists(const DoctorEnv& env, const std::string& path) {
  std::error_code ec;
  return fs::exists(fs::path(env.root) / path.substr(1), ec);
}

// kB value of a /proc/meminfo key, 0 when absent.
size_t MemInfoBytes(const std::string& meminfo, const std::string& key) {
  const size_t p = meminfo.find(key + ":");
  if (p == std::string::npos) return 0;
  return size_t(std::atoll(meminfo.c_str() + p + key.size() + 1)) * 1024;
}

std::string Gib(double b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", b / double(1ull << 30));
  return buf;
}

void Add(std::vector<Finding>& out, std::string check, Severity s, std::string msg,
         std::string fix = "") {
  out.push_back({std::move(check), s, std::move(msg), std::move(fix)});
}

// ---- Vulkan ----------------------------------------------------------------------------------

// Whether the model's plan asks for a GPU (then a missing one fails instead of warning).
bool WantsGpu(const DoctorEnv& env) { return env.need_bytes > 0 && env.need_backend == "vulkan"; }

// The loader: built, working, with devices.
void CheckVulkanLoader(const DoctorEnv& env, std::vector<Finding>& out) {
  const Severity no_gpu = WantsGpu(env) ? Severity::kFail : Severity::kWarn;
  if (!env.vulkan_built) {
    Add(out, "vulkan.build", no_gpu, "this build has no Vulkan backend (ES_VULKAN=OFF): CPU only",
        "rebuild with -DES_VULKAN=ON (needs glslc)");
  } else if (!env.vulkan_error.empty()) {
    Add(out, "vulkan.loader", no_gpu,
        "Vulkan unavailable: " + env.vulkan_error + "; the CPU backend works",
        "install the loader and a driver: apt install libvulkan1 mesa-vulkan-drivers (or the GPU "
        "vendor's driver)");
  } else if (env.devices.empty()) {
    Add(out, "vulkan.devices", no_gpu,
        "the Vulkan loader found no device (no ICD installed); the CPU backend works",
        "install a driver: mesa-vulkan-drivers, nvidia-driver, or the board's Mali / Adreno "
        "driver");
  } else {
    Add(out, "vulkan.loader", Severity::kOk,
        std::to_string(env.devices.size()) + " Vulkan device(s)");
  }
}

// One device: usable at all, the features behind the fast paths, a known-bad driver.
void CheckVulkanDevice(const DoctorEnv& env, const VulkanDeviceInfo& d, std::vector<Finding>& out) {
  const std::string id = "device." + std::to_string(d.index);
  const std::string who = d.name + " (" + d.driver + ")";
  if (!d.missing_required.empty()) {
    std::string m;
    for (const auto& r : d.missing_required) m += (m.empty() ? "" : ", ") + r;
    Add(out, id + ".usable",
        WantsGpu(env) && env.devices.size() == 1 ? Severity::kFail : Severity::kWarn,
        who + " cannot run edgeseek: lacks " + m, "update the driver, or use --backend cpu");
    return;
  }
  std::vector<std::string> lacks;
  if (!d.fp16) lacks.push_back("fp16 arithmetic (f16 math paths off)");
  if (!d.storage16) lacks.push_back("16-bit storage (f16 weights widened)");
  if (!d.int8 || !d.storage8) lacks.push_back("8-bit storage / int8 (block types read as bytes)");
  if (!d.int_dot_accel)
    lacks.push_back("hardware int8 dot products (Q4_0/Q8_0 decode on the f32 GEMV)");
  if (!d.coopmat_khr && !d.coopmat_nv)
    lacks.push_back("cooperative matrices (prefill without tensor cores)");
  if (!d.subgroup_clustered) lacks.push_back("clustered subgroup ops (small-TPR GEMV off)");
  char sub[96];
  std::snprintf(sub, sizeof sub, "subgroup %u (%u..%u)", d.subgroup_size, d.min_subgroup_size,
                d.max_subgroup_size);
  if (lacks.empty()) {
    Add(out, id + ".features", Severity::kOk, who + ": every feature edgeseek uses; " + sub);
  } else {
    std::string m;
    for (const auto& l : lacks) m += (m.empty() ? "" : "; ") + l;
    Add(out, id + ".features", Severity::kInfo, who + ": " + sub + "; slower paths for: " + m,
        d.type == "cpu" ? "a software rasterizer (lavapipe): for tests; use --backend cpu for speed"
                        : "");
  }
  const std::string ver = FirstVersion(d.driver);
  for (const KnownBadDriver& k : env.known_bad)
    if (d.driver.find(k.driver) != std::string::npos && !ver.empty() && VersionLess(ver, k.below))
      Add(out, id + ".driver", Severity::kWarn,
          who + ": driver " + ver + " is older than " + k.below + ": " + k.reason, k.fix);
}

// The largest device-local heap of the usable devices (0: none).
uint64_t BestDeviceHeap(const DoctorEnv& env) {
  uint64_t best_heap = 0;
  for (const VulkanDeviceInfo& d : env.devices) {
    if (!d.missing_required.empty()) continue;
    for (const auto& h : d.heaps)
      if (h.device_local) best_heap = std::max(best_heap, h.bytes);
  }
  return best_heap;
}

// ---- memory against the model's plan ---------------------------------------------------------

void CheckMemory(const DoctorEnv& env, std::vector<Finding>& out) {
  const uint64_t best_heap = BestDeviceHeap(env);
  const std::string meminfo = ReadText(env, "/proc/meminfo");
  const size_t ram = MemInfoBytes(meminfo, "MemTotal"),
               avail = MemInfoBytes(meminfo, "MemAvailable");
  if (env.need_bytes > 0) {
    const bool gpu = env.need_backend == "vulkan";
    const size_t have = gpu && best_heap > 0 ? size_t(best_heap) : avail;
    const std::string where =
        gpu && best_heap > 0 ? "the GPU's device-local heap" : "available RAM";
    if (have == 0) {
      Add(out, "memory.model", Severity::kInfo,
          "cannot read " + where + " to check " + env.need_what);
    } else if (env.need_bytes > have) {
      Add(out, "memory.model", Severity::kFail,
          env.need_what + " needs " + Gib(double(env.need_bytes)) + ", " + where + " is " +
              Gib(double(have)),
          "a smaller --type (q4_0), a shorter --context, --kv-type q8_0, or a device with more "
          "memory (edgeseek plan)");
    } else {
      Add(out, "memory.model", Severity::kOk,
          env.need_what + " needs " + Gib(double(env.need_bytes)) + " of " + Gib(double(have)) +
              " " + where);
    }
  } else if (ram > 0) {
    Add(out, "memory.ram", Severity::kOk,
        "RAM " + Gib(double(ram)) + ", available " + Gib(double(avail)));
  }
}

// ---- CPU -------------------------------------------------------------------------------------

// The SIMD extensions the CPU kernels pick from.
void CheckSimd(const DoctorEnv& env, std::vector<Finding>& out) {
  const std::string cpuinfo = ReadText(env, "/proc/cpuinfo");
  auto has = [&](const char* flag) {
    return cpuinfo.find(std::string(" ") + flag) != std::string::npos;
  };
  if (cpuinfo.empty()) {
    Add(out, "cpu.simd", Severity::kInfo, "cannot read /proc/cpuinfo");
  } else if (has("avx512_vnni") || has("avx512f")) {
    Add(out, "cpu.simd", Severity::kOk,
        std::string("x86-64 AVX-512") + (has("avx512_vnni") ? " with VNNI" : ""));
  } else if (has("avx2")) {
    Add(out, "cpu.simd", Severity::kOk,
        std::string("x86-64 AVX2") + (has("avx_vnni") ? " with AVX-VNNI" : ""));
  } else if (has("asimd")) {
    const bool dot = has("asimddp"), mm = has("i8mm");
    Add(out, "cpu.simd", dot ? Severity::kOk : Severity::kWarn,
        std::string("ARM64 NEON") + (dot ? " + dotprod" : "") + (mm ? " + i8mm" : ""),
        dot ? ""
            : "no dotprod: block-quantized matmuls take the plain NEON path (ARMv8.2+ cores have "
              "it)");
  } else {
    Add(out, "cpu.simd", Severity::kWarn,
        "no AVX2 or NEON found: the CPU kernels run their portable path",
        "a CPU with AVX2 (x86-64) or NEON (ARM64)");
  }
}

// The clock governor and transparent hugepages: steady steps, fewer TLB misses.
void CheckClocksAndPages(const DoctorEnv& env, std::vector<Finding>& out) {
  const std::string gov = ReadText(env, "/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor");
  if (gov.empty()) {
    Add(out, "cpu.governor", Severity::kInfo, "no cpufreq governor (a VM, or fixed clocks)");
  } else if (gov.rfind("performance", 0) == 0) {
    Add(out, "cpu.governor", Severity::kOk, "governor performance");
  } else {
    Add(out, "cpu.governor", Severity::kWarn,
        "governor " + gov.substr(0, gov.find('\n')) + ": clocks ramp up late, decode steps vary",
        "sudo cpupower frequency-set -g performance (Jetson: sudo jetson_clocks)");
  }
  const std::string thp = ReadText(env, "/sys/kernel/mm/transparent_hugepage/enabled");
  if (thp.find("[never]") != std::string::npos) {
    Add(out, "memory.hugepages", Severity::kWarn,
        "transparent hugepages [never]: weight streams pay a TLB miss per 4 KiB page",
        "echo madvise | sudo tee /sys/kernel/mm/transparent_hugepage/enabled");
  } else if (!thp.empty()) {
    const size_t b = thp.find('['), e = thp.find(']');
    Add(out, "memory.hugepages", Severity::kOk,
        "transparent hugepages " +
            (b != std::string::npos && e > b ? thp.substr(b, e - b + 1) : thp));
  }
}

// ---- boards ----------------------------------------------------------------------------------

// Jetson: the L4T release against the JetPack 6.0 baseline.
void CheckJetson(const DoctorEnv& env, std::vector<Finding>& out) {
  const std::string tegra = ReadText(env, "/etc/nv_tegra_release");
  if (!tegra.empty()) {
    // "# R36 (release), REVISION: 3.0, GCID: ..." → L4T 36.3.0
    int major = 0;
    double rev = 0;
    std::sscanf(tegra.c_str(), "# R%d (release), REVISION: %lf", &major, &rev);
    char l4t[32];
    std::snprintf(l4t, sizeof l4t, "%d.%g", major, rev);
    const bool old = major < 36 || (major == 36 && rev < 3.0);
    Add(out, "jetson.l4t", old ? Severity::kWarn : Severity::kOk,
        std::string("Jetson L4T ") + l4t +
            (old ? ": older than the JetPack 6.0 / L4T 36.3 baseline" : ""),
        old ? "flash JetPack 6.0 or later (L4T 36.3+; its Vulkan driver is what edgeseek is tested "
              "against)"
            : "");
  }
}

// RK3588: a Mali GPU driver loaded (panthor or mali_kbase).
void CheckRk3588(const DoctorEnv& env, std::vector<Finding>& out) {
  const std::string compat = ReadText(env, "/proc/device-tree/compatible");
  if (compat.find("rockchip,rk3588") != std::string::npos) {
    const bool panthor = Exists(env, "/sys/module/panthor"),
               kbase = Exists(env, "/sys/module/mali_kbase") || Exists(env, "/dev/mali0");
    if (panthor || kbase)
      Add(out, "rk3588.mali", Severity::kOk,
          std::string("RK3588 Mali-G610 driver: ") + (panthor ? "panthor" : "mali_kbase"));
    else
      Add(out, "rk3588.mali", Severity::kWarn,
          "RK3588 without a Mali GPU driver (neither panthor nor mali_kbase loaded)",
          "Linux 6.10+ with panthor and Mesa 24.1+ (panvk), or the vendor kernel's mali_kbase with "
          "its Vulkan blob");
  }
}

}  // namespace

std::vector<Finding> RunDoctor(const DoctorEnv& env) {
  std::vector<Finding> out;
  CheckVulkanLoader(env, out);
  for (const VulkanDeviceInfo& d : env.devices) CheckVulkanDevice(env, d, out);
  CheckMemory(env, out);
  CheckSimd(env, out);
  CheckClocksAndPages(env, out);
  CheckJetson(env, out);
  CheckRk3588(env, out);
  return out;
}

int DoctorExitCode(const std::vector<Finding>& f) {
  for (const Finding& x : f)
    if (x.severity == Severity::kFail) return 1;
  return 0;
}

nlohmann::json DoctorToJson(const std::vector<Finding>& f) {
  nlohmann::json j = nlohmann::json::array();
  for (const Finding& x : f)
    j.push_back({{"check", x.check},
                 {"severity", SeverityName(x.severity)},
                 {"message", x.message},
                 {"fix", x.fix}});
  return {{"findings", j}, {"blocking", DoctorExitCode(f) != 0}};
}

}  // namespace es
