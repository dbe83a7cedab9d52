// GGUF key and tensor-name tables: HF <-> GGUF names for qwen2/llama/deepseek2 tensors, both MLA
// layouts, stacked experts, and the per-architecture keys.
#include <gtest/gtest.h>

#include <algorithm>

#include "edgeseek/internal/formats/gguf.h"

namespace es {
namespace {

TEST(GgufNames, DenseModelTensors) {
  const std::pair<const char*, const char*> cases[] = {
      {"model.embed_tokens.weight", "token_embd.weight"},
      {"model.norm.weight", "output_norm.weight"},
      {"lm_head.weight", "output.weight"},
      {"model.layers.0.input_layernorm.weight", "blk.0.attn_norm.weight"},
      {"model.layers.27.post_attention_layernorm.weight", "blk.27.ffn_norm.weight"},
      {"model.layers.3.self_attn.q_proj.weight", "blk.3.attn_q.weight"},
      {"model.layers.3.self_attn.q_proj.bias", "blk.3.attn_q.bias"},
      {"model.layers.3.self_attn.k_proj.bias", "blk.3.attn_k.bias"},
      {"model.layers.3.self_attn.v_proj.weight", "blk.3.attn_v.weight"},
      {"model.layers.10.self_attn.o_proj.weight", "blk.10.attn_output.weight"},
      {"model.layers.1.mlp.gate_proj.weight", "blk.1.ffn_gate.weight"},
      {"model.layers.1.mlp.up_proj.weight", "blk.1.ffn_up.weight"},
      {"model.layers.1.mlp.down_proj.weight", "blk.1.ffn_down.weight"},
  };
  for (const auto& [hf, gguf] : cases) {
    const auto m = HfToGgufName(hf);
    ASSERT_TRUE(m) << hf;
    EXPECT_EQ(m->gguf_name, gguf);
    EXPECT_EQ(m->expert, -1);
    EXPECT_EQ(GgufToHfName(gguf), std::optional<std::string>(hf)) << gguf;
  }
  EXPECT_EQ(HfToGgufName("model.layers.12.mlp.up_proj.weight")->layer, 12);
  EXPECT_EQ(HfToGgufName("lm_head.weight")->layer, -1);
}

TEST(GgufNames, DeepseekMlaAndMoe) {
  const std::pair<const char*, const char*> cases[] = {
      {"model.layers.0.self_attn.q_a_proj.weight", "blk.0.attn_q_a.weight"},
      {"model.layers.0.self_attn.q_a_layernorm.weight", "blk.0.attn_q_a_norm.weight"},
      {"model.layers.0.self_attn.q_b_proj.weight", "blk.0.attn_q_b.weight"},
      {"model.layers.5.self_attn.kv_a_proj_with_mqa.weight", "blk.5.attn_kv_a_mqa.weight"},
      {"model.layers.5.self_attn.kv_a_layernorm.weight", "blk.5.attn_kv_a_norm.weight"},
      {"model.layers.5.self_attn.kv_b_proj.weight", "blk.5.attn_kv_b.weight"},
      {"model.layers.2.mlp.gate.weight", "blk.2.ffn_gate_inp.weight"},
      {"model.layers.2.mlp.gate.e_score_correction_bias", "blk.2.exp_probs_b.bias"},
      {"model.layers.2.mlp.shared_experts.gate_proj.weight", "blk.2.ffn_gate_shexp.weight"},
      {"model.layers.2.mlp.shared_experts.up_proj.weight", "blk.2.ffn_up_shexp.weight"},
      {"model.layers.2.mlp.shared_experts.down_proj.weight", "blk.2.ffn_down_shexp.weight"},
  };
  for (const auto& [hf, gguf] : cases) {
    const auto m = HfToGgufName(hf);
    ASSERT_TRUE(m) << hf;
    EXPECT_EQ(m->gguf_name, gguf);
    EXPECT_EQ(GgufToHfName(gguf), std::optional<std::string>(hf)) << gguf;
  }
}

TEST(GgufNames, StackedExperts) {
  const auto m = HfToGgufName("model.layers.4.mlp.experts.63.down_proj.weight");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->gguf_name, "blk.4.ffn_down_exps.weight");
  EXPECT_EQ(m->layer, 4);
  EXPECT_EQ(m->expert, 63);
  EXPECT_EQ(HfToGgufName("model.layers.4.mlp.experts.0.gate_proj.weight")->gguf_name,
            "blk.4.ffn_gate_exps.weight");
  EXPECT_EQ(HfToGgufName("model.layers.4.mlp.experts.7.up_proj.weight")->gguf_name,
            "blk.4.ffn_up_exps.weight");
  EXPECT_EQ(GgufToHfName("blk.4.ffn_up_exps.weight", 7),
            std::optional<std::string>("model.layers.4.mlp.experts.7.up_proj.weight"));
  // A stacked tensor has no single HF name without an expert index, and a plain one takes none.
  EXPECT_FALSE(GgufToHfName("blk.4.ffn_up_exps.weight"));
  EXPECT_FALSE(GgufToHfName("blk.4.ffn_up.weight", 3));
}

TEST(GgufNames, GgufOnlyAndUnknownNames) {
  EXPECT_FALSE(GgufToHfName("blk.0.attn_k_b.weight"));  // split MLA layout: derived from kv_b
  EXPECT_FALSE(GgufToHfName("blk.0.attn_v_b.weight"));
  EXPECT_FALSE(GgufToHfName("rope_freqs.weight"));
  EXPECT_FALSE(HfToGgufName("model.layers.0.self_attn.rotary_emb.inv_freq"));
  EXPECT_FALSE(HfToGgufName("model.layers.x.mlp.up_proj.weight"));
  EXPECT_FALSE(HfToGgufName("model.layers.01.mlp.up_proj.weight"));  // one spelling per index
  EXPECT_FALSE(HfToGgufName("model.layers.1.mlp.up_proj"));
  EXPECT_FALSE(HfToGgufName("model.embed_tokens.weightx"));
}

TEST(GgufNames, TableIsABijectionOnItsPatterns) {
  const auto& t = GgufNameTable();
  for (size_t i = 0; i < t.size(); ++i)
    for (size_t j = i + 1; j < t.size(); ++j) {
      EXPECT_NE(t[i].hf, t[j].hf);
      EXPECT_NE(t[i].gguf, t[j].gguf);
    }
}

TEST(GgufNames, BuildersAndKeys) {
  EXPECT_EQ(BlockTensorName(3, kTensorAttnQ), "blk.3.attn_q.weight");
  EXPECT_EQ(BlockTensorName(0, kTensorExpProbsB, "bias"), "blk.0.exp_probs_b.bias");
  EXPECT_EQ(TensorName(kTensorRopeFreqs), "rope_freqs.weight");
  EXPECT_EQ(BlockTensorName(7, kTensorAttnKB), "blk.7.attn_k_b.weight");
  EXPECT_EQ(ArchKey(kArchQwen2, kKeyBlockCount), "qwen2.block_count");
  EXPECT_EQ(ArchKey(kArchDeepseek2, kKeyAttnKvLoraRank), "deepseek2.attention.kv_lora_rank");
  EXPECT_EQ(ArchKey(kArchDeepseek2, kKeyRopeScalingYarnLogMul),
            "deepseek2.rope.scaling.yarn_log_multiplier");
  EXPECT_EQ(ArchKey(kArchLlama, kKeyAttnLayerNormRmsEps), "llama.attention.layer_norm_rms_epsilon");
  const auto& ds = ArchKeySuffixes(kArchDeepseek2);
  for (auto k :
       {kKeyAttnQLoraRank, kKeyExpertCount, kKeyExpertSharedCount, kKeyLeadingDenseBlockCount,
        kKeyExpertGatingFunc, kKeyExpertWeightsNorm, kKeyRopeScalingYarnLogMul})
    EXPECT_NE(std::find(ds.begin(), ds.end(), k), ds.end()) << k;
  const auto& qw = ArchKeySuffixes(kArchQwen2);
  EXPECT_EQ(std::find(qw.begin(), qw.end(), kKeyExpertCount), qw.end());
  EXPECT_TRUE(ArchKeySuffixes("gpt2").empty());
  EXPECT_EQ(kKeyTokenizerSepId, "tokenizer.ggml.seperator_token_id");
}

}  // namespace
}  // namespace es
