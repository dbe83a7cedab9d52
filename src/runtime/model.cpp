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

// Holds what a loaded model owns besides the base members.
class ModelLoader : public Model {
 public:
  std::unique_ptr<SafetensorsSet> st;
  std::map<std::string, Tensor> owned;  // converted or generated tensors

  const Tensor* Lookup(const std::string& name) {
    if (auto it = owned.find(name); it != owned.end()) return &it->second;
    if (!st) return nullptr;
    const Tensor* t = st->Find(name);
    if (t && t->dtype == DType::kF8E4M3) return ConvertFp8(*t);
    if (t) return t;
    return SplitFusedExpert(name);
  }

  const Tensor* ConvertFp8(const Tensor& w) {
    const std::string sname = w.name + "_scale_inv";
    const Tensor* s = st->Find(sname);
    ES_CHECK(s, "tensor '", w.name, "' is FP8 but '", sname, "' (its block scales) is missing");
    ES_CHECK(w.shape.size() == 2, "FP8 tensor '", w.name, "' must be 2-D");
    const int64_t N = w.shape[0], K = w.shape[1];
    const int64_t bn = config_->fp8_block_n, bk = config_->fp8_block_k;
    const Shape want{(N + bn - 1) / bn, (K + bk - 1) / bk};
    ES_CHECK(s->shape == want, "tensor '", sname, "' has shape ", ShapeStr(s->shape),
             " but FP8 blocks of ", bn, "x", bk, " over ", ShapeStr(w.shape), " need ", ShapeStr(want));
    const std::vector<float> scale = ToF32(*s);
    Tensor out = AllocTensor(w.name, DType::kF32, w.shape);
    float* o = static_cast<float*>(MutableData(out));
    const uint8_t* src = w.bytes();
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k)
        o[n * K + k] = F8E4M3ToF32(src[n * K + k]) * scale[size_t((n / bn) * want[1] + k / bk)];
    return &(owned[w.name] = std::move(out));
  }

  // model.layers.L.mlp.experts.E.{gate,up,down}_proj.weight from fused 3-D tensors.
  const Tensor* SplitFusedExpert(const std::string& name) {
    const std::string key = ".mlp.experts.";
    const size_t p = name.find(key);
    if (p == std::string::npos) return nullptr;
    const std::string prefix = name.substr(0, p + key.size());
    const std::string rest = name.substr(p + key.size());
    const size_t dot = rest.find('.');
    if (dot == std::string::npos) return nullptr;
    int e;
    try {
      e = std::stoi(rest.substr(0, dot));
    } catch (...) {
      return nullptr;
    }
    const std::string which = rest.substr(dot + 1);
    const bool is_down = which == "down_proj.weight";
    const Tensor* f = st->Find(prefix + (is_down ? "down_proj" : "gate_up_proj"));
    if (!f) return nullptr;
    ES_CHECK(f->shape.size() == 3 && e < f->shape[0], "fused expert tensor '", f->name,
             "' has shape ", ShapeStr(f->shape));
    ES_CHECK(!IsQuantized(f->dtype) && f->dtype != DType::kF8E4M3, "fused expert tensor '", f->name,
             "' of type ", Name(f->dtype), " is not supported");
    const int64_t rows = f->shape[1], cols = f->shape[2];
    Tensor v;
    v.name = name;
    v.dtype = f->dtype;
    v.owner = f->owner;
    const size_t rb = RowBytes(f->dtype, cols);
    const uint8_t* base = f->bytes() + size_t(e) * size_t(rows) * rb;
    if (is_down) {
      v.shape = {rows, cols};
      v.data = base;
    } else {
      ES_CHECK(rows % 2 == 0, "fused tensor '", f->name, "' must hold gate and up halves");
      v.shape = {rows / 2, cols};
      v.data = which == "gate_proj.weight" ? base : base + size_t(rows / 2) * rb;
      if (which != "gate_proj.weight" && which != "up_proj.weight") return nullptr;
    }
    v.nbytes = size_t(v.shape[0]) * rb;
    return &(owned[name] = std::move(v));
  }

  void Finish(const std::string& where) {
    arch_ = std::make_unique<ModelArch>(*config_, [this](const std::string& n) { return Lookup(n); });
    weight_list_ = arch_->Weights();
    gen_.eos_ids = config_->eos_token_ids;
    gen_.bos_id = config_->bos_token_id;
    (void)where;
  }

  void ReadGenerationConfig(const std::string& path) {
    std::ifstream f(path);
    if (!f.good()) return;
    json j;
    try {
      j = json::parse(f);
    } catch (const json::parse_error& e) {
      Fail(path, ": invalid JSON: ", e.what());
    }
    if (j.contains("eos_token_id")) {
      gen_.eos_ids.clear();
      if (j["eos_token_id"].is_array())
        for (auto& v : j["eos_token_id"]) gen_.eos_ids.push_back(v.get<int32_t>());
      else if (j["eos_token_id"].is_number_integer())
        gen_.eos_ids.push_back(j["eos_token_id"].get<int32_t>());
    }
    if (j.contains("bos_token_id") && j["bos_token_id"].is_number_integer())
      gen_.bos_id = j["bos_token_id"].get<int32_t>();
    if (j.contains("temperature") && j["temperature"].is_number())
      gen_.temperature = j["temperature"].get<float>();
    if (j.contains("top_p") && j["top_p"].is_number()) gen_.top_p = j["top_p"].get<float>();
    if (j.contains("top_k") && j["top_k"].is_number_integer()) gen_.top_k = j["top_k"].get<int>();
  }
};

std::shared_ptr<Model> Model::Load(const std::string& path, const LoadOptions& opts) {
  if (!opts.synthetic.empty()) return Synthetic(opts.synthetic, opts);
  std::error_code ec;
  ES_CHECK(fs::exists(path, ec), "cannot read '", path, "': no such file or directory");
  if (!fs::is_directory(path, ec)) {
    Fail("'", path, "' is not a Hugging Face model folder (GGUF files are not supported yet)");
  }
  auto m = std::shared_ptr<ModelLoader>(new ModelLoader());
  m->name_ = fs::path(path).filename().string();
  if (m->name_.empty()) m->name_ = fs::path(path).parent_path().filename().string();
  m->config_ = std::make_unique<ModelConfig>(LoadHfConfig((fs::path(path) / "config.json").string()));
  m->st = SafetensorsSet::Open(path);
  m->Finish(path);
  m->ReadGenerationConfig((fs::path(path) / "generation_config.json").string());
  if (fs::exists(fs::path(path) / "tokenizer.json")) m->tokenizer_ = Tokenizer::Load(path);
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
  m->Finish(name_or_config);
  return m;
}

}  // namespace es
