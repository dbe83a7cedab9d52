// A minimal Hugging Face -> GGUF writer for tests (see gguf_model_util.h). Keys and tensor names
// follow llama.cpp's converter: llama q/k rows permuted per head (rope pairs adjacent), llama3
// rope as a rope_freqs tensor, YaRN's mscale_all_dim as yarn_log_multiplier, experts stacked.
#include "gguf_model_util.h"

#include <cmath>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "edgeseek/internal/backends/backend.h"
#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/formats/safetensors.h"
#include "edgeseek/internal/models/arch.h"
#include "edgeseek/internal/models/config.h"
#include "edgeseek/internal/runtime/runner.h"
#include "test_util.h"

namespace es::test {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// llama.cpp's permute: per head, rows (i, i + d/2) -> (2i, 2i + 1). x: [n_head * d, cols].
std::vector<float> PermuteRows(const std::vector<float>& x, int64_t n_head, int64_t cols) {
  const int64_t rows = int64_t(x.size()) / cols, d = rows / n_head, half = d / 2;
  std::vector<float> y(x.size());
  for (int64_t h = 0; h < n_head; ++h)
    for (int64_t i = 0; i < half; ++i)
      for (int64_t k = 0; k < 2; ++k) {
        const int64_t src = h * d + k * half + i, dst = h * d + 2 * i + k;
        std::memcpy(&y[size_t(dst * cols)], &x[size_t(src * cols)], size_t(cols) * 4);
      }
  return y;
}

std::string TokenContent(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content")) return v["content"].get<std::string>();
  return "";
}

}  // namespace

void SetGgufVocab(GgufWriter& w, const std::string& dir, const std::string& pre) {
  const json tj = json::parse(ReadFile(dir + "/tokenizer.json"));
  json cfg = json::object();
  if (fs::exists(dir + "/tokenizer_config.json"))
    cfg = json::parse(ReadFile(dir + "/tokenizer_config.json"));
  std::map<int64_t, std::pair<std::string, int64_t>> by_id;  // id -> (text, type)
  for (auto it = tj["model"]["vocab"].begin(); it != tj["model"]["vocab"].end(); ++it)
    by_id[it.value().get<int64_t>()] = {it.key(), int64_t(GgufTokenType::kNormal)};
  for (const json& a : tj["added_tokens"])
    by_id[a["id"].get<int64_t>()] = {a["content"].get<std::string>(),
                                     a.value("special", false)
                                         ? int64_t(GgufTokenType::kControl)
                                         : int64_t(GgufTokenType::kUserDefined)};
  const int64_t n = by_id.rbegin()->first + 1;
  std::vector<std::string> tokens(static_cast<size_t>(n));
  std::vector<int64_t> types(size_t(n), int64_t(GgufTokenType::kUnused));
  for (int64_t i = 0; i < n; ++i) tokens[size_t(i)] = "[PAD" + std::to_string(i) + "]";
  for (auto& [id, tt] : by_id) {
    tokens[size_t(id)] = tt.first;
    types[size_t(id)] = tt.second;
  }
  std::vector<std::string> merges;
  for (const json& m : tj["model"]["merges"])
    merges.push_back(m.is_string() ? m.get<std::string>()
                                   : m[0].get<std::string>() + " " + m[1].get<std::string>());
  w.Set(std::string(kKeyTokenizerModel), GgufValue::Str("gpt2"));
  w.Set(std::string(kKeyTokenizerPre), GgufValue::Str(pre));
  w.Set(std::string(kKeyTokenizerTokens), GgufValue::StrArray(tokens));
  w.Set(std::string(kKeyTokenizerTokenType), GgufValue::IntArray(GgufType::kI32, types));
  w.Set(std::string(kKeyTokenizerMerges), GgufValue::StrArray(merges));
  auto id_of = [&](const std::string& text) -> int64_t {
    for (auto& [id, tt] : by_id)
      if (tt.first == text) return id;
    return -1;
  };
  const std::string bos = cfg.contains("bos_token") ? TokenContent(cfg["bos_token"]) : "";
  const std::string eos = cfg.contains("eos_token") ? TokenContent(cfg["eos_token"]) : "";
  if (!bos.empty() && id_of(bos) >= 0)
    w.Set(std::string(kKeyTokenizerBosId), GgufValue::U32(uint32_t(id_of(bos))));
  if (!eos.empty() && id_of(eos) >= 0)
    w.Set(std::string(kKeyTokenizerEosId), GgufValue::U32(uint32_t(id_of(eos))));
  // BOS added by tokenizer_config or by the post-processor's template (llama 3).
  bool add_bos = cfg.value("add_bos_token", false);
  if (tj.contains("post_processor") && !tj["post_processor"].is_null() && !bos.empty() &&
      tj["post_processor"].dump().find("\"SpecialToken\":{\"id\":" + json(bos).dump()) !=
          std::string::npos)
    add_bos = true;
  w.Set(std::string(kKeyTokenizerAddBos), GgufValue::Bool(add_bos));
  w.Set(std::string(kKeyTokenizerAddEos), GgufValue::Bool(cfg.value("add_eos_token", false)));
  if (cfg.contains("chat_template") && cfg["chat_template"].is_string())
    w.Set(std::string(kKeyTokenizerChatTemplate),
          GgufValue::Str(cfg["chat_template"].get<std::string>()));
}

