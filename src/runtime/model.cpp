// Model loading: Hugging Face folders (config.json, safetensors, generation_config.json,
// tokenizer files) and synthetic models of built-in shapes, each optionally quantized at load
// (LoadOptions::quantize; synthetic weights tensor by tensor as they are made).
//
// Weight lookups go through one function that also
//  - converts FP8 E4M3 weights with 128×128 block scales (`<name>_scale_inv`) to f32 at load,
//  - splits transformers-5 fused expert tensors (`mlp.experts.gate_up_proj` [E, 2I, D],
//    `mlp.experts.down_proj` [E, D, I]) into per-expert views (no copy),
// so the architectures see one naming scheme. Multi-token-prediction layers of V3/R1
// checkpoints (model.layers.<n_layers>…) are never looked up, hence never loaded.
#include "edgeseek/internal/runtime/model.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/core/progress.h"
#include "edgeseek/internal/core/thread_pool.h"
#include "edgeseek/internal/formats/gguf_quantize.h"
#include "edgeseek/internal/formats/safetensors.h"
#include "edgeseek/internal/models/arch.h"
#include "edgeseek/internal/models/config.h"
#include "edgeseek/internal/runtime/convert.h"
#include "edgeseek/internal/tokenizer/tokenizer.h"
#include "model_loader.h"
#include "synthetic_weights.h"

namespace es {

namespace fs = std::filesystem;
using nlohmann::json;

Model::Model() = default;
Model::~Model() = default;

int Model::vocab_size() const { return int(config_->vocab_size); }
int64_t Model::max_context() const { return config_->max_position_embeddings; }
size_t Model::weight_bytes() const {
  size_t s = 0;
  for (const Tensor* t : weight_list_) s += t->nbytes;
  return s;
}
int64_t Model::n_params() const {
  int64_t s = 0;
  for (const Tensor* t : weight_list_) s += t->numel();
  return s;
}

std::shared_ptr<Model> Model::Load(const std::string& path, const LoadOptions& opts) {
  if (!opts.synthetic.empty()) return Synthetic(opts.synthetic, opts);
  std::error_code ec;
  ES_CHECK(fs::exists(path, ec), "cannot read '", path, "': no such file or directory");
  if (const std::string onnx = OnnxModelFile(path); !onnx.empty()) {
    std::shared_ptr<Model> o = LoadOnnxModel(onnx, opts);
    if (opts.quantize) QuantizeModelWeights(*o, *opts.quantize, opts.threads);
    return o;
  }
  if (!fs::is_directory(path, ec)) {
    if (fs::path(path).extension() == ".gguf") {
      std::shared_ptr<Model> g = LoadGgufModel(path, opts);
      if (opts.quantize) QuantizeModelWeights(*g, *opts.quantize, opts.threads);
      return g;
    }
    Fail("'", path, "' is neither a Hugging Face model folder, a .gguf file nor an .onnx file");
  }
  auto m = std::shared_ptr<ModelLoader>(new ModelLoader());
  m->name_ = fs::path(path).filename().string();
  if (m->name_.empty()) m->name_ = fs::path(path).parent_path().filename().string();
  const std::string config_path = (fs::path(path) / "config.json").string();
  m->config_ = std::make_unique<ModelConfig>(LoadHfConfig(config_path, kCheckpointLater));
  m->st = SafetensorsSet::Open(path);
  CheckHfLayersPresent(*m->config_, HfLayersPresent(m->st->Names()), config_path);
  m->fp8_progress = m->LoadFp8Progress();  // FP8 weights are dequantized as Finish looks them up
  m->Finish();
  m->fp8_progress.reset();
  m->ReadGenerationConfig((fs::path(path) / "generation_config.json").string());
  if (!opts.tokenizer.empty())
    m->tokenizer_ = Tokenizer::Load(opts.tokenizer);
  else if (fs::exists(fs::path(path) / "tokenizer.json"))
    m->tokenizer_ = Tokenizer::Load(path);
  if (opts.quantize) QuantizeModelWeights(*m, *opts.quantize, opts.threads);
  return m;
}

namespace {

// Synthetic tensor i quantized to `type` a slice of rows at a time: the source slice is made,
// re-encoded into the quantized tensor and dropped, so the source tensor never exists whole.
Tensor QuantizeSynthetic(const SyntheticWeights& sw, size_t i, DType type, ThreadPool& pool) {
  const Tensor& s = sw.tensors()[i];
  Tensor q = AllocTensorForWrite(s.name, type, s.shape);  // every row re-encoded below
  const int64_t cols = s.cols(), rows = s.rows();
  const size_t in_row = s.row_bytes(), out_row = q.row_bytes();
  const int64_t step = StreamStepRows(in_row, out_row);
  std::vector<uint8_t> slice(size_t(std::min(step, rows)) * in_row);
  uint8_t* dst = static_cast<uint8_t*>(MutableData(q));
  for (int64_t r0 = 0; r0 < rows; r0 += step) {
    const int64_t n = std::min(step, rows - r0);
    sw.Fill(i, r0, r0 + n, slice.data(), pool);
    RequantizeRows(
        pool, s.dtype, [&](int64_t r) { return slice.data() + size_t(r) * in_row; }, type, n, cols,
        dst + size_t(r0) * out_row, "quantize at load", s.name, r0);
  }
  return q;
}

}  // namespace

std::shared_ptr<Model> Model::Synthetic(const std::string& name_or_config,
                                        const LoadOptions& opts) {
  auto m = std::shared_ptr<ModelLoader>(new ModelLoader());
  const ModelConfig c = SyntheticConfig(name_or_config, &m->name_);
  m->config_ = std::make_unique<ModelConfig>(c);
  // Deterministic random weights (synthetic_weights.h), made one tensor at a time; those that
  // quantize-at-load replaces are quantized as they are made.
  const SyntheticWeights sw(c, opts.synthetic_dtype, opts.seed);
  ThreadPool pool(opts.threads);
  uint64_t total = 0, done = 0;
  for (const Tensor& s : sw.tensors()) total += s.nbytes;
  Progress progress(opts.quantize ? "generating and quantizing weights" : "generating weights",
                    total, Progress::Unit::kBytes);
  for (size_t i = 0; i < sw.tensors().size(); ++i) {
    const Tensor& s = sw.tensors()[i];
    const std::optional<DType> q =
        opts.quantize ? QuantizeAtLoadType(*opts.quantize, s.name, s.shape, s.dtype) : std::nullopt;
    m->owned.emplace(s.name, q ? QuantizeSynthetic(sw, i, *q, pool) : sw.Make(i, pool));
    progress.Set(done += s.nbytes, s.name);
  }
  m->Finish();
  if (!opts.tokenizer.empty()) {
    m->tokenizer_ = Tokenizer::Load(opts.tokenizer);
    ES_CHECK(m->tokenizer_->vocab_size() <= c.vocab_size, "tokenizer '", opts.tokenizer, "' has ",
             m->tokenizer_->vocab_size(), " tokens but the model's vocabulary holds ",
             c.vocab_size);
  }
  return m;
}

}  // namespace es
