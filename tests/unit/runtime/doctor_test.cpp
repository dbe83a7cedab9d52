// `edgeseek doctor` on faked machines: files under a temporary root stand for /proc, /sys and
// /etc, and the Vulkan device list (or the loader's error) is made up per case: no GPU, no
// loader, an old driver, a Jetson before the L4T 36.3 baseline, an RK3588 without a Mali driver,
// a governor and hugepages setting to fix, a model that does not fit.
#include "edgeseek/internal/runtime/doctor.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "test_util.h"

namespace es {
namespace {

class Doctor : public ::testing::Test {
 protected:
  void SetUp() override {
    env_.root = test::TempDir();
    env_.vulkan_built = true;
    File("/proc/meminfo",
         "MemTotal:       8000000 kB\nMemFree:  100 kB\nMemAvailable:   6000000 kB\n");
    File("/proc/cpuinfo", "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma\n");
  }
  void File(const std::string& path, const std::string& text) {
    const std::filesystem::path p = std::filesystem::path(env_.root) / path.substr(1);
    std::filesystem::create_directories(p.parent_path());
    test::WriteFile(p.string(), text);
  }
  const Finding* Find(const std::vector<Finding>& f, const std::string& check) {
    for (const Finding& x : f)
      if (x.check == check) return &x;
    return nullptr;
  }
  static VulkanDeviceInfo Gpu(const std::string& driver) {
    VulkanDeviceInfo d;
    d.name = "Test GPU";
    d.type = "discrete";
    d.driver = driver;
    d.fp16 = d.int8 = d.storage16 = d.storage8 = d.int_dot = d.int_dot_accel = d.coopmat_khr = true;
    d.subgroup_arithmetic = d.subgroup_clustered = true;
    d.subgroup_size = 32;
    d.heaps = {{size_t(24) << 30, true}};
    return d;
  }
  DoctorEnv env_;
};

TEST_F(Doctor, NoGpuIsAWarningNotABlock) {
  const auto f = RunDoctor(env_);
  const Finding* v = Find(f, "vulkan.devices");
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->severity, Severity::kWarn);
  EXPECT_NE(v->fix.find("mesa-vulkan-drivers"), std::string::npos);
  EXPECT_EQ(DoctorExitCode(f), 0);
  EXPECT_EQ(Find(f, "cpu.simd")->message, "x86-64 AVX2");
}

TEST_F(Doctor, MissingLoaderBlocksAGpuRunOnly) {
  env_.vulkan_error = "no Vulkan loader (libvulkan.so.1 not found)";
  auto f = RunDoctor(env_);
  EXPECT_EQ(Find(f, "vulkan.loader")->severity, Severity::kWarn);
  EXPECT_NE(Find(f, "vulkan.loader")->fix.find("libvulkan1"), std::string::npos);
  EXPECT_EQ(DoctorExitCode(f), 0);
  env_.need_bytes = 1 << 20;
  env_.need_backend = "vulkan";
  env_.need_what = "a model";
  f = RunDoctor(env_);
  EXPECT_EQ(Find(f, "vulkan.loader")->severity, Severity::kFail);
  EXPECT_EQ(DoctorExitCode(f), 1);
}

TEST_F(Doctor, OldDriverFromTheKnownBadList) {
  env_.devices = {Gpu("NVIDIA 535.104.05")};
  env_.known_bad = {{"NVIDIA", "550", "a test reason", "update the driver"}};
  auto f = RunDoctor(env_);
  const Finding* d = Find(f, "device.0.driver");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->severity, Severity::kWarn);
  EXPECT_NE(d->message.find("535.104.05 is older than 550"), std::string::npos) << d->message;
  env_.devices = {Gpu("NVIDIA 580.159.04")};
  f = RunDoctor(env_);
  EXPECT_EQ(Find(f, "device.0.driver"), nullptr);
  EXPECT_EQ(Find(f, "device.0.features")->severity, Severity::kOk);
}

TEST_F(Doctor, UnusableDeviceAndMissingFeaturesSaySo) {
  VulkanDeviceInfo d = Gpu("Mesa 22.3.6");
  d.coopmat_khr = false;
  d.int_dot_accel = false;
  env_.devices = {d};
  auto f = RunDoctor(env_);
  EXPECT_EQ(Find(f, "device.0.features")->severity, Severity::kInfo);
  EXPECT_NE(Find(f, "device.0.features")->message.find("cooperative matrices"), std::string::npos);
  d.missing_required = {"subgroup arithmetic"};
  env_.devices = {d};
  f = RunDoctor(env_);
  EXPECT_NE(Find(f, "device.0.usable")->message.find("subgroup arithmetic"), std::string::npos);
}

