// Tiny random llama / qwen2 models written with the GGUF helpers (keys and tensor names from
// gguf_names.h), then requantized by every preset and uniform type, plus a dequantized f32 twin
// of each. The test checks them with our reader; tests/unit/gguf/interop/llama_cpp_check.sh
// then loads the same files (left in this test's temp dir) in llama.cpp and compares its
// next-token distributions between each quantized file and its twin (docs/gguf.md).
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "edgeseek/internal/formats/gguf.h"
#include "edgeseek/internal/formats/gguf_quantize.h"
#include "edgeseek/internal/quant/blocks.h"
#include "test_util.h"

namespace es {
namespace {

std::string Utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += char(cp);
  } else {
    s += char(0xC0 | (cp >> 6));
    s += char(0x80 | (cp & 63));
  }
  return s;
}

// A byte-level BPE vocabulary (GPT-2's byte-to-unicode map) plus specials: enough for llama.cpp.
void SetTinyTokenizer(GgufWriter& w, int n_vocab) {
  std::vector<std::string> toks;
  int extra = 0;
  for (int b = 0; b < 256; ++b) {
    const bool self = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
    toks.push_back(Utf8(uint32_t(self ? b : 256 + extra++)));
  }
  toks.push_back("<|endoftext|>");
  while (int(toks.size()) < n_vocab)
    toks.push_back("<|extra_" + std::to_string(toks.size()) + "|>");
  std::vector<int64_t> types(toks.size(), int64_t(GgufTokenType::kNormal));
  for (size_t i = 256; i < toks.size(); ++i) types[i] = int64_t(GgufTokenType::kControl);
  w.Set(std::string(kKeyTokenizerModel), GgufValue::Str("gpt2"));
  w.Set(std::string(kKeyTokenizerPre), GgufValue::Str("qwen2"));
  w.Set(std::string(kKeyTokenizerTokens), GgufValue::StrArray(toks));
  w.Set(std::string(kKeyTokenizerTokenType), GgufValue::IntArray(GgufType::kI32, types));
  w.Set(std::string(kKeyTokenizerMerges), GgufValue::StrArray({"Ġ t", "h e"}));
  w.Set(std::string(kKeyTokenizerBosId), GgufValue::U32(256));
  w.Set(std::string(kKeyTokenizerEosId), GgufValue::U32(256));
  w.Set(std::string(kKeyTokenizerAddBos), GgufValue::Bool(false));
}