void WriteHfAsGguf(const std::string& hf_dir, const std::string& out, const HfToGgufOptions& o) {
  const ModelConfig c = LoadHfConfig(hf_dir + "/config.json");
  const auto st = SafetensorsSet::Open(hf_dir);
  const std::string arch = c.arch == Arch::kLlama   ? "llama"
                           : c.arch == Arch::kQwen2 ? "qwen2"
                                                    : "deepseek2";
  auto key = [&](std::string_view s) { return ArchKey(arch, s); };
  GgufWriter w;
  w.Set(std::string(kKeyGeneralArchitecture), GgufValue::Str(arch));
  w.Set(std::string(kKeyGeneralName), GgufValue::Str(fs::path(hf_dir).filename().string()));
  w.Set(std::string(kKeyGeneralFileType), GgufValue::U32(0));
  w.Set(key(kKeyBlockCount), GgufValue::U32(uint32_t(c.n_layers)));
  w.Set(key(kKeyContextLength), GgufValue::U32(uint32_t(c.max_position_embeddings)));
  w.Set(key(kKeyEmbeddingLength), GgufValue::U32(uint32_t(c.hidden_size)));
  w.Set(key(kKeyFeedForwardLength), GgufValue::U32(uint32_t(c.intermediate_size)));
  w.Set(key(kKeyAttnHeadCount), GgufValue::U32(uint32_t(c.n_heads)));
  w.Set(key(kKeyAttnHeadCountKv), GgufValue::U32(uint32_t(c.n_kv_heads)));
  w.Set(key(kKeyAttnLayerNormRmsEps), GgufValue::F32(c.rms_norm_eps));
  w.Set(key(kKeyRopeFreqBase), GgufValue::F32(float(c.rope_theta)));
  w.Set(key(kKeyRopeDimensionCount), GgufValue::U32(uint32_t(c.rope_dim())));
  if (c.rope.type == "linear" || c.rope.type == "yarn") {
    w.Set(key(kKeyRopeScalingType), GgufValue::Str(c.rope.type));
    w.Set(key(kKeyRopeScalingFactor), GgufValue::F32(float(c.rope.factor)));
  }
  if (c.rope.type == "yarn") {
    w.Set(key(kKeyRopeScalingOrigCtxLen),
          GgufValue::U32(uint32_t(c.rope.original_max_position_embeddings)));
    w.Set(key(kKeyRopeScalingYarnLogMul), GgufValue::F32(float(0.1 * c.rope.mscale_all_dim)));
  }
  std::deque<std::vector<float>> store;
  auto add = [&](const std::string& name, const Shape& shape, std::vector<float> v) {
    if (name == o.skip_tensor) return;
    store.push_back(std::move(v));
    w.AddTensor(name, DType::kF32, shape, store.back().data());
  };
  if (c.rope.type == "llama3") {
    // rope_freqs[i] = default inv_freq / llama3 inv_freq (what the converter computes).
    ModelConfig plain = c;
    plain.rope.type = "default";
    const RopeTable a = plain.MakeRope(), b = c.MakeRope();
    std::vector<float> f(a.inv_freq.size());
    for (size_t i = 0; i < f.size(); ++i) f[i] = a.inv_freq[i] / b.inv_freq[i];
    add(TensorName(kTensorRopeFreqs), {int64_t(f.size())}, f);
  }
  if (c.is_mla()) {
    if (c.q_lora_rank > 0) w.Set(key(kKeyAttnQLoraRank), GgufValue::U32(uint32_t(c.q_lora_rank)));
    w.Set(key(kKeyAttnKvLoraRank), GgufValue::U32(uint32_t(c.kv_lora_rank)));
    const uint32_t kl = uint32_t(c.qk_nope_head_dim + c.qk_rope_head_dim),
                   vl = uint32_t(c.v_head_dim);
    if (o.split_kv_b) {
      w.Set(key(kKeyAttnHeadCountKv), GgufValue::U32(1));
      w.Set(key(kKeyAttnKeyLength), GgufValue::U32(uint32_t(c.kv_lora_rank + c.qk_rope_head_dim)));
      w.Set(key(kKeyAttnValueLength), GgufValue::U32(uint32_t(c.kv_lora_rank)));
      w.Set(key(kKeyAttnKeyLengthMla), GgufValue::U32(kl));
      w.Set(key(kKeyAttnValueLengthMla), GgufValue::U32(vl));
    } else {
      w.Set(key(kKeyAttnKeyLength), GgufValue::U32(kl));
      w.Set(key(kKeyAttnValueLength), GgufValue::U32(vl));
    }
    if (c.n_routed_experts > 0) {
      w.Set(key(kKeyLeadingDenseBlockCount), GgufValue::U32(uint32_t(c.first_k_dense_replace)));
      w.Set(key(kKeyExpertFeedForwardLength), GgufValue::U32(uint32_t(c.moe_intermediate_size)));
      w.Set(key(kKeyExpertCount), GgufValue::U32(uint32_t(c.n_routed_experts)));
      w.Set(key(kKeyExpertSharedCount), GgufValue::U32(uint32_t(c.n_shared_experts)));
      w.Set(key(kKeyExpertUsedCount), GgufValue::U32(uint32_t(c.num_experts_per_tok)));
      w.Set(key(kKeyExpertWeightsScale), GgufValue::F32(float(c.routed_scaling_factor)));
      w.Set(key(kKeyExpertWeightsNorm), GgufValue::Bool(c.norm_topk_prob));
      w.Set(key(kKeyExpertGatingFunc), GgufValue::U32(c.arch == Arch::kDeepseekV3 ? 2 : 1));
      w.Set(key(kKeyExpertGroupCount), GgufValue::U32(uint32_t(c.n_group)));
      w.Set(key(kKeyExpertGroupUsedCount), GgufValue::U32(uint32_t(c.topk_group)));
    }
  } else if (c.head_dim * c.n_heads != c.hidden_size) {
    w.Set(key(kKeyAttnKeyLength), GgufValue::U32(uint32_t(c.head_dim)));
    w.Set(key(kKeyAttnValueLength), GgufValue::U32(uint32_t(c.head_dim)));
  }
  if (!o.tokenizer_dir.empty()) SetGgufVocab(w, o.tokenizer_dir, o.tokenizer_pre);

  auto f32 = [&](const std::string& name) {
    const Tensor& t = st->Get(name);
    return ToF32(t);
  };
  std::map<std::string, std::vector<float>> stacks;  // gguf name -> experts so far
  std::map<std::string, Shape> stack_shape;
  for (const WeightSpec& s : ExpectedWeights(c)) {
    const auto m = HfToGgufName(s.name);
    ES_CHECK(m.has_value(), "no GGUF name for ", s.name);
    std::vector<float> v = f32(s.name);
    if (m->expert >= 0) {
      auto& acc = stacks[m->gguf_name];
      acc.insert(acc.end(), v.begin(), v.end());
      stack_shape[m->gguf_name] = {c.n_routed_experts, s.shape[0], s.shape[1]};
      if (m->expert == c.n_routed_experts - 1)
        add(m->gguf_name, stack_shape[m->gguf_name], std::move(acc));
      continue;
    }
    const bool is_q = s.name.find("self_attn.q_proj.") != std::string::npos;
    const bool is_k = s.name.find("self_attn.k_proj.") != std::string::npos;
    if (c.arch == Arch::kLlama && o.permute_llama && (is_q || is_k)) {
      const int64_t heads = is_q ? c.n_heads : c.n_kv_heads;
      v = PermuteRows(v, heads, s.shape.size() == 2 ? s.shape[1] : 1);
    }
    if (o.split_kv_b && s.name.find("kv_b_proj.weight") != std::string::npos) {
      const int64_t H = c.n_heads, dn = c.qk_nope_head_dim, dv = c.v_head_dim, r = c.kv_lora_rank;
      std::vector<float> kb(size_t(H * r * dn)), vb(size_t(H * dv * r));
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t i = 0; i < dn; ++i)
          for (int64_t j = 0; j < r; ++j)
            kb[size_t((h * r + j) * dn + i)] = v[size_t((h * (dn + dv) + i) * r + j)];
        for (int64_t i = 0; i < dv; ++i)
          for (int64_t j = 0; j < r; ++j)
            vb[size_t((h * dv + i) * r + j)] = v[size_t((h * (dn + dv) + dn + i) * r + j)];
      }
      const int layer = std::stoi(s.name.substr(std::strlen("model.layers.")));
      add(BlockTensorName(layer, kTensorAttnKB), {H, r, dn}, std::move(kb));
      add(BlockTensorName(layer, kTensorAttnVB), {H, dv, r}, std::move(vb));
      continue;
    }
    add(m->gguf_name, s.shape, std::move(v));
  }
  if (o.edit) o.edit(w);
  w.WriteFile(out);
}

std::vector<float> PrefillLogits(const std::shared_ptr<Model>& m, const std::vector<int32_t>& ids,
                                 const std::string& backend) {
  BackendOptions bo;
  bo.threads = 2;
  RunnerOptions ro;
  ro.n_slots = 1;
  ro.context = 128;
  Runner r(m, CreateBackend(backend, bo), ro);
  Batch b;
  b.Add(0, 0, ids, true);
  b.Finalize();
  std::vector<float> logits;
  r.Forward(b, &logits);
  return logits;
}

}  // namespace es::test
