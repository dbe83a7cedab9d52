// GGUF model loading (issue 5): llama.cpp's metadata -> ModelConfig, the Hugging Face tensor names
// the architectures ask for -> GGUF tensors (views into the mapping, no copy), and the tokenizer
// from tokenizer.ggml.* (gguf_tokenizer.cpp).
//
// Conventions of llama.cpp's files that matter here (docs/gguf.md has the whole table):
//  - `llama` files have q/k rows permuted per head so that rope pairs are adjacent (llama.cpp's
//    rope "NORM"): we rotate adjacent pairs (ModelConfig::rope_interleaved) instead of undoing
//    the permutation. q·k is unchanged when q and k share a permutation of their dims, and v is
//    not permuted. `qwen2` files are not permuted (rope "NEOX", halves).
//  - A `rope_freqs` tensor [rope_dim / 2] divides each rope frequency (llama3 scaling, baked in by
//    the converter).
//  - deepseek2 MLA: one `attn_kv_b` [H*(dn+dv), r] (= kv_b_proj), or (newer files) `attn_k_b`
//    [H, r, dn] (k part, transposed per head) and `attn_v_b` [H, dv, r]; kv_b is rebuilt from the
//    pair. q-LoRA is decided from attention.q_lora_rank and the attn_q_a tensors (not from the
//    layer count, as llama.cpp's Feb-2025 loader did). YaRN: llama.cpp scales attention by
//    (1 + yarn_log_multiplier * ln(factor))^2 and leaves cos/sin unscaled, i.e. transformers with
//    mscale == mscale_all_dim = 10 * yarn_log_multiplier.
//  - MoE experts are stacked 3-D tensors [E, rows, cols]; each expert is a 2-D view.
//  - Tied embeddings when output.weight is absent.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/core/half.h"
#include "edgeseek/internal/formats/gguf.h"
#include "edgeseek/internal/models/arch.h"
#include "edgeseek/internal/quant/blocks.h"
#include "edgeseek/internal/tokenizer/tokenizer.h"
#include "gguf_model.h"
#include "model_loader.h"

