// Hugging Face checkpoint -> GGUF (what `edgeseek convert` runs): the metadata keys, tensor names,
// tensor layouts and tokenizer metadata that llama.cpp's loader reads, with the tensors quantized
// by a QuantPolicy. The input is a config.json (as JSON) plus the checkpoint's tensors under
// their Hugging Face names, so this layer does not depend on the model loader: the runtime's
// ConvertModelToGguf (edgeseek/internal/runtime/convert.h) feeds it a loaded or synthetic
// es::Model.
//
// What it writes, per architecture (general.architecture from config.json's model_type):
//   llama (LlamaForCausalLM), qwen2 (Qwen2ForCausalLM), deepseek2 (DeepseekV2/V3ForCausalLM).
//   - hyper-parameters: "<arch>.context_length", embedding_length, block_count, ... (the keys of
//     ArchKeySuffixes), rope scaling (linear / yarn keys; llama3-style scaling as a rope_freqs
//     tensor of per-pair frequency divisors, as llama.cpp's converter writes it);
//   - tensors renamed by HfToGgufName; MoE experts stacked into [experts, rows, cols] tensors;
//   - llama only: the rows of attn_q / attn_k (weights and biases) permuted per head so that the
//     rope pairs (i, i + d/2) of the checkpoint's rotate-half convention become adjacent
//     (2i, 2i + 1), the interleaved convention llama.cpp's llama rope uses:
//       new row h*d + 2i + j  <-  old row h*d + j*d/2 + i      (i < d/2, j in {0, 1})
//     qwen2 (NEOX rope) and deepseek2 (checkpoint already interleaved) are written unpermuted;
//   - tokenizer.ggml.* from tokenizer.json / tokenizer_config.json (byte-level BPE: model "gpt2",
//     tokens padded to the vocabulary size with "[PAD<i>]" tokens of type unused, token types,
//     merges, bos/eos/pad ids, add_bos/add_eos, pre-tokenizer name chosen from the pattern) and
//     tokenizer.chat_template.
// The output is a pure function of the inputs and the policy (not of the thread count).
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "edgeseek/internal/core/tensor.h"
#include "edgeseek/internal/formats/gguf.h"
#include "edgeseek/internal/formats/gguf_quantize.h"
#include "edgeseek/internal/formats/quant_policy.h"

namespace es {

class ThreadPool;

struct GgufConvertSource {
  nlohmann::json config;               // config.json (hub or transformers-5 dialect)
  std::vector<const Tensor*> tensors;  // Hugging Face names; a repeated name is taken once
  // Makes rows [row_begin, row_end) of a tensor of `tensors` whose `data` is null (name, type,
  // shape and nbytes set), RowBytes(dtype, cols) bytes a row, when the converter reaches them
  // (threads from `pool` may help): a source that makes its tensors on demand (synthetic
  // weights) then never holds more than one slice of one tensor. Unset: every tensor has data.
  std::function<void(const Tensor& t, int64_t row_begin, int64_t row_end, uint8_t* dst,
                     ThreadPool& pool)>
      fill_rows;
  // Called once rows [row_begin, row_end) of a source tensor are written and will not be read
  // again (a source of mmapped tensors hands their pages back: DropMappedPages). Unset: nothing.
  std::function<void(const Tensor& t, int64_t row_begin, int64_t row_end)> release;
  std::string tokenizer_dir;          // folder with tokenizer.json; empty: no tokenizer keys
  std::string name;                   // general.name
  std::string where = "config.json";  // names the config in errors
};

// Writes `src` to `out_path` (via PATH.tmp, renamed at the end). Stats count output tensors;
// `requantized` are those whose type changed, `copied` those written as they were. The header
// (every tensor's type, shape and offset) is written first, from the plan; then each tensor's
// data a slice of rows at a time (StreamStepRows), read from the source tensors (or made by
// fill_rows), re-encoded and written — memory holds one slice, never a tensor or the model
// (a llama q/k projection, whose rope permutation moves rows across it, is held whole).
GgufQuantizeStats ConvertToGguf(const GgufConvertSource& src, const std::string& out_path,
                                const QuantPolicy& policy, const GgufQuantizeOptions& options = {});

// ---- Pieces, exposed for tests.

// "llama", "qwen2" or "deepseek2" for a config's model_type / architectures; es::Error naming
// the model type otherwise.
std::string GgufArchForConfig(const nlohmann::json& config, const std::string& where);

// The hyper-parameter keys of `arch` from a config.json.
void SetGgufHparams(GgufWriter& w, const std::string& arch, const nlohmann::json& config,
                    const std::string& where);

// llama3-style rope scaling as llama.cpp stores it: rope_dim / 2 frequency divisors (1 for high
// frequencies, `factor` for low ones, a smooth blend between); empty when the config has no
// llama3 rope scaling.
std::vector<float> Llama3RopeFreqFactors(const nlohmann::json& config, int rope_dim);

// tokenizer.ggml.* and tokenizer.chat_template from DIR/tokenizer.json and (when present)
// DIR/tokenizer_config.json, DIR/chat_template.jinja; bos/eos ids not named there come from
// `config`. `vocab_size` is the model's: the token list is padded to it. Throws es::Error naming
// the file and field at fault (an unsupported tokenizer model, a token id out of range, ...).
void SetGgufTokenizer(GgufWriter& w, const std::string& dir, int64_t vocab_size,
                      const nlohmann::json& config);

// llama.cpp's pre-tokenizer name for a tokenizer.json's pre_tokenizer: "llama-bpe" (Llama 3),
// "qwen2" (Qwen2 / R1-Distill-Qwen), "deepseek-v3", "deepseek-llm", "gpt-2"; es::Error for
// patterns it does not recognize.
std::string GgufPreTokenizerName(const nlohmann::json& tokenizer_json, const std::string& where);

// The llama q/k row permutation above, on `rows` rows of `row_bytes` bytes (rows = heads * d).
void PermuteRopeRows(const uint8_t* src, uint8_t* dst, int64_t rows, size_t row_bytes, int heads);

}  // namespace es
