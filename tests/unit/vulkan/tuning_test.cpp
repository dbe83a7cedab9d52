// The tuning registry (backends/vulkan/tuning.h): every knob parses its default and rejects a bad
// value naming itself and what it allows; the environment is parsed once into the struct, and a
// value set on the struct wins over it; a running backend takes graph-build knobs only;
// `edgeseek devices --tuning` prints the effective values, and docs/vulkan.md carries exactly
// the table `--tuning --markdown` generates.
#include "backends/vulkan/tuning.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <set>
#include <string>

#include "edgeseek/internal/core/error.h"
#include "test_util.h"
#include "vk_util.h"

namespace es {
namespace {

using vk::Knob;
using vk::KnobSource;
using vk::KnobType;
using vk::Tuning;
using vk::TuningTable;

// The message of the es::Error that fn throws ("" when it throws none).
template <class Fn>
std::string ErrorOf(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(VulkanTuning, TableIsInEnumOrderWithUniqueEnvNames) {
  std::set<std::string> names;
  for (int i = 0; i < vk::kKnobCount; ++i) {
    const vk::KnobSpec& s = TuningTable()[size_t(i)];
    EXPECT_EQ(int(s.id), i) << s.name;
    EXPECT_EQ(std::string(s.name).rfind("ES_VK_", 0), 0u) << s.name;
    EXPECT_TRUE(names.insert(s.name).second) << "twice: " << s.name;
    EXPECT_GT(std::string(s.doc).size(), 10u) << s.name;
  }
  for (const vk::RetiredKnob& r : vk::RetiredKnobs())
    EXPECT_EQ(names.count(r.name), 0u) << r.name << " is both a knob and retired";
}

TEST(VulkanTuning, EveryKnobParsesItsDefault) {
  const Tuning fresh;
  for (const vk::KnobSpec& s : TuningTable()) {
    EXPECT_EQ(fresh.Text(s.id), s.def) << s.name;
    EXPECT_EQ(fresh.source(s.id), KnobSource::kDefault) << s.name;
    Tuning t;
    EXPECT_EQ(ErrorOf([&] { t.Set(s.name, s.def); }), "") << s.name;
    EXPECT_EQ(t.source(s.id), KnobSource::kStruct) << s.name;
    EXPECT_EQ(t.Text(s.id), s.def) << s.name;
  }
  // Typed reads of a few defaults.
  EXPECT_EQ(fresh.Uint(Knob::kGemvTpr), 128u);
  EXPECT_TRUE(fresh.On(Knob::kFuse));
  EXPECT_TRUE(fresh.IsAuto(Knob::kGemvIdot));
  EXPECT_EQ(fresh.Tile(Knob::kCm2Tile), (std::array<uint32_t, 3>{128, 128, 64}));
}

TEST(VulkanTuning, EveryKnobRejectsABadValueNamingItAndWhatItAllows) {
  for (const vk::KnobSpec& s : TuningTable()) {
    if (s.type == KnobType::kText) continue;  // paths: any text
    for (const char* bad : {"x1", "-1", "1x", " 1", "4294967296"}) {
      Tuning t;
      const std::string e = ErrorOf([&] { t.Set(s.name, bad); });
      EXPECT_NE(e.find(std::string(s.name) + "='" + bad + "'"), std::string::npos)
          << s.name << "=" << bad << ": " << e;
      EXPECT_NE(e.find(s.allowed), std::string::npos) << e;
      EXPECT_EQ(t.Text(s.id), s.def) << s.name << ": changed by a bad value";
    }
  }
  // Numbers outside a list or a range, a tile of the wrong shape, a bool other than 0/1.
  Tuning t;
  for (const auto& [k, v] :
       std::initializer_list<std::pair<Knob, const char*>>{{Knob::kGemvQr, "3"},
                                                           {Knob::kAttnSplits, "128"},
                                                           {Knob::kSpinUs, "10000001"},
                                                           {Knob::kCm2Tile, "128x128"},
                                                           {Knob::kCm2Tile, "128x128x64x1"},
                                                           {Knob::kCm2Tile, "0x8x8"},
                                                           {Knob::kFuse, "2"},
                                                           {Knob::kCoopmat, "nv"},
                                                           {Knob::kGemvIdot, "2"}})
    EXPECT_NE(ErrorOf([&] { t.Set(k, v); }), "") << vk::Spec(k).name << "=" << v;
  EXPECT_EQ(ErrorOf([&] { t.Set(Knob::kSpinUs, "10000000"); }), "");
  EXPECT_EQ(t.Uint(Knob::kSpinUs), 10000000u);
  EXPECT_NE(
      ErrorOf([&] { t.Set("ES_VK_NO_SUCH", "1"); }).find("no tuning knob named ES_VK_NO_SUCH"),
      std::string::npos);
  EXPECT_NE(ErrorOf([&] { t.Set("ES_VK_CM2_FAST", "1"); }).find("no longer a knob"),
            std::string::npos);
}

// The one place the environment is read: parsed once, each value marked as from it, a bad one an
// error naming it; a value set on the struct wins.
TEST(VulkanTuning, EnvironmentIsParsedOnceAndTheStructWins) {
  setenv("ES_VK_GEMV_TPR", "32", 1);
  setenv("ES_VK_ATTN_CHUNK", "", 1);  // empty: unset
  const Tuning env = Tuning::FromEnvironment();
  EXPECT_EQ(env.Uint(Knob::kGemvTpr), 32u);
  EXPECT_EQ(env.source(Knob::kGemvTpr), KnobSource::kEnv);
  EXPECT_EQ(env.source(Knob::kAttnChunk), KnobSource::kDefault);
  Tuning over;
  over.Set(Knob::kGemvTpr, "64").Set(Knob::kFuse, "0");
  const Tuning both = env.With(over);
  EXPECT_EQ(both.Uint(Knob::kGemvTpr), 64u);
  EXPECT_EQ(both.source(Knob::kGemvTpr), KnobSource::kStruct);
  EXPECT_FALSE(both.On(Knob::kFuse));
  EXPECT_EQ(both.source(Knob::kAttnChunk), KnobSource::kDefault);
  setenv("ES_VK_GEMV_TPR", "33", 1);
  EXPECT_NE(ErrorOf([] { Tuning::FromEnvironment(); }).find("ES_VK_GEMV_TPR='33'"),
            std::string::npos);
  unsetenv("ES_VK_GEMV_TPR");
  unsetenv("ES_VK_ATTN_CHUNK");
}

// A running backend takes new graph-build knobs (its next program records with them), not those
// read when its device was created.
class VulkanTuningBackend : public test::VulkanTest {};

TEST_F(VulkanTuningBackend, RetuneTakesGraphKnobsOnly) {
  vk::VulkanBackend& be = test::SharedVulkan();
  Tuning t = be.tuning();
  t.Set(Knob::kCm2, be.tuning().On(Knob::kCm2) ? "0" : "1");
  const std::string e = ErrorOf([&] { be.Retune(t); });
  EXPECT_NE(e.find("ES_VK_CM2 is read when the device is created"), std::string::npos) << e;
  {
    test::ScopedKnobs knobs(be, {{"ES_VK_ATTN_SPLITS", "8"}});
    EXPECT_EQ(be.tuning().Uint(Knob::kAttnSplits), 8u);
    EXPECT_EQ(be.tuning().source(Knob::kAttnSplits), KnobSource::kStruct);
  }
  EXPECT_EQ(be.tuning().Uint(Knob::kAttnSplits), 32u);
}

int Devices(const std::string& args, std::string* out, std::string* err) {
  return test::RunCommand(test::CliPath() + " devices " + args, out, err);
}

TEST(VulkanTuningCli, DevicesTuningPrintsEveryKnobWithValueDefaultAndSource) {
  std::string out, err;
  ASSERT_EQ(
      test::RunCommand("ES_VK_GEMV_QR=8 " + test::CliPath() + " devices --tuning", &out, &err), 0)
      << err;
  for (const vk::KnobSpec& s : TuningTable())
    EXPECT_NE(out.find(std::string(s.name) + " "), std::string::npos) << s.name << "\n" << out;
  const size_t qr = out.find("ES_VK_GEMV_QR ");
  ASSERT_NE(qr, std::string::npos);
  const std::string line = out.substr(qr, out.find('\n', qr) - qr);
  EXPECT_NE(line.find(" 8 "), std::string::npos) << line;
  EXPECT_NE(line.find(" env "), std::string::npos) << line;
  const size_t tpr = out.find("ES_VK_GEMV_TPR ");
  EXPECT_NE(out.substr(tpr, out.find('\n', tpr) - tpr).find(" default "), std::string::npos) << out;
  // A bad value: one line naming it, non-zero exit.
  EXPECT_NE(
      test::RunCommand("ES_VK_GEMV_QR=3 " + test::CliPath() + " devices --tuning", &out, &err), 0);
  EXPECT_NE(err.find("ES_VK_GEMV_QR='3'"), std::string::npos) << err;
  EXPECT_NE(Devices("--markdown", &out, &err), 0);
  EXPECT_NE(err.find("--markdown goes with --tuning"), std::string::npos) << err;
}

// docs/vulkan.md's knob table is the generated one, between its markers (regenerate with
// `edgeseek devices --tuning --markdown`).
TEST(VulkanTuningCli, DocsTableIsTheGeneratedOne) {
  std::string out, err;
  ASSERT_EQ(Devices("--tuning --markdown", &out, &err), 0) << err;
  EXPECT_EQ(out, vk::TuningMarkdown());
  const std::string doc = test::ReadFile(test::SourceDir() + "/docs/vulkan.md");
  const std::string begin = "<!-- tuning table: `edgeseek devices --tuning --markdown` -->\n",
                    end = "<!-- end of tuning table -->";
  const size_t b = doc.find(begin), e = doc.find(end);
  ASSERT_NE(b, std::string::npos) << "docs/vulkan.md has no " << begin;
  ASSERT_NE(e, std::string::npos) << "docs/vulkan.md has no " << end;
  EXPECT_EQ(doc.substr(b + begin.size(), e - b - begin.size()), out)
      << "docs/vulkan.md's tuning table is stale: regenerate it with `edgeseek devices --tuning "
         "--markdown`";
}

}  // namespace
}  // namespace es