namespace es {
namespace {

namespace fs = std::filesystem;

// ---- metadata -> ModelConfig ------------------------------------------------------------------

// llama.cpp's llama_expert_gating_func_type.
constexpr uint32_t kGatingNone = 0, kGatingSoftmax = 1, kGatingSigmoid = 2;

// Whether any of the first n_layers blocks holds blk.N.<base>.<suffix>.
bool HasAnyTensor(const GgufFile& f, int n_layers, std::string_view base, std::string_view suffix) {
  for (int l = 0; l < n_layers; ++l)
    if (f.HasTensor(BlockTensorName(l, base, suffix))) return true;
  return false;
}

// 1 + the highest N of the blk.N.* tensors in the file (0 without any): what bounds the block
// count a key may claim. A 4-byte edit of block_count to 10^7 made `inspect` build tens of
// millions of tensor names (20 s, 3 GB) before failing on the first missing one.
int BlocksPresent(const GgufFile& f) {
  int64_t blocks = 0;
  for (const GgufTensorInfo& t : f.tensor_infos()) {
    if (t.name.compare(0, 4, "blk.") != 0) continue;
    int64_t n = 0;
    size_t i = 4;
    for (; i < t.name.size() && i < 14 && t.name[i] >= '0' && t.name[i] <= '9'; ++i)
      n = n * 10 + (t.name[i] - '0');
    if (i > 4 && i < t.name.size() && t.name[i] == '.') blocks = std::max(blocks, n + 1);
  }
  return int(std::min<int64_t>(blocks, INT32_MAX));
}

// A float key that must be a positive finite number (NaN rms_norm_eps or a 0 rope base loaded
// and gave NaN logits).
float PositiveF32(const GgufFile& f, const std::string& key, float v) {
  ES_CHECK(std::isfinite(v) && v > 0, f.path(), ": key ", key, " is ", v,
           " (must be a positive finite number)");
  return v;
}

void ReadRopeScaling(const GgufFile& f, const std::string& arch, ModelConfig& c) {
  auto key = [&](std::string_view s) { return ArchKey(arch, s); };
  const std::string type = f.GetStringOr(key(kKeyRopeScalingType), "none");
  if (type == "none") return;
  const std::string where = f.path() + ": key " + key(kKeyRopeScalingType);
  if (type != "linear" && type != "yarn")
    Fail(where, " is '", type, "' (supported: none, linear, yarn)");
  c.rope.type = type;
  c.rope.factor = f.GetF32(key(kKeyRopeScalingFactor));
  ES_CHECK(c.rope.factor > 0, f.path(), ": key ", key(kKeyRopeScalingFactor),
           " must be positive (got ", c.rope.factor, ")");
  if (type == "linear") return;
  c.rope.original_max_position_embeddings =
      f.GetU32Or(key(kKeyRopeScalingOrigCtxLen), uint32_t(c.max_position_embeddings));
  c.rope.beta_fast = PositiveF32(f, key(kKeyRopeScalingYarnBetaFast),
                                 f.GetF32Or(key(kKeyRopeScalingYarnBetaFast), 32.0f));
  c.rope.beta_slow = PositiveF32(f, key(kKeyRopeScalingYarnBetaSlow),
                                 f.GetF32Or(key(kKeyRopeScalingYarnBetaSlow), 1.0f));
  if (c.is_mla()) {
    const float log_mul = f.GetF32Or(key(kKeyRopeScalingYarnLogMul), 0.0f);
    const float attn_factor = f.GetF32Or(key(kKeyRopeScalingAttnFactor), 1.0f);
    ES_CHECK(attn_factor == 1.0f, f.path(), ": key ", key(kKeyRopeScalingAttnFactor), " is ",
             attn_factor, " (only 1.0 is supported for deepseek2)");
    // cos/sin unscaled; softmax scale (1 + log_mul ln factor)^2 / sqrt(d)
    // (ModelConfig::AttentionScale).
    c.rope.attention_factor = 1.0;
    c.rope.mscale_all_dim = double(log_mul) / 0.1;
    c.rope.mscale = c.rope.mscale_all_dim;
  }
}

void ReadDeepseek2(const GgufFile& f, ModelConfig& c) {
  const std::string arch(kArchDeepseek2);
  auto key = [&](std::string_view s) { return ArchKey(arch, s); };
  c.kv_lora_rank = int(f.GetU32(key(kKeyAttnKvLoraRank)));
  c.qk_rope_head_dim = int(f.GetU32(key(kKeyRopeDimensionCount)));
  // Newer files (split attn_k_b / attn_v_b) store the latent-form lengths in key_length /
  // value_length and the per-head ones in *_mla.
  const bool mla_keys = f.Has(key(kKeyAttnKeyLengthMla));
  const int k_len = int(f.GetU32(key(mla_keys ? kKeyAttnKeyLengthMla : kKeyAttnKeyLength)));
  c.v_head_dim = int(f.GetU32(key(mla_keys ? kKeyAttnValueLengthMla : kKeyAttnValueLength)));
  ES_CHECK(k_len > c.qk_rope_head_dim, f.path(), ": key ",
           key(mla_keys ? kKeyAttnKeyLengthMla : kKeyAttnKeyLength), " (", k_len, ") must exceed ",
           key(kKeyRopeDimensionCount), " (", c.qk_rope_head_dim, ")");
  c.qk_nope_head_dim = k_len - c.qk_rope_head_dim;
  c.head_dim = k_len;
  c.n_kv_heads = c.n_heads;  // MLA: every head reads the shared latent

  // q-LoRA: from the key and the tensors, not from the layer count.
  const std::string qa = BlockTensorName(0, kTensorAttnQA);
  const bool has_qa = f.HasTensor(qa);
  const uint32_t q_rank = f.GetU32Or(key(kKeyAttnQLoraRank), 0);
  if (has_qa) {
    ES_CHECK(f.Has(key(kKeyAttnQLoraRank)), f.path(), ": tensor ", qa, " is present but key ",
             key(kKeyAttnQLoraRank), " is missing");
    ES_CHECK(q_rank > 0, f.path(), ": tensor ", qa, " is present but key ", key(kKeyAttnQLoraRank),
             " is 0");
    c.q_lora_rank = int(q_rank);
  } else {
    ES_CHECK(q_rank == 0, f.path(), ": key ", key(kKeyAttnQLoraRank), " is ", q_rank,
             " but tensor ", qa, " is missing");
    c.q_lora_rank = 0;
  }

  const uint32_t n_experts = f.GetU32Or(key(kKeyExpertCount), 0);
  c.n_routed_experts = int(std::min<uint32_t>(n_experts, INT32_MAX));
  uint32_t gating = kGatingNone;
  if (c.n_routed_experts > 0) {
    // Bounded by the stacked expert tensor [E, ff, embd] before anything per expert is built.
    const int first_moe =
        int(std::min<uint32_t>(f.GetU32Or(key(kKeyLeadingDenseBlockCount), 0), INT32_MAX));
    const std::string exps = BlockTensorName(first_moe, kTensorFfnGateExps, "weight");
    const GgufTensorInfo* t = f.FindTensor(exps);
    ES_CHECK(t && !t->shape.empty() && t->shape[0] >= int64_t(n_experts), f.path(), ": key ",
             key(kKeyExpertCount), " is ", n_experts, " but tensor ", exps,
             t ? " has shape " + ShapeStr(t->shape) : std::string(" is missing"));
    c.num_experts_per_tok = int(f.GetU32(key(kKeyExpertUsedCount)));
    c.moe_intermediate_size = f.GetU32(key(kKeyExpertFeedForwardLength));
    c.n_shared_experts = int(f.GetU32Or(key(kKeyExpertSharedCount), 0));
    c.first_k_dense_replace = int(f.GetU32Or(key(kKeyLeadingDenseBlockCount), 0));
    c.routed_scaling_factor =
        PositiveF32(f, key(kKeyExpertWeightsScale), f.GetF32Or(key(kKeyExpertWeightsScale), 1.0f));
    c.norm_topk_prob = f.GetBoolOr(key(kKeyExpertWeightsNorm), false);
    c.n_group = int(f.GetU32Or(key(kKeyExpertGroupCount), 1));
    c.topk_group = int(f.GetU32Or(key(kKeyExpertGroupUsedCount), uint32_t(c.n_group)));
    gating = f.GetU32Or(key(kKeyExpertGatingFunc), kGatingNone);
    ES_CHECK(gating <= kGatingSigmoid, f.path(), ": key ", key(kKeyExpertGatingFunc), " is ",
             gating, " (1: softmax, 2: sigmoid)");
  }
  // V3: sigmoid scores with the exp_probs_b correction (noaux_tc); V2: softmax, greedy or
  // group-limited greedy.
  const bool has_bias = HasAnyTensor(f, c.n_layers, kTensorExpProbsB, "bias");
  if (gating == kGatingSigmoid || has_bias) {
    c.arch = Arch::kDeepseekV3;
    c.topk_method = "noaux_tc";
    c.scoring_func = "sigmoid";
  } else {
    c.arch = Arch::kDeepseekV2;
    c.topk_method = c.n_group > 1 ? "group_limited_greedy" : "greedy";
    c.scoring_func = "softmax";
  }
}

}  // namespace

ModelConfig GgufModelConfig(const GgufFile& f) {
  const std::string& arch = f.Architecture();
  ModelConfig c;
  if (arch == kArchLlama) {
    c.arch = Arch::kLlama;
  } else if (arch == kArchQwen2) {
    c.arch = Arch::kQwen2;
  } else if (arch == kArchDeepseek2) {
    c.arch = Arch::kDeepseekV2;  // V2 or V3: decided in ReadDeepseek2
  } else {
    Fail(f.path(), ": unknown architecture '", arch, "' (", kKeyGeneralArchitecture,
         "; supported: llama, qwen2, deepseek2)");
  }
  auto key = [&](std::string_view s) { return ArchKey(arch, s); };
  const uint32_t block_count = f.GetU32(key(kKeyBlockCount));
  const uint32_t nextn = f.GetU32Or(key(kKeyNextnPredictLayers), 0);
  ES_CHECK(nextn < block_count, f.path(), ": key ", key(kKeyNextnPredictLayers), " (", nextn,
           ") must be below ", key(kKeyBlockCount), " (", block_count, ")");
  const int blocks_present = BlocksPresent(f);
  ES_CHECK(block_count - nextn <= uint32_t(blocks_present), f.path(), ": key ", key(kKeyBlockCount),
           " is ", block_count, " but the file holds tensors for ", blocks_present,
           " blocks (blk.0 to blk.", blocks_present - 1, ")");
  // The last `nextn` blocks are multi-token-prediction modules (ModelArch binds the first when
  // the file carries its tensors: blk.<n_layers>.nextn.*).
  c.n_layers = int(block_count - nextn);
  c.num_nextn_predict_layers = int(nextn);
  c.hidden_size = f.GetU32(key(kKeyEmbeddingLength));
  c.n_heads = int(f.GetU32(key(kKeyAttnHeadCount)));
  c.n_kv_heads = int(f.GetU32Or(key(kKeyAttnHeadCountKv), uint32_t(c.n_heads)));
  c.rms_norm_eps =
      PositiveF32(f, key(kKeyAttnLayerNormRmsEps), f.GetF32(key(kKeyAttnLayerNormRmsEps)));
  c.max_position_embeddings = f.GetU32Or(key(kKeyContextLength), 4096);
  c.rope_theta = PositiveF32(f, key(kKeyRopeFreqBase), f.GetF32Or(key(kKeyRopeFreqBase), 10000.0f));
  // Below 1 the rotary frequencies base^(-2i/d) grow with the dimension instead of falling (no
  // model has such a base); 1e-45 made them infinite and the logits NaN.
  ES_CHECK(c.rope_theta >= 1, f.path(), ": key ", key(kKeyRopeFreqBase), " is ", c.rope_theta,
           " (a rope base must be at least 1)");

  // Vocabulary size and dtype from the embedding table [V, D].
  const GgufTensorInfo* embd = f.FindTensor(TensorName(kTensorTokenEmbd));
  ES_CHECK(embd, "missing tensor ", TensorName(kTensorTokenEmbd), " in ", f.path());
  ES_CHECK(embd->shape.size() == 2 && embd->shape[1] == c.hidden_size, "tensor ", embd->name,
           " in ", f.path(), " has shape ", ShapeStr(embd->shape), ", expected [n_vocab, ",
           c.hidden_size, "] (", key(kKeyEmbeddingLength), ")");
  c.vocab_size = embd->shape[0];
  if (f.Has(key(kKeyVocabSize)))
    ES_CHECK(int64_t(f.GetU32(key(kKeyVocabSize))) == c.vocab_size, f.path(), ": key ",
             key(kKeyVocabSize), " is ", f.GetU32(key(kKeyVocabSize)), " but ", embd->name, " has ",
             c.vocab_size, " rows");
  c.dtype = IsQuantized(embd->dtype) || embd->dtype == DType::kF32 ? DType::kF32 : embd->dtype;
  c.tie_word_embeddings = !f.HasTensor(TensorName(kTensorOutput));

  if (c.arch == Arch::kDeepseekV2) {
    ReadDeepseek2(f, c);
    // Dense layers (all of them without experts, the leading ones with).
    if (c.n_routed_experts == 0 || c.first_k_dense_replace > 0)
      c.intermediate_size = f.GetU32(key(kKeyFeedForwardLength));
    else
      c.intermediate_size = f.GetU32Or(key(kKeyFeedForwardLength), 0);
    const bool bias = f.HasTensor(BlockTensorName(0, kTensorAttnOutput, "bias"));
    c.attention_bias = c.attention_out_bias = bias;
  } else {
    c.intermediate_size = f.GetU32(key(kKeyFeedForwardLength));
    ES_CHECK(c.n_heads > 0, f.path(), ": key ", key(kKeyAttnHeadCount), " must be positive");
    c.head_dim = int(f.GetU32Or(key(kKeyAttnKeyLength), uint32_t(c.hidden_size / c.n_heads)));
    if (f.Has(key(kKeyAttnValueLength)))
      ES_CHECK(int(f.GetU32(key(kKeyAttnValueLength))) == c.head_dim, f.path(), ": key ",
               key(kKeyAttnValueLength), " differs from the key length ", c.head_dim,
               " (not supported)");
    const int rope_dim = int(f.GetU32Or(key(kKeyRopeDimensionCount), uint32_t(c.head_dim)));
    ES_CHECK(rope_dim == c.head_dim, f.path(), ": key ", key(kKeyRopeDimensionCount), " is ",
             rope_dim, " but heads are ", c.head_dim, " wide (partial rotary is not supported)");
    if (c.arch == Arch::kQwen2) {
      c.attention_bias = true;
      c.attention_out_bias = f.HasTensor(BlockTensorName(0, kTensorAttnOutput, "bias"));
    } else {
      c.attention_bias = f.HasTensor(BlockTensorName(0, kTensorAttnQ, "bias"));
      c.attention_out_bias = f.HasTensor(BlockTensorName(0, kTensorAttnOutput, "bias"));
      c.rope_interleaved = true;  // llama.cpp's converter permuted q/k (see the file comment)
    }
  }
  ReadRopeScaling(f, arch, c);

  // rope_freqs: per-frequency divisors (llama3 scaling as llama.cpp applies it).
  if (const GgufTensorInfo* rf = f.FindTensor(TensorName(kTensorRopeFreqs))) {
    const Shape want{c.rope_dim() / 2};
    const Tensor t = f.GetTensor(rf->name, want);
    ES_CHECK(t.dtype == DType::kF32, "tensor ", rf->name, " in ", f.path(), " has type ",
             Name(t.dtype), ", expected f32");
    c.rope_freq_factors.assign(t.as<float>(), t.as<float>() + want[0]);
    for (size_t i = 0; i < c.rope_freq_factors.size(); ++i)
      ES_CHECK(std::isfinite(c.rope_freq_factors[i]) && c.rope_freq_factors[i] > 0, "tensor ",
               rf->name, " in ", f.path(), ": element ", i, " is ", c.rope_freq_factors[i],
               " (must be positive)");
  }

  // Generation ids from the tokenizer keys (they describe the model's vocabulary).
  auto add_eos = [&](std::string_view k) {
    if (!f.Has(k)) return;
    const int32_t id = int32_t(f.GetU32(k));
    for (int32_t e : c.eos_token_ids)
      if (e == id) return;
    c.eos_token_ids.push_back(id);
  };
  add_eos(kKeyTokenizerEosId);
  add_eos(kKeyTokenizerEotId);
  add_eos(kKeyTokenizerEomId);
  if (f.Has(kKeyTokenizerBosId)) c.bos_token_id = int32_t(f.GetU32(kKeyTokenizerBosId));

  c.Validate(f.path());
  return c;
}

namespace {

// ---- HF tensor names -> GGUF tensors ----------------------------------------------------------

class GgufWeights {
 public:
  GgufWeights(std::shared_ptr<GgufFile> f, const ModelConfig& c,
              std::map<std::string, Tensor>* owned)
      : f_(std::move(f)), c_(c), owned_(owned) {}

