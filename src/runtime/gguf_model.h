// GGUF model loading internals (model_gguf.cpp, gguf_tokenizer.cpp), exposed to the runtime and
// its tests: llama.cpp metadata -> ModelConfig, and tokenizer.ggml.* -> Tokenizer.
#pragma once

#include <memory>
#include <string>

#include "edgeseek/internal/formats/gguf.h"
#include "edgeseek/internal/models/config.h"
#include "edgeseek/internal/tokenizer/tokenizer.h"

namespace es {

// Maps the metadata of a `qwen2`, `llama` or `deepseek2` file (and the presence of a few
// tensors: attn_q_a, output, exp_probs_b, rope_freqs, biases) onto a ModelConfig. Throws
// es::Error naming the file and the key at fault.
ModelConfig GgufModelConfig(const GgufFile& f);

// The tokenizer a GGUF file carries (tokenizer.ggml.model "gpt2": byte-level BPE). Returns null
// and sets *why (one line naming the file and the key) when the file has none or one edgeseek
// does not read; throws es::Error for a malformed vocabulary.
std::unique_ptr<Tokenizer> GgufTokenizer(const GgufFile& f, std::string* why);

// The Split regexes (applied in order, each Isolated, before the byte-level map) that
// tokenizer.ggml.pre names; empty vector for GPT-2's own regex. Throws for an unknown name.
std::vector<std::string> GgufPreTokenizerRegexes(const std::string& pre, const std::string& where);

}  // namespace es
