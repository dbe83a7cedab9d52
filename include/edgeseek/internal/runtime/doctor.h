// `edgeseek doctor`: checks this machine against what edgeseek (and optionally a model's plan)
// needs, one finding per check with how to fix it. Everything it reads comes through DoctorEnv
// (a root folder for /proc, /sys and /etc, the Vulkan device list or the loader's error), so
// tests fake a Jetson, an RK3588 board, a machine without a GPU or without a loader.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "edgeseek/internal/backends/vulkan.h"

namespace es {

enum class Severity : uint8_t { kOk, kInfo, kWarn, kFail };  // kFail: blocks the run
const char* SeverityName(Severity s);

struct Finding {
  std::string check;  // "vulkan.loader", "device.0.features", "cpu.governor", ...
  Severity severity = Severity::kOk;
  std::string message;
  std::string fix;  // empty when there is nothing to do
};

// A driver release known to misbehave: devices whose driver string contains `driver` and whose
// version (the first dotted number in it) is below `below` get a warning with `reason`.
struct KnownBadDriver {
  std::string driver, below, reason, fix;
};

struct DoctorEnv {
  std::string root = "/";  // prefix for /proc, /sys, /etc
  bool vulkan_built = true;
  std::string vulkan_error;  // non-empty: the loader / driver failed (ListVulkanDevices' error)
  std::vector<VulkanDeviceInfo> devices;
  std::vector<KnownBadDriver> known_bad;
  // With a model: the bytes its plan needs (0: no model given) and on which backend.
  size_t need_bytes = 0;
  std::string need_backend = "cpu";
  std::string need_what;  // "r1-distill-qwen-7b q4_0 at 4096 tokens"
};

// This machine: "/", the Vulkan devices (or the loader's error), the built-in known-bad list.
DoctorEnv SystemDoctorEnv();
std::vector<KnownBadDriver> BuiltinKnownBadDrivers();

std::vector<Finding> RunDoctor(const DoctorEnv& env);
// 1 when a finding is kFail, else 0.
int DoctorExitCode(const std::vector<Finding>& f);
nlohmann::json DoctorToJson(const std::vector<Finding>& f);

// "1.2.3" < "1.10" by numeric fields; the first dotted number of a driver string ("NVIDIA
// 580.159.04" → "580.159.04").
bool VersionLess(const std::string& a, const std::string& b);
std::string FirstVersion(const std::string& s);

}  // namespace es
