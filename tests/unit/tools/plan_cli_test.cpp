// `edgeseek plan` and `edgeseek devices --calibrate` from the outside: the JSON contract, one
// clear error line and a non-zero exit per kind of bad input, every shipped device profile
// valid against configs/devices.schema.json, and a calibrated profile that plan reads back.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/runtime/device_profile.h"
#include "test_util.h"

namespace es {
namespace {

int Plan(const std::string& args, std::string* out, std::string* err) {
  return test::RunCommand(test::CliPath() + " plan " + args, out, err);
}

TEST(PlanCli, JsonHasTheContractFields) {
  std::string out, err;
  ASSERT_EQ(
      Plan("--synthetic r1-distill-qwen-7b --type q4_0 --device h200 -c 32768 --json", &out, &err),
      0)
      << err;
  const auto j = nlohmann::json::parse(out);
  for (const char* k : {"prefill_tokens_per_s", "decode_tokens_per_s", "memory_bytes",
                        "weights_bytes", "kv_bytes", "decode_bound", "prefill_bound"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_GT(j["decode_tokens_per_s"].get<double>(), 0);
  EXPECT_EQ(j["decode_bound"], "bandwidth");
  // f16 by default on a GPU profile: 56 KiB a token for the 7B
  // (docs/log/2026-12-02-cpu-kv-cache-types.md).
  EXPECT_EQ(j["kv_bytes"].get<int64_t>(), int64_t(32768) * 57344);
}

TEST(PlanCli, DeviceTakesAPathAndSplitsReportPerDevice) {
  std::string out, err;
  const std::string path = test::SourceDir() + "/configs/devices/orin-nx-16gb.json";
  ASSERT_EQ(Plan("--synthetic deepseek-v2-lite --type q4_0 --device " + path +
                     " --devices 2 --split head --json",
                 &out, &err),
            0)
      << err;
  const auto j = nlohmann::json::parse(out);
  ASSERT_EQ(j["per_device"].size(), 2u);
  EXPECT_EQ(j["split"], "head");
  // The human form names the binding limit of each phase.
  ASSERT_EQ(Plan("--synthetic r1-distill-qwen-1.5b --device rpi5", &out, &err), 0) << err;
  EXPECT_NE(out.find("bandwidth"), std::string::npos) << out;
}

// One line "edgeseek: error: ..." naming what is wrong, exit code non-zero.
void ExpectError(const std::string& args, const std::string& what) {
  std::string out, err;
  const int rc = Plan(args, &out, &err);
  EXPECT_NE(rc, 0) << args;
  EXPECT_NE(err.find(what), std::string::npos) << args << "\n" << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
}

TEST(PlanCli, BadInputGivesOneClearError) {
  const std::string m = "--synthetic r1-distill-qwen-1.5b ";
  ExpectError(m + "--device nope", "unknown device profile 'nope'");
  ExpectError(m + "--device /nonexistent/x.json", "no such file");
  ExpectError(m + "--device h200 --type q9", "unknown quantization type 'q9'");
  ExpectError(m + "--device h200 -c 0", "--context must be at least 1");
  ExpectError(m + "--device h200 -c 100 -p 512", "does not fit in --context 100");
  ExpectError(m + "--device h200 -b 0", "--batch");
  ExpectError(m + "--device h200 --kv-type q2", "q2");
  ExpectError(m + "--device h200 --devices 5 --split head",
              "12 attention heads do not divide over 5");
  ExpectError(m + "--device h200 --devices 2 --split diagonal", "--split must be layer or head");
  ExpectError("--device h200", "no model given");
  ExpectError("--synthetic nope --device h200", "unknown synthetic preset 'nope'");
  ExpectError(m, "no device given");
}

TEST(PlanCli, ProfileAgainstTheSchemaNamesTheField) {
  const std::string dir = test::TempDir();
  auto j = nlohmann::json::parse(test::ReadFile(test::SourceDir() + "/configs/devices/rpi5.json"));
  j["bandwidth"].erase("source");
  test::WriteFile(dir + "/bad.json", j.dump());
  ExpectError("--synthetic r1-distill-qwen-1.5b --device " + dir + "/bad.json", "/bandwidth");
  test::WriteFile(dir + "/bad2.json", "{ not json");
  ExpectError("--synthetic r1-distill-qwen-1.5b --device " + dir + "/bad2.json", "not valid JSON");
}

TEST(PlanCli, EveryShippedProfileIsValidAndSourced) {
  const std::vector<std::string> want = {"orin-nx-16gb",  "orin-nano-8gb", "orin-nano-super",
                                         "agx-orin-64gb", "rk3588",        "sd8gen3",
                                         "rpi5",          "x86-laptop",    "rtx4090",
                                         "h200",          "dev-epyc-2c",   "dev-xeon-emr-2c"};
  namespace fs = std::filesystem;
  int n = 0;
  for (const auto& e : fs::directory_iterator(test::SourceDir() + "/configs/devices")) {
    SCOPED_TRACE(e.path().string());
    const DeviceProfile p = LoadDeviceProfile(e.path().string());
    EXPECT_EQ(p.name, e.path().stem().string());
    for (const ProfileValue* v :
         {&p.memory_bytes, &p.bandwidth, &p.fp32_flops, &p.dispatch_s, &p.step_s})
      EXPECT_FALSE(v->source.empty());
    ++n;
  }
  EXPECT_GE(n, int(want.size()));
  for (const auto& w : want)
    EXPECT_TRUE(fs::exists(test::SourceDir() + "/configs/devices/" + w + ".json")) << w;
}

TEST(PlanCli, CalibrateWritesAProfilePlanReads) {
  const std::string out_path = test::TempDir() + "/cal.json";
  std::string out, err;
  ASSERT_EQ(
      test::RunCommand(test::CliPath() +
                           " devices --calibrate --quick --seconds 0.02 -t 1 --name here --json " +
                           out_path,
                       &out, &err),
      0)
      << err;
  const DeviceProfile p = LoadDeviceProfile(out_path);
  EXPECT_TRUE(p.calibrated);
  EXPECT_EQ(p.name, "here");
  EXPECT_GT(p.bandwidth.value, 0);
  // The process's own share, measured (its resident set before the probes: a few MB to tens).
  EXPECT_TRUE(p.reserved_bytes.calibrated);
  EXPECT_GT(p.reserved_bytes.value, 1 << 20);
  EXPECT_LT(p.reserved_bytes.value, 512 << 20);
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0}) {
    ASSERT_TRUE(p.gemm_flops.count(t)) << Name(t);
    EXPECT_GT(p.gemv_bytes_per_s.at(t).value, 0) << Name(t);
    EXPECT_TRUE(p.gemv_bytes_per_s.at(t).calibrated);
    // The shape curves: the quick shapes and the large one, sorted by size, each calibrated. A
    // GEMM shape whose run would take over 4x --seconds is skipped (a slow device: under qemu
    // f16 kept 2 of 4), the large one never.
    ASSERT_EQ(p.gemv_curve.count(t), 1u) << Name(t);
    ASSERT_EQ(p.gemm_curve.count(t), 1u) << Name(t);
    EXPECT_EQ(p.gemv_curve.at(t).size(), 4u) << Name(t);
    EXPECT_GE(p.gemm_curve.at(t).size(), 1u) << Name(t);
    EXPECT_LE(p.gemm_curve.at(t).size(), 4u) << Name(t);
    for (const auto* c : {&p.gemv_curve.at(t), &p.gemm_curve.at(t)})
      for (size_t i = 0; i < c->size(); ++i) {
        EXPECT_GT((*c)[i].rate.value, 0);
        EXPECT_TRUE((*c)[i].rate.calibrated);
        if (i > 0) {
          EXPECT_LE((*c)[i - 1].weight_bytes, (*c)[i].weight_bytes);
        }
      }
  }
  // The layer chains (quick: one made-up shape, f16 / q8_0 / q4_0, decode and prefill rows).
  ASSERT_FALSE(p.layer_probes.empty());
  for (const LayerProbe& l : p.layer_probes) {
    EXPECT_GT(l.seconds.value, 0);
    EXPECT_TRUE(l.seconds.calibrated);
    EXPECT_EQ(l.kv_type, DType::kF32);  // the CPU backend's default cache
  }
  ASSERT_EQ(Plan("--synthetic r1-distill-qwen-1.5b --type q8_0 --device " + out_path + " --json",
                 &out, &err),
            0)
      << err;
  EXPECT_GT(nlohmann::json::parse(out)["decode_tokens_per_s"].get<double>(), 0);
}

}  // namespace
}  // namespace es
