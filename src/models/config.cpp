// config.json parsing (both dialects), rope tables, attention scale, KV layout.
#include "edgeseek/internal/models/config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <numbers>
#include <type_traits>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/core/json_field.h"

namespace es {

using nlohmann::json;

const char* ArchName(Arch a) {
  switch (a) {
    case Arch::kLlama:
      return "LlamaForCausalLM";
    case Arch::kQwen2:
      return "Qwen2ForCausalLM";
    case Arch::kDeepseekV2:
      return "DeepseekV2ForCausalLM";
    case Arch::kDeepseekV3:
      return "DeepseekV3ForCausalLM";
  }
  return "?";
}

bool ModelConfig::IsMoeLayer(int layer) const {
  if (n_routed_experts <= 0) return false;
  // transformers 5.17 decides by first_k_dense_replace alone (V2 and V3 ignore moe_layer_freq;
  // every released checkpoint has moe_layer_freq = 1, where the two rules agree).
  return layer >= first_k_dense_replace;
}

int ModelConfig::HeadsOf(int l) const {
  return l >= 0 && size_t(l) < layer_heads.size() ? layer_heads[size_t(l)] : n_heads;
}
int ModelConfig::KvHeadsOf(int l) const {
  return l >= 0 && size_t(l) < layer_kv_heads.size() ? layer_kv_heads[size_t(l)] : n_kv_heads;
}
int64_t ModelConfig::IntermediateOf(int l) const {
  return l >= 0 && size_t(l) < layer_intermediate.size() ? layer_intermediate[size_t(l)]
                                                         : intermediate_size;
}

namespace {

using json_field::As;
using json_field::Get;
using json_field::Opt;

std::vector<int32_t> IdList(const json& j, const char* key, const std::string& where) {
  std::vector<int32_t> out;
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return out;
  if (it->is_number_integer()) {
    out.push_back(As<int32_t>(*it, key, where));
  } else if (it->is_array()) {
    for (auto& v : *it) {
      ES_CHECK(v.is_number_integer(), where, ": field '", key, "' must hold integers");
      out.push_back(As<int32_t>(v, key, where));
    }
  } else {
    Fail(where, ": field '", key, "' must be an integer or a list of integers");
  }
  return out;
}

// A per-layer shape field: one integer for every layer, or a list of one per layer (pruned
// models). Returns the widest value; fills `per_layer` from a list.
template <typename T>
T LayerField(const json& j, const char* key, const std::string& where, T fallback, bool required,
             std::vector<T>* per_layer) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (required) return Get<T>(j, key, where);  // the usual "missing field" error
    return fallback;
  }
  if (!it->is_array()) return As<T>(*it, key, where);
  ES_CHECK(!it->empty(), where, ": field '", key, "' is an empty list");
  T widest = 0;
  for (auto& v : *it) {
    ES_CHECK(v.is_number_integer(), where, ": field '", key, "' must hold integers");
    per_layer->push_back(As<T>(v, key, where));
    widest = std::max(widest, per_layer->back());
  }
  return widest;
}

DType ParseTorchDtype(const std::string& s, const std::string& where) {
  if (s == "bfloat16") return DType::kBF16;
  if (s == "float16" || s == "half") return DType::kF16;
  if (s == "float32" || s == "float") return DType::kF32;
  Fail(where, ": unsupported dtype '", s, "'");
}

double GetMscale(double scale, double mscale) {
  if (scale <= 1.0) return 1.0;
  return 0.1 * mscale * std::log(scale) + 1.0;
}

}  // namespace

int64_t HfLayersPresent(const std::vector<std::string>& tensor_names) {
  constexpr std::string_view kPrefix = "model.layers.";
  int64_t layers = 0;
  for (const std::string& name : tensor_names) {
    if (name.compare(0, kPrefix.size(), kPrefix) != 0) continue;
    int64_t n = 0;
    size_t i = kPrefix.size();
    for (; i < name.size() && i < kPrefix.size() + 10 && name[i] >= '0' && name[i] <= '9'; ++i)
      n = n * 10 + (name[i] - '0');
    if (i > kPrefix.size() && i < name.size() && name[i] == '.') layers = std::max(layers, n + 1);
  }
  return layers;
}

