// A loaded model: configuration, weights (mmapped), the graph builder of its architecture, and
// (when the folder or file has one) its tokenizer. Backend-independent.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "edgeseek/internal/graph/graph.h"

namespace es {

struct ModelConfig;  // edgeseek/internal/models/config.h
class ModelArch;     // edgeseek/internal/models/arch.h
class Tokenizer;     // edgeseek/internal/tokenizer/tokenizer.h
struct QuantPolicy;  // edgeseek/internal/formats/quant_policy.h

struct GenerationDefaults {
  std::vector<int32_t> eos_ids;
  int32_t bos_id = -1;
  float temperature = 1.0f, top_p = 1.0f;
  int top_k = 0;
};

struct LoadOptions {
  std::string synthetic;  // preset name or config.json path: random weights, no files
  uint64_t seed = 0;      // for synthetic weights
  DType synthetic_dtype = DType::kBF16;
  std::string tokenizer;  // tokenizer folder or tokenizer.json to attach (overrides the model's)
  // Quantize at load (`--dtype q4_0`): the weights QuantizeAtLoadType picks
  // (edgeseek/internal/runtime/convert.h) become quantized copies, as QuantizeModelWeights makes
  // them. Synthetic weights are quantized tensor by tensor as they are made, so their bf16 form
  // never exists whole (peak memory: the quantized model plus one slice). Null: none.
  std::shared_ptr<const QuantPolicy> quantize;
  int threads = 0;  // making and quantizing weights at load (<= 0: all)
};

class Model {
 public:
  // PATH: a Hugging Face folder (config.json + *.safetensors [+ tokenizer.json]), a GGUF file,
  // or an ONNX decoder (a .onnx file, or a folder holding one: ORT-GenAI's builder output with
  // genai_config.json, a torch.onnx / optimum export), lifted into the same graph (docs/onnx.md).
  // Throws es::Error naming the file, tensor or field at fault.
  static std::shared_ptr<Model> Load(const std::string& path, const LoadOptions& opts = {});
  static std::shared_ptr<Model> Synthetic(const std::string& name_or_config,
                                          const LoadOptions& opts);
  virtual ~Model();

  const ModelConfig& config() const { return *config_; }
  const ModelArch& arch() const { return *arch_; }
  const GenerationDefaults& generation() const { return gen_; }
  const Tokenizer* tokenizer() const { return tokenizer_.get(); }  // may be null
  // Why tokenizer() is null when the model file carries a tokenizer edgeseek cannot read (one
  // line naming the file and key); "" otherwise.
  const std::string& tokenizer_error() const { return tokenizer_error_; }
  std::string name() const { return name_; }
  // How an imported model (ONNX) was lifted, one line each (inspect prints them); empty otherwise.
  const std::vector<std::string>& import_notes() const { return import_notes_; }
  int vocab_size() const;
  int64_t max_context() const;
  // Every weight tensor, in load order.
  const std::vector<const Tensor*>& weights() const { return weight_list_; }
  size_t weight_bytes() const;
  int64_t n_params() const;

 protected:
  Model();
  std::string name_;
  std::unique_ptr<ModelConfig> config_;
  std::unique_ptr<ModelArch> arch_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::string tokenizer_error_;
  GenerationDefaults gen_;
  std::vector<const Tensor*> weight_list_;
  std::vector<std::string> import_notes_;
  friend class ModelLoader;
};

}  // namespace es
