// Test helpers for GGUF model loading: a minimal Hugging Face folder -> GGUF writer (f32 tensors,
// llama.cpp's keys and names, llama q/k permuted as llama.cpp's converter does), used until the
// converter (`edgeseek convert`) is there, plus logits helpers.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "edgeseek/internal/formats/gguf.h"
#include "edgeseek/internal/runtime/model.h"

namespace es::test {

struct HfToGgufOptions {
  bool split_kv_b = false;  // deepseek2: attn_k_b / attn_v_b (newer llama.cpp) instead of attn_kv_b
  bool permute_llama = true;  // llama: permute q/k rows as llama.cpp's converter does
  std::string tokenizer_dir;  // a tokenizer.json folder whose vocabulary goes into tokenizer.ggml.*
  std::string tokenizer_pre = "gpt2";  // tokenizer.ggml.pre written with it
  std::string skip_tensor;             // a GGUF tensor name left out (bad-input tests)
  // Last chance to edit the file before it is written (bad-input tests).
  std::function<void(GgufWriter&)> edit;
};

// Writes HF_DIR (config.json + safetensors, dense dtypes) as an f32 GGUF at OUT.
void WriteHfAsGguf(const std::string& hf_dir, const std::string& out,
                   const HfToGgufOptions& o = {});

// Writes the vocabulary of a tokenizer.json folder as tokenizer.ggml.* keys (model "gpt2").
void SetGgufVocab(GgufWriter& w, const std::string& tokenizer_dir, const std::string& pre);

// Logits [T, V] of one prefill of `ids` on `backend`.
std::vector<float> PrefillLogits(const std::shared_ptr<Model>& m, const std::vector<int32_t>& ids,
                                 const std::string& backend = "cpu");

}  // namespace es::test