void CheckHfLayersPresent(const ModelConfig& c, int64_t layers_present, const std::string& where) {
  ES_CHECK(c.n_layers <= layers_present, where, ": field 'num_hidden_layers' is ", c.n_layers,
           " but the checkpoint holds tensors for ", layers_present, " layers",
           layers_present > 0
               ? " (model.layers.0 to model.layers." + std::to_string(layers_present - 1) + ")"
               : std::string());
}

namespace {

// The architecture: architectures[0], or model_type when that is absent.
Arch ParseArch(const json& j, const std::string& where) {
  std::string arch;
  if (j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty())
    arch = As<std::string>(j["architectures"][0], "architectures[0]", where);
  const std::string model_type = Opt<std::string>(j, "model_type", "", where);
  if (arch == "LlamaForCausalLM" || (arch.empty() && model_type == "llama")) return Arch::kLlama;
  if (arch == "Qwen2ForCausalLM" || (arch.empty() && model_type == "qwen2")) return Arch::kQwen2;
  if (arch == "DeepseekV2ForCausalLM" || (arch.empty() && model_type == "deepseek_v2"))
    return Arch::kDeepseekV2;
  if (arch == "DeepseekV3ForCausalLM" || (arch.empty() && model_type == "deepseek_v3"))
    return Arch::kDeepseekV3;
  Fail(where, ": unknown architecture '", arch.empty() ? model_type : arch,
       "' (supported: LlamaForCausalLM, Qwen2ForCausalLM, DeepseekV2ForCausalLM, "
       "DeepseekV3ForCausalLM)");
}

// Rope: transformers-5 `rope_parameters` or hub `rope_theta` + `rope_scaling`.
void ParseRope(const json& j, const std::string& where, ModelConfig& c) {
  json rp = json::object();
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) rp = j["rope_parameters"];
  if (j.contains("rope_scaling") && j["rope_scaling"].is_object())
    for (auto& [k, v] : j["rope_scaling"].items())
      if (!rp.contains(k)) rp[k] = v;
  c.rope_theta = Opt<double>(rp, "rope_theta", Opt<double>(j, "rope_theta", 10000.0, where), where);
  std::string rtype =
      Opt<std::string>(rp, "rope_type", Opt<std::string>(rp, "type", "default", where), where);
  c.rope.type = rtype;
  if (rtype != "default" && rtype != "llama3" && rtype != "yarn" && rtype != "linear")
    Fail(where, ": unsupported rope type '", rtype, "' (supported: default, linear, llama3, yarn)");
  c.rope.factor = Opt<double>(rp, "factor", 0.0, where);
  c.rope.low_freq_factor = Opt<double>(rp, "low_freq_factor", 1.0, where);
  c.rope.high_freq_factor = Opt<double>(rp, "high_freq_factor", 4.0, where);
  c.rope.original_max_position_embeddings =
      Opt<int64_t>(rp, "original_max_position_embeddings", 0, where);
  c.rope.beta_fast = Opt<double>(rp, "beta_fast", 0.0, where);
  c.rope.beta_slow = Opt<double>(rp, "beta_slow", 0.0, where);
  if (c.rope.beta_fast == 0) c.rope.beta_fast = 32.0;
  if (c.rope.beta_slow == 0) c.rope.beta_slow = 1.0;
  c.rope.mscale = Opt<double>(rp, "mscale", 0.0, where);
  c.rope.mscale_all_dim = Opt<double>(rp, "mscale_all_dim", 0.0, where);
  c.rope.attention_factor = Opt<double>(rp, "attention_factor", 0.0, where);
  c.rope.truncate = Opt<bool>(rp, "truncate", true, where);
  if (rtype == "llama3" || rtype == "yarn") {
    if (c.rope.original_max_position_embeddings == 0) {
      // llama.cpp's converter reads it from the top level of config.json; accept both.
      c.rope.original_max_position_embeddings =
          Opt<int64_t>(j, "original_max_position_embeddings", c.max_position_embeddings, where);
    }
    if (c.rope.factor == 0.0) {
      ES_CHECK(rtype == "yarn", where, ": rope_scaling llama3 needs 'factor'");
      c.rope.factor =
          double(c.max_position_embeddings) / double(c.rope.original_max_position_embeddings);
    }
  }
  if (rtype == "linear") ES_CHECK(c.rope.factor > 0, where, ": rope_scaling linear needs 'factor'");
}

