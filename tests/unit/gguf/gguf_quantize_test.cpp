// QuantizeGguf and the `quantize` verb on a hand-made tiny qwen2-like GGUF: output types by
// policy, dequantized values against the source, metadata updates, determinism across runs
// and thread counts, verbatim copies, and one-line errors for bad input.
#include "edgeseek/internal/formats/gguf_quantize.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/core/half.h"
#include "edgeseek/internal/formats/gguf.h"
#include "edgeseek/internal/quant/blocks.h"
#include "test_util.h"

namespace es {
namespace {

struct Src {
  std::string name;
  DType type;
  Shape shape;
};

const std::vector<Src>& Tensors() {
  static const std::vector<Src> t = {
      {"token_embd.weight", DType::kF32, {32, 256}},
      {"blk.0.attn_norm.weight", DType::kF32, {256}},
      {"blk.0.attn_q.weight", DType::kF16, {64, 256}},
      {"blk.0.attn_v.weight", DType::kBF16, {32, 256}},
      {"blk.0.ffn_down.weight", DType::kF32, {256, 96}},
      {"blk.0.ffn_gate_inp.weight", DType::kF32, {8, 256}},
      {"output.weight", DType::kQ8_0, {32, 256}},
      {"ids", DType::kI32, {4}},
  };
  return t;
}

// Source values (f32) per tensor, for comparing after dequantization.
std::vector<std::vector<float>> g_values;

std::string MakeInput(const std::string& dir, bool with_nan = false) {
  const std::string path = dir + "/in.gguf";
  GgufWriter w;
  w.Set("general.architecture", GgufValue::Str("qwen2"));
  w.Set("general.file_type", GgufValue::U32(0));
  w.Set("qwen2.block_count", GgufValue::U32(1));
  w.Set("tokenizer.ggml.tokens", GgufValue::StrArray({"a", "b"}));
  std::vector<std::vector<uint8_t>> bytes;
  g_values.clear();
  uint64_t seed = 1;
  for (const Src& s : Tensors()) {
    const int64_t n = NumElements(s.shape);
    std::vector<float> v = test::RandomFloats(size_t(n), seed++, 0.5f);
    if (with_nan && s.name == "blk.0.attn_q.weight") v[size_t(3 * 256 + 5)] = NAN;
    std::vector<uint8_t> b(RowBytes(s.type, s.shape.back()) * size_t(n / s.shape.back()));
    if (s.type == DType::kI32) {
      for (int64_t i = 0; i < n; ++i) reinterpret_cast<int32_t*>(b.data())[i] = int32_t(i * 7);
    } else {
      for (int64_t r = 0; r < n / s.shape.back(); ++r) {
        const int64_t c = s.shape.back();
        if (s.type == DType::kF16) {
          for (int64_t i = 0; i < c; ++i)
            reinterpret_cast<uint16_t*>(b.data())[r * c + i] = F32ToF16(v[size_t(r * c + i)]);
        } else {
          Quantize(s.type, v.data() + r * c, b.data() + size_t(r) * RowBytes(s.type, c), c);
        }
      }
      Dequantize(s.type, b.data(), v.data(), n);  // the values the file really holds
    }
    g_values.push_back(v);
    bytes.push_back(std::move(b));
    w.AddTensor(s.name, s.type, s.shape, bytes.back().data());
  }
  w.WriteFile(path);
  return path;
}

std::vector<float> Values(const GgufFile& f, const std::string& name) {
  const Tensor t = f.GetTensor(name);
  std::vector<float> v(static_cast<size_t>(t.numel()));
  Dequantize(t.dtype, t.data, v.data(), t.numel());
  return v;
}

TEST(GgufQuantize, Q4KMTypesValuesAndMetadata) {
  const std::string dir = test::TempDir();
  const std::string in = MakeInput(dir);
  std::vector<std::pair<uint64_t, uint64_t>> progress;
  GgufQuantizeOptions opt;
  opt.threads = 2;
  opt.progress = [&](uint64_t done, uint64_t total, const std::string&) {
    progress.emplace_back(done, total);
  };
  const auto st = QuantizeGguf(in, dir + "/out.gguf", BuiltinQuantPolicy("q4_k_m"), opt);
  EXPECT_EQ(st.tensors, Tensors().size());
  EXPECT_EQ(st.copied, 3u);  // attn_norm (F32), ffn_gate_inp (F32), ids (I32)
  EXPECT_EQ(st.requantized, 5u);
  ASSERT_EQ(progress.size(), Tensors().size());
  EXPECT_EQ(progress.back().first, progress.back().second);

  const auto f = GgufFile::Open(dir + "/out.gguf");
  EXPECT_EQ(f->GetU32("general.file_type"), 15u);
  EXPECT_EQ(f->GetU32("general.quantization_version"), 2u);
  EXPECT_EQ(f->GetString("general.architecture"), "qwen2");
  EXPECT_EQ(f->GetStringArray("tokenizer.ggml.tokens")[1], "b");
  EXPECT_EQ(f->GetU32("qwen2.block_count"), 1u);
  const std::pair<const char*, DType> want[] = {
      {"token_embd.weight", DType::kQ6_K},
      {"blk.0.attn_norm.weight", DType::kF32},
      {"blk.0.attn_q.weight", DType::kQ4_K},
      {"blk.0.attn_v.weight", DType::kQ6_K},
      {"blk.0.ffn_down.weight", DType::kQ5_1},  // q5_k rule, 96-wide rows fall back
      {"blk.0.ffn_gate_inp.weight", DType::kF32},
      {"output.weight", DType::kQ6_K},
      {"ids", DType::kI32}};
  for (const auto& [name, type] : want) EXPECT_EQ(f->FindTensor(name)->dtype, type) << name;
  // Dequantized values against the source, with each type's round-trip bound (blocks_test).
  const double tol[] = {0.03, 0.0, 0.10, 0.03, 0.06, 0.0, 0.03};
  for (size_t i = 0; i + 1 < Tensors().size(); ++i) {
    const double err = test::RelL2(Values(*f, Tensors()[i].name), g_values[i]);
    EXPECT_LE(err, tol[i]) << Tensors()[i].name;
  }
  EXPECT_EQ(f->GetTensor("ids").as<int32_t>()[3], 21);
  EXPECT_EQ(f->FindTensor("blk.0.attn_q.weight")->shape, (Shape{64, 256}));
}

TEST(GgufQuantize, DeterministicAcrossRunsAndThreads) {
  const std::string dir = test::TempDir();
  const std::string in = MakeInput(dir);
  for (const char* preset : {"q4_k_m", "q4_0", "i4g"}) {
    GgufQuantizeOptions one, three;
    one.threads = 1;
    three.threads = 3;
    QuantizeGguf(in, dir + "/a.gguf", BuiltinQuantPolicy(preset), one);
    QuantizeGguf(in, dir + "/b.gguf", BuiltinQuantPolicy(preset), three);
    QuantizeGguf(in, dir + "/c.gguf", BuiltinQuantPolicy(preset), three);
    const std::string a = test::ReadFile(dir + "/a.gguf");
    EXPECT_FALSE(a.empty());
    EXPECT_EQ(a, test::ReadFile(dir + "/b.gguf")) << preset;
    EXPECT_EQ(a, test::ReadFile(dir + "/c.gguf")) << preset;
  }
}

TEST(GgufQuantize, UnchangedTensorsAreCopiedVerbatim) {
  const std::string dir = test::TempDir();
  const std::string in = MakeInput(dir);
  QuantizeGguf(in, dir + "/q8.gguf", BuiltinQuantPolicy("q8_0"));
  const auto src = GgufFile::Open(in);
  const auto out = GgufFile::Open(dir + "/q8.gguf");
  const Tensor a = src->GetTensor("output.weight"), b = out->GetTensor("output.weight");
  ASSERT_EQ(b.dtype, DType::kQ8_0);
  ASSERT_EQ(a.nbytes, b.nbytes);
  EXPECT_EQ(std::memcmp(a.data, b.data, a.nbytes), 0);
  EXPECT_EQ(out->GetU32("general.file_type"), 7u);
}

TEST(GgufQuantize, I4GFilesRoundTrip) {
  const std::string dir = test::TempDir();
  const std::string in = MakeInput(dir);
  QuantizeGguf(in, dir + "/i4g.gguf", BuiltinQuantPolicy("i4g"));
  const auto f = GgufFile::Open(dir + "/i4g.gguf");
  EXPECT_EQ(f->FindTensor("blk.0.attn_q.weight")->dtype, DType::kI4G);
  EXPECT_EQ(f->FindTensor("blk.0.attn_q.weight")->ggml_type, kGgmlTypeI4G);
  EXPECT_EQ(f->FindTensor("token_embd.weight")->dtype, DType::kQ8_0);
  EXPECT_FALSE(f->Has("general.file_type"));  // no llama.cpp file type describes i4g
  EXPECT_LE(test::RelL2(Values(*f, "blk.0.attn_q.weight"), g_values[2]), 0.09);
  // Requantizing an i4g file (dequantize i4g -> quantize) works too.
  QuantizeGguf(dir + "/i4g.gguf", dir + "/back.gguf", BuiltinQuantPolicy("q8_0"));
  EXPECT_EQ(GgufFile::Open(dir + "/back.gguf")->FindTensor("blk.0.attn_q.weight")->dtype,
            DType::kQ8_0);
}

TEST(GgufQuantize, NonFiniteWeightIsAnErrorAndLeavesNoFile) {
  const std::string dir = test::TempDir();
  const std::string in = MakeInput(dir, /*with_nan=*/true);
  try {
    QuantizeGguf(in, dir + "/out.gguf", BuiltinQuantPolicy("q4_0"));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find(
            "tensor blk.0.attn_q.weight row 3: cannot quantize to q4_0: element 5 is not finite"),
        std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(dir + "/out.gguf"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/out.gguf.tmp"));
}

TEST(QuantizeVerb, WritesFileAndOneSummaryLine) {
  const std::string dir = test::TempDir();
  const std::string in = MakeInput(dir);
  std::string out, err;
  const int rc = test::RunCommand(
      test::CliPath() + " quantize " + in + " " + dir + "/v.gguf --type q4_0 -t 2", &out, &err);
  ASSERT_EQ(rc, 0) << err;
  EXPECT_EQ(err.find('\r'), std::string::npos) << "no progress bar when stderr is not a terminal";
  EXPECT_NE(err.find("quantized " + in), std::string::npos) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  const auto f = GgufFile::Open(dir + "/v.gguf");
  EXPECT_EQ(f->FindTensor("blk.0.attn_q.weight")->dtype, DType::kQ4_0);
  EXPECT_EQ(f->FindTensor("blk.0.attn_v.weight")->dtype, DType::kQ8_0);
  EXPECT_EQ(f->GetU32("general.file_type"), 2u);

  // --policy with a config file gives the same bytes as the preset of the same name.
  ASSERT_EQ(test::RunCommand(test::CliPath() + " quantize " + in + " " + dir + "/p.gguf --policy " +
                                 test::SourceDir() + "/configs/quant/q4_0.json",
                             &out, &err),
            0)
      << err;
  EXPECT_EQ(test::ReadFile(dir + "/v.gguf"), test::ReadFile(dir + "/p.gguf"));
}

TEST(GgufDumpVerb, PrintsMetadataAndTensors) {
  const std::string dir = test::TempDir();
  const std::string in = MakeInput(dir);
  std::string out, err;
  ASSERT_EQ(test::RunCommand(test::CliPath() + " gguf-dump " + in, &out, &err), 0) << err;
  EXPECT_NE(out.find("GGUF v3, 4 metadata keys, 8 tensors, alignment 32"), std::string::npos)
      << out;
  EXPECT_NE(out.find("qwen2.block_count"), std::string::npos) << out;
  EXPECT_NE(out.find("array<string>[2]"), std::string::npos) << out;
  EXPECT_NE(out.find("blk.0.attn_q.weight"), std::string::npos) << out;
  EXPECT_NE(out.find("[64, 256]"), std::string::npos) << out;
  test::WriteFile(dir + "/junk.gguf", "GGUFjunk");
  EXPECT_EQ(test::RunCommand(test::CliPath() + " gguf-dump " + dir + "/junk.gguf", &out, &err), 1);
  EXPECT_EQ(err.rfind("edgeseek: error: ", 0), 0u) << err;
}

TEST(QuantizeVerb, BadInputGivesOneErrorLine) {
  const std::string dir = test::TempDir();
  const std::string in = MakeInput(dir);
  const std::string bytes = test::ReadFile(in);
  test::WriteFile(dir + "/cut.gguf", bytes.substr(0, bytes.size() / 2));
  const std::pair<std::string, std::string> cases[] = {
      {dir + "/cut.gguf " + dir + "/o.gguf --type q8_0", "runs past the end of the file"},
      {in + " " + dir + "/o.gguf --type q3_k", "unknown quantization type 'q3_k'"},
      {dir + "/missing.gguf " + dir + "/o.gguf --type q8_0", "cannot open"},
      {in + " " + dir + "/o.gguf --policy " + dir + "/nope.json", "cannot open policy file"},
      {in + " " + dir + "/o.gguf", "give --type or --policy"},
  };
  for (const auto& [args, needle] : cases) {
    std::string out, err;
    EXPECT_EQ(test::RunCommand(test::CliPath() + " quantize " + args, &out, &err), 1) << args;
    EXPECT_EQ(err.rfind("edgeseek: error: ", 0), 0u) << err;
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
    EXPECT_NE(err.find(needle), std::string::npos) << err;
  }
  EXPECT_FALSE(std::filesystem::exists(dir + "/o.gguf"));
}

}  // namespace
}  // namespace es
