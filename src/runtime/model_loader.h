// ModelLoader: the concrete Model that loaders fill (HF folders here, GGUF files in
// model_gguf.cpp): owns the checkpoint mappings and any converted tensors, and resolves weight
// names for the architectures.
#pragma once

#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/core/half.h"
#include "edgeseek/internal/core/json_field.h"
#include "edgeseek/internal/core/progress.h"
#include "edgeseek/internal/core/tensor.h"
#include "edgeseek/internal/formats/safetensors.h"
#include "edgeseek/internal/models/arch.h"
#include "edgeseek/internal/models/config.h"
#include "edgeseek/internal/runtime/model.h"

namespace es {

// Holds what a loaded model owns besides the base members.
class ModelLoader : public Model {
 public:
  using Model::config_;
  using Model::gen_;
  using Model::import_notes_;
  using Model::name_;
  using Model::tokenizer_;
  using Model::tokenizer_error_;
  // Extra lookup tried first (e.g. GGUF name mapping); null when unused.
  std::function<const Tensor*(const std::string&)> custom_lookup;

  std::unique_ptr<SafetensorsSet> st;
  std::map<std::string, Tensor> owned;  // converted or generated tensors
  // While the architecture looks up an FP8 checkpoint's weights (each dequantized then): the
  // bytes converted, on a terminal (LoadFp8Progress).
  std::unique_ptr<Progress> fp8_progress;

  const Tensor* Lookup(const std::string& name) {
    if (custom_lookup) return custom_lookup(name);
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
             " but FP8 blocks of ", bn, "x", bk, " over ", ShapeStr(w.shape), " need ",
             ShapeStr(want));
    const std::vector<float> scale = ToF32(*s);
    Tensor out = AllocTensor(w.name, DType::kF32, w.shape);
    float* o = static_cast<float*>(MutableData(out));
    const uint8_t* src = w.bytes();
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k)
        o[n * K + k] = F8E4M3ToF32(src[n * K + k]) * scale[size_t((n / bn) * want[1] + k / bk)];
    if (fp8_progress) fp8_progress->Add(w.nbytes);
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

  // A progress line over the checkpoint's FP8 bytes, for the Finish() that converts them (null
  // when it holds none).
  std::unique_ptr<Progress> LoadFp8Progress() const {
    uint64_t bytes = 0;
    for (const std::string& n : st->Names())
      if (const Tensor* t = st->Find(n); t->dtype == DType::kF8E4M3) bytes += t->nbytes;
    if (bytes == 0) return nullptr;
    return std::make_unique<Progress>("converting FP8 weights", bytes, Progress::Unit::kBytes);
  }

  void Finish() {
    arch_ =
        std::make_unique<ModelArch>(*config_, [this](const std::string& n) { return Lookup(n); });
    weight_list_ = arch_->Weights();
    gen_.eos_ids = config_->eos_token_ids;
    gen_.bos_id = config_->bos_token_id;
  }

  // generation_config.json: the generation defaults (EOS/BOS ids, temperature, top_p, top_k).
  // Values of the wrong type are one error naming the file and the field, like config.json's.
  void ReadGenerationConfig(const std::string& path) {
    using json_field::As;
    using json_field::Opt;
    if (!std::ifstream(path).good()) return;  // optional
    const nlohmann::json j = json_field::ReadFile(path);
    ES_CHECK(j.is_object(), path, ": expected a JSON object at the top level");
    if (auto it = j.find("eos_token_id"); it != j.end() && !it->is_null()) {
      gen_.eos_ids.clear();
      if (it->is_array()) {
        for (size_t i = 0; i < it->size(); ++i)
          gen_.eos_ids.push_back(
              As<int32_t>((*it)[i], "eos_token_id[" + std::to_string(i) + "]", path));
      } else {
        gen_.eos_ids.push_back(As<int32_t>(*it, "eos_token_id", path));
      }
    }
    gen_.bos_id = Opt<int32_t>(j, "bos_token_id", gen_.bos_id, path);
    gen_.temperature = float(Opt<double>(j, "temperature", gen_.temperature, path));
    gen_.top_p = float(Opt<double>(j, "top_p", gen_.top_p, path));
    gen_.top_k = Opt<int>(j, "top_k", gen_.top_k, path);
  }
};

// Loads a GGUF file (model_gguf.cpp).
std::shared_ptr<Model> LoadGgufModel(const std::string& path, const LoadOptions& opts);

// The .onnx file PATH names: PATH itself when it ends in .onnx, the decoder of a folder's
// genai_config.json, or the one *.onnx file of a folder without *.safetensors; "" when PATH is
// not an ONNX model (model_onnx.cpp). Throws es::Error when a folder holds several .onnx files
// and nothing says which.
std::string OnnxModelFile(const std::string& path);
// Loads an ONNX decoder (model_onnx.cpp): reads, lifts (edgeseek/internal/models/onnx_lift.h), and
// takes eos/bos/context from genai_config.json, config.json or generation_config.json beside it and
// the tokenizer from the folder.
std::shared_ptr<Model> LoadOnnxModel(const std::string& onnx_file, const LoadOptions& opts);

}  // namespace es