void WriteTinyModel(const std::string& arch, const std::string& path) {
  const int n_embd = 256, n_ff = 512, n_head = 4, n_kv = 2, n_layer = 2, head = n_embd / n_head,
            n_vocab = 320;
  GgufWriter w;
  w.Set(std::string(kKeyGeneralArchitecture), GgufValue::Str(arch));
  w.Set(std::string(kKeyGeneralName), GgufValue::Str("tiny-" + arch));
  w.Set(std::string(kKeyGeneralFileType), GgufValue::U32(0));
  w.Set(ArchKey(arch, kKeyContextLength), GgufValue::U32(256));
  w.Set(ArchKey(arch, kKeyEmbeddingLength), GgufValue::U32(n_embd));
  w.Set(ArchKey(arch, kKeyBlockCount), GgufValue::U32(n_layer));
  w.Set(ArchKey(arch, kKeyFeedForwardLength), GgufValue::U32(n_ff));
  w.Set(ArchKey(arch, kKeyAttnHeadCount), GgufValue::U32(n_head));
  w.Set(ArchKey(arch, kKeyAttnHeadCountKv), GgufValue::U32(n_kv));
  w.Set(ArchKey(arch, kKeyAttnLayerNormRmsEps), GgufValue::F32(1e-6f));
  w.Set(ArchKey(arch, kKeyRopeFreqBase), GgufValue::F32(10000.f));
  w.Set(ArchKey(arch, kKeyRopeDimensionCount), GgufValue::U32(head));
  SetTinyTokenizer(w, n_vocab);
  std::mt19937 rng(42);
  std::vector<std::vector<float>> store;
  store.reserve(64);
  auto add = [&](const std::string& name, Shape shape, float scale, float offset = 0.0f) {
    std::normal_distribution<float> g(offset, scale);
    std::vector<float> v(static_cast<size_t>(NumElements(shape)));
    for (auto& x : v) x = g(rng);
    store.push_back(std::move(v));
    w.AddTensor(name, DType::kF32, shape, store.back().data());
  };
  add(TensorName(kTensorTokenEmbd), {n_vocab, n_embd}, 1.0f);
  for (int l = 0; l < n_layer; ++l) {
    add(BlockTensorName(l, kTensorAttnNorm), {n_embd}, 0.1f, 1.0f);
    add(BlockTensorName(l, kTensorAttnQ), {n_embd, n_embd}, 0.08f);
    add(BlockTensorName(l, kTensorAttnK), {n_kv * head, n_embd}, 0.08f);
    add(BlockTensorName(l, kTensorAttnV), {n_kv * head, n_embd}, 0.08f);
    if (arch == kArchQwen2) {
      add(BlockTensorName(l, kTensorAttnQ, "bias"), {n_embd}, 0.1f);
      add(BlockTensorName(l, kTensorAttnK, "bias"), {n_kv * head}, 0.1f);
      add(BlockTensorName(l, kTensorAttnV, "bias"), {n_kv * head}, 0.1f);
    }
    add(BlockTensorName(l, kTensorAttnOutput), {n_embd, n_embd}, 0.08f);
    add(BlockTensorName(l, kTensorFfnNorm), {n_embd}, 0.1f, 1.0f);
    add(BlockTensorName(l, kTensorFfnGate), {n_ff, n_embd}, 0.08f);
    add(BlockTensorName(l, kTensorFfnUp), {n_ff, n_embd}, 0.08f);
    add(BlockTensorName(l, kTensorFfnDown), {n_embd, n_ff}, 0.06f);
  }
  add(TensorName(kTensorOutputNorm), {n_embd}, 0.1f, 1.0f);
  add(TensorName(kTensorOutput), {n_vocab, n_embd}, 0.1f);
  w.WriteFile(path);
}

TEST(GgufInterop, TinyModelsForLlamaCpp) {
  const std::string dir = test::TempDir();
  for (const std::string arch : {"llama", "qwen2"}) {
    const std::string f32 = dir + "/tiny_" + arch + "_f32.gguf";
    WriteTinyModel(arch, f32);
    const auto src = GgufFile::Open(f32);
    EXPECT_EQ(src->GetU32(ArchKey(arch, kKeyBlockCount)), 2u);
    EXPECT_EQ(src->GetStringArray(kKeyTokenizerTokens).size(), 320u);
    for (const char* type :
         {"q8_0", "q4_0", "q4_k_m", "q4_1", "q5_0", "q5_1", "q5_k", "q6_k", "f16", "bf16"}) {
      const std::string q = dir + "/tiny_" + arch + "_" + type + ".gguf";
      const std::string twin = dir + "/tiny_" + arch + "_" + type + "_deq.gguf";
      QuantizeGguf(f32, q, BuiltinQuantPolicy(type));
      QuantizeGguf(q, twin, BuiltinQuantPolicy("f32"));
      const auto fq = GgufFile::Open(q), ft = GgufFile::Open(twin);
      // The twin holds exactly our dequantization of the quantized file.
      for (const auto& ti : fq->tensor_infos()) {
        const Tensor a = fq->GetTensor(ti.name), b = ft->GetTensor(ti.name, ti.shape);
        ASSERT_EQ(b.dtype, DType::kF32);
        std::vector<float> v(static_cast<size_t>(a.numel()));
        Dequantize(a.dtype, a.data, v.data(), a.numel());
        ASSERT_EQ(std::memcmp(v.data(), b.data, b.nbytes), 0) << type << " " << ti.name;
      }
    }
  }
}

}  // namespace
}  // namespace es
