// ConvertModelToGguf / ConvertSyntheticToGguf / ConvertHfToGguf / QuantizeModelWeights
// (include/edgeseek/internal/runtime/convert.h): the model-level halves of `edgeseek convert` and
// of quantize-at-load (`--dtype q4_0` ...).
#include "edgeseek/internal/runtime/convert.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/core/json_field.h"
#include "edgeseek/internal/core/progress.h"
#include "edgeseek/internal/core/thread_pool.h"
#include "edgeseek/internal/formats/gguf_convert.h"
#include "edgeseek/internal/formats/gguf_names.h"
#include "edgeseek/internal/models/arch.h"
#include "edgeseek/internal/models/config.h"
#include "edgeseek/internal/quant/blocks.h"
#include "model_loader.h"
#include "synthetic_weights.h"

namespace es {

namespace fs = std::filesystem;

namespace {

nlohmann::json ReadConfigJson(const std::string& path) { return json_field::ReadFile(path); }

// The owners of a folder model's safetensors views (one per mapped file; fused-expert views
// share them; FP8 weights converted at load own their bytes and are not among them).
std::set<const void*> MappedOwners(ModelLoader* ml) {
  std::set<const void*> out;
  if (!ml || !ml->st) return out;
  for (const std::string& n : ml->st->Names()) out.insert(ml->st->Find(n)->owner.get());
  return out;
}

}  // namespace

GgufQuantizeStats ConvertModelToGguf(const Model& m, const std::string& out_path,
                                     const QuantPolicy& policy,
                                     const ConvertModelOptions& options) {
  GgufConvertSource src;
  // An imported (ONNX) model whose rope was recovered as per-frequency factors has no
  // config.json form for them, and one with interleaved rope already has the layout the GGUF
  // writer would permute q/k into: refuse rather than write wrong rotary angles.
  if (!m.import_notes().empty() && options.config_path.empty()) {
    ES_CHECK(m.config().rope_freq_factors.empty(), "model ", m.name(),
             ": its rotary frequencies were recovered as per-frequency factors (a scaled rope), "
             "which the GGUF ",
             "writer cannot express yet");
    ES_CHECK(!m.config().rope_interleaved, "model ", m.name(),
             ": interleaved rotary embedding (GroupQueryAttention rotary_interleaved=1) cannot be "
             "converted to GGUF yet");
  }
  // The GGUF writer has one head count and FFN width for all layers (llama.cpp's per-layer arrays
  // are not written) and edgeseek's GGUF loader takes no partial rotary: refuse both.
  ES_CHECK(!m.config().per_layer_shapes(), "model ", m.name(),
           ": per-layer shapes (different head counts or FFN widths per layer, a pruned model) "
           "cannot be converted to GGUF yet");
  ES_CHECK(m.config().rotary_dim == 0, "model ", m.name(), ": partial rotary (",
           m.config().rotary_dim, " of ", m.config().head_dim,
           " dims per head) cannot be converted to GGUF yet");
  if (options.config_path.empty()) {
    src.config = ToHfConfig(m.config());
    src.where = "model " + m.name();
  } else {
    src.config = ReadConfigJson(options.config_path);
    src.where = options.config_path;
  }
  // The checkpoint tensors by their names (ExpectedWeights order); m.weights() lists what the
  // graphs read, which for MLA is the derived absorbed pair instead of kv_b itself. Lookups only
  // fill the loader's caches (FP8 conversion, fused-expert views), hence the const_cast.
  auto* ml = const_cast<ModelLoader*>(dynamic_cast<const ModelLoader*>(&m));
  if (ml) {
    // The MTP module's tensors (ExpectedMtpWeights) too, where the model carries it.
    std::vector<WeightSpec> specs = ExpectedWeights(m.config());
    if (m.arch().mtp()) {
      const std::vector<WeightSpec> mtp = ExpectedMtpWeights(m.config());
      specs.insert(specs.end(), mtp.begin(), mtp.end());
    }
    for (const WeightSpec& w : specs)
      if (const Tensor* t = ml->Lookup(w.name)) src.tensors.push_back(t);
  } else {
    src.tensors = m.weights();
  }
  // Views of the checkpoint's mapped files hand their pages back once written, so RSS does not
  // grow to the size of the checkpoint.
  const std::set<const void*> mapped = MappedOwners(ml);
  src.release = [&mapped](const Tensor& t, int64_t b, int64_t e) {
    if (mapped.count(t.owner.get()))
      DropMappedPages(t.bytes() + size_t(b) * t.row_bytes(), size_t(e - b) * t.row_bytes());
  };
  src.tokenizer_dir = options.tokenizer_dir;
  src.name = m.name();
  return ConvertToGguf(src, out_path, policy, options.quantize);
}

GgufQuantizeStats ConvertSyntheticWeightsToGguf(const SyntheticWeights& weights,
                                                const ModelConfig& c, const std::string& name,
                                                const std::string& out_path,
                                                const QuantPolicy& policy,
                                                const ConvertModelOptions& options) {
  GgufConvertSource src;
  if (options.config_path.empty()) {
    src.config = ToHfConfig(c);
    src.where = "model " + name;
  } else {
    src.config = ReadConfigJson(options.config_path);
    src.where = options.config_path;
  }
  // The tensors in ExpectedWeights order, as Model::Synthetic binds them, without data: each
  // slice is made when the converter reaches it.
  for (const Tensor& t : weights.tensors()) src.tensors.push_back(&t);
  src.fill_rows = [&weights](const Tensor& t, int64_t b, int64_t e, uint8_t* dst,
                             ThreadPool& pool) {
    weights.Fill(size_t(&t - weights.tensors().data()), b, e, dst, pool);
  };
  src.tokenizer_dir = options.tokenizer_dir;
  src.name = name;
  return ConvertToGguf(src, out_path, policy, options.quantize);
}

GgufQuantizeStats ConvertSyntheticToGguf(const std::string& name_or_config, uint64_t seed,
                                         const std::string& out_path, const QuantPolicy& policy,
                                         const ConvertModelOptions& options) {
  std::string name;
  const ModelConfig c = SyntheticConfig(name_or_config, &name);
  const SyntheticWeights weights(c, DType::kBF16, seed);
  return ConvertSyntheticWeightsToGguf(weights, c, name, out_path, policy, options);
}

GgufQuantizeStats ConvertHfToGguf(const std::string& hf_dir, const std::string& out_path,
                                  const QuantPolicy& policy, const GgufQuantizeOptions& options) {
  std::error_code ec;
  ES_CHECK(fs::is_directory(hf_dir, ec), "'", hf_dir, "' is not a Hugging Face model folder");
  const std::shared_ptr<Model> m = Model::Load(hf_dir);
  ConvertModelOptions o;
  o.quantize = options;
  if (fs::exists(fs::path(hf_dir) / "tokenizer.json")) o.tokenizer_dir = hf_dir;
  return ConvertModelToGguf(*m, out_path, policy, o);
}

std::optional<DType> QuantizeAtLoadType(const QuantPolicy& policy, const std::string& name,
                                        const Shape& shape, DType dtype) {
  if (shape.size() != 2) return std::nullopt;
  const auto g = HfToGgufName(name);
  if (!g) return std::nullopt;  // derived tensors (MLA absorption)
  const std::string& n = g->gguf_name;
  const bool keep = n == TensorName(kTensorTokenEmbd) ||
                    n.find("." + std::string(kTensorAttnKvB) + ".") != std::string::npos;
  const DType type = ChooseType(policy, n, shape, dtype);
  if (keep || type == dtype || !CanQuantize(type) || !CanQuantize(dtype)) return std::nullopt;
  return type;
}

QuantizeAtLoadStats QuantizeModelWeights(Model& m, const QuantPolicy& policy, int threads) {
  auto* ml = dynamic_cast<ModelLoader*>(&m);
  ES_CHECK(ml, "quantize at load: model ", m.name(),
           " was not made by Model::Load or Model::Synthetic");
  QuantizeAtLoadStats st;
  struct Job {
    const Tensor* src;
    DType type;
  };
  std::vector<Job> jobs;
  std::vector<const Tensor*> seen;
  // The MTP module's checkpoint tensors too (eh_proj itself: its column halves are rebuilt from
  // the quantized copy when the architecture is bound again).
  std::vector<const Tensor*> all = m.weights();
  if (m.arch().mtp())
    for (const WeightSpec& w : ExpectedMtpWeights(m.config()))
      if (const Tensor* t = ml->Lookup(w.name)) all.push_back(t);
  for (const Tensor* t : all) {
    if (std::find(seen.begin(), seen.end(), t) != seen.end()) continue;
    seen.push_back(t);
    if (t->shape.size() != 2 || !HfToGgufName(t->name)) continue;  // 1-D and derived tensors
    if (const std::optional<DType> type = QuantizeAtLoadType(policy, t->name, t->shape, t->dtype))
      jobs.push_back({t, *type});
    else
      ++st.kept;
  }
  ThreadPool pool(threads);
  const std::set<const void*> mapped = MappedOwners(ml);
  std::vector<std::pair<std::string, Tensor>> made;
  uint64_t total = 0, done = 0;
  for (const Job& j : jobs) total += j.src->nbytes;
  Progress progress("quantizing weights", total, Progress::Unit::kBytes);
  for (const Job& j : jobs) {
    const Tensor& s = *j.src;
    Tensor q = AllocTensor(s.name, j.type, s.shape);
    const size_t in_row = s.row_bytes();
    RequantizeRows(
        pool, s.dtype, [&](int64_t r) { return s.bytes() + size_t(r) * in_row; }, j.type, s.rows(),
        s.cols(), static_cast<uint8_t*>(MutableData(q)), "quantize at load", s.name);
    st.bytes_before += s.nbytes;
    st.bytes_after += q.nbytes;
    ++st.quantized;
    // A mapped source is not read again (the quantized copy replaces it): hand its pages back.
    if (mapped.count(s.owner.get())) DropMappedPages(s.data, s.nbytes);
    made.emplace_back(s.name, std::move(q));
    progress.Set(done += s.nbytes, s.name);
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