  // Checks every tensor the architecture reads against the shape the metadata implies, naming
  // the GGUF tensor in errors.
  void CheckAll() const {
    std::set<std::string> stacked_done;
    for (const WeightSpec& s : ExpectedWeights(c_)) {
      if (IsKvB(s.name)) {
        CheckKvB(s);
        continue;
      }
      const auto m = HfToGgufName(s.name);
      ES_ASSERT(m.has_value());
      if (m->expert >= 0) {
        if (!stacked_done.insert(m->gguf_name).second) continue;
        Shape want{c_.n_routed_experts};
        want.insert(want.end(), s.shape.begin(), s.shape.end());
        f_->GetTensor(m->gguf_name, want);
        continue;
      }
      if (s.optional && !f_->HasTensor(m->gguf_name)) continue;
      f_->GetTensor(m->gguf_name, s.shape);
    }
  }

  // A tensor by checkpoint name, or nullptr.
  const Tensor* Lookup(const std::string& hf) {
    if (auto it = owned_->find(hf); it != owned_->end()) return &it->second;
    if (IsKvB(hf)) return KvB(hf);
    const auto m = HfToGgufName(hf);
    if (!m) return nullptr;
    const GgufTensorInfo* ti = f_->FindTensor(m->gguf_name);
    if (!ti) return nullptr;
    Tensor t = f_->GetTensor(m->gguf_name);
    if (m->expert >= 0) {
      ES_CHECK(t.shape.size() == 3 && m->expert < t.shape[0], "tensor ", m->gguf_name, " in ",
               f_->path(), " has shape ", ShapeStr(t.shape), ", too few experts for ", hf);
      const size_t rb = t.row_bytes();
      const int64_t rows = t.shape[1];
      t.data = t.bytes() + size_t(m->expert) * size_t(rows) * rb;
      t.shape = {rows, t.shape[2]};
      t.nbytes = size_t(rows) * rb;
    }
    t.name = hf;
    return &((*owned_)[hf] = std::move(t));
  }

