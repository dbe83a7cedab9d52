// GGUF metadata keys and tensor names for the architectures edgeseek runs (qwen2, llama,
// deepseek2), and the map between Hugging Face checkpoint tensor names and GGUF tensor names.
// The names are those llama.cpp's gguf-py writes and its loader reads (learned from the GGUF
// spec and gguf-py's constants; this table is our own).
//
// Per-architecture keys are "<arch>.<suffix>": ArchKey("qwen2", kKeyBlockCount) ->
// "qwen2.block_count". Tensor names are "<base>.weight" / "<base>.bias" for global tensors and
// "blk.<layer>.<base>.weight" for per-layer ones: BlockTensorName(3, kTensorAttnQ) ->
// "blk.3.attn_q.weight".
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace es {

// ---- Architectures.
inline constexpr std::string_view kArchQwen2 = "qwen2";
inline constexpr std::string_view kArchLlama = "llama";
inline constexpr std::string_view kArchDeepseek2 = "deepseek2";

// ---- general.*
inline constexpr std::string_view kKeyGeneralArchitecture = "general.architecture";
inline constexpr std::string_view kKeyGeneralName = "general.name";
inline constexpr std::string_view kKeyGeneralAlignment = "general.alignment";
inline constexpr std::string_view kKeyGeneralFileType = "general.file_type";
inline constexpr std::string_view kKeyGeneralQuantizationVersion = "general.quantization_version";
inline constexpr uint32_t kGgmlQuantizationVersion = 2;

// ---- Per-architecture key suffixes (use with ArchKey).
inline constexpr std::string_view kKeyVocabSize = "vocab_size";
inline constexpr std::string_view kKeyContextLength = "context_length";
inline constexpr std::string_view kKeyEmbeddingLength = "embedding_length";
inline constexpr std::string_view kKeyBlockCount = "block_count";
inline constexpr std::string_view kKeyFeedForwardLength = "feed_forward_length";
inline constexpr std::string_view kKeyLeadingDenseBlockCount = "leading_dense_block_count";
inline constexpr std::string_view kKeyExpertFeedForwardLength = "expert_feed_forward_length";
inline constexpr std::string_view kKeyExpertSharedFeedForwardLength =
    "expert_shared_feed_forward_length";
inline constexpr std::string_view kKeyExpertCount = "expert_count";
inline constexpr std::string_view kKeyExpertUsedCount = "expert_used_count";
inline constexpr std::string_view kKeyExpertSharedCount = "expert_shared_count";
inline constexpr std::string_view kKeyExpertGroupCount = "expert_group_count";
inline constexpr std::string_view kKeyExpertGroupUsedCount = "expert_group_used_count";
inline constexpr std::string_view kKeyExpertWeightsScale = "expert_weights_scale";
inline constexpr std::string_view kKeyExpertWeightsNorm = "expert_weights_norm";
// expert_gating_func: 1 = softmax (DeepSeek-V2), 2 = sigmoid (DeepSeek-V3).
inline constexpr std::string_view kKeyExpertGatingFunc = "expert_gating_func";
inline constexpr std::string_view kKeyNextnPredictLayers = "nextn_predict_layers";
inline constexpr std::string_view kKeyAttnHeadCount = "attention.head_count";
inline constexpr std::string_view kKeyAttnHeadCountKv = "attention.head_count_kv";
inline constexpr std::string_view kKeyAttnKeyLength = "attention.key_length";
inline constexpr std::string_view kKeyAttnValueLength = "attention.value_length";
// MLA with the split attn_k_b / attn_v_b layout: per-head dims of the absorbed (latent) form.
inline constexpr std::string_view kKeyAttnKeyLengthMla = "attention.key_length_mla";
inline constexpr std::string_view kKeyAttnValueLengthMla = "attention.value_length_mla";
inline constexpr std::string_view kKeyAttnLayerNormEps = "attention.layer_norm_epsilon";
inline constexpr std::string_view kKeyAttnLayerNormRmsEps = "attention.layer_norm_rms_epsilon";
inline constexpr std::string_view kKeyAttnQLoraRank = "attention.q_lora_rank";
inline constexpr std::string_view kKeyAttnKvLoraRank = "attention.kv_lora_rank";
inline constexpr std::string_view kKeyAttnSlidingWindow = "attention.sliding_window";
inline constexpr std::string_view kKeyRopeDimensionCount = "rope.dimension_count";
inline constexpr std::string_view kKeyRopeFreqBase = "rope.freq_base";
inline constexpr std::string_view kKeyRopeScalingType =
    "rope.scaling.type";  // "none"|"linear"|"yarn"
inline constexpr std::string_view kKeyRopeScalingFactor = "rope.scaling.factor";
inline constexpr std::string_view kKeyRopeScalingAttnFactor = "rope.scaling.attn_factor";
inline constexpr std::string_view kKeyRopeScalingOrigCtxLen =
    "rope.scaling.original_context_length";
inline constexpr std::string_view kKeyRopeScalingFinetuned = "rope.scaling.finetuned";
inline constexpr std::string_view kKeyRopeScalingYarnLogMul = "rope.scaling.yarn_log_multiplier";
inline constexpr std::string_view kKeyRopeScalingYarnBetaFast = "rope.scaling.yarn_beta_fast";
inline constexpr std::string_view kKeyRopeScalingYarnBetaSlow = "rope.scaling.yarn_beta_slow";

// "<arch>.<suffix>"
std::string ArchKey(std::string_view arch, std::string_view suffix);
// The key suffixes an architecture's llama.cpp loader reads (required and optional), for the
// converter and for `inspect`; empty for an unknown architecture.
const std::vector<std::string_view>& ArchKeySuffixes(std::string_view arch);

// ---- tokenizer.*
inline constexpr std::string_view kKeyTokenizerModel = "tokenizer.ggml.model";  // "gpt2", "llama"
inline constexpr std::string_view kKeyTokenizerPre =
    "tokenizer.ggml.pre";  // "qwen2", "llama-bpe", "deepseek-llm"...
inline constexpr std::string_view kKeyTokenizerTokens = "tokenizer.ggml.tokens";
inline constexpr std::string_view kKeyTokenizerTokenType = "tokenizer.ggml.token_type";
inline constexpr std::string_view kKeyTokenizerScores = "tokenizer.ggml.scores";
inline constexpr std::string_view kKeyTokenizerMerges = "tokenizer.ggml.merges";
inline constexpr std::string_view kKeyTokenizerBosId = "tokenizer.ggml.bos_token_id";
inline constexpr std::string_view kKeyTokenizerEosId = "tokenizer.ggml.eos_token_id";
inline constexpr std::string_view kKeyTokenizerUnkId = "tokenizer.ggml.unknown_token_id";
inline constexpr std::string_view kKeyTokenizerSepId =
    "tokenizer.ggml.seperator_token_id";  // sic, as in gguf-py
inline constexpr std::string_view kKeyTokenizerPadId = "tokenizer.ggml.padding_token_id";
inline constexpr std::string_view kKeyTokenizerEotId = "tokenizer.ggml.eot_token_id";
inline constexpr std::string_view kKeyTokenizerEomId = "tokenizer.ggml.eom_token_id";
inline constexpr std::string_view kKeyTokenizerAddBos = "tokenizer.ggml.add_bos_token";
inline constexpr std::string_view kKeyTokenizerAddEos = "tokenizer.ggml.add_eos_token";
inline constexpr std::string_view kKeyTokenizerAddSpacePrefix = "tokenizer.ggml.add_space_prefix";
inline constexpr std::string_view kKeyTokenizerChatTemplate = "tokenizer.chat_template";
// tokenizer.ggml.token_type values (llama.cpp's llama_token_type).
enum class GgufTokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// ---- Tensor base names.
inline constexpr std::string_view kTensorTokenEmbd = "token_embd";
inline constexpr std::string_view kTensorOutputNorm = "output_norm";
inline constexpr std::string_view kTensorOutput = "output";
inline constexpr std::string_view kTensorRopeFreqs = "rope_freqs";  // [rope_dim / 2] f32 divisors
// per layer (blk.N.*)
inline constexpr std::string_view kTensorAttnNorm = "attn_norm";
inline constexpr std::string_view kTensorAttnQ = "attn_q";
inline constexpr std::string_view kTensorAttnK = "attn_k";
inline constexpr std::string_view kTensorAttnV = "attn_v";
inline constexpr std::string_view kTensorAttnOutput = "attn_output";
inline constexpr std::string_view kTensorAttnQA = "attn_q_a";
inline constexpr std::string_view kTensorAttnQANorm = "attn_q_a_norm";
inline constexpr std::string_view kTensorAttnQB = "attn_q_b";
inline constexpr std::string_view kTensorAttnKvAMqa = "attn_kv_a_mqa";
inline constexpr std::string_view kTensorAttnKvANorm = "attn_kv_a_norm";
inline constexpr std::string_view kTensorAttnKvB = "attn_kv_b";
inline constexpr std::string_view kTensorAttnKB = "attn_k_b";  // split MLA layout (no HF tensor)
inline constexpr std::string_view kTensorAttnVB = "attn_v_b";  // split MLA layout (no HF tensor)
inline constexpr std::string_view kTensorFfnNorm = "ffn_norm";
inline constexpr std::string_view kTensorFfnGate = "ffn_gate";
inline constexpr std::string_view kTensorFfnUp = "ffn_up";
inline constexpr std::string_view kTensorFfnDown = "ffn_down";
inline constexpr std::string_view kTensorFfnGateInp = "ffn_gate_inp";    // MoE router
inline constexpr std::string_view kTensorFfnGateExps = "ffn_gate_exps";  // [experts, ff, embd]
inline constexpr std::string_view kTensorFfnUpExps = "ffn_up_exps";      // [experts, ff, embd]
inline constexpr std::string_view kTensorFfnDownExps = "ffn_down_exps";  // [experts, embd, ff]
inline constexpr std::string_view kTensorFfnGateShexp = "ffn_gate_shexp";
inline constexpr std::string_view kTensorFfnUpShexp = "ffn_up_shexp";
inline constexpr std::string_view kTensorFfnDownShexp = "ffn_down_shexp";
inline constexpr std::string_view kTensorExpProbsB =
    "exp_probs_b";  // stored as "...exp_probs_b.bias"

// "<base>.<suffix>" and "blk.<layer>.<base>.<suffix>".
std::string TensorName(std::string_view base, std::string_view suffix = "weight");
std::string BlockTensorName(int layer, std::string_view base, std::string_view suffix = "weight");

// ---- Hugging Face <-> GGUF tensor names.
struct GgufNameMapping {
  std::string gguf_name;  // e.g. "blk.3.ffn_gate_exps.weight"
  int layer = -1;         // block index, -1 for global tensors
  int expert = -1;        // >= 0: this HF tensor is slice `expert` of a stacked 3-D GGUF tensor
};
// "model.layers.3.self_attn.q_proj.weight" -> "blk.3.attn_q.weight";
// "model.layers.2.mlp.experts.7.up_proj.weight" -> {"blk.2.ffn_up_exps.weight", expert 7};
// std::nullopt for names with no GGUF counterpart (e.g. rotary_emb.inv_freq).
std::optional<GgufNameMapping> HfToGgufName(std::string_view hf_name);
// The reverse. For stacked expert tensors pass the expert index (required); tensors that only
// exist in GGUF (attn_k_b, attn_v_b, rope_freqs) give std::nullopt.
std::optional<std::string> GgufToHfName(std::string_view gguf_name, int expert = -1);

// One row of the name table, for documentation and tests: patterns with "{N}" (layer) and
// "{E}" (expert) placeholders, without the ".weight"/".bias" suffix unless `exact` is set.
struct GgufNameRule {
  std::string_view hf;
  std::string_view gguf;
  bool exact;  // the pattern includes the suffix (names that do not end in .weight/.bias)
};
const std::vector<GgufNameRule>& GgufNameTable();

}  // namespace es
