// ConvertToGguf: Hugging Face config + tensors + tokenizer files -> a GGUF file llama.cpp loads
// (see include/edgeseek/internal/formats/gguf_convert.h for what is written and why).
//
// Sections: config helpers · hyper-parameters · tokenizer · tensor plan · writing.
#include "edgeseek/internal/formats/gguf_convert.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <unordered_map>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/core/json_field.h"
#include "edgeseek/internal/core/thread_pool.h"
#include "edgeseek/internal/quant/blocks.h"

namespace es {

namespace fs = std::filesystem;
using nlohmann::json;

// ---------------------------------------------------------------------------------------------
// Config helpers (both config.json dialects: hub `rope_theta` + `rope_scaling`, transformers-5
// `rope_parameters`).
namespace {

bool HasNumber(const json& j, const char* key) { return j.contains(key) && j[key].is_number(); }

int64_t GetInt(const json& j, const char* key, const std::string& where) {
  return json_field::Get<int64_t>(j, key, where);
}
int64_t GetIntOr(const json& j, const char* key, int64_t def, const std::string& where) {
  return json_field::Opt<int64_t>(j, key, def, where);
}
double GetDoubleOr(const json& j, const char* key, double def, const std::string& where) {
  return json_field::Opt<double>(j, key, def, where);
}

// The rope scaling object ({} when none) with its type under "type".
json RopeScaling(const json& c) {
  json r = json::object();
  if (c.contains("rope_parameters") && c["rope_parameters"].is_object())
    r = c["rope_parameters"];
  else if (c.contains("rope_scaling") && c["rope_scaling"].is_object())
    r = c["rope_scaling"];
  std::string type = "default";
  if (r.contains("rope_type") && r["rope_type"].is_string())
    type = r["rope_type"].get<std::string>();
  else if (r.contains("type") && r["type"].is_string())
    type = r["type"].get<std::string>();
  r["type"] = type;
  return r;
}

double RopeTheta(const json& c, const std::string& where) {
  if (HasNumber(c, "rope_theta")) return c["rope_theta"].get<double>();
  if (c.contains("rope_parameters") && c["rope_parameters"].is_object())
    return GetDoubleOr(c["rope_parameters"], "rope_theta", 10000.0, where + ": rope_parameters");
  return 10000.0;
}

int HeadDim(const json& c, const std::string& where) {
  const int64_t heads = GetInt(c, "num_attention_heads", where);
  ES_CHECK(heads > 0, where, ": num_attention_heads must be positive");
  return int(GetIntOr(c, "head_dim", GetInt(c, "hidden_size", where) / heads, where));
}

}  // namespace

std::string GgufArchForConfig(const json& c, const std::string& where) {
  std::string mt = c.contains("model_type") && c["model_type"].is_string()
                       ? c["model_type"].get<std::string>()
                       : "";
  if (mt.empty() && c.contains("architectures") && c["architectures"].is_array() &&
      !c["architectures"].empty() && c["architectures"][0].is_string()) {
    const std::string a = c["architectures"][0].get<std::string>();
    if (a == "LlamaForCausalLM")
      mt = "llama";
    else if (a == "Qwen2ForCausalLM")
      mt = "qwen2";
    else if (a == "DeepseekV2ForCausalLM")
      mt = "deepseek_v2";
    else if (a == "DeepseekV3ForCausalLM")
      mt = "deepseek_v3";
    else
      mt = a;
  }
  if (mt == "llama") return std::string(kArchLlama);
  if (mt == "qwen2") return std::string(kArchQwen2);
  if (mt == "deepseek_v2" || mt == "deepseek_v3") return std::string(kArchDeepseek2);
  Fail(where, ": unsupported architecture '", mt.empty() ? "(no model_type)" : mt,
       "' (convert supports llama, qwen2, deepseek_v2, deepseek_v3)");
}

// ---------------------------------------------------------------------------------------------
// Hyper-parameters.

std::vector<float> Llama3RopeFreqFactors(const json& c, int rope_dim) {
  const json r = RopeScaling(c);
  if (r["type"] != "llama3") return {};
  const std::string where = "rope scaling";
  const double factor = GetDoubleOr(r, "factor", 8.0, where);
  const double low = GetDoubleOr(r, "low_freq_factor", 1.0, where);
  const double high = GetDoubleOr(r, "high_freq_factor", 4.0, where);
  const double old_ctx = double(GetIntOr(r, "original_max_position_embeddings", 8192, where));
  const double base = RopeTheta(c, "config.json");
  const double low_wavelen = old_ctx / low, high_wavelen = old_ctx / high;
  std::vector<float> out;
  for (int i = 0; i < rope_dim; i += 2) {
    const double freq = 1.0 / std::pow(base, double(i) / double(rope_dim));
    const double wavelen = 2.0 * M_PI / freq;
    double f;
    if (wavelen < high_wavelen) {
      f = 1.0;
    } else if (wavelen > low_wavelen) {
      f = factor;
    } else {
      const double smooth = (old_ctx / wavelen - low) / (high - low);
      f = 1.0 / ((1.0 - smooth) / factor + smooth);
    }
    out.push_back(float(f));
  }
  return out;
}

void SetGgufHparams(GgufWriter& w, const std::string& arch, const json& c,
                    const std::string& where) {
  auto key = [&](std::string_view suffix) { return ArchKey(arch, suffix); };
  auto u32 = [&](std::string_view suffix, int64_t v) {
    ES_CHECK(v >= 0 && v <= int64_t(UINT32_MAX), where, ": value ", v, " for ", key(suffix),
             " is out of range");
    w.Set(key(suffix), GgufValue::U32(uint32_t(v)));
  };
  auto f32 = [&](std::string_view suffix, double v) {
    w.Set(key(suffix), GgufValue::F32(float(v)));
  };
  const int64_t hidden = GetInt(c, "hidden_size", where);
  const int64_t heads = GetInt(c, "num_attention_heads", where);
  const int64_t kv_heads = GetIntOr(c, "num_key_value_heads", heads, where);
  u32(kKeyContextLength, GetIntOr(c, "max_position_embeddings", 4096, where));
  u32(kKeyEmbeddingLength, hidden);
  u32(kKeyBlockCount, GetInt(c, "num_hidden_layers", where));
  u32(kKeyFeedForwardLength, GetInt(c, "intermediate_size", where));
  u32(kKeyAttnHeadCount, heads);
  u32(kKeyAttnHeadCountKv, kv_heads);
  f32(kKeyAttnLayerNormRmsEps, GetDoubleOr(c, "rms_norm_eps", 1e-6, where));
  f32(kKeyRopeFreqBase, RopeTheta(c, where));
  u32(kKeyVocabSize, GetInt(c, "vocab_size", where));
  const json rs = RopeScaling(c);
  const std::string rtype = rs["type"].get<std::string>();
  if (arch == kArchDeepseek2) {
    const int64_t nope = GetInt(c, "qk_nope_head_dim", where),
                  rope = GetInt(c, "qk_rope_head_dim", where);
    u32(kKeyLeadingDenseBlockCount, GetIntOr(c, "first_k_dense_replace", 0, where));
    const int64_t q_lora = GetIntOr(c, "q_lora_rank", 0, where);
    if (q_lora > 0) u32(kKeyAttnQLoraRank, q_lora);
    u32(kKeyAttnKvLoraRank, GetInt(c, "kv_lora_rank", where));
    u32(kKeyAttnKeyLength, nope + rope);
    u32(kKeyAttnValueLength, GetInt(c, "v_head_dim", where));
    u32(kKeyRopeDimensionCount, rope);
    const int64_t experts = GetIntOr(c, "n_routed_experts", 0, where);
    if (experts > 0) {
      u32(kKeyExpertFeedForwardLength, GetInt(c, "moe_intermediate_size", where));
      u32(kKeyExpertCount, experts);
      u32(kKeyExpertSharedCount, GetIntOr(c, "n_shared_experts", 0, where));
      u32(kKeyExpertUsedCount, GetInt(c, "num_experts_per_tok", where));
      f32(kKeyExpertWeightsScale, GetDoubleOr(c, "routed_scaling_factor", 1.0, where));
      const bool norm = c.contains("norm_topk_prob") && c["norm_topk_prob"].is_boolean() &&
                        c["norm_topk_prob"].get<bool>();
      w.Set(key(kKeyExpertWeightsNorm), GgufValue::Bool(norm));
      const std::string scoring = c.contains("scoring_func") && c["scoring_func"].is_string()
                                      ? c["scoring_func"].get<std::string>()
                                      : "softmax";
      ES_CHECK(scoring == "softmax" || scoring == "sigmoid", where, ": scoring_func '", scoring,
               "' is not supported (softmax or sigmoid)");
      u32(kKeyExpertGatingFunc, scoring == "softmax" ? 1 : 2);
      u32(kKeyExpertGroupCount, GetIntOr(c, "n_group", 1, where));
      u32(kKeyExpertGroupUsedCount, GetIntOr(c, "topk_group", 1, where));
    }
    if (rtype == "yarn") {
      w.Set(key(kKeyRopeScalingType), GgufValue::Str("yarn"));
      f32(kKeyRopeScalingFactor, GetDoubleOr(rs, "factor", 1.0, where));
      u32(kKeyRopeScalingOrigCtxLen, GetIntOr(rs, "original_max_position_embeddings", 4096, where));
      // llama.cpp's deepseek2 graph takes 0.1 * mscale_all_dim as the yarn log multiplier.
      f32(kKeyRopeScalingYarnLogMul, 0.1 * GetDoubleOr(rs, "mscale_all_dim", 0.0, where));
    } else {
      ES_CHECK(rtype == "default", where, ": rope scaling '", rtype,
               "' is not supported for deepseek2");
    }
    return;
  }
  const int head_dim = HeadDim(c, where);
  u32(kKeyRopeDimensionCount, head_dim);
  if (head_dim != hidden / heads) {
    u32(kKeyAttnKeyLength, head_dim);
    u32(kKeyAttnValueLength, head_dim);
  }
  if (rtype == "linear") {
    w.Set(key(kKeyRopeScalingType), GgufValue::Str("linear"));
    f32(kKeyRopeScalingFactor, GetDoubleOr(rs, "factor", 1.0, where));
  } else if (rtype == "yarn") {
    w.Set(key(kKeyRopeScalingType), GgufValue::Str("yarn"));
    f32(kKeyRopeScalingFactor, GetDoubleOr(rs, "factor", 1.0, where));
    u32(kKeyRopeScalingOrigCtxLen, GetIntOr(rs, "original_max_position_embeddings", 4096, where));
  } else {
    // llama3 scaling travels as the rope_freqs tensor; anything else is unknown here.
    ES_CHECK(rtype == "default" || rtype == "llama3", where, ": rope scaling '", rtype,
             "' is not supported by convert");
  }
}

// ---------------------------------------------------------------------------------------------
// Tokenizer.
namespace {

json ReadJsonFile(const std::string& path) { return json_field::ReadFile(path); }

// The Split regexes of a pre_tokenizer (in order), and whether a ByteLevel with use_regex is there.
void CollectSplits(const json& p, std::vector<std::string>* splits, bool* byte_level_regex,
                   const std::string& where) {
  if (!p.is_object()) return;
  const std::string type = json_field::Opt<std::string>(p, "type", "", where);
  if (type == "Sequence" && p.contains("pretokenizers")) {
    for (const auto& q : p["pretokenizers"]) CollectSplits(q, splits, byte_level_regex, where);
  } else if (type == "Split" && p.contains("pattern") && p["pattern"].is_object()) {
    const json& pat = p["pattern"];
    if (pat.contains("Regex") && pat["Regex"].is_string())
      splits->push_back(pat["Regex"].get<std::string>());
    else if (pat.contains("String") && pat["String"].is_string())
      splits->push_back(pat["String"].get<std::string>());
  } else if (type == "ByteLevel") {
    *byte_level_regex = *byte_level_regex || json_field::Opt<bool>(p, "use_regex", true, where);
  }
}

bool Contains(const std::string& s, std::string_view part) {
  return s.find(part) != std::string::npos;
}

bool LooksSpecial(const std::string& t) {
  auto ends = [&](std::string_view a, std::string_view b) {
    return t.size() >= a.size() + b.size() && t.compare(0, a.size(), a) == 0 &&
           t.compare(t.size() - b.size(), b.size(), b) == 0;
  };
  return t == "<pad>" || t == "<mask>" || ends("<|", "|>") ||
         ends("<\xef\xbd\x9c", "\xef\xbd\x9c>");  // <｜ … ｜>
}

// The text of a special token entry of tokenizer_config.json: a string or {"content": ...}
// (absent or null: none).
std::optional<std::string> SpecialText(const json& cfg, const std::string& key,
                                       const std::string& where) {
  if (!cfg.contains(key) || cfg[key].is_null()) return std::nullopt;
  const json& v = cfg[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object()) return json_field::Get<std::string>(v, "content", where + ": " + key);
  Fail(where, ": field '", key, "' must be a string or {\"content\": ...} (got ", v.type_name(),
       ")");
}

}  // namespace

std::string GgufPreTokenizerName(const json& tok, const std::string& where) {
  static const std::string kLlama3 =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  static const std::string kQwen2 =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  std::vector<std::string> splits;
  bool byte_level_regex = false;
  if (tok.contains("pre_tokenizer"))
    CollectSplits(tok["pre_tokenizer"], &splits, &byte_level_regex, where + ": pre_tokenizer");
  if (splits.size() == 1 && splits[0] == kLlama3) return "llama-bpe";
  if (splits.size() == 1 && splits[0] == kQwen2) return "qwen2";
  if (splits.size() == 3 && splits[0] == R"(\p{N}{1,3})" &&
      Contains(splits[1], "\xe4\xb8\x80-\xe9\xbe\xa5") && Contains(splits[2], R"([\p{L}\p{M}]+)"))
    return "deepseek-v3";
  if (splits.size() >= 5 && splits[0] == "[\r\n]" && splits.back() == R"(\p{N}+)")
    return "deepseek-llm";
  if (splits.empty() && byte_level_regex) return "gpt-2";
  std::string shown = splits.empty() ? "(none)" : splits[0].substr(0, 60);
  Fail(where, ": pre-tokenizer not recognized (first split pattern ", shown,
       "); known: llama-bpe, qwen2, deepseek-v3, deepseek-llm, gpt-2");
}

namespace {

// The tokenizer's tokens by id [vocab_size] (ids it leaves out become "[PADi]", unused), their
// GGUF token types, and each token's id.
struct GgufVocab {
  std::vector<std::string> tokens;
  std::vector<int64_t> types;
  std::unordered_map<std::string, int64_t> id_of;
};

// Tokens by id: the BPE vocabulary, then the added tokens (which may repeat vocabulary ids).
GgufVocab ReadGgufVocab(const json& tok, const std::string& tok_path, int64_t vocab_size) {
  const json& model = tok["model"];
  std::map<int64_t, std::string> by_id;
  std::unordered_map<int64_t, int64_t> type_of;
  for (const auto& [text, id] : model["vocab"].items()) {
    ES_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0, tok_path, ": token '", text,
             "' has a bad id");
    by_id[id.get<int64_t>()] = text;
  }
  if (tok.contains("added_tokens") && tok["added_tokens"].is_array()) {
    for (const auto& a : tok["added_tokens"]) {
      ES_CHECK(a.contains("id") && a["id"].is_number_integer() && a.contains("content") &&
                   a["content"].is_string(),
               tok_path, ": added_tokens entry without id/content");
      const int64_t id = a["id"].get<int64_t>();
      const std::string text = a["content"].get<std::string>();
      by_id[id] = text;
      const bool special =
          json_field::Opt<bool>(a, "special", false, tok_path + ": added token '" + text + "'") ||
          LooksSpecial(text);
      type_of[id] = int64_t(special ? GgufTokenType::kControl : GgufTokenType::kUserDefined);
    }
  }
  ES_CHECK(!by_id.empty(), tok_path, ": empty vocabulary");
  const int64_t max_id = by_id.rbegin()->first;
  ES_CHECK(max_id < vocab_size, tok_path, ": token id ", max_id,
           " does not fit the model's vocabulary of ", vocab_size);
  GgufVocab v;
  v.tokens.resize(static_cast<size_t>(vocab_size));
  v.types.assign(size_t(vocab_size), static_cast<int64_t>(GgufTokenType::kNormal));
  for (int64_t i = 0; i < vocab_size; ++i) {
    auto it = by_id.find(i);
    if (it == by_id.end()) {
      v.tokens[size_t(i)] = "[PAD" + std::to_string(i) + "]";
      v.types[size_t(i)] = int64_t(GgufTokenType::kUnused);
      continue;
    }
    v.tokens[size_t(i)] = it->second;
    if (auto t = type_of.find(i); t != type_of.end()) v.types[size_t(i)] = t->second;
    v.id_of.emplace(it->second, i);
  }
  return v;
}

// The merges as "a b" strings (tokenizer.json writes "a b" or ["a", "b"]).
std::vector<std::string> ReadGgufMerges(const json& model, const std::string& tok_path) {
  std::vector<std::string> merges;
  if (!model.contains("merges") || !model["merges"].is_array()) return merges;
  for (const auto& m : model["merges"]) {
    if (m.is_string()) {
      merges.push_back(m.get<std::string>());
    } else {
      ES_CHECK(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(), tok_path,
               ": merges entry ", merges.size(), " is neither \"a b\" nor [\"a\", \"b\"]");
      merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
    }
  }
  return merges;
}

// Special ids: tokenizer_config.json names them by text; config.json by id for the others.
// Returns the ids set, by name ("bos", "eos", ...).
std::map<std::string, int64_t> SetSpecialIds(GgufWriter& w, const json& tcfg,
                                             const std::string& cfg_path, const json& config,
                                             const GgufVocab& v, int64_t vocab_size) {
  struct SpecialKey {
    const char* name;
    std::string_view key;
  };
  const SpecialKey kSpecials[] = {{"bos", kKeyTokenizerBosId},
                                  {"eos", kKeyTokenizerEosId},
                                  {"unk", kKeyTokenizerUnkId},
                                  {"sep", kKeyTokenizerSepId},
                                  {"pad", kKeyTokenizerPadId}};
  std::map<std::string, int64_t> special_ids;
  for (const SpecialKey& s : kSpecials) {
    int64_t id = -1;
    if (auto text = SpecialText(tcfg, std::string(s.name) + "_token", cfg_path)) {
      auto it = v.id_of.find(*text);
      ES_CHECK(it != v.id_of.end(), cfg_path, ": ", s.name, "_token '", *text,
               "' is not in the vocabulary");
      id = it->second;
    } else {
      const std::string k = std::string(s.name) + "_token_id";
      if (config.contains(k)) {
        const json& val = config[k];
        if (val.is_number_integer())
          id = val.get<int64_t>();
        else if (val.is_array() && !val.empty() && val[0].is_number_integer())
          id = val[0].get<int64_t>();
      }
    }
    if (id < 0) continue;
    ES_CHECK(id < vocab_size, "config: ", s.name, " token id ", id,
             " is outside the vocabulary of ", vocab_size);
    w.Set(std::string(s.key), GgufValue::U32(uint32_t(id)));
    special_ids[s.name] = id;
  }
  return special_ids;
}

// add_bos / add_eos: tokenizer_config.json, else the post-processor's template.
void SetAddBosEos(GgufWriter& w, const json& tok, const std::string& tok_path, const json& tcfg,
                  const std::string& cfg_path, const GgufVocab& v,
                  std::map<std::string, int64_t>& special_ids) {
  std::optional<bool> add_bos, add_eos;
  if (tcfg.contains("add_bos_token") && !tcfg["add_bos_token"].is_null())
    add_bos = json_field::As<bool>(tcfg["add_bos_token"], "add_bos_token", cfg_path);
  if (tcfg.contains("add_eos_token") && !tcfg["add_eos_token"].is_null())
    add_eos = json_field::As<bool>(tcfg["add_eos_token"], "add_eos_token", cfg_path);
  std::function<void(const json&)> scan = [&](const json& p) {
    if (!p.is_object()) return;
    const std::string type =
        json_field::Opt<std::string>(p, "type", "", tok_path + ": post_processor");
    if (type == "Sequence" && p.contains("processors"))
      for (const auto& q : p["processors"]) scan(q);
    if (type != "TemplateProcessing" || !p.contains("single") || !p["single"].is_array()) return;
    const json& single = p["single"];
    auto special_is = [&](const json& e, const char* which) {
      if (!e.is_object() || !e.contains("SpecialToken")) return false;
      const std::string text = json_field::Opt<std::string>(
          e["SpecialToken"], "id", "", tok_path + ": post_processor SpecialToken");
      auto it = v.id_of.find(text);
      return it != v.id_of.end() && special_ids.count(which) && special_ids[which] == it->second;
    };
    if (!add_bos) add_bos = !single.empty() && special_is(single.front(), "bos");
    if (!add_eos) add_eos = !single.empty() && special_is(single.back(), "eos");
  };
  if (tok.contains("post_processor")) scan(tok["post_processor"]);
  if (add_bos) w.Set(std::string(kKeyTokenizerAddBos), GgufValue::Bool(*add_bos));
  if (add_eos) w.Set(std::string(kKeyTokenizerAddEos), GgufValue::Bool(*add_eos));
}

// Chat template(s): tokenizer_config.json's string or named list, else chat_template.jinja.
void SetChatTemplates(GgufWriter& w, const json& tcfg, const std::string& cfg_path,
                      const std::string& dir) {
  const std::string jinja = (fs::path(dir) / "chat_template.jinja").string();
  if (tcfg.contains("chat_template") && tcfg["chat_template"].is_string()) {
    w.Set(std::string(kKeyTokenizerChatTemplate),
          GgufValue::Str(tcfg["chat_template"].get<std::string>()));
  } else if (tcfg.contains("chat_template") && !tcfg["chat_template"].is_null() &&
             !tcfg["chat_template"].is_array()) {
    Fail(cfg_path,
         ": field 'chat_template' must be a string or a list of {\"name\", \"template\"}");
  } else if (tcfg.contains("chat_template") && tcfg["chat_template"].is_array()) {
    for (const auto& t : tcfg["chat_template"]) {
      ES_CHECK(t.contains("name") && t["name"].is_string() && t.contains("template") &&
                   t["template"].is_string(),
               cfg_path, ": chat_template entries need 'name' and 'template'");
      const std::string name = t["name"].get<std::string>();
      const std::string key = name == "default"
                                  ? std::string(kKeyTokenizerChatTemplate)
                                  : std::string(kKeyTokenizerChatTemplate) + "." + name;
      w.Set(key, GgufValue::Str(t["template"].get<std::string>()));
    }
  } else if (fs::exists(jinja)) {
    std::ifstream f(jinja);
    std::stringstream ss;
    ss << f.rdbuf();
    w.Set(std::string(kKeyTokenizerChatTemplate), GgufValue::Str(ss.str()));
  }
}

}  // namespace