// MLA attention (DeepSeek V2 / V3), its mixture of experts and the router's method.
void ParseMla(const json& j, const std::string& where, ModelConfig& c) {
  c.q_lora_rank = Opt<int>(j, "q_lora_rank", 0, where);
  c.kv_lora_rank = Get<int>(j, "kv_lora_rank", where);
  c.qk_nope_head_dim = Get<int>(j, "qk_nope_head_dim", where);
  c.qk_rope_head_dim = Get<int>(j, "qk_rope_head_dim", where);
  c.v_head_dim = Get<int>(j, "v_head_dim", where);
  c.head_dim = c.qk_nope_head_dim + c.qk_rope_head_dim;
  c.n_routed_experts = Opt<int>(j, "n_routed_experts", 0, where);
  c.n_shared_experts = Opt<int>(j, "n_shared_experts", 0, where);
  c.moe_intermediate_size = Opt<int64_t>(j, "moe_intermediate_size", 0, where);
  c.num_experts_per_tok = Opt<int>(j, "num_experts_per_tok", 0, where);
  c.first_k_dense_replace = Opt<int>(j, "first_k_dense_replace", 0, where);
  c.moe_layer_freq = Opt<int>(j, "moe_layer_freq", 1, where);
  c.n_group = Opt<int>(j, "n_group", 1, where);
  c.topk_group = Opt<int>(j, "topk_group", 1, where);
  c.topk_method = Opt<std::string>(j, "topk_method",
                                   c.arch == Arch::kDeepseekV3 ? "noaux_tc" : "greedy", where);
  c.scoring_func = Opt<std::string>(j, "scoring_func",
                                    c.arch == Arch::kDeepseekV3 ? "sigmoid" : "softmax", where);
  c.norm_topk_prob = Opt<bool>(j, "norm_topk_prob", false, where);
  c.routed_scaling_factor = Opt<double>(j, "routed_scaling_factor", 1.0, where);
  c.num_nextn_predict_layers = Opt<int>(j, "num_nextn_predict_layers", 0, where);
  // transformers 5.17: V3's router is always noaux_tc over sigmoid scores and V2's always
  // softmax, whatever the config says.
  if (c.arch == Arch::kDeepseekV3) {
    c.topk_method = "noaux_tc";
    c.scoring_func = "sigmoid";
  } else {
    c.scoring_func = "softmax";
    if (c.topk_method == "noaux_tc")
      Fail(where, ": topk_method noaux_tc needs DeepseekV3ForCausalLM");
  }
  if (c.topk_method != "greedy" && c.topk_method != "group_limited_greedy" &&
      c.topk_method != "noaux_tc")
    Fail(where, ": unsupported topk_method '", c.topk_method, "'");
  if (c.scoring_func != "softmax" && c.scoring_func != "sigmoid")
    Fail(where, ": unsupported scoring_func '", c.scoring_func, "'");
}

// Plain attention: head_dim (explicit, or hidden / heads) and a partial rotary dimension.
void ParseHeadDim(const json& j, const std::string& where, ModelConfig& c) {
  const int hd = Opt<int>(j, "head_dim", 0, where);
  ES_CHECK(hd > 0 || c.layer_heads.empty(), where,
           ": per-layer num_attention_heads need an explicit head_dim");
  c.head_dim = hd > 0 ? hd : int(c.hidden_size / std::max(1, c.n_heads));
  const double prf = Opt<double>(j, "partial_rotary_factor", 1.0, where);
  ES_CHECK(std::isfinite(prf) && prf > 0 && prf <= 1, where,
           ": field 'partial_rotary_factor' must be in (0, 1] (got ", prf, ")");
  // transformers: int(head_dim * partial_rotary_factor); the nudge keeps r / head_dim exact.
  if (prf < 1) c.rotary_dim = int(std::floor(double(c.head_dim) * prf + 1e-9));
}