TEST_F(Doctor, ModelAgainstRamAndGpuHeap) {
  env_.need_bytes = size_t(7) << 30;  // 7 GiB against 6,000,000 kB available
  env_.need_what = "r1-distill-qwen-7b";
  auto f = RunDoctor(env_);
  EXPECT_EQ(Find(f, "memory.model")->severity, Severity::kFail);
  EXPECT_EQ(DoctorExitCode(f), 1);
  env_.devices = {Gpu("NVIDIA 580.159.04")};
  env_.need_backend = "vulkan";
  f = RunDoctor(env_);
  EXPECT_EQ(Find(f, "memory.model")->severity, Severity::kOk);  // 24 GiB heap
}

TEST_F(Doctor, GovernorAndHugepages) {
  File("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor", "powersave\n");
  File("/sys/kernel/mm/transparent_hugepage/enabled", "always madvise [never]\n");
  auto f = RunDoctor(env_);
  EXPECT_EQ(Find(f, "cpu.governor")->severity, Severity::kWarn);
  EXPECT_NE(Find(f, "cpu.governor")->fix.find("performance"), std::string::npos);
  EXPECT_EQ(Find(f, "memory.hugepages")->severity, Severity::kWarn);
  File("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor", "performance\n");
  File("/sys/kernel/mm/transparent_hugepage/enabled", "always [madvise] never\n");
  f = RunDoctor(env_);
  EXPECT_EQ(Find(f, "cpu.governor")->severity, Severity::kOk);
  EXPECT_EQ(Find(f, "memory.hugepages")->severity, Severity::kOk);
}

TEST_F(Doctor, JetsonL4tBaseline) {
  File("/etc/nv_tegra_release",
       "# R35 (release), REVISION: 4.1, GCID: 33958178, BOARD: t186ref, EABI: aarch64\n");
  File("/proc/cpuinfo",
       "Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp asimddp\n");
  auto f = RunDoctor(env_);
  EXPECT_EQ(Find(f, "jetson.l4t")->severity, Severity::kWarn);
  EXPECT_NE(Find(f, "jetson.l4t")->message.find("35.4.1"), std::string::npos)
      << Find(f, "jetson.l4t")->message;
  EXPECT_EQ(Find(f, "cpu.simd")->message, "ARM64 NEON + dotprod");
  File("/etc/nv_tegra_release",
       "# R36 (release), REVISION: 3.0, GCID: 36191598, BOARD: generic, EABI: aarch64\n");
  f = RunDoctor(env_);
  EXPECT_EQ(Find(f, "jetson.l4t")->severity, Severity::kOk);
}

TEST_F(Doctor, Rk3588MaliDriver) {
  File("/proc/device-tree/compatible", std::string("radxa,rock-5b\0rockchip,rk3588\0", 30));
  auto f = RunDoctor(env_);
  EXPECT_EQ(Find(f, "rk3588.mali")->severity, Severity::kWarn);
  EXPECT_NE(Find(f, "rk3588.mali")->fix.find("panthor"), std::string::npos);
  std::filesystem::create_directories(env_.root + "/sys/module/panthor");
  f = RunDoctor(env_);
  EXPECT_EQ(Find(f, "rk3588.mali")->message, "RK3588 Mali-G610 driver: panthor");
}

TEST(DoctorVersion, ComparesNumerically) {
  EXPECT_TRUE(VersionLess("535.104.05", "550"));
  EXPECT_FALSE(VersionLess("580.159.04", "550"));
  EXPECT_TRUE(VersionLess("22.3.6", "22.10"));
  EXPECT_FALSE(VersionLess("24.1", "24.1.0"));
  EXPECT_EQ(FirstVersion("llvmpipe Mesa 22.3.6 (LLVM 15.0.6)"), "22.3.6");
  EXPECT_EQ(FirstVersion("NVIDIA 580.159.04"), "580.159.04");
}

TEST(DoctorCli, ThisMachineInUnderTwoSeconds) {
  std::string out, err;
  const int rc = test::RunCommand("timeout 2 " + test::CliPath() + " doctor --json", &out, &err);
  EXPECT_NE(rc, 124) << "over 2 s";
  const auto j = nlohmann::json::parse(out);
  EXPECT_EQ(rc, j["blocking"].get<bool>() ? 1 : 0) << err;
  EXPECT_FALSE(j["findings"].empty());
}

}  // namespace
}  // namespace es
