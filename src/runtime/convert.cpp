// ConvertModelToGguf / ConvertHfToGguf / QuantizeModelWeights (include/edgeseek/runtime/convert.h):
// the model-level halves of `edgeseek convert` and of quantize-at-load (`--dtype q4_0` ...).
#include "edgeseek/runtime/convert.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "edgeseek/core/error.h"
#include "edgeseek/core/thread_pool.h"
#include "edgeseek/formats/gguf_convert.h"
#include "edgeseek/formats/gguf_names.h"
#include "edgeseek/models/arch.h"
#include "edgeseek/models/config.h"
#include "edgeseek/quant/blocks.h"
#include "model_loader.h"

namespace es {

namespace fs = std::filesystem;

GgufQuantizeStats ConvertModelToGguf(const Model& m, const std::string& out_path, const QuantPolicy& policy,
                                     const ConvertModelOptions& options) {
  GgufConvertSource src;
  if (options.config_path.empty()) {
    src.config = ToHfConfig(m.config());
    src.where = "model " + m.name();
  } else {
    std::ifstream f(options.config_path);
    ES_CHECK(f.good(), "cannot read '", options.config_path, "'");
    try {
      src.config = nlohmann::json::parse(f);
    } catch (const nlohmann::json::parse_error& e) {
      Fail(options.config_path, ": invalid JSON: ", e.what());
    }
    src.where = options.config_path;
  }
  // The checkpoint tensors by their names (ExpectedWeights order); m.weights() lists what the
  // graphs read, which for MLA is the derived absorbed pair instead of kv_b itself. Lookups only
  // fill the loader's caches (FP8 conversion, fused-expert views), hence the const_cast.
  auto* ml = const_cast<ModelLoader*>(dynamic_cast<const ModelLoader*>(&m));
  if (ml) {
    for (const WeightSpec& w : ExpectedWeights(m.config()))
      if (const Tensor* t = ml->Lookup(w.name)) src.tensors.push_back(t);
  } else {
    src.tensors = m.weights();
  }
  src.tokenizer_dir = options.tokenizer_dir;
  src.name = m.name();
  return ConvertToGguf(src, out_path, policy, options.quantize);
}

GgufQuantizeStats ConvertHfToGguf(const std::string& hf_dir, const std::string& out_path, const QuantPolicy& policy,
                                  const GgufQuantizeOptions& options) {
  std::error_code ec;
  ES_CHECK(fs::is_directory(hf_dir, ec), "'", hf_dir, "' is not a Hugging Face model folder");
  const std::shared_ptr<Model> m = Model::Load(hf_dir);
  ConvertModelOptions o;
  o.quantize = options;
  if (fs::exists(fs::path(hf_dir) / "tokenizer.json")) o.tokenizer_dir = hf_dir;
  return ConvertModelToGguf(*m, out_path, policy, o);
}

QuantizeAtLoadStats QuantizeModelWeights(Model& m, const QuantPolicy& policy, int threads) {
  auto* ml = dynamic_cast<ModelLoader*>(&m);
  ES_CHECK(ml, "quantize at load: model ", m.name(), " was not made by Model::Load or Model::Synthetic");
  QuantizeAtLoadStats st;
  struct Job {
    const Tensor* src;
    DType type;
  };
  std::vector<Job> jobs;
  std::vector<const Tensor*> seen;
  for (const Tensor* t : m.weights()) {
    if (std::find(seen.begin(), seen.end(), t) != seen.end()) continue;
    seen.push_back(t);
    if (t->shape.size() != 2) continue;
    const auto g = HfToGgufName(t->name);
    if (!g) continue;  // derived tensors (MLA absorption)
    const std::string& n = g->gguf_name;
    const bool keep = n == TensorName(kTensorTokenEmbd) || n.find("." + std::string(kTensorAttnKvB) + ".") != std::string::npos;
    const DType type = ChooseType(policy, n, t->shape, t->dtype);
    if (keep || type == t->dtype || !CanQuantize(type) || !CanQuantize(t->dtype)) {
      ++st.kept;
      continue;
    }
    jobs.push_back({t, type});
  }
  ThreadPool pool(threads);
  std::vector<std::pair<std::string, Tensor>> made;
  for (const Job& j : jobs) {
    const Tensor& s = *j.src;
    Tensor q = AllocTensor(s.name, j.type, s.shape);
    const int64_t cols = s.cols();
    const size_t in_row = s.row_bytes(), out_row = q.row_bytes();
    uint8_t* dst = static_cast<uint8_t*>(MutableData(q));
    std::vector<std::string> errors(size_t(pool.size()));
    pool.ParallelFor(
        s.rows(),
        [&](int64_t b, int64_t e, int th) {
          std::vector<float> f(static_cast<size_t>(cols));
          for (int64_t r = b; r < e; ++r) {
            try {
              Dequantize(s.dtype, s.bytes() + size_t(r) * in_row, f.data(), cols);
              Quantize(j.type, f.data(), dst + size_t(r) * out_row, cols);
            } catch (const Error& err) {
              errors[size_t(th)] = "tensor " + s.name + " row " + std::to_string(r) + ": " + err.what();
              return;
            }
          }
        },
        std::max<int64_t>(1, (1 << 16) / std::max<int64_t>(cols, 1)));
    for (const std::string& e : errors) ES_CHECK(e.empty(), "quantize at load: ", e);
    st.bytes_before += s.nbytes;
    st.bytes_after += q.nbytes;
    ++st.quantized;
    made.emplace_back(s.name, std::move(q));
  }
  // Swap in the quantized tensors (the lookup prefers owned tensors) and rebind the architecture;
  // generation defaults read from generation_config.json survive the rebinding.
  const GenerationDefaults gen = ml->gen_;
  for (auto& [name, t] : made) ml->owned[name] = std::move(t);
  ml->Finish();
  ml->gen_ = gen;
  return st;
}

}  // namespace es
