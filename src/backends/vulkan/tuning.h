// The tuning registry of the Vulkan backend: one table of every knob (environment name, type,
// allowed values, default, when it is read, one-line doc), parsed once into a Tuning that the
// backend owns and passes down (Device::tuning(); the ops reach it through OpContext::dev).
// Nothing else in the backend reads the environment. Tests and embedders set knobs on the
// struct (Tuning::Set) instead of the environment; `edgeseek devices --tuning` prints the
// effective values and `--markdown` the table of docs/vulkan.md.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace es::vk {

// Every knob; the order is the table's (TuningTable()).
enum class Knob : int {
  // process: read from the environment when the loader / instance is first needed
  kLoader,
  kValidation,
  // device creation
  kCacheDir,
  kPipelineStats,
  kCoopmat,
  kSharedBlock,
  kCm2,
  kCm2Tile,
  kCm2Wg,
  kCm2X32,
  kCm2Swap,
  kCm2Splitk,
  kCm2SplitkMinK,
  kCm2Sms,
  kFaCm2,
  kF16Act,
  // graph build (a program is recorded)
  kSpinUs,
  kFuse,
  kGemmBm,
  kGemmSplitk,
  kCm2Quant,
  kDecGemm,
  kGemvTpr,
  kGemvQr,
  kGemvSpl,
  kGemvMagic,
  kGemvIdot,
  kGemvIdotQ4K,
  kGemvIdotQ6K,
  kGemvIdotTpr,
  kGemvIdotQr,
  kGemvIdotWg,
  kGemvIdotUnroll,
  kGemvIdotLocal,
  kGemvMinGroups,
  kGemvDualQuant,
  kMoeRouteFuse,
  kAttnDecode,
  kAttnFuse,
  kAttnQuant,
  kAttnSplits,
  kAttnChunk,
  kMlaRowsHeads,
  kMlaRowsSplits,
  kCount
};
constexpr int kKnobCount = int(Knob::kCount);

enum class KnobType { kBool, kUint, kEnum, kTile, kText };
enum class KnobWhen { kProcess, kDevice, kGraph };
enum class KnobSource { kDefault, kEnv, kStruct };
// kOperational: deployment and debugging; kPath: forces a code path (tests on lavapipe, the A/B
// of a fallback), its default measured where the doc says; kExperiment: an A/B still open (the
// doc says why). Knobs whose A/B was settled are gone (RetiredKnobs).
enum class KnobRole { kOperational, kPath, kExperiment };

struct KnobSpec {
  Knob id;
  const char* name;  // environment variable
  KnobType type;
  // kBool: "0|1"; kUint: a '|' list ("4|8|16") or a range "lo..hi"; kEnum: a '|' list of words;
  // kTile: "BMxBNxBK" (three numbers); kText: any text.
  const char* allowed;
  const char* def;  // as text; "auto" where the code decides per device or type
  KnobWhen when;
  KnobRole role;
  const char* doc;
};
const std::array<KnobSpec, kKnobCount>& TuningTable();
const KnobSpec& Spec(Knob k);
const char* KnobTypeName(KnobType t);
const char* KnobWhenName(KnobWhen w);
const char* KnobSourceName(KnobSource s);
const char* KnobRoleName(KnobRole r);

class Tuning {
 public:
  Tuning();  // every knob at its default
  // Defaults overridden by every knob set (non-empty) in the environment; a bad value throws
  // es::Error naming the variable and its allowed values.
  static Tuning FromEnvironment();
  // The process-wide FromEnvironment(), parsed on first use (the loader and instance knobs).
  static const Tuning& Process();

  // Sets a knob (source kStruct); throws es::Error naming it and its allowed values when `value`
  // is not one of them, or, by name, when there is no such knob.
  Tuning& Set(Knob k, const std::string& value);
  Tuning& Set(const std::string& name, const std::string& value);
  // This, with every knob that `over` has set explicitly (source kStruct) taken from it.
  Tuning With(const Tuning& over) const;

  bool On(Knob k) const;                       // kBool
  uint32_t Uint(Knob k) const;                 // kUint (not "auto")
  bool IsAuto(Knob k) const;                   // the value is "auto"
  const std::string& Text(Knob k) const;       // any type, as written
  std::array<uint32_t, 3> Tile(Knob k) const;  // kTile
  KnobSource source(Knob k) const { return v_[size_t(k)].source; }

 private:
  struct Value {
    std::string text;
    std::array<uint32_t, 3> num{};
    KnobSource source = KnobSource::kDefault;
  };
  static Value Parse(const KnobSpec& s, const std::string& value);  // throws on a bad value
  std::array<Value, kKnobCount> v_;
};

// Knobs that were settled and removed: the name and the measurement that settled it. Setting one
// in the environment prints a warning naming it (FromEnvironment); Set throws.
struct RetiredKnob {
  const char* name;
  const char* settled;
};
const std::vector<RetiredKnob>& RetiredKnobs();

// The effective values as a table (name, value, default, source, when), one knob a line.
std::string TuningReport(const Tuning& t);
// The registry as a Markdown table (docs/vulkan.md, between its "tuning table" markers).
std::string TuningMarkdown();

// For `edgeseek devices --tuning`: the knobs a backend created now would take (TuningReport of
// the environment's), or with `markdown` the registry's table (TuningMarkdown). Declared weak
// like edgeseek/internal/backends/vulkan.h's functions: null in a build without the Vulkan backend.
__attribute__((weak)) std::string TuningText(bool markdown);

}  // namespace es::vk