void SetGgufTokenizer(GgufWriter& w, const std::string& dir, int64_t vocab_size,
                      const json& config) {
  const std::string tok_path = (fs::path(dir) / "tokenizer.json").string();
  const json tok = ReadJsonFile(tok_path);
  ES_CHECK(tok.contains("model") && tok["model"].is_object(), tok_path, ": missing 'model'");
  const json& model = tok["model"];
  const std::string mtype = json_field::Opt<std::string>(model, "type", "", tok_path + ": model");
  ES_CHECK(mtype == "BPE", tok_path, ": tokenizer model '", mtype,
           "' is not supported (byte-level BPE only)");
  ES_CHECK(!json_field::Opt<bool>(model, "byte_fallback", false, tok_path + ": model"), tok_path,
           ": byte-fallback (SentencePiece-style) BPE is not supported (byte-level BPE only)");
  ES_CHECK(model.contains("vocab") && model["vocab"].is_object(), tok_path,
           ": missing model.vocab");
  GgufVocab v = ReadGgufVocab(tok, tok_path, vocab_size);
  std::vector<std::string> merges = ReadGgufMerges(model, tok_path);
  w.Set(std::string(kKeyTokenizerModel), GgufValue::Str("gpt2"));
  w.Set(std::string(kKeyTokenizerPre), GgufValue::Str(GgufPreTokenizerName(tok, tok_path)));
  w.Set(std::string(kKeyTokenizerTokens), GgufValue::StrArray(std::move(v.tokens)));
  w.Set(std::string(kKeyTokenizerTokenType),
        GgufValue::IntArray(GgufType::kI32, std::move(v.types)));
  w.Set(std::string(kKeyTokenizerMerges), GgufValue::StrArray(std::move(merges)));
  const std::string cfg_path = (fs::path(dir) / "tokenizer_config.json").string();
  json tcfg = json::object();
  if (fs::exists(cfg_path)) tcfg = ReadJsonFile(cfg_path);
  std::map<std::string, int64_t> special_ids =
      SetSpecialIds(w, tcfg, cfg_path, config, v, vocab_size);
  SetAddBosEos(w, tok, tok_path, tcfg, cfg_path, v, special_ids);
  SetChatTemplates(w, tcfg, cfg_path, dir);
}

