// ONNX import end to end: tiny golden checkpoints written as ONNX (onnx_writer_util.h) in the
// ORT-GenAI builder style and the decomposed torch.onnx style, imported, and run against the
// same checkpoint loaded from its Hugging Face folder — same IR, so f32 logits agree to 1e-4
// (in fact exactly), int4 (MatMulNBits of Q4_0 rows) exactly against the folder quantized to
// Q4_0 at load. Error cases: an unsupported op or pattern names the node; a truncated or corrupt
// file is one clear error.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>

#include "edgeseek/internal/backends/backend.h"
#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/formats/onnx.h"
#include "edgeseek/internal/formats/quant_policy.h"
#include "edgeseek/internal/formats/safetensors.h"
#include "edgeseek/internal/models/arch.h"
#include "edgeseek/internal/models/config.h"
#include "edgeseek/internal/runtime/convert.h"
#include "edgeseek/internal/runtime/model.h"
#include "edgeseek/internal/runtime/runner.h"
#include "onnx_logits_util.h"
#include "onnx_writer_util.h"
#include "test_util.h"

namespace es::test {
namespace {

namespace fs = std::filesystem;

std::string Golden(const std::string& v) { return SourceDir() + "/tests/golden/data/models/" + v; }

// Logits of a prefill of `ids` (every row) and of one decode step after it.
std::vector<float> Logits(const std::shared_ptr<Model>& m, const std::vector<int32_t>& ids,
                          const std::string& backend = "cpu") {
  return PrefillThenStepLogits(m, ids, backend);
}

std::vector<int32_t> Ids(const Model& m) {
  std::vector<int32_t> ids;
  for (int i = 0; i < 9; ++i) ids.push_back(int32_t((1 + 37 * i) % m.vocab_size()));
  return ids;
}

double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    d = std::max(d, double(std::fabs(a[i] - b[i])));
  return d;
}

std::shared_ptr<Model> LoadQuantized(const std::string& dir, DType t) {
  LoadOptions lo;
  auto p = std::make_shared<QuantPolicy>();
  p->name = "test";
  p->default_type = t;
  lo.quantize = p;
  return Model::Load(dir, lo);
}

std::string StyleName(OnnxStyle s) {
  return s == OnnxStyle::kGenAi ? "_genai" : s == OnnxStyle::kTorch ? "_torch" : "_dynamo";
}

struct Case {
  std::string variant;
  OnnxStyle style;
};

class OnnxImport : public ::testing::TestWithParam<Case> {};

TEST_P(OnnxImport, F32LogitsEqualTheFolder) {
  const Case& c = GetParam();
  const std::string dir = TempDir() + "/onnx";
  OnnxWriteOptions o;
  o.style = c.style;
  WriteOnnxFromHf(Golden(c.variant), dir, o);
  const auto ref = Model::Load(Golden(c.variant));
  const auto m = Model::Load(dir + "/model.onnx");
  EXPECT_EQ(m->config().n_layers, ref->config().n_layers);
  EXPECT_EQ(m->config().n_kv_heads, ref->config().n_kv_heads);
  EXPECT_EQ(m->config().tie_word_embeddings, ref->config().tie_word_embeddings);
  EXPECT_LE(MaxAbsDiff(Logits(m, Ids(*ref)), Logits(ref, Ids(*ref))), 1e-4);
  EXPECT_FALSE(m->import_notes().empty());
}

TEST_P(OnnxImport, Int4MatMulNBitsEqualsQ4_0AtLoad) {
  const Case& c = GetParam();
  const std::string dir = TempDir() + "/onnx";
  OnnxWriteOptions o;
  o.style = c.style;
  o.int4 = true;
  WriteOnnxFromHf(Golden(c.variant), dir, o);
  const auto ref = LoadQuantized(Golden(c.variant), DType::kQ4_0);
  const auto m = Model::Load(dir);
  for (const Tensor* t : m->weights()) {
    if (t->name.find("q_proj.weight") != std::string::npos) {
      EXPECT_EQ(t->dtype, DType::kQ4_0) << t->name;
    }
  }
  EXPECT_EQ(MaxAbsDiff(Logits(m, Ids(*ref)), Logits(ref, Ids(*ref))), 0.0);
}

INSTANTIATE_TEST_SUITE_P(
    , OnnxImport,
    ::testing::Values(Case{"qwen2_tied", OnnxStyle::kGenAi}, Case{"qwen2_tied", OnnxStyle::kTorch},
                      Case{"qwen2_tied", OnnxStyle::kDynamo}, Case{"llama3_f32", OnnxStyle::kGenAi},
                      Case{"llama3_f32", OnnxStyle::kTorch}, Case{"llama3_f32", OnnxStyle::kDynamo},
                      // 5 query heads on 1 kv head, hidden 160, 3 layers
                      Case{"qwen2_sharded", OnnxStyle::kDynamo}),
    [](const auto& i) { return i.param.variant + StyleName(i.param.style); });

// bf16 checkpoints (their values written as f32): GQA 6:1 with head_dim 128, and llama3 rope
// scaling (per-frequency factors recovered from the cos/sin cache or the inv_freq constant).
TEST(OnnxImportBf16, RealDimAndLlama3RopeMatchTheFolder) {
  for (const std::string v : {"qwen2_realdim", "llama3"}) {
    for (OnnxStyle s : {OnnxStyle::kGenAi, OnnxStyle::kTorch, OnnxStyle::kDynamo}) {
      const std::string dir = TempDir() + "/" + v + StyleName(s);
      OnnxWriteOptions o;
      o.style = s;
      WriteOnnxFromHf(Golden(v), dir, o);
      const auto ref = Model::Load(Golden(v));
      const auto m = Model::Load(dir);
      const std::vector<float> a = Logits(m, Ids(*ref)), b = Logits(ref, Ids(*ref));
      double mx = 0;
      for (float x : b) mx = std::max(mx, double(std::fabs(x)));
      EXPECT_LE(MaxAbsDiff(a, b), 1e-4 * std::max(1.0, mx)) << dir;
    }
  }
}

TEST(OnnxImportVariants, ExternalDataRotaryNodesPackedQkvZeroPointsF16) {
  const auto ref = Model::Load(Golden("llama3_f32"));
  const std::vector<float> want = Logits(ref, Ids(*ref));
  {
    OnnxWriteOptions o;
    o.external_data = true;
    const std::string dir = TempDir() + "/ext";
    WriteOnnxFromHf(Golden("llama3_f32"), dir, o);
    ASSERT_TRUE(fs::exists(dir + "/model.onnx.data"));
    EXPECT_LE(MaxAbsDiff(Logits(Model::Load(dir), Ids(*ref)), want), 1e-4);
  }
  {
    OnnxWriteOptions o;
    o.rotary_nodes = true;
    const std::string dir = TempDir() + "/rotary";
    WriteOnnxFromHf(Golden("llama3_f32"), dir, o);
    EXPECT_LE(MaxAbsDiff(Logits(Model::Load(dir), Ids(*ref)), want), 1e-4);
  }
  {
    OnnxWriteOptions o;
    o.packed_qkv = true;
    const std::string dir = TempDir() + "/packed";
    WriteOnnxFromHf(Golden("qwen2_tied"), dir, o);
    const auto r2 = Model::Load(Golden("qwen2_tied"));
    EXPECT_LE(MaxAbsDiff(Logits(Model::Load(dir), Ids(*r2)), Logits(r2, Ids(*r2))), 1e-4);
  }
  {
    OnnxWriteOptions o;
    o.int4 = true;
    o.explicit_zero_points = true;
    const std::string dir = TempDir() + "/zp";
    WriteOnnxFromHf(Golden("llama3_f32"), dir, o);
    const auto q = LoadQuantized(Golden("llama3_f32"), DType::kQ4_0);
    EXPECT_EQ(MaxAbsDiff(Logits(Model::Load(dir), Ids(*ref)), Logits(q, Ids(*ref))), 0.0);
  }
  {
    OnnxWriteOptions o;
    o.f16 = true;
    const std::string dir = TempDir() + "/f16";
    WriteOnnxFromHf(Golden("llama3_f32"), dir, o);
    const auto h = LoadQuantized(Golden("llama3_f32"), DType::kF16);
    const auto m = Model::Load(dir);
    for (const Tensor* t : m->weights()) {
      if (t->name.find("up_proj") != std::string::npos) {
        EXPECT_EQ(t->dtype, DType::kF16);
      }
    }
    EXPECT_LE(MaxAbsDiff(Logits(m, Ids(*ref)), Logits(h, Ids(*ref))), 1e-4);
  }
}

TEST(OnnxImportVariants, GatherBlockQuantizedEqualsItsDequantizedTwin) {
  OnnxWriteOptions a, b;
  a.int4_embedding = true;
  b.dequantized_embedding = true;
  const std::string da = TempDir() + "/gbq", db = TempDir() + "/deq";
  WriteOnnxFromHf(Golden("llama3_f32"), da, a);
  WriteOnnxFromHf(Golden("llama3_f32"), db, b);
  const auto ma = Model::Load(da), mb = Model::Load(db);
  EXPECT_EQ(ma->arch().embedding()->dtype, DType::kQ4_0);
  EXPECT_LE(MaxAbsDiff(Logits(ma, Ids(*mb)), Logits(mb, Ids(*mb))), 1e-5);
}

// raw_data lies wherever the protobuf put it: a float read through such a view is undefined
// behaviour, so the reader copies a misaligned view into aligned memory, values unchanged.
TEST(OnnxReader, MisalignedInitializersAreCopiedAligned) {
  const std::string dir = TempDir() + "/align";
  OnnxWriteOptions o;
  o.style = OnnxStyle::kDynamo;
  o.f16 = true;
  WriteOnnxFromHf(Golden("llama3_f32"), dir, o);
  OnnxModelInfo info;
  const OpGraph g = ReadOnnx(dir + "/model.onnx", &info);
  EXPECT_GT(info.aligned_copies, 0u);
  EXPECT_GT(info.aligned_copy_bytes, 0u);
  int checked = 0;
  for (const auto& [name, t] : g.constants) {
    const size_t es = t.dtype == DType::kF32 || t.dtype == DType::kI32 ? 4
                      : t.dtype == DType::kI8                          ? 1
                                                                       : 2;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data) % es, 0u) << name;
    ++checked;
  }
  EXPECT_GT(checked, 20);
  // Values unchanged: every layer's norm weight equals the checkpoint's.
  const auto st = SafetensorsSet::Open(Golden("llama3_f32"));
  for (const std::string n : {"model.layers.0.input_layernorm.weight", "model.norm.weight"}) {
    ASSERT_TRUE(g.Constant(n)) << n;
    EXPECT_EQ(ToF32(*g.Constant(n)), ToF32(st->Get(n))) << n;
  }
}