// quantization_config: fp8 with block scales, the only method read.
void ParseQuantization(const json& q, const std::string& where, ModelConfig& c) {
  const std::string method = Opt<std::string>(q, "quant_method", "", where);
  ES_CHECK(method == "fp8", where, ": unsupported quantization_config.quant_method '", method,
           "' (supported: fp8 with block scales)");
  c.fp8_block = true;
  if (q.contains("weight_block_size") && q["weight_block_size"].is_array() &&
      q["weight_block_size"].size() == 2) {
    c.fp8_block_n = As<int>(q["weight_block_size"][0], "weight_block_size", where);
    c.fp8_block_k = As<int>(q["weight_block_size"][1], "weight_block_size", where);
  }
}

}  // namespace

ModelConfig ParseHfConfig(const json& j, const std::string& where, int64_t layers_present) {
  ES_CHECK(j.is_object(), where, ": config must be a JSON object");
  ModelConfig c;
  c.arch = ParseArch(j, where);
  c.vocab_size = Get<int64_t>(j, "vocab_size", where);
  c.hidden_size = Get<int64_t>(j, "hidden_size", where);
  c.n_layers = Get<int>(j, "num_hidden_layers", where);
  if (layers_present == kNoCheckpoint)
    ES_CHECK(c.n_layers <= kMaxSyntheticLayers, where, ": field 'num_hidden_layers' is ",
             c.n_layers, " (at most ", kMaxSyntheticLayers, " supported for synthetic weights)");
  else if (layers_present != kCheckpointLater)
    CheckHfLayersPresent(c, layers_present, where);
  c.intermediate_size =
      LayerField<int64_t>(j, "intermediate_size", where, 0, true, &c.layer_intermediate);
  c.n_heads = LayerField<int>(j, "num_attention_heads", where, 0, true, &c.layer_heads);
  c.n_kv_heads = LayerField<int>(j, "num_key_value_heads", where, -1, false, &c.layer_kv_heads);
  if (c.n_kv_heads == -1) {  // absent: as many as the query heads, layer by layer
    c.n_kv_heads = c.n_heads;
    c.layer_kv_heads = c.layer_heads;
  }
  c.rms_norm_eps = float(Opt<double>(j, "rms_norm_eps", 1e-6, where));
  c.max_position_embeddings = Opt<int64_t>(j, "max_position_embeddings", 4096, where);
  c.tie_word_embeddings = Opt<bool>(j, "tie_word_embeddings", false, where);
  c.attention_bias = c.arch == Arch::kQwen2 ? true : Opt<bool>(j, "attention_bias", false, where);
  c.attention_out_bias = c.arch == Arch::kLlama && c.attention_bias;
  c.mlp_bias = Opt<bool>(j, "mlp_bias", false, where);
  if (c.arch == Arch::kDeepseekV3 || c.arch == Arch::kDeepseekV2) {
    c.attention_out_bias = c.attention_bias;
  }
  if (j.contains("dtype") && j["dtype"].is_string())
    c.dtype = ParseTorchDtype(j["dtype"].get<std::string>(), where);
  else if (j.contains("torch_dtype") && j["torch_dtype"].is_string())
    c.dtype = ParseTorchDtype(j["torch_dtype"].get<std::string>(), where);

  ParseRope(j, where, c);
  if (c.is_mla())
    ParseMla(j, where, c);
  else
    ParseHeadDim(j, where, c);
  if (j.contains("quantization_config") && j["quantization_config"].is_object())
    ParseQuantization(j["quantization_config"], where, c);
  c.eos_token_ids = IdList(j, "eos_token_id", where);
  auto bos = IdList(j, "bos_token_id", where);
  if (!bos.empty()) c.bos_token_id = bos[0];
  c.Validate(where);
  return c;
}

// Far above any model (DeepSeek-V3: 61 layers x 256 experts) and low enough that the expert
// tensor list built from the config stays small. (Layers alone are bounded by the tensors
// present: ParseHfConfig, and block_count in model_gguf.cpp.)
constexpr int64_t kMaxExpertLayers = int64_t(1) << 18;  // layers x routed experts

