// Built-in presets of real published shapes, for synthetic models (benchmarks, the README's
// main job) when no checkpoint is at hand. Shapes from the models' config.json files.
#include "edgeseek/internal/models/presets.h"

#include "edgeseek/internal/core/error.h"

namespace es {

namespace {
ModelConfig Qwen2Distill(int64_t hidden, int64_t inter, int layers, int heads, int kv_heads,
                         double theta, int64_t max_pos, bool tie) {
  ModelConfig c;
  c.arch = Arch::kQwen2;
  c.vocab_size = 152064;
  c.hidden_size = hidden;
  c.intermediate_size = inter;
  c.n_layers = layers;
  c.n_heads = heads;
  c.n_kv_heads = kv_heads;
  c.head_dim = int(hidden / heads);
  c.rms_norm_eps = 1e-6f;
  c.max_position_embeddings = max_pos;
  c.rope_theta = theta;
  c.tie_word_embeddings = tie;
  c.attention_bias = true;
  c.bos_token_id = 151646;
  c.eos_token_ids = {151643};
  return c;
}

// The DeepSeek MLA shape shared by V2-Lite, V3 and R1: 512-wide latent, 64 rope + 128 nope
// dims, 128 value dims, YaRN ×40 over 4096 original positions.
ModelConfig DeepseekBase(Arch arch) {
  ModelConfig c;
  c.arch = arch;
  c.rms_norm_eps = 1e-6f;
  c.max_position_embeddings = 163840;
  c.rope_theta = 10000.0;
  c.rope.type = "yarn";
  c.rope.factor = 40.0;
  c.rope.beta_fast = 32;
  c.rope.beta_slow = 1;
  c.rope.original_max_position_embeddings = 4096;
  c.kv_lora_rank = 512;
  c.qk_nope_head_dim = 128;
  c.qk_rope_head_dim = 64;
  c.v_head_dim = 128;
  c.head_dim = 192;
  c.first_k_dense_replace = 1;
  c.moe_layer_freq = 1;
  return c;
}
}  // namespace

std::vector<std::string> PresetNames() {
  return {"r1-distill-qwen-1.5b", "r1-distill-qwen-7b",  "r1-distill-qwen-14b",
          "r1-distill-qwen-32b",  "r1-distill-llama-8b", "deepseek-v2-lite",
          "deepseek-v3-small"};
}

ModelConfig PresetConfig(const std::string& name) {
  if (name == "r1-distill-qwen-1.5b") {
    // DeepSeek-R1-Distill-Qwen-1.5B (Qwen2.5-Math-1.5B): vocab 151936, untied.
    ModelConfig c = Qwen2Distill(1536, 8960, 28, 12, 2, 10000.0, 131072, false);
    c.vocab_size = 151936;
    return c;
  }
  if (name == "r1-distill-qwen-7b")
    return Qwen2Distill(3584, 18944, 28, 28, 4, 10000.0, 131072, false);
  if (name == "r1-distill-qwen-14b") {
    ModelConfig c = Qwen2Distill(5120, 13824, 48, 40, 8, 1000000.0, 131072, false);
    c.rms_norm_eps = 1e-5f;
    return c;
  }
  if (name == "r1-distill-qwen-32b") {
    ModelConfig c = Qwen2Distill(5120, 27648, 64, 40, 8, 1000000.0, 131072, false);
    c.rms_norm_eps = 1e-5f;
    return c;
  }
  if (name == "r1-distill-llama-8b") {
    ModelConfig c;
    c.arch = Arch::kLlama;
    c.vocab_size = 128256;
    c.hidden_size = 4096;
    c.intermediate_size = 14336;
    c.n_layers = 32;
    c.n_heads = 32;
    c.n_kv_heads = 8;
    c.head_dim = 128;
    c.rms_norm_eps = 1e-5f;
    c.max_position_embeddings = 131072;
    c.rope_theta = 500000.0;
    c.rope.type = "llama3";
    c.rope.factor = 8.0;
    c.rope.low_freq_factor = 1.0;
    c.rope.high_freq_factor = 4.0;
    c.rope.original_max_position_embeddings = 8192;
    c.bos_token_id = 128000;
    c.eos_token_ids = {128001};
    return c;
  }
  if (name == "deepseek-v2-lite") {
    // DeepSeek-V2-Lite(-Chat): 15.7B params, 2.4B active; MLA without q LoRA; 64 experts, 6 used.
    ModelConfig c = DeepseekBase(Arch::kDeepseekV2);
    c.vocab_size = 102400;
    c.hidden_size = 2048;
    c.intermediate_size = 10944;
    c.n_layers = 27;
    c.n_heads = 16;
    c.n_kv_heads = 16;
    c.rope.mscale = 0.707;
    c.rope.mscale_all_dim = 0.707;
    c.q_lora_rank = 0;
    c.n_routed_experts = 64;
    c.n_shared_experts = 2;
    c.moe_intermediate_size = 1408;
    c.num_experts_per_tok = 6;
    c.n_group = 1;
    c.topk_group = 1;
    c.topk_method = "greedy";
    c.scoring_func = "softmax";
    c.norm_topk_prob = false;
    c.routed_scaling_factor = 1.0;
    c.bos_token_id = 100000;
    c.eos_token_ids = {100001};
    return c;
  }
  if (name == "deepseek-v3-small") {
    // The DeepSeek-V3/R1 architecture (MLA with q LoRA, 128/64 rope split, YaRN, noaux_tc
    // routing over grouped experts, shared expert, dense first layers) at a size this machine
    // runs: hidden 1024, 8 layers, 32 experts of 512, 4 used.
    ModelConfig c = DeepseekBase(Arch::kDeepseekV3);
    c.vocab_size = 129280;
    c.hidden_size = 1024;
    c.intermediate_size = 2816;
    c.n_layers = 8;
    c.n_heads = 8;
    c.n_kv_heads = 8;
    c.rope.mscale = 1.0;
    c.rope.mscale_all_dim = 1.0;
    c.q_lora_rank = 384;
    c.n_routed_experts = 32;
    c.n_shared_experts = 1;
    c.moe_intermediate_size = 512;
    c.num_experts_per_tok = 4;
    c.n_group = 4;
    c.topk_group = 2;
    c.topk_method = "noaux_tc";
    c.scoring_func = "sigmoid";
    c.norm_topk_prob = true;
    c.routed_scaling_factor = 2.5;
    c.bos_token_id = 0;
    c.eos_token_ids = {1};
    return c;
  }
  std::string names;
  for (auto& n : PresetNames()) names += (names.empty() ? "" : ", ") + n;
  Fail("unknown synthetic preset '", name, "' (known: ", names, ", or a config.json path)");
}

}  // namespace es
