// HF -> GGUF conversion (src/formats/gguf_convert.cpp, src/runtime/convert.cpp, `edgeseek
// convert`) on the golden transformers checkpoints: the metadata keys, tensor names, shapes and
// types llama.cpp's loader expects, llama's q/k rope permutation, stacked MoE experts, tokenizer
// metadata, dequantized tensors within each type's error, determinism and bad input.
#include "edgeseek/internal/runtime/convert.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/formats/gguf.h"
#include "edgeseek/internal/formats/gguf_convert.h"
#include "edgeseek/internal/formats/safetensors.h"
#include "edgeseek/internal/quant/blocks.h"
#include "test_util.h"

namespace es {
namespace {

namespace fs = std::filesystem;

std::string Golden(const std::string& name) {
  return test::SourceDir() + "/tests/golden/data/models/" + name;
}
std::string TinyTokenizer() { return test::SourceDir() + "/tests/data/tiny_tokenizer"; }

nlohmann::json Config(const std::string& model) {
  return nlohmann::json::parse(test::ReadFile(Golden(model) + "/config.json"));
}

std::vector<float> Floats(const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  Dequantize(t.dtype, t.data, v.data(), t.numel());
  return v;
}

// The HF tensor as f32 rows, with llama's rope permutation applied when `heads` > 0.
std::vector<float> HfRows(const SafetensorsSet& st, const std::string& name, int heads = 0) {
  const Tensor& t = st.Get(name);
  std::vector<float> v = Floats(t);
  if (heads <= 0) return v;
  std::vector<float> p(v.size());
  const int64_t rows = t.shape.size() == 1 ? t.shape[0] : t.rows();
  const size_t row_bytes = t.shape.size() == 1 ? sizeof(float) : size_t(t.cols()) * sizeof(float);
  PermuteRopeRows(reinterpret_cast<const uint8_t*>(v.data()), reinterpret_cast<uint8_t*>(p.data()),
                  rows, row_bytes, heads);
  return p;
}

// ---- Pure pieces.

TEST(ConvertPieces, RopePermutationInterleavesHalves) {
  // 2 heads of d = 4: rows per head (0 1 | 2 3) -> (0 2 1 3).
  const uint8_t src[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  uint8_t dst[8];
  PermuteRopeRows(src, dst, 8, 1, 2);
  const uint8_t want[8] = {0, 2, 1, 3, 4, 6, 5, 7};
  EXPECT_EQ(std::vector<uint8_t>(dst, dst + 8), std::vector<uint8_t>(want, want + 8));
  EXPECT_THROW(PermuteRopeRows(src, dst, 6, 1, 4), Error);  // 6 rows do not split into 4 heads
}

TEST(ConvertPieces, ArchitectureFromConfig) {
  EXPECT_EQ(GgufArchForConfig(Config("llama3"), "c"), "llama");
  EXPECT_EQ(GgufArchForConfig(Config("qwen2_tied"), "c"), "qwen2");
  EXPECT_EQ(GgufArchForConfig(Config("dsv2_lite"), "c"), "deepseek2");
  EXPECT_EQ(GgufArchForConfig(Config("dsv3"), "c"), "deepseek2");
  try {
    GgufArchForConfig(nlohmann::json{{"model_type", "gpt_neox"}}, "cfg.json");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cfg.json: unsupported architecture 'gpt_neox'"),
              std::string::npos)
        << e.what();
  }
}

TEST(ConvertPieces, PreTokenizerNames) {
  auto split = [](const std::string& re) {
    return nlohmann::json{
        {"type", "Split"}, {"pattern", {{"Regex", re}}}, {"behavior", "Isolated"}};
  };
  auto seq = [](std::vector<nlohmann::json> v) {
    v.push_back({{"type", "ByteLevel"}, {"use_regex", false}});
    return nlohmann::json{{"pre_tokenizer", {{"type", "Sequence"}, {"pretokenizers", v}}}};
  };
  const std::string llama3 =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  const std::string qwen2 =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  EXPECT_EQ(GgufPreTokenizerName(seq({split(llama3)}), "t"), "llama-bpe");
  EXPECT_EQ(GgufPreTokenizerName(seq({split(qwen2)}), "t"), "qwen2");
  EXPECT_EQ(
      GgufPreTokenizerName(seq({split(R"(\p{N}{1,3})"),
                                split("[\xe4\xb8\x80-\xe9\xbe\xa5\xe3\x81\x80-\xe3\x82\x9f]+"),
                                split(R"([^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+|\s+)")}),
                           "t"),
      "deepseek-v3");
  EXPECT_EQ(
      GgufPreTokenizerName(
          nlohmann::json{{"pre_tokenizer", {{"type", "ByteLevel"}, {"use_regex", true}}}}, "t"),
      "gpt-2");
  EXPECT_THROW(GgufPreTokenizerName(seq({split("[a-z]+")}), "t"), Error);
}

TEST(ConvertPieces, Llama3RopeFreqFactors) {
  // Wavelengths below old_ctx / high_freq_factor keep factor 1; above old_ctx / low_freq_factor
  // get `factor`; monotone in between.
  const nlohmann::json c = Config("llama3");
  const std::vector<float> f = Llama3RopeFreqFactors(c, 32);
  ASSERT_EQ(f.size(), 16u);
  EXPECT_EQ(f.front(), 1.0f);
  EXPECT_EQ(f.back(), 8.0f);
  for (size_t i = 1; i < f.size(); ++i) EXPECT_GE(f[i], f[i - 1]);
  EXPECT_TRUE(Llama3RopeFreqFactors(Config("llama3_f32"), 32).empty());
}

// ---- Whole files.

class ConvertFile : public ::testing::Test {
 protected:
  std::string dir_ = test::TempDir();
};

TEST_F(ConvertFile, Qwen2KeysNamesShapesTokenizerAndExactF32) {
  const std::string out = dir_ + "/qwen2.gguf";
  GgufQuantizeOptions qo;
  const std::shared_ptr<Model> m = Model::Load(Golden("qwen2_tied"));
  ConvertModelOptions o;
  o.tokenizer_dir = TinyTokenizer();
  ConvertModelToGguf(*m, out, BuiltinQuantPolicy("f32"), o);
  const auto f = GgufFile::Open(out);
  EXPECT_EQ(f->Architecture(), "qwen2");
  EXPECT_EQ(f->GetU32("qwen2.block_count"), 2u);
  EXPECT_EQ(f->GetU32("qwen2.context_length"), 512u);
  EXPECT_EQ(f->GetU32("qwen2.embedding_length"), 128u);
  EXPECT_EQ(f->GetU32("qwen2.feed_forward_length"), 224u);
  EXPECT_EQ(f->GetU32("qwen2.attention.head_count"), 4u);
  EXPECT_EQ(f->GetU32("qwen2.attention.head_count_kv"), 2u);
  EXPECT_EQ(f->GetU32("qwen2.rope.dimension_count"), 32u);
  EXPECT_FLOAT_EQ(f->GetF32("qwen2.rope.freq_base"), 1e6f);
  EXPECT_FLOAT_EQ(f->GetF32("qwen2.attention.layer_norm_rms_epsilon"), 1e-6f);
  EXPECT_EQ(f->GetU32("general.file_type"), 0u);
  // Tokenizer: 379 tokens padded to the model's 384 with unused [PAD] entries.
  EXPECT_EQ(f->GetString("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(f->GetString("tokenizer.ggml.pre"), "gpt-2");
  const auto& toks = f->GetStringArray("tokenizer.ggml.tokens");
  const std::vector<int64_t> types = f->GetIntArray("tokenizer.ggml.token_type");
  ASSERT_EQ(toks.size(), 384u);
  ASSERT_EQ(types.size(), 384u);
  EXPECT_EQ(toks[378], "<|im_end|>");
  EXPECT_EQ(types[378], int64_t(GgufTokenType::kControl));
  EXPECT_EQ(toks[383], "[PAD383]");
  EXPECT_EQ(types[383], int64_t(GgufTokenType::kUnused));
  EXPECT_EQ(types[100], int64_t(GgufTokenType::kNormal));
  EXPECT_EQ(f->GetU32("tokenizer.ggml.eos_token_id"), 378u);  // tokenizer_config's eos_token
  EXPECT_EQ(f->GetU32("tokenizer.ggml.padding_token_id"), 376u);
  EXPECT_EQ(f->GetU32("tokenizer.ggml.bos_token_id"),
            1u);  // config.json (tokenizer_config has none)
  EXPECT_FALSE(f->GetBool("tokenizer.ggml.add_bos_token"));
  EXPECT_EQ(f->GetStringArray("tokenizer.ggml.merges")[0], "\xc4\xa0 t");  // "Ġ t"
  EXPECT_NE(f->GetString("tokenizer.chat_template").find("<|im_start|>"), std::string::npos);

  // Tensors: every HF weight under its llama.cpp name, tied embedding without output.weight.
  const auto st = SafetensorsSet::Open(Golden("qwen2_tied"));
  std::set<std::string> names;
  for (const auto& ti : f->tensor_infos()) names.insert(ti.name);
  std::set<std::string> want = {"token_embd.weight", "output_norm.weight"};
  for (int l = 0; l < 2; ++l)
    for (const char* b : {"attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight",
                          "attn_q.bias", "attn_k.bias", "attn_v.bias", "attn_output.weight",
                          "ffn_norm.weight", "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight"})
      want.insert("blk." + std::to_string(l) + "." + b);
  EXPECT_EQ(names, want);
  for (const auto& ti : f->tensor_infos()) {
    const std::string hf = *GgufToHfName(ti.name);
    const Tensor& h = st->Get(hf);
    EXPECT_EQ(ti.shape, h.shape) << ti.name;
    EXPECT_EQ(ti.dtype, DType::kF32) << ti.name;
    EXPECT_EQ(Floats(f->GetTensor(ti.name)), Floats(h)) << ti.name;  // qwen2: no permutation
  }
}

TEST_F(ConvertFile, LlamaQKPermutedAndRopeFreqs) {
  const std::string out = dir_ + "/llama.gguf";
  ConvertHfToGguf(Golden("llama3"), out, BuiltinQuantPolicy("f32"));
  const auto f = GgufFile::Open(out);
  const auto st = SafetensorsSet::Open(Golden("llama3"));
  EXPECT_EQ(f->Architecture(), "llama");
  EXPECT_EQ(f->GetU32("llama.vocab_size"), 320u);
  EXPECT_FALSE(f->Has("tokenizer.ggml.model"));  // the golden folder has no tokenizer
  // q: 4 heads, k: 2 kv heads, each head's rows (i, i + 16) made adjacent.
  EXPECT_EQ(Floats(f->GetTensor("blk.1.attn_q.weight")),
            HfRows(*st, "model.layers.1.self_attn.q_proj.weight", 4));
  EXPECT_EQ(Floats(f->GetTensor("blk.1.attn_k.weight")),
            HfRows(*st, "model.layers.1.self_attn.k_proj.weight", 2));
  EXPECT_NE(Floats(f->GetTensor("blk.1.attn_q.weight")),
            HfRows(*st, "model.layers.1.self_attn.q_proj.weight"));
  EXPECT_EQ(Floats(f->GetTensor("blk.1.attn_v.weight")),
            HfRows(*st, "model.layers.1.self_attn.v_proj.weight"));
  EXPECT_EQ(Floats(f->GetTensor("output.weight")), HfRows(*st, "lm_head.weight"));
  // llama3 rope scaling -> rope_freqs [head_dim / 2], no rope.scaling keys.
  const Tensor rf = f->GetTensor("rope_freqs.weight");
  EXPECT_EQ(rf.shape, Shape{16});
  EXPECT_EQ(Floats(rf), Llama3RopeFreqFactors(Config("llama3"), 32));
  EXPECT_FALSE(f->Has("llama.rope.scaling.type"));
}

TEST_F(ConvertFile, DeepseekKeysAndStackedExperts) {
  for (const std::string model : {"dsv2_lite", "dsv3"}) {
    const std::string out = dir_ + "/" + model + ".gguf";
    ConvertHfToGguf(Golden(model), out, BuiltinQuantPolicy("f32"));
    const auto f = GgufFile::Open(out);
    const nlohmann::json c = Config(model);
    EXPECT_EQ(f->Architecture(), "deepseek2");
    EXPECT_EQ(f->GetU32("deepseek2.attention.kv_lora_rank"), c["kv_lora_rank"].get<uint32_t>());
    EXPECT_EQ(f->GetU32("deepseek2.attention.key_length"),
              c["qk_nope_head_dim"].get<uint32_t>() + c["qk_rope_head_dim"].get<uint32_t>());
    EXPECT_EQ(f->GetU32("deepseek2.rope.dimension_count"), c["qk_rope_head_dim"].get<uint32_t>());
    EXPECT_EQ(f->GetU32("deepseek2.expert_count"), c["n_routed_experts"].get<uint32_t>());
    EXPECT_EQ(f->GetU32("deepseek2.leading_dense_block_count"),
              c["first_k_dense_replace"].get<uint32_t>());
    EXPECT_EQ(f->GetU32("deepseek2.expert_gating_func"), model == "dsv3" ? 2u : 1u);
    EXPECT_EQ(f->GetString("deepseek2.rope.scaling.type"), "yarn");
    EXPECT_FLOAT_EQ(f->GetF32("deepseek2.rope.scaling.yarn_log_multiplier"),
                    0.1f * c["rope_parameters"]["mscale_all_dim"].get<float>());
    EXPECT_EQ(f->Has("deepseek2.attention.q_lora_rank"), !c["q_lora_rank"].is_null());
    const int64_t E = c["n_routed_experts"], ff = c["moe_intermediate_size"], D = c["hidden_size"];
    const int last = c["num_hidden_layers"].get<int>() - 1;
    const std::string b = "blk." + std::to_string(last) + ".";
    const Tensor up = f->GetTensor(b + "ffn_up_exps.weight");
    EXPECT_EQ(up.shape, (Shape{E, ff, D}));
    EXPECT_EQ(f->GetTensor(b + "ffn_down_exps.weight").shape, (Shape{E, D, ff}));
    EXPECT_TRUE(f->HasTensor(b + "attn_kv_b.weight"));
    EXPECT_TRUE(f->HasTensor(b + "ffn_gate_inp.weight"));
    EXPECT_EQ(f->HasTensor(b + "exp_probs_b.bias"), model == "dsv3");
    // Expert 1's rows sit after expert 0's.
    const std::shared_ptr<Model> m = Model::Load(Golden(model));
    const Tensor* e1 = nullptr;
    for (const Tensor* t : m->weights())
      if (t->name == "model.layers." + std::to_string(last) + ".mlp.experts.1.up_proj.weight")
        e1 = t;
    ASSERT_NE(e1, nullptr);
    const std::vector<float> all = Floats(up);
    const std::vector<float> one = Floats(*e1);
    EXPECT_EQ(std::vector<float>(all.begin() + int64_t(ff * D), all.begin() + int64_t(2 * ff * D)),
              one);
  }
}

// Dequantized tensors within each type's error (relative L2 over the tensor; bounds ~2x the
// errors measured on these Gaussian-like weights).
double TypeTolerance(DType t) {
  switch (t) {
    case DType::kF32:
      return 0;
    case DType::kF16:
      return 1e-3;
    case DType::kBF16:
      return 5e-3;
    case DType::kQ8_0:
      return 0.01;
    case DType::kQ6_K:
      return 0.02;
    case DType::kQ5_0:
    case DType::kQ5_1:
    case DType::kQ5_K:
      return 0.07;
    default:
      return 0.14;  // 4-bit types
  }
}

TEST_F(ConvertFile, QuantizedTensorsWithinTheTypeError) {
  const auto st = SafetensorsSet::Open(Golden("llama3_f32"));
  for (const char* type :
       {"f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k_m", "q6_k", "i4g"}) {
    const std::string out = dir_ + "/llama3_" + type + ".gguf";
    ConvertHfToGguf(Golden("llama3_f32"), out, BuiltinQuantPolicy(type));
    const auto f = GgufFile::Open(out);
    std::set<DType> seen;
    for (const auto& ti : f->tensor_infos()) {
      seen.insert(ti.dtype);
      const bool is_q = ti.name.find("attn_q.") != std::string::npos;
      const bool is_k = ti.name.find("attn_k.") != std::string::npos;
      const std::vector<float> want = HfRows(*st, *GgufToHfName(ti.name), is_q ? 3 : is_k ? 3 : 0);
      const double err = test::RelL2(Floats(f->GetTensor(ti.name)), want);
      EXPECT_LE(err, TypeTolerance(ti.dtype)) << type << " " << ti.name << " " << Name(ti.dtype);
      if (ti.shape.size() == 1) {
        EXPECT_EQ(ti.dtype, DType::kF32) << ti.name;
      }
    }
    EXPECT_GE(seen.size(), 2u) << type;  // norms stay f32, weights take the policy's types
  }
}

TEST_F(ConvertFile, DeterministicAcrossRunsAndThreads) {
  const std::shared_ptr<Model> m = Model::Load(Golden("dsv3"));
  std::string first;
  for (int threads : {1, 2, 3}) {
    const std::string out = dir_ + "/d" + std::to_string(threads) + ".gguf";
    ConvertModelOptions o;
    o.quantize.threads = threads;
    ConvertModelToGguf(*m, out, BuiltinQuantPolicy("q4_k_m"), o);
    const std::string bytes = test::ReadFile(out);
    if (first.empty()) first = bytes;
    EXPECT_EQ(bytes, first) << "threads " << threads;
  }
}

TEST_F(ConvertFile, TokenizerIdOutsideTheVocabularyIsAnError) {
  // The tiny tokenizer has 379 tokens; llama3_f32's vocabulary holds 288.
  const std::shared_ptr<Model> m = Model::Load(Golden("llama3_f32"));
  ConvertModelOptions o;
  o.tokenizer_dir = TinyTokenizer();
  try {
    ConvertModelToGguf(*m, dir_ + "/bad.gguf", BuiltinQuantPolicy("q8_0"), o);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not fit the model's vocabulary of 288"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(dir_ + "/bad.gguf"));
}

// Wrongly typed or missing values in the config.json given to convert, tokenizer.json and
// tokenizer_config.json are one es::Error naming the file and the key (issue 23), and no file is
// left behind; nlohmann's type_error escaped before (e.g. add_bos_token "yes", SpecialToken 5).
TEST_F(ConvertFile, WronglyTypedOrMissingJsonValues) {
  const std::shared_ptr<Model> m = Model::Load(Golden("qwen2_tied"));
  const std::string tok_dir = dir_ + "/tok";
  fs::create_directories(tok_dir);
  const nlohmann::json tok =
      nlohmann::json::parse(test::ReadFile(TinyTokenizer() + "/tokenizer.json"));
  const nlohmann::json tcfg =
      nlohmann::json::parse(test::ReadFile(TinyTokenizer() + "/tokenizer_config.json"));
  const nlohmann::json config = Config("qwen2_tied");
  struct Case {
    const char* file;
    const char* pointer;  // replaced by `value`, or removed when it is null
    nlohmann::json value;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {"config.json", "/hidden_size", "128", "field 'hidden_size' must be an integer (got string)"},
      {"config.json", "/num_hidden_layers", nullptr, "missing field 'num_hidden_layers'"},
      {"config.json", "/rms_norm_eps", "small",
       "field 'rms_norm_eps' must be a number (got string)"},
      {"tokenizer_config.json", "/add_bos_token", "yes",
       "field 'add_bos_token' must be true or false (got string)"},
      {"tokenizer_config.json", "/eos_token", 5,
       "field 'eos_token' must be a string or {\"content\""},
      {"tokenizer_config.json",
       "/eos_token",
       {{"lstrip", false}},
       "eos_token: missing field 'content'"},
      {"tokenizer_config.json", "/chat_template", 5,
       "field 'chat_template' must be a string or a list"},
      {"tokenizer.json", "/added_tokens/0/special", "yes",
       "added token '<|endoftext|>': field 'special' must be true or false"},
      {"tokenizer.json", "/model/byte_fallback", 0,
       "model: field 'byte_fallback' must be true or false"},
      {"tokenizer.json", "/pre_tokenizer/type", 3, "pre_tokenizer: field 'type' must be a string"},
  };
  for (const Case& c : cases) {
    const std::string file = c.file;
    nlohmann::json j = file == "config.json" ? config : file == "tokenizer.json" ? tok : tcfg;
    const nlohmann::json::json_pointer ptr(c.pointer);
    if (!c.value.is_null())
      j[ptr] = c.value;
    else
      j[ptr.parent_pointer()].erase(ptr.back());
    test::WriteFile(dir_ + "/config.json", (file == "config.json" ? j : config).dump());
    test::WriteFile(tok_dir + "/tokenizer.json", (file == "tokenizer.json" ? j : tok).dump());
    test::WriteFile(tok_dir + "/tokenizer_config.json",
                    (file == "tokenizer_config.json" ? j : tcfg).dump());
    ConvertModelOptions o;
    o.tokenizer_dir = tok_dir;
    o.config_path = dir_ + "/config.json";
    const std::string where = file == "config.json" ? o.config_path : tok_dir + "/" + file;
    try {
      ConvertModelToGguf(*m, dir_ + "/bad.gguf", BuiltinQuantPolicy("q8_0"), o);
      ADD_FAILURE() << "no error for " << c.file << c.pointer;
    } catch (const Error& e) {
      const std::string err = e.what();
      EXPECT_EQ(err.rfind(where, 0), 0u) << err;
      EXPECT_NE(err.find(c.expect), std::string::npos) << "'" << c.expect << "' not in: " << err;
    }
    EXPECT_FALSE(fs::exists(dir_ + "/bad.gguf"));
  }
}

// ---- The verb.

TEST_F(ConvertFile, VerbWritesFileFromFolderAndSynthetic) {
  std::string out, err;
  const std::string f1 = dir_ + "/v1.gguf", f2 = dir_ + "/v2.gguf";
  ASSERT_EQ(test::RunCommand(test::CliPath() + " convert " + Golden("qwen2_tied") + " -o " + f1 +
                                 " --type q8_0 --tokenizer " + TinyTokenizer(),
                             &out, &err),
            0)
      << err;
  EXPECT_NE(err.find("converted"), std::string::npos) << err;
  EXPECT_EQ(GgufFile::Open(f1)->GetU32("general.file_type"), 7u);
  // --synthetic with a config.json: random weights of that shape.
  ASSERT_EQ(test::RunCommand(test::CliPath() + " convert --synthetic " + Golden("qwen2_tied") +
                                 "/config.json -o " + f2 + " --type q4_0 --seed 3",
                             &out, &err),
            0)
      << err;
  const auto f = GgufFile::Open(f2);
  EXPECT_EQ(f->FindTensor("blk.1.ffn_up.weight")->dtype, DType::kQ4_0);
  EXPECT_EQ(f->FindTensor("blk.1.ffn_up.weight")->shape, (Shape{224, 128}));
}

TEST_F(ConvertFile, VerbBadInputGivesOneErrorLine) {
  struct Case {
    std::string args, message;
  };
  const std::string cfg_dir = dir_ + "/neox";
  fs::create_directories(cfg_dir);
  test::WriteFile(cfg_dir + "/config.json",
                  R"({"model_type": "gpt_neox", "architectures": ["GPTNeoXForCausalLM"]})");
  const std::vector<Case> cases = {
      {Golden("qwen2_tied") + " -o " + dir_ + "/x.gguf --type q9_9",
       "unknown quantization type 'q9_9'"},
      {dir_ + "/missing -o " + dir_ + "/x.gguf --type q8_0", "is not a Hugging Face model folder"},
      {cfg_dir + " -o " + dir_ + "/x.gguf --type q8_0",
       "unknown architecture 'GPTNeoXForCausalLM'"},
      {"-o " + dir_ + "/x.gguf --type q8_0", "give either HF_DIR or --synthetic"},
  };
  for (const Case& c : cases) {
    std::string out, err;
    EXPECT_EQ(test::RunCommand(test::CliPath() + " convert " + c.args, &out, &err), 1) << c.args;
    EXPECT_NE(err.find(c.message), std::string::npos) << c.args << ": " << err;
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
    EXPECT_FALSE(fs::exists(dir_ + "/x.gguf"));
  }
}

}  // namespace
}  // namespace es