TEST(OnnxImportConfig, GenAiConfigAndFolderResolution) {
  const std::string dir = TempDir() + "/genai";
  WriteOnnxFromHf(Golden("llama3_f32"), dir, {});
  std::ofstream(dir + "/genai_config.json")
      << R"({"model": {"bos_token_id": 1, "eos_token_id": [2, 7], "context_length": 300,
             "decoder": {"filename": "model.onnx"}}})";
  const auto m = Model::Load(dir);
  EXPECT_EQ(m->generation().eos_ids, (std::vector<int32_t>{2, 7}));
  EXPECT_EQ(m->max_context(), 300);
  std::ofstream(dir + "/genai_config.json")
      << R"({"model": {"decoder": {"filename": "../x.onnx"}}})";
  EXPECT_THROW(Model::Load(dir), Error);
}

// The same IR on the Vulkan backend (lavapipe in CI): the imported model and the folder agree there
// too, f32 and int4.
TEST(OnnxImportVulkan, ImportedAndFolderAgreeOnVulkan) {
  if (!VulkanBackendBuilt()) GTEST_SKIP() << "built without the Vulkan backend";
  try {
    CreateBackend("vulkan", {});
  } catch (const std::exception& e) {
    GTEST_SKIP() << "no Vulkan device: " << e.what();
  }
  for (bool int4 : {false, true}) {
    OnnxWriteOptions o;
    o.style = OnnxStyle::kTorch;
    o.int4 = int4;
    const std::string dir = TempDir() + "/vk";
    WriteOnnxFromHf(Golden("llama3_f32"), dir, o);
    const auto ref = int4 ? LoadQuantized(Golden("llama3_f32"), DType::kQ4_0)
                          : Model::Load(Golden("llama3_f32"));
    const auto m = Model::Load(dir);
    EXPECT_LE(MaxAbsDiff(Logits(m, Ids(*ref), "vulkan"), Logits(ref, Ids(*ref), "vulkan")), 1e-4)
        << int4;
  }
}