 private:
  static bool IsKvB(const std::string& hf) {
    static const std::string kSuffix = ".self_attn.kv_b_proj.weight";
    return hf.size() > kSuffix.size() &&
           hf.compare(hf.size() - kSuffix.size(), kSuffix.size(), kSuffix) == 0;
  }
  static int LayerOf(const std::string& hf) {
    // "model.layers.N.self_attn..."
    return std::stoi(hf.substr(std::strlen("model.layers.")));
  }
  Shape KbShape() const { return {c_.n_heads, c_.kv_lora_rank, c_.qk_nope_head_dim}; }
  Shape VbShape() const { return {c_.n_heads, c_.v_head_dim, c_.kv_lora_rank}; }

  void CheckKvB(const WeightSpec& s) const {
    const int l = LayerOf(s.name);
    const std::string kv = BlockTensorName(l, kTensorAttnKvB);
    if (f_->HasTensor(kv)) {
      f_->GetTensor(kv, s.shape);
      return;
    }
    const std::string kb = BlockTensorName(l, kTensorAttnKB),
                      vb = BlockTensorName(l, kTensorAttnVB);
    ES_CHECK(f_->HasTensor(kb) || f_->HasTensor(vb), "missing tensor ", kv, " (or ", kb, " and ",
             vb, ") in ", f_->path());
    f_->GetTensor(kb, KbShape());
    f_->GetTensor(vb, VbShape());
  }

