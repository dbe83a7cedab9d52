// Model loading: Hugging Face folders (config.json, safetensors, generation_config.json,
// tokenizer files) and synthetic models of built-in shapes.
//
// Weight lookups go through one function that also
//  - converts FP8 E4M3 weights with 128×128 block scales (`<name>_scale_inv`) to f32 at load,
//  - splits transformers-5 fused expert tensors (`mlp.experts.gate_up_proj` [E, 2I, D],
//    `mlp.experts.down_proj` [E, D, I]) into per-expert views (no copy),
// so the architectures see one naming scheme. Multi-token-prediction layers of V3/R1
// checkpoints (model.layers.<n_layers>…) are never looked up, hence never loaded.
#include "edgeseek/runtime/model.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "edgeseek/core/error.h"
#include "edgeseek/core/half.h"
#include "edgeseek/core/thread_pool.h"
#include "edgeseek/formats/safetensors.h"
#include "edgeseek/models/arch.h"
#include "edgeseek/models/config.h"
#include "edgeseek/models/presets.h"
#include "edgeseek/tokenizer/tokenizer.h"
#include "model_loader.h"

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
  if (!fs::is_directory(path, ec)) {
    if (fs::path(path).extension() == ".gguf") return LoadGgufModel(path, opts);
    Fail("'", path, "' is neither a Hugging Face model folder nor a .gguf file");
  }
  auto m = std::shared_ptr<ModelLoader>(new ModelLoader());
  m->name_ = fs::path(path).filename().string();
  if (m->name_.empty()) m->name_ = fs::path(path).parent_path().filename().string();
  m->config_ = std::make_unique<ModelConfig>(LoadHfConfig((fs::path(path) / "config.json").string()));
  m->st = SafetensorsSet::Open(path);
  m->Finish();
  m->ReadGenerationConfig((fs::path(path) / "generation_config.json").string());
  if (!opts.tokenizer.empty())
    m->tokenizer_ = Tokenizer::Load(opts.tokenizer);
  else if (fs::exists(fs::path(path) / "tokenizer.json"))
    m->tokenizer_ = Tokenizer::Load(path);
  return m;
}

std::shared_ptr<Model> Model::Synthetic(const std::string& name_or_config, const LoadOptions& opts) {
  auto m = std::shared_ptr<ModelLoader>(new ModelLoader());
  ModelConfig c;
  std::error_code ec;
  if (fs::exists(name_or_config, ec) && !fs::is_directory(name_or_config, ec)) {
    c = LoadHfConfig(name_or_config);
    m->name_ = fs::path(name_or_config).stem().string();
  } else {
    c = PresetConfig(name_or_config);
    m->name_ = name_or_config;
  }
  m->config_ = std::make_unique<ModelConfig>(c);
  // Deterministic random weights: each tensor seeded by its name and the seed; values uniform
  // in ±sqrt(3/fan_in) (unit-variance outputs), norms 1 ± 0.1.
  const std::vector<WeightSpec> specs = ExpectedWeights(c);
  ThreadPool pool(0);
  for (const WeightSpec& s : specs) {
    Tensor t = AllocTensor(s.name, s.is_norm || s.shape.size() == 1 ? DType::kF32 : opts.synthetic_dtype, s.shape);
    const int64_t n = t.numel();
    const uint64_t seed = std::hash<std::string>{}(s.name) ^ (opts.seed * 0x9e3779b97f4a7c15ull);
    const float scale = s.is_norm ? 0.1f : float(std::sqrt(3.0 / double(s.shape.back())));
    const float center = s.is_norm ? 1.0f : 0.0f;
    const DType dt = t.dtype;
    void* data = MutableData(t);
    pool.ParallelFor(n, [&](int64_t b, int64_t e, int) {
      uint64_t x = seed + uint64_t(b) * 0xbf58476d1ce4e5b9ull;
      for (int64_t i = b; i < e; ++i) {
        x += 0x9e3779b97f4a7c15ull;  // splitmix64
        uint64_t z = x;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        const float u = float(z >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f;
        const float v = center + scale * u;
        if (dt == DType::kF32) static_cast<float*>(data)[i] = v;
        else if (dt == DType::kF16) static_cast<uint16_t*>(data)[i] = F32ToF16(v);
        else static_cast<uint16_t*>(data)[i] = F32ToBF16(v);
      }
    }, 4096);
    m->owned.emplace(s.name, std::move(t));
  }
  m->Finish();
  if (!opts.tokenizer.empty()) {
    m->tokenizer_ = Tokenizer::Load(opts.tokenizer);
    ES_CHECK(m->tokenizer_->vocab_size() <= c.vocab_size, "tokenizer '", opts.tokenizer, "' has ",
             m->tokenizer_->vocab_size(), " tokens but the model's vocabulary holds ", c.vocab_size);
  }
  return m;
}

}  // namespace es