// ---- errors ---------------------------------------------------------------------------------
std::string LoadError(const std::string& path) {
  try {
    Model::Load(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(OnnxImportErrors, UnsupportedOpNamesTheNode) {
  OnnxWriteOptions o;
  o.style = OnnxStyle::kTorch;
  o.replace_op = "Sigmoid";
  o.with_op = "Gelu";
  const std::string dir = TempDir() + "/gelu";
  WriteOnnxFromHf(Golden("qwen2_tied"), dir, o);
  const std::string e = LoadError(dir + "/model.onnx");
  EXPECT_NE(e.find("node '/Sigmoid_"), std::string::npos) << e;
  EXPECT_NE(e.find("op type 'Gelu'"), std::string::npos) << e;
  EXPECT_NE(e.find("domain 'ai.onnx'"), std::string::npos) << e;
  EXPECT_NE(e.find("not supported"), std::string::npos) << e;
}

TEST(OnnxImportErrors, UnsupportedPatternNamesTheNode) {
  OnnxWriteOptions o;
  o.style = OnnxStyle::kGenAi;
  o.replace_op = "Sigmoid";
  o.with_op = "Neg";  // a known op where SiLU's Sigmoid was: the MLP no longer fits
  const std::string dir = TempDir() + "/neg";
  WriteOnnxFromHf(Golden("qwen2_tied"), dir, o);
  const std::string e = LoadError(dir);
  EXPECT_NE(e.find("does not fit a Llama/Qwen2 decoder"), std::string::npos) << e;
  EXPECT_NE(e.find("node '"), std::string::npos) << e;
  EXPECT_NE(e.find("op type '"), std::string::npos) << e;
}

// The dynamo exporter's GatherND (the padding bits of the attention mask) is plumbing the lift
// looks past; one where the walk expects a lifted op is one error naming it.
TEST(OnnxImportErrors, GatherNdOutsideTheMaskNamesTheNode) {
  OnnxWriteOptions o;
  o.style = OnnxStyle::kDynamo;
  o.replace_op = "Gather";  // the token embedding: the first Gather of a dynamo-style graph
  o.with_op = "GatherND";
  const std::string dir = TempDir() + "/gathernd";
  WriteOnnxFromHf(Golden("llama3_f32"), dir, o);
  const std::string e = LoadError(dir + "/model.onnx");
  EXPECT_NE(e.find("node '/Gather_"), std::string::npos) << e;
  EXPECT_NE(e.find("op type 'GatherND', domain 'ai.onnx'"), std::string::npos) << e;
  EXPECT_NE(e.find("token embedding (Gather)"), std::string::npos) << e;
}

TEST(OnnxImportErrors, TruncatedAndCorruptFiles) {
  const std::string dir = TempDir() + "/trunc";
  WriteOnnxFromHf(Golden("qwen2_tied"), dir, {});
  const std::string bytes = ReadFile(dir + "/model.onnx");
  WriteFile(dir + "/model.onnx", bytes.substr(0, bytes.size() / 2));
  std::string e = LoadError(dir + "/model.onnx");
  EXPECT_NE(e.find("model.onnx"), std::string::npos) << e;
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
  WriteFile(dir + "/model.onnx", std::string(1000, '\xff'));
  e = LoadError(dir + "/model.onnx");
  EXPECT_NE(e.find("model.onnx"), std::string::npos) << e;
  EXPECT_TRUE(e.find("corrupt") != std::string::npos || e.find("truncated") != std::string::npos)
      << e;
  WriteFile(dir + "/model.onnx", "");
  EXPECT_NE(LoadError(dir + "/model.onnx").find("empty"), std::string::npos);
  // external data shorter than the tensors it names
  const std::string ext = TempDir() + "/ext_short";
  OnnxWriteOptions o;
  o.external_data = true;
  WriteOnnxFromHf(Golden("qwen2_tied"), ext, o);
  const std::string data = ReadFile(ext + "/model.onnx.data");
  WriteFile(ext + "/model.onnx.data", data.substr(0, data.size() - 100));
  e = LoadError(ext + "/model.onnx");
  EXPECT_NE(e.find("model.onnx.data"), std::string::npos) << e;
}

// Numbers written inside the file bound nothing by themselves (issue 23): an INT64 initializer
// claiming 2^35 elements over 8 bytes of raw data, a shape of more than 2^40 elements, and an
// external-data offset that is not a number are each one clear error naming the tensor, with no
// allocation of the claimed size (before, the first made a 256 GB vector and the last threw
// std::stoll's bare "stoll").
TEST(OnnxImportErrors, CountsAreBoundedByTheBytesPresent) {
  auto edit = [](const std::string& path, const std::function<void(onnx::ModelProto&)>& f) {
    onnx::ModelProto m;
    {
      std::ifstream in(path, std::ios::binary);
      ASSERT_TRUE(m.ParseFromIstream(&in));
    }
    f(m);
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    ASSERT_TRUE(m.SerializeToOstream(&out));
  };
  const std::string dir = TempDir() + "/counts";
  WriteOnnxFromHf(Golden("qwen2_tied"), dir, {});
  const std::string clean = ReadFile(dir + "/model.onnx");
  edit(dir + "/model.onnx", [](onnx::ModelProto& m) {
    onnx::TensorProto* t = m.mutable_graph()->add_initializer();
    t->set_name("bogus");
    t->set_data_type(onnx::TensorProto::INT64);
    t->add_dims(int64_t(1) << 35);
    t->set_raw_data(std::string(8, '\0'));
  });
  std::string e = LoadError(dir + "/model.onnx");
  EXPECT_NE(e.find("'bogus'"), std::string::npos) << e;
  EXPECT_NE(e.find("raw_data holds 8 bytes"), std::string::npos) << e;

  WriteFile(dir + "/model.onnx", clean);
  edit(dir + "/model.onnx", [](onnx::ModelProto& m) {
    onnx::TensorProto* t = m.mutable_graph()->add_initializer();
    t->set_name("huge");
    t->set_data_type(onnx::TensorProto::FLOAT);
    t->add_dims(int64_t(1) << 30);
    t->add_dims(int64_t(1) << 30);
  });
  e = LoadError(dir + "/model.onnx");
  EXPECT_NE(e.find("'huge'"), std::string::npos) << e;
  EXPECT_NE(e.find("more than 2^40 elements"), std::string::npos) << e;

  const std::string ext = TempDir() + "/counts_ext";
  OnnxWriteOptions o;
  o.external_data = true;
  WriteOnnxFromHf(Golden("qwen2_tied"), ext, o);
  edit(ext + "/model.onnx", [](onnx::ModelProto& m) {
    for (auto& t : *m.mutable_graph()->mutable_initializer())
      for (auto& kv : *t.mutable_external_data())
        if (kv.key() == "offset") {
          kv.set_value("12x");
          return;
        }
  });
  e = LoadError(ext + "/model.onnx");
  EXPECT_NE(e.find("external data offset '12x' is not a byte count"), std::string::npos) << e;
}

// ---- verbs ----------------------------------------------------------------------------------
TEST(OnnxImportCli, InspectShowsTheLiftAndConvertWritesGguf) {
  const std::string dir = TempDir() + "/cli";
  WriteOnnxFromHf(Golden("llama3_f32"), dir, {});
  std::string out, err;
  ASSERT_EQ(RunCommand(CliPath() + " inspect -m " + dir, &out, &err), 0) << err;
  EXPECT_NE(out.find("lifted: LlamaForCausalLM, 3 layers, attention from GroupQueryAttention"),
            std::string::npos)
      << out;
  const std::string gguf = dir + "/out.gguf";
  ASSERT_EQ(RunCommand(CliPath() + " convert " + dir + "/model.onnx -o " + gguf + " --type f32",
                       &out, &err),
            0)
      << err;
  const auto ref = Model::Load(Golden("llama3_f32"));
  EXPECT_LE(MaxAbsDiff(Logits(Model::Load(gguf), Ids(*ref)), Logits(ref, Ids(*ref))), 1e-4);
}

}  // namespace
}  // namespace es::test
