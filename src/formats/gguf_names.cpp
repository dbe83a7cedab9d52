// GGUF key and tensor-name tables (see include/edgeseek/internal/formats/gguf_names.h).
#include "edgeseek/internal/formats/gguf_names.h"

#include <charconv>
#include <string>

namespace es {

std::string ArchKey(std::string_view arch, std::string_view suffix) {
  std::string k(arch);
  k += '.';
  k += suffix;
  return k;
}

const std::vector<std::string_view>& ArchKeySuffixes(std::string_view arch) {
  static const std::vector<std::string_view> kDense = {
      kKeyContextLength, kKeyEmbeddingLength, kKeyBlockCount,          kKeyFeedForwardLength,
      kKeyAttnHeadCount, kKeyAttnHeadCountKv, kKeyAttnLayerNormRmsEps, kKeyRopeDimensionCount,
      kKeyRopeFreqBase,  kKeyRopeScalingType, kKeyRopeScalingFactor,   kKeyRopeScalingOrigCtxLen,
      kKeyVocabSize};
  static const std::vector<std::string_view> kDeepseek2 = {
      kKeyContextLength,         kKeyEmbeddingLength,        kKeyBlockCount,
      kKeyFeedForwardLength,     kKeyAttnHeadCount,          kKeyAttnHeadCountKv,
      kKeyAttnLayerNormRmsEps,   kKeyAttnQLoraRank,          kKeyAttnKvLoraRank,
      kKeyAttnKeyLength,         kKeyAttnValueLength,        kKeyAttnKeyLengthMla,
      kKeyAttnValueLengthMla,    kKeyRopeDimensionCount,     kKeyRopeFreqBase,
      kKeyRopeScalingType,       kKeyRopeScalingFactor,      kKeyRopeScalingOrigCtxLen,
      kKeyRopeScalingYarnLogMul, kKeyLeadingDenseBlockCount, kKeyExpertFeedForwardLength,
      kKeyExpertCount,           kKeyExpertUsedCount,        kKeyExpertSharedCount,
      kKeyExpertWeightsScale,    kKeyExpertWeightsNorm,      kKeyExpertGatingFunc,
      kKeyExpertGroupCount,      kKeyExpertGroupUsedCount,   kKeyVocabSize};
  static const std::vector<std::string_view> kNone;
  if (arch == kArchQwen2 || arch == kArchLlama) return kDense;
  if (arch == kArchDeepseek2) return kDeepseek2;
  return kNone;
}

std::string TensorName(std::string_view base, std::string_view suffix) {
  std::string n(base);
  n += '.';
  n += suffix;
  return n;
}

std::string BlockTensorName(int layer, std::string_view base, std::string_view suffix) {
  return "blk." + std::to_string(layer) + "." + TensorName(base, suffix);
}

const std::vector<GgufNameRule>& GgufNameTable() {
  static const std::vector<GgufNameRule> kTable = {
      {"model.embed_tokens", "token_embd", false},
      {"model.norm", "output_norm", false},
      {"lm_head", "output", false},
      {"model.layers.{N}.input_layernorm", "blk.{N}.attn_norm", false},
      {"model.layers.{N}.post_attention_layernorm", "blk.{N}.ffn_norm", false},
      // dense attention (qwen2 also has q/k/v biases: same names, ".bias")
      {"model.layers.{N}.self_attn.q_proj", "blk.{N}.attn_q", false},
      {"model.layers.{N}.self_attn.k_proj", "blk.{N}.attn_k", false},
      {"model.layers.{N}.self_attn.v_proj", "blk.{N}.attn_v", false},
      {"model.layers.{N}.self_attn.o_proj", "blk.{N}.attn_output", false},
      // MLA (deepseek2)
      {"model.layers.{N}.self_attn.q_a_proj", "blk.{N}.attn_q_a", false},
      {"model.layers.{N}.self_attn.q_a_layernorm", "blk.{N}.attn_q_a_norm", false},
      {"model.layers.{N}.self_attn.q_b_proj", "blk.{N}.attn_q_b", false},
      {"model.layers.{N}.self_attn.kv_a_proj_with_mqa", "blk.{N}.attn_kv_a_mqa", false},
      {"model.layers.{N}.self_attn.kv_a_layernorm", "blk.{N}.attn_kv_a_norm", false},
      {"model.layers.{N}.self_attn.kv_b_proj", "blk.{N}.attn_kv_b", false},
      // dense FFN
      {"model.layers.{N}.mlp.gate_proj", "blk.{N}.ffn_gate", false},
      {"model.layers.{N}.mlp.up_proj", "blk.{N}.ffn_up", false},
      {"model.layers.{N}.mlp.down_proj", "blk.{N}.ffn_down", false},
      // MoE: router, routed experts (stacked along a new outermost dim), shared experts
      {"model.layers.{N}.mlp.gate", "blk.{N}.ffn_gate_inp", false},
      {"model.layers.{N}.mlp.gate.e_score_correction_bias", "blk.{N}.exp_probs_b.bias", true},
      {"model.layers.{N}.mlp.experts.{E}.gate_proj", "blk.{N}.ffn_gate_exps", false},
      {"model.layers.{N}.mlp.experts.{E}.up_proj", "blk.{N}.ffn_up_exps", false},
      {"model.layers.{N}.mlp.experts.{E}.down_proj", "blk.{N}.ffn_down_exps", false},
      {"model.layers.{N}.mlp.shared_experts.gate_proj", "blk.{N}.ffn_gate_shexp", false},
      {"model.layers.{N}.mlp.shared_experts.up_proj", "blk.{N}.ffn_up_shexp", false},
      {"model.layers.{N}.mlp.shared_experts.down_proj", "blk.{N}.ffn_down_shexp", false},
      // the multi-token-prediction module of DeepSeek-V3/R1 (block n_layers; llama.cpp's names)
      {"model.layers.{N}.eh_proj", "blk.{N}.nextn.eh_proj", false},
      {"model.layers.{N}.enorm", "blk.{N}.nextn.enorm", false},
      {"model.layers.{N}.hnorm", "blk.{N}.nextn.hnorm", false},
      {"model.layers.{N}.embed_tokens", "blk.{N}.nextn.embed_tokens", false},
      {"model.layers.{N}.shared_head.norm", "blk.{N}.nextn.shared_head_norm", false},
      {"model.layers.{N}.shared_head.head", "blk.{N}.nextn.shared_head_head", false},
  };
  return kTable;
}

namespace {

// Matches `name` against `pattern` whose "{N}"/"{E}" placeholders stand for decimal integers.
bool MatchPattern(std::string_view pattern, std::string_view name, int* layer, int* expert) {
  *layer = -1;
  *expert = -1;
  size_t p = 0, s = 0;
  while (p < pattern.size()) {
    if (pattern[p] == '{' && p + 2 < pattern.size() && pattern[p + 2] == '}') {
      const char which = pattern[p + 1];
      size_t e = s;
      while (e < name.size() && name[e] >= '0' && name[e] <= '9') ++e;
      if (e == s || e - s > 9) return false;
      if (name[s] == '0' && e - s > 1) return false;  // no leading zeros: one spelling per index
      int v = 0;
      std::from_chars(name.data() + s, name.data() + e, v);
      (which == 'N' ? *layer : *expert) = v;
      s = e;
      p += 3;
      continue;
    }
    if (s >= name.size() || name[s] != pattern[p]) return false;
    ++s;
    ++p;
  }
  return s == name.size();
}

std::string Fill(std::string_view pattern, int layer, int expert) {
  std::string out;
  for (size_t p = 0; p < pattern.size(); ++p) {
    if (pattern[p] == '{' && p + 2 < pattern.size() && pattern[p + 2] == '}') {
      out += std::to_string(pattern[p + 1] == 'N' ? layer : expert);
      p += 2;
    } else {
      out += pattern[p];
    }
  }
  return out;
}

// Splits "base.weight" / "base.bias" into base and suffix; suffix empty if neither.
void SplitSuffix(std::string_view name, std::string_view* base, std::string_view* suffix) {
  for (std::string_view sfx : {std::string_view(".weight"), std::string_view(".bias")}) {
    if (name.size() > sfx.size() && name.substr(name.size() - sfx.size()) == sfx) {
      *base = name.substr(0, name.size() - sfx.size());
      *suffix = sfx;
      return;
    }
  }
  *base = name;
  *suffix = {};
}

}  // namespace

std::optional<GgufNameMapping> HfToGgufName(std::string_view hf_name) {
  int layer, expert;
  for (const auto& r : GgufNameTable())
    if (r.exact && MatchPattern(r.hf, hf_name, &layer, &expert))
      return GgufNameMapping{Fill(r.gguf, layer, expert), layer, expert};
  std::string_view base, suffix;
  SplitSuffix(hf_name, &base, &suffix);
  if (suffix.empty()) return std::nullopt;
  for (const auto& r : GgufNameTable())
    if (!r.exact && MatchPattern(r.hf, base, &layer, &expert))
      return GgufNameMapping{Fill(r.gguf, layer, expert) + std::string(suffix), layer, expert};
  return std::nullopt;
}

std::optional<std::string> GgufToHfName(std::string_view gguf_name, int expert) {
  int layer, unused;
  for (const auto& r : GgufNameTable())
    if (r.exact && MatchPattern(r.gguf, gguf_name, &layer, &unused))
      return Fill(r.hf, layer, expert);
  std::string_view base, suffix;
  SplitSuffix(gguf_name, &base, &suffix);
  if (suffix.empty()) return std::nullopt;
  for (const auto& r : GgufNameTable()) {
    if (r.exact || !MatchPattern(r.gguf, base, &layer, &unused)) continue;
    const bool stacked = r.hf.find("{E}") != std::string_view::npos;
    if (stacked != (expert >= 0)) return std::nullopt;
    return Fill(r.hf, layer, expert) + std::string(suffix);
  }
  return std::nullopt;
}

}  // namespace es