void ModelConfig::Validate(const std::string& where) const {
  auto positive = [&](int64_t v, const char* name) {
    ES_CHECK(v > 0, where, ": field '", name, "' must be positive (got ", v, ")");
  };
  // NaN or 0 here loaded and gave NaN logits (then `generate` emitted token 0 forever).
  auto positive_finite = [&](double v, const char* name) {
    ES_CHECK(std::isfinite(v) && v > 0, where, ": field '", name,
             "' must be a positive finite number (got ", v, ")");
  };
  positive_finite(rms_norm_eps, "rms_norm_eps");
  positive_finite(rope_theta, "rope_theta");
  // Below 1 the rotary frequencies base^(-2i/d) grow with the dimension instead of falling (no
  // model has such a base); 1e-45 made them infinite and the logits NaN.
  ES_CHECK(rope_theta >= 1, where, ": field 'rope_theta' is ", rope_theta,
           " (a rope base must be at least 1)");
  ES_CHECK(std::isfinite(rope.factor) && rope.factor >= 0, where,
           ": field 'rope_scaling.factor' must be a finite number >= 0 (got ", rope.factor, ")");
  ES_CHECK(std::isfinite(routed_scaling_factor), where,
           ": field 'routed_scaling_factor' must be finite (got ", routed_scaling_factor, ")");
  ES_CHECK(n_routed_experts <= 0 || int64_t(n_layers) * n_routed_experts <= kMaxExpertLayers, where,
           ": field 'n_routed_experts' is ", n_routed_experts, " with ", n_layers,
           " layers (at most ", kMaxExpertLayers, " expert-layers supported)");
  positive(vocab_size, "vocab_size");
  positive(hidden_size, "hidden_size");
  positive(n_layers, "num_hidden_layers");
  positive(n_heads, "num_attention_heads");
  positive(n_kv_heads, "num_key_value_heads");
  ES_CHECK(n_heads % n_kv_heads == 0 || !layer_heads.empty() || !layer_kv_heads.empty(), where,
           ": num_attention_heads (", n_heads, ") must be a multiple of num_key_value_heads (",
           n_kv_heads, ")");
  auto per_layer = [&](size_t n, const char* name) {
    ES_CHECK(n == 0 || n == size_t(n_layers), where, ": field '", name, "' lists ", n,
             " layers, the model has ", n_layers);
  };
  per_layer(layer_heads.size(), "num_attention_heads");
  per_layer(layer_kv_heads.size(), "num_key_value_heads");
  per_layer(layer_intermediate.size(), "intermediate_size");
  ES_CHECK(!per_layer_shapes() || !is_mla(), where,
           ": per-layer shapes are supported for Llama and Qwen2 only");
  for (int l = 0; l < n_layers && per_layer_shapes(); ++l) {
    const int h = HeadsOf(l), kv = KvHeadsOf(l);
    ES_CHECK(h > 0 && kv > 0 && h % kv == 0 && IntermediateOf(l) > 0, where, ": layer ", l, " has ",
             h, " heads, ", kv, " kv heads and an FFN of ", IntermediateOf(l),
             " (heads must be a positive multiple of kv heads, the FFN positive)");
  }
  ES_CHECK(rotary_dim >= 0 && rotary_dim % 2 == 0 && (is_mla() || rotary_dim <= head_dim), where,
           ": the rotary dims (", rotary_dim, ") must be even and at most head_dim");
  if (is_mla()) {
    positive(kv_lora_rank, "kv_lora_rank");
    positive(qk_rope_head_dim, "qk_rope_head_dim");
    positive(v_head_dim, "v_head_dim");
    ES_CHECK(qk_rope_head_dim % 2 == 0, where, ": qk_rope_head_dim must be even");
    if (n_routed_experts > 0) {
      positive(moe_intermediate_size, "moe_intermediate_size");
      positive(num_experts_per_tok, "num_experts_per_tok");
      ES_CHECK(num_experts_per_tok <= n_routed_experts, where,
               ": num_experts_per_tok exceeds n_routed_experts");
      ES_CHECK(n_group >= 1 && n_routed_experts % n_group == 0, where,
               ": n_routed_experts must be a multiple of n_group");
      ES_CHECK(topk_group >= 1 && topk_group <= n_group, where,
               ": topk_group must be in [1, n_group]");
    }
  } else {
    positive(head_dim, "head_dim");
    ES_CHECK(head_dim % 2 == 0, where, ": head_dim must be even");
    positive(intermediate_size, "intermediate_size");
  }
}