void PermuteRopeRows(const uint8_t* src, uint8_t* dst, int64_t rows, size_t row_bytes, int heads) {
  ES_CHECK(heads > 0 && rows % heads == 0 && (rows / heads) % 2 == 0, "rope permutation: ", rows,
           " rows do not split into ", heads, " heads of even size");
  const int64_t d = rows / heads, half = d / 2;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < half; ++i)
      for (int64_t j = 0; j < 2; ++j)
        std::memcpy(dst + size_t(h * d + 2 * i + j) * row_bytes,
                    src + size_t(h * d + j * half + i) * row_bytes, row_bytes);
}

// ---------------------------------------------------------------------------------------------
// Tensor plan: one entry per output tensor (experts stacked), in order of first appearance.
namespace {

struct OutTensor {
  std::string name;  // GGUF name
  Shape shape;       // outermost-first; experts prepended when stacked
  DType src_type = DType::kF32;
  DType dst_type = DType::kF32;
  std::vector<const Tensor*> parts;  // one, or one per expert (in expert order)
  int permute_heads = 0;             // > 0: llama q/k rope permutation over this many heads
  std::vector<float> generated;      // tensors made here (rope_freqs)
  uint64_t in_bytes = 0;
};

bool EndsWith(const std::string& s, std::string_view e) {
  return s.size() >= e.size() && s.compare(s.size() - e.size(), e.size(), e) == 0;
}

std::vector<OutTensor> PlanTensors(const GgufConvertSource& src, const std::string& arch) {
  const std::string& where = src.where;
  std::vector<OutTensor> out;
  std::map<std::string, size_t> index;  // gguf name -> out position
  std::map<std::string, std::map<int, const Tensor*>> experts;
  std::map<std::string, bool> seen;
  const int heads = int(GetInt(src.config, "num_attention_heads", where));
  const int kv_heads = int(GetIntOr(src.config, "num_key_value_heads", heads, where));
  for (const Tensor* t : src.tensors) {
    if (!t || seen[t->name]) continue;
    seen[t->name] = true;
    const auto m = HfToGgufName(t->name);
    if (!m) continue;  // derived or unused tensors (rotary inv_freq, MLA absorption)
    auto it = index.find(m->gguf_name);
    const bool created = it == index.end();
    if (created) {
      OutTensor o;
      o.name = m->gguf_name;
      o.shape = t->shape;
      o.src_type = t->dtype;
      if (arch == kArchLlama) {
        if (EndsWith(t->name, "self_attn.q_proj.weight") ||
            EndsWith(t->name, "self_attn.q_proj.bias"))
          o.permute_heads = heads;
        if (EndsWith(t->name, "self_attn.k_proj.weight") ||
            EndsWith(t->name, "self_attn.k_proj.bias"))
          o.permute_heads = kv_heads;
      }
      if (m->expert < 0) o.parts.push_back(t);
      index[o.name] = out.size();
      out.push_back(std::move(o));
      it = index.find(m->gguf_name);
    }
    if (m->expert >= 0) {
      OutTensor& o = out[it->second];
      ES_CHECK(t->shape == o.shape && t->dtype == o.src_type, where, ": expert tensor '", t->name,
               "' has shape ", ShapeStr(t->shape), " ", Name(t->dtype), " but expert tensors of ",
               o.name, " have ", ShapeStr(o.shape), " ", Name(o.src_type));
      ES_CHECK(!experts[o.name].count(m->expert), where, ": expert tensor '", t->name,
               "' given twice");
      experts[o.name][m->expert] = t;
    } else {
      ES_CHECK(created, where, ": tensor '", t->name, "' maps to ", m->gguf_name,
               ", which another tensor already fills");
    }
  }
  for (auto& [name, experts_of] : experts) {
    const auto& by_expert = experts_of;  // a plain name: clang 14 cannot capture a binding
    OutTensor& o = out[index[name]];
    const int n = int(by_expert.size());
    ES_CHECK(by_expert.rbegin()->first == n - 1, where, ": ", name, " is missing expert ", [&] {
      int e = 0;
      for (const auto& kv : by_expert) {
        if (kv.first != e) break;
        ++e;
      }
      return e;
    }());
    for (const auto& kv : by_expert) o.parts.push_back(kv.second);
    o.shape.insert(o.shape.begin(), int64_t(n));
  }
  for (OutTensor& o : out) {
    ES_CHECK(!o.shape.empty() && o.shape.back() > 0, where, ": tensor ", o.name, " has shape ",
             ShapeStr(o.shape));
    for (const Tensor* p : o.parts) o.in_bytes += p->nbytes;
  }
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Writing.

namespace {

// Multi-token-prediction modules (blk.<num_hidden_layers>.nextn.*) are blocks too, counted in
// block_count, with nextn_predict_layers saying how many of the last blocks they are (llama.cpp's
// convention); a source without their tensors writes a plain model.
void SetMtpBlocks(GgufWriter& w, const GgufConvertSource& src, const std::string& arch,
                  const std::vector<OutTensor>& plan) {
  const std::string& where = src.where;
  const int64_t n_layers = GetInt(src.config, "num_hidden_layers", where);
  const std::string mtp_prefix = "blk." + std::to_string(n_layers) + ".nextn.";
  const bool has_mtp = std::any_of(plan.begin(), plan.end(), [&](const OutTensor& o) {
    return o.name.compare(0, mtp_prefix.size(), mtp_prefix) == 0;
  });
  if (!has_mtp) return;
  const int64_t nextn = GetIntOr(src.config, "num_nextn_predict_layers", 0, where);
  ES_CHECK(nextn >= 1, where, ": the tensors hold an MTP module (", mtp_prefix,
           "*) but num_nextn_predict_layers is ", nextn);
  w.Set(ArchKey(arch, kKeyBlockCount), GgufValue::U32(uint32_t(n_layers + nextn)));
  w.Set(ArchKey(arch, kKeyNextnPredictLayers), GgufValue::U32(uint32_t(nextn)));
}

// Llama 3's rope_freqs tensor, made from the config's rope scaling (none without it).
void AddRopeFreqs(const GgufConvertSource& src, const std::string& arch,
                  std::vector<OutTensor>& plan) {
  if (arch != kArchLlama) return;
  const std::vector<float> f = Llama3RopeFreqFactors(src.config, HeadDim(src.config, src.where));
  if (f.empty()) return;
  OutTensor o;
  o.name = TensorName(kTensorRopeFreqs);
  o.shape = {int64_t(f.size())};
  o.generated = f;
  o.in_bytes = f.size() * sizeof(float);
  plan.push_back(std::move(o));
}

// Each tensor's output type by the policy, declared to the writer with the file type; counts
// the input bytes.
void DeclareTensors(GgufWriter& w, const GgufConvertSource& src, const QuantPolicy& policy,
                    std::vector<OutTensor>& plan, GgufQuantizeStats& st) {
  bool any_quantized = false;
  for (OutTensor& o : plan) {
    o.dst_type =
        o.generated.empty() ? ChooseType(policy, o.name, o.shape, o.src_type) : DType::kF32;
    ES_CHECK(o.generated.size() || CanQuantize(o.src_type), src.where, ": tensor ", o.name,
             " of type ", Name(o.src_type), " cannot be converted");
    any_quantized |= IsQuantized(o.dst_type);
    w.AddTensor(o.name, o.dst_type, o.shape);
    st.in_bytes += o.in_bytes;
  }
  const int ftype = policy.file_type >= 0 ? policy.file_type : FileTypeFor(policy.default_type);
  if (ftype >= 0) w.Set(std::string(kKeyGeneralFileType), GgufValue::U32(uint32_t(ftype)));
  if (any_quantized)
    w.Set(std::string(kKeyGeneralQuantizationVersion), GgufValue::U32(kGgmlQuantizationVersion));
}

// Buffers reused from tensor to tensor: a made slice (or part), a permuted part, re-encoded rows.
struct ConvertScratch {
  std::vector<uint8_t> made, permuted, out;
};

// Writes one planned tensor read from its source parts: one part (the tensor, or one expert of
// a stacked one) and one slice of its rows at a time; a part without data is made by
// src.fill_rows just before it is written. Returns the bytes written.
size_t WriteTensorRows(GgufWriter& w, const GgufConvertSource& src, const OutTensor& o,
                       ThreadPool& pool, ConvertScratch& sc) {
  const std::string& where = src.where;
  const int64_t cols = o.shape.back();
  const int64_t part_rows = o.parts[0]->rows();
  const size_t in_row = RowBytes(o.src_type, cols), out_row = RowBytes(o.dst_type, cols);
  const int64_t rows = part_rows * int64_t(o.parts.size());
  const bool copy = o.dst_type == o.src_type;
  const int64_t step = StreamStepRows(in_row, out_row);
  // 1-D tensors permuted (llama q/k biases) are rows of one element here.
  const bool one_d = o.shape.size() == 1;
  const int64_t prow = one_d ? cols : part_rows;  // rows seen by the permutation
  const size_t prow_bytes = one_d ? RowBytes(o.src_type, 1) : in_row;
  for (size_t p = 0; p < o.parts.size(); ++p) {
    const Tensor& part = *o.parts[p];
    ES_CHECK(part.data || src.fill_rows, where, ": tensor '", part.name, "' has no data");
    const uint8_t* whole = part.bytes();  // the part's rows, when they are all at hand
    if (o.permute_heads > 0) {            // the permutation moves rows across the part
      if (!whole) {
        sc.made.resize(part.nbytes);
        src.fill_rows(part, 0, part_rows, sc.made.data(), pool);
        whole = sc.made.data();
      }
      sc.permuted.resize(size_t(prow) * prow_bytes);
      PermuteRopeRows(whole, sc.permuted.data(), prow, prow_bytes, o.permute_heads);
      whole = sc.permuted.data();
    }
    for (int64_t r0 = 0; r0 < part_rows; r0 += step) {
      const int64_t n = std::min(step, part_rows - r0);
      const uint8_t* in = whole ? whole + size_t(r0) * in_row : nullptr;
      if (!in) {
        sc.made.resize(size_t(n) * in_row);
        src.fill_rows(part, r0, r0 + n, sc.made.data(), pool);
        in = sc.made.data();
      }
      if (copy) {
        w.WriteTensorPart(in, size_t(n) * in_row);
      } else {
        sc.out.resize(size_t(n) * out_row);
        RequantizeRows(
            pool, o.src_type, [&](int64_t r) { return in + size_t(r) * in_row; }, o.dst_type, n,
            cols, sc.out.data(), where, o.name, int64_t(p) * part_rows + r0);
        w.WriteTensorPart(sc.out.data(), size_t(n) * out_row);
      }
      if (src.release && part.data && o.permute_heads == 0) src.release(part, r0, r0 + n);
    }
    if (src.release && part.data && o.permute_heads > 0) src.release(part, 0, part_rows);
  }
  if (rows == 0) w.WriteTensorData(nullptr, 0);
  return out_row * size_t(rows);
}

}  // namespace

GgufQuantizeStats ConvertToGguf(const GgufConvertSource& src, const std::string& out_path,
                                const QuantPolicy& policy, const GgufQuantizeOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string& where = src.where;
  const std::string arch = GgufArchForConfig(src.config, where);
  GgufWriter w;
  w.Set(std::string(kKeyGeneralArchitecture), GgufValue::Str(arch));
  w.Set(std::string(kKeyGeneralName), GgufValue::Str(src.name.empty() ? arch : src.name));
  SetGgufHparams(w, arch, src.config, where);
  const int64_t vocab = GetInt(src.config, "vocab_size", where);
  if (!src.tokenizer_dir.empty()) SetGgufTokenizer(w, src.tokenizer_dir, vocab, src.config);

  std::vector<OutTensor> plan = PlanTensors(src, arch);
  ES_CHECK(!plan.empty(), where, ": no tensor of the checkpoint maps to a GGUF name");
  SetMtpBlocks(w, src, arch, plan);
  AddRopeFreqs(src, arch, plan);
  GgufQuantizeStats st;
  DeclareTensors(w, src, policy, plan, st);

  ThreadPool pool(options.threads);
  ConvertScratch scratch;
  w.Begin(out_path);
  uint64_t done = 0;
  for (const OutTensor& o : plan) {
    ++st.tensors;
    ++st.out_types[o.dst_type];
    if (!o.generated.empty()) {
      w.WriteTensorData(o.generated.data(), o.generated.size() * sizeof(float));
      st.out_bytes += o.generated.size() * sizeof(float);
      ++st.copied;
    } else {
      st.out_bytes += WriteTensorRows(w, src, o, pool, scratch);
      ++(o.dst_type == o.src_type ? st.copied : st.requantized);
    }
    done += o.in_bytes;
    if (options.progress) options.progress(done, st.in_bytes, o.name);
  }
  w.Finish();
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return st;
}

}  // namespace es
