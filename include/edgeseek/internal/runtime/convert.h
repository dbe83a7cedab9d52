// Model-level quantization entry points, above the formats layer:
//  - ConvertModelToGguf: a loaded (Hugging Face) or synthetic es::Model -> GGUF, through
//    ConvertToGguf (edgeseek/internal/formats/gguf_convert.h) — what `edgeseek convert` runs;
//  - QuantizeModelWeights: quantize at load — the 2-D matmul weights of a loaded model are
//    replaced by block-quantized copies chosen by a QuantPolicy (the same policies and GGUF-name
//    rules as convert/quantize), so bench/logits/kld run quantized models without a file.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "edgeseek/internal/formats/gguf_quantize.h"
#include "edgeseek/internal/formats/quant_policy.h"
#include "edgeseek/internal/runtime/model.h"

namespace es {

struct ConvertModelOptions {
  std::string config_path;  // config.json to take the hyper-parameters from; empty: the model's own
  std::string tokenizer_dir;  // folder with tokenizer.json; empty: none (no tokenizer.* keys)
  GgufQuantizeOptions quantize;
};

// Writes `m` as a GGUF file. The model's weights must still be in their checkpoint types (or
// quantized ones: they are dequantized and requantized by the policy).
GgufQuantizeStats ConvertModelToGguf(const Model& m, const std::string& out_path,
                                     const QuantPolicy& policy,
                                     const ConvertModelOptions& options = {});

// `edgeseek convert --synthetic`: the synthetic model `name_or_config` (a preset or a config.json
// path; bf16 weights of `seed`) as GGUF — the bytes ConvertModelToGguf writes for
// Model::Synthetic, but each weight is made a slice of rows at a time as the converter reaches
// it, so the model never exists in memory (V2-Lite: 31 GB of bf16).
GgufQuantizeStats ConvertSyntheticToGguf(const std::string& name_or_config, uint64_t seed,
                                         const std::string& out_path, const QuantPolicy& policy,
                                         const ConvertModelOptions& options = {});

// Convenience: a Hugging Face folder (config.json, *.safetensors, tokenizer.json when present)
// -> GGUF. Throws es::Error naming the folder or file at fault.
GgufQuantizeStats ConvertHfToGguf(const std::string& hf_dir, const std::string& out_path,
                                  const QuantPolicy& policy,
                                  const GgufQuantizeOptions& options = {});

struct QuantizeAtLoadStats {
  size_t quantized = 0;  // tensors replaced
  size_t kept = 0;       // 2-D weights left as they were (embedding, MLA kv_b, type unchanged)
  uint64_t bytes_before = 0, bytes_after = 0;  // of the replaced tensors
};

// The type quantize-at-load gives a weight (Hugging Face name, shape, type), or nullopt where it
// stays as it is: 1-D tensors, tensors without a GGUF name (derived ones), the token embedding
// (a row lookup, not a matmul), MLA's kv_b (the absorbed weights are derived from it element by
// element), and weights whose type would not change or cannot be converted.
std::optional<DType> QuantizeAtLoadType(const QuantPolicy& policy, const std::string& name,
                                        const Shape& shape, DType dtype);

// Replaces the matmul weights of `m` (a model made by Model::Load from a folder or by
// Model::Synthetic) by quantized copies: each weight's GGUF name and shape go through
// ChooseType (dense targets too: `--dtype f16` on an f32 folder). Kept as they were: the token
// embedding (a row lookup, not a matmul), 1-D tensors, and MLA's kv_b (the absorbed weights are
// derived from it element by element). Deterministic; rows spread over `threads` (<= 0: all).
QuantizeAtLoadStats QuantizeModelWeights(Model& m, const QuantPolicy& policy, int threads = 0);

}  // namespace es