  // kv_b_proj [H*(dn+dv), r]: the attn_kv_b view in the file's type (ModelArch builds the
  // absorbed MLA pair from it at load, in f16 for a block-quantized one; a CPU decode reads
  // Wuv as kv_b's own rows and prefill expands K and V through it), or rebuilt from attn_k_b
  // [H, r, dn] and attn_v_b [H, dv, r].
  const Tensor* KvB(const std::string& hf) {
    const int l = LayerOf(hf);
    const int64_t H = c_.n_heads, dn = c_.qk_nope_head_dim, dv = c_.v_head_dim, r = c_.kv_lora_rank;
    const std::string kv = BlockTensorName(l, kTensorAttnKvB);
    if (f_->HasTensor(kv)) {
      Tensor t = f_->GetTensor(kv);
      t.name = hf;
      return &((*owned_)[hf] = std::move(t));
    }
    const std::string kbn = BlockTensorName(l, kTensorAttnKB),
                      vbn = BlockTensorName(l, kTensorAttnVB);
    if (!f_->HasTensor(kbn) || !f_->HasTensor(vbn)) return nullptr;
    const Tensor kb = f_->GetTensor(kbn, KbShape()), vb = f_->GetTensor(vbn, VbShape());
    // Same dense type for both: keep it; otherwise assemble in f32.
    const bool keep = kb.dtype == vb.dtype && (kb.dtype == DType::kF32 || kb.dtype == DType::kF16 ||
                                               kb.dtype == DType::kBF16);
    const DType dt = keep ? kb.dtype : DType::kF32;
    const size_t es = RowBytes(dt, 1);
    Tensor out = AllocTensor(hf, dt, {H * (dn + dv), r});
    uint8_t* o = static_cast<uint8_t*>(MutableData(out));
    std::vector<float> kf, vf;
    if (!keep) {
      kf.resize(size_t(kb.numel()));
      vf.resize(size_t(vb.numel()));
      Dequantize(kb.dtype, kb.data, kf.data(), kb.numel());
      Dequantize(vb.dtype, vb.data, vf.data(), vb.numel());
    }
    auto src_k = [&](int64_t h, int64_t j, int64_t i) {  // k_b[h][j][i] = kv_b[h*(dn+dv) + i][j]
      const size_t idx = size_t((h * r + j) * dn + i);
      return keep ? kb.bytes() + idx * es : reinterpret_cast<const uint8_t*>(kf.data() + idx);
    };
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t i = 0; i < dn; ++i)
        for (int64_t j = 0; j < r; ++j)
          std::memcpy(o + (size_t(h * (dn + dv) + i) * size_t(r) + size_t(j)) * es, src_k(h, j, i),
                      es);
      for (int64_t i = 0; i < dv; ++i) {
        const size_t idx = size_t((h * dv + i) * r);
        const uint8_t* src =
            keep ? vb.bytes() + idx * es : reinterpret_cast<const uint8_t*>(vf.data() + idx);
        std::memcpy(o + size_t(h * (dn + dv) + dn + i) * size_t(r) * es, src, size_t(r) * es);
      }
    }
    return &((*owned_)[hf] = std::move(out));
  }