RopeTable ModelConfig::MakeRope() const {
  RopeTable t;
  t.mode = is_mla() || rope_interleaved ? RopeMode::kInterleaved : RopeMode::kNeox;
  const int dim = rope_dim();
  t.dim = dim;
  t.inv_freq.resize(size_t(dim / 2));
  const double base = rope_theta;
  // transformers computes these in float32: base ** (arange(0, dim, 2).float() / dim).
  auto pos_freq = [&](int i) {
    const float expo = float(2 * i) / float(dim);
    return float(std::pow(double(float(base)), double(expo)));
  };
  for (int i = 0; i < dim / 2; ++i) t.inv_freq[size_t(i)] = 1.0f / pos_freq(i);
  if (rope.type == "linear") {
    for (auto& f : t.inv_freq) f = float(f / rope.factor);
  } else if (rope.type == "llama3") {
    const double factor = rope.factor, lo = rope.low_freq_factor, hi = rope.high_freq_factor;
    const double old_ctx = double(rope.original_max_position_embeddings);
    const double low_wl = old_ctx / lo, high_wl = old_ctx / hi;
    for (auto& f : t.inv_freq) {
      const double wl = 2 * std::numbers::pi / double(f);
      double v = wl > low_wl ? double(f) / factor : double(f);
      if (!(wl < high_wl) && !(wl > low_wl)) {
        const double smooth = (old_ctx / wl - lo) / (hi - lo);
        v = (1 - smooth) * v / factor + smooth * v;
      }
      f = float(v);
    }
  } else if (rope.type == "yarn") {
    const double factor = rope.factor;
    const double omax = double(rope.original_max_position_embeddings);
    auto corr_dim = [&](double rot) {
      return (dim * std::log(omax / (rot * 2 * std::numbers::pi))) / (2 * std::log(base));
    };
    double low = corr_dim(rope.beta_fast), high = corr_dim(rope.beta_slow);
    if (rope.truncate) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, double(dim - 1));
    if (low == high) high += 0.001;
    for (int i = 0; i < dim / 2; ++i) {
      const float ramp = std::clamp(float((float(i) - low) / (high - low)), 0.0f, 1.0f);
      const float extrap_factor = 1.0f - ramp;
      const float pf = pos_freq(i);
      const float extrap = 1.0f / pf;
      const float interp = 1.0f / (float(factor) * pf);
      t.inv_freq[size_t(i)] = interp * (1.0f - extrap_factor) + extrap * extrap_factor;
    }
    if (rope.attention_factor > 0) {
      t.attention_factor = float(rope.attention_factor);
    } else if (rope.mscale != 0 && rope.mscale_all_dim != 0) {
      t.attention_factor =
          float(GetMscale(factor, rope.mscale) / GetMscale(factor, rope.mscale_all_dim));
    } else {
      t.attention_factor = float(GetMscale(factor, 1.0));
    }
  }
  if (!rope_freq_factors.empty()) {
    ES_CHECK(rope_freq_factors.size() == t.inv_freq.size(),
             "rope frequency factors: ", rope_freq_factors.size(), " values for ",
             t.inv_freq.size(), " frequencies");
    for (size_t i = 0; i < t.inv_freq.size(); ++i) t.inv_freq[i] /= rope_freq_factors[i];
  }
  return t;
}

float ModelConfig::AttentionScale() const {
  if (!is_mla()) return float(1.0 / std::sqrt(double(head_dim)));
  double scale = 1.0 / std::sqrt(double(qk_nope_head_dim + qk_rope_head_dim));
  // DeepSeek V2 and V3 multiply the softmax scale by mscale(factor, mscale_all_dim)^2 under YaRN.
  if (rope.type == "yarn" && rope.mscale_all_dim != 0) {
    const double m = GetMscale(rope.factor, rope.mscale_all_dim);
    scale *= m * m;
  }
  return float(scale);
}

KvSpec ModelConfig::MakeKvSpec(DType kv_dtype) const {
  KvSpec s;
  s.n_layers = n_layers;
  s.dtype = kv_dtype;
  if (is_mla()) {
    s.mla = true;
    s.width[0] = kv_lora_rank;
    s.width[1] = qk_rope_head_dim;
  } else {
    s.width[0] = n_kv_heads * head_dim;
    s.width[1] = n_kv_heads * head_dim;
  }
  return s;
}

