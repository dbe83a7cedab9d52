// ModelConfig: everything the architectures need from a Hugging Face config.json (both dialects:
// hub style with `rope_theta` + `rope_scaling` {type|rope_type} + `torch_dtype`, and
// transformers-5 style with `rope_parameters` {rope_theta, rope_type, ...} + `dtype`), or from a
// GGUF file's metadata, or from a built-in preset.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "edgeseek/internal/core/dtype.h"
#include "edgeseek/internal/graph/graph.h"

namespace es {

enum class Arch : uint8_t { kLlama, kQwen2, kDeepseekV2, kDeepseekV3 };
const char* ArchName(Arch a);  // the HF class name, e.g. "DeepseekV3ForCausalLM"

struct RopeScaling {
  std::string type = "default";  // default | linear | llama3 | yarn
  double factor = 1.0;
  // llama3
  double low_freq_factor = 1.0, high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 0;
  // yarn
  double beta_fast = 32.0, beta_slow = 1.0;
  double mscale = 0.0, mscale_all_dim = 0.0;  // 0: absent
  double attention_factor = 0.0;              // 0: absent (derived)
  bool truncate = true;
};

struct ModelConfig {
  Arch arch = Arch::kLlama;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int n_layers = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;  // standard attention
  // Per-layer shapes (structured pruning keeps fewer heads or FFN channels in some layers). Empty:
  // every layer has n_heads / n_kv_heads / intermediate_size. Else [n_layers] each, and those
  // three scalars hold the widest layer's values (what the KV cache and the plans size for).
  // config.json: num_attention_heads, num_key_value_heads and intermediate_size as lists.
  std::vector<int> layer_heads, layer_kv_heads;
  std::vector<int64_t> layer_intermediate;
  // Partial rotary (config.json: partial_rotary_factor, rotary_dim = int(head_dim * factor)): rope
  // turns the first rotary_dim dims of each head (neox halves inside them) and the rest pass
  // through. 0: the whole head.
  int rotary_dim = 0;
  float rms_norm_eps = 1e-6f;
  int64_t max_position_embeddings = 4096;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v bias (Qwen2 always)
  bool attention_out_bias = false;
  bool mlp_bias = false;
  double rope_theta = 10000.0;
  RopeScaling rope;
  // GGUF files (llama.cpp's conventions): `llama` q/k rows are permuted so that rope pairs are
  // adjacent (interleaved rope, as DeepSeek's); a `rope_freqs` tensor divides each frequency
  // (llama3 scaling baked in by the converter): inv_freq[i] /= rope_freq_factors[i].
  bool rope_interleaved = false;
  std::vector<float> rope_freq_factors;  // [rope_dim / 2] or empty
  DType dtype = DType::kBF16;            // torch_dtype / dtype

  // MLA (DeepSeek V2/V3)
  int q_lora_rank = 0;  // 0: no q LoRA (q_proj)
  int kv_lora_rank = 0;
  int qk_nope_head_dim = 0;
  int qk_rope_head_dim = 0;
  int v_head_dim = 0;

  // MoE
  int n_routed_experts = 0;
  int n_shared_experts = 0;
  int64_t moe_intermediate_size = 0;
  int num_experts_per_tok = 0;
  int first_k_dense_replace = 0;
  int moe_layer_freq = 1;
  int n_group = 1;
  int topk_group = 1;
  std::string topk_method = "greedy";
  std::string scoring_func = "softmax";
  bool norm_topk_prob = false;
  double routed_scaling_factor = 1.0;
  int num_nextn_predict_layers = 0;

  // FP8 block quantization of the checkpoint (DeepSeek-V3/R1 release)
  bool fp8_block = false;
  int fp8_block_n = 128, fp8_block_k = 128;

  // Generation defaults from config.json (generation_config.json overrides).
  std::vector<int32_t> eos_token_ids;
  int32_t bos_token_id = -1;

  bool is_mla() const { return arch == Arch::kDeepseekV2 || arch == Arch::kDeepseekV3; }
  bool IsMoeLayer(int layer) const;
  int rope_dim() const {
    return is_mla() ? qk_rope_head_dim : rotary_dim > 0 ? rotary_dim : head_dim;
  }
  // Layer l's shapes (the scalars where the config has no per-layer lists, and for l outside
  // [0, n_layers), e.g. an MTP module's layer).
  int HeadsOf(int l) const;
  int KvHeadsOf(int l) const;
  int64_t IntermediateOf(int l) const;
  bool per_layer_shapes() const {
    return !layer_heads.empty() || !layer_kv_heads.empty() || !layer_intermediate.empty();
  }
  // Rope table (llama3 / YaRN folded into inv_freq) and the softmax scale of attention.
  RopeTable MakeRope() const;
  float AttentionScale() const;
  KvSpec MakeKvSpec(DType kv_dtype) const;
  // Bytes per token of a naive cache of expanded K and V (what MLA saves against).
  size_t ExpandedKvBytesPerToken(DType kv_dtype) const;
  // Throws es::Error naming the field when a value is missing or inconsistent.
  void Validate(const std::string& where) const;
};

// num_hidden_layers is bounded by the layers the checkpoint holds tensors for (as GGUF's
// block_count is), so a 4-byte edit cannot make the loader build names for 10^7 layers.
// kNoCheckpoint (synthetic weights, made from the config's numbers alone): a fixed cap,
// kMaxSyntheticLayers. kCheckpointLater: the caller opens the checkpoint after the config (whose
// errors, e.g. an unknown architecture, come first) and calls CheckHfLayersPresent before
// building anything per layer.
inline constexpr int64_t kNoCheckpoint = -1;
inline constexpr int64_t kCheckpointLater = -2;
inline constexpr int64_t kMaxSyntheticLayers = 4096;
// 1 + the highest N of the model.layers.N.* names (0 without any).
int64_t HfLayersPresent(const std::vector<std::string>& tensor_names);
// Throws es::Error naming num_hidden_layers in `where` when it exceeds `layers_present`.
void CheckHfLayersPresent(const ModelConfig& c, int64_t layers_present, const std::string& where);

// Parses config.json (as JSON) of a supported architecture. `where` names the file in errors;
// `layers_present` is HfLayersPresent of the checkpoint, kNoCheckpoint or kCheckpointLater.
ModelConfig ParseHfConfig(const nlohmann::json& j, const std::string& where,
                          int64_t layers_present = kNoCheckpoint);
ModelConfig LoadHfConfig(const std::string& path, int64_t layers_present = kNoCheckpoint);
// Writes a transformers-5 style config.json for a ModelConfig (synthetic models, converters).
nlohmann::json ToHfConfig(const ModelConfig& c);

}  // namespace es