  std::shared_ptr<GgufFile> f_;
  const ModelConfig& c_;
  std::map<std::string, Tensor>* owned_;
};

}  // namespace

std::shared_ptr<Model> LoadGgufModel(const std::string& path, const LoadOptions& opts) {
  std::shared_ptr<GgufFile> f = GgufFile::Open(path);
  auto m = std::shared_ptr<ModelLoader>(new ModelLoader());
  m->name_ = f->GetStringOr(kKeyGeneralName, fs::path(path).stem().string());
  m->config_ = std::make_unique<ModelConfig>(GgufModelConfig(*f));
  auto weights = std::make_shared<GgufWeights>(f, *m->config_, &m->owned);
  weights->CheckAll();
  m->custom_lookup = [weights](const std::string& n) { return weights->Lookup(n); };
  m->Finish();
  if (!opts.tokenizer.empty()) {
    m->tokenizer_ = Tokenizer::Load(opts.tokenizer);
  } else {
    m->tokenizer_ = GgufTokenizer(*f, &m->tokenizer_error_);
  }
  if (m->tokenizer_)
    ES_CHECK(m->tokenizer_->vocab_size() <= m->config_->vocab_size, path, ": the tokenizer has ",
             m->tokenizer_->vocab_size(), " tokens but ", TensorName(kTensorTokenEmbd), " only ",
             m->config_->vocab_size, " rows");
  return m;
}

}  // namespace es