size_t ModelConfig::ExpandedKvBytesPerToken(DType kv_dtype) const {
  if (!is_mla()) return MakeKvSpec(kv_dtype).BytesPerToken();
  const int64_t k = int64_t(n_heads) * (qk_nope_head_dim + qk_rope_head_dim);
  const int64_t v = int64_t(n_heads) * v_head_dim;
  return size_t(n_layers) * (RowBytes(kv_dtype, k) + RowBytes(kv_dtype, v));
}

ModelConfig LoadHfConfig(const std::string& path, int64_t layers_present) {
  const json j = json_field::ReadFile(path);
  return ParseHfConfig(j, path, layers_present);
}

json ToHfConfig(const ModelConfig& c) {
  json j;
  j["architectures"] = {ArchName(c.arch)};
  static const char* kTypes[] = {"llama", "qwen2", "deepseek_v2", "deepseek_v3"};
  j["model_type"] = kTypes[int(c.arch)];
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] =
      c.layer_intermediate.empty() ? json(c.intermediate_size) : json(c.layer_intermediate);
  j["num_hidden_layers"] = c.n_layers;
  if (c.num_nextn_predict_layers > 0) j["num_nextn_predict_layers"] = c.num_nextn_predict_layers;
  j["num_attention_heads"] = c.layer_heads.empty() ? json(c.n_heads) : json(c.layer_heads);
  j["num_key_value_heads"] = c.layer_kv_heads.empty() ? json(c.n_kv_heads) : json(c.layer_kv_heads);
  if (!c.is_mla()) j["head_dim"] = c.head_dim;
  if (c.rotary_dim > 0) j["partial_rotary_factor"] = double(c.rotary_dim) / c.head_dim;
  if (c.mlp_bias) j["mlp_bias"] = true;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["attention_bias"] = c.attention_bias;
  j["dtype"] = c.dtype == DType::kF32 ? "float32" : c.dtype == DType::kF16 ? "float16" : "bfloat16";
  json rp = {{"rope_theta", c.rope_theta}, {"rope_type", c.rope.type}};
  if (c.rope.type != "default") {
    rp["factor"] = c.rope.factor;
    if (c.rope.original_max_position_embeddings)
      rp["original_max_position_embeddings"] = c.rope.original_max_position_embeddings;
  }
  if (c.rope.type == "llama3") {
    rp["low_freq_factor"] = c.rope.low_freq_factor;
    rp["high_freq_factor"] = c.rope.high_freq_factor;
  }
  if (c.rope.type == "yarn") {
    rp["beta_fast"] = c.rope.beta_fast;
    rp["beta_slow"] = c.rope.beta_slow;
    if (c.rope.mscale) rp["mscale"] = c.rope.mscale;
    if (c.rope.mscale_all_dim) rp["mscale_all_dim"] = c.rope.mscale_all_dim;
  }
  j["rope_parameters"] = rp;
  if (c.is_mla()) {
    j["q_lora_rank"] = c.q_lora_rank ? json(c.q_lora_rank) : json(nullptr);
    j["kv_lora_rank"] = c.kv_lora_rank;
    j["qk_nope_head_dim"] = c.qk_nope_head_dim;
    j["qk_rope_head_dim"] = c.qk_rope_head_dim;
    j["v_head_dim"] = c.v_head_dim;
    j["n_routed_experts"] = c.n_routed_experts;
    j["n_shared_experts"] = c.n_shared_experts;
    j["moe_intermediate_size"] = c.moe_intermediate_size;
    j["num_experts_per_tok"] = c.num_experts_per_tok;
    j["first_k_dense_replace"] = c.first_k_dense_replace;
    j["moe_layer_freq"] = c.moe_layer_freq;
    j["n_group"] = c.n_group;
    j["topk_group"] = c.topk_group;
    j["topk_method"] = c.topk_method;
    j["scoring_func"] = c.scoring_func;
    j["norm_topk_prob"] = c.norm_topk_prob;
    j["routed_scaling_factor"] = c.routed_scaling_factor;
  }
  if (!c.eos_token_ids.empty()) j["eos_token_id"] = c.eos_token_ids;
  if (c.bos_token_id >= 0) j["bos_token_id"] = c.bos_token_id;
  return j;
}

}  // namespace es
