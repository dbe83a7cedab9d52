#include "common.h"

#include "edgeseek/internal/backends/backend.h"
#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/formats/quant_policy.h"
#include "edgeseek/internal/runtime/convert.h"
#include "edgeseek/internal/runtime/pipeline.h"

namespace es::tools {
namespace {

std::vector<std::pair<const CLI::App*, const ModelArgs*>>& ModelArgsRegistry() {
  static std::vector<std::pair<const CLI::App*, const ModelArgs*>> r;
  return r;
}

}  // namespace

const ModelArgs* ModelArgsOf(const CLI::App* app) {
  for (const auto& [a, m] : ModelArgsRegistry())
    if (a == app) return m;
  return nullptr;
}

void ModelArgs::Add(CLI::App& app, bool allow_synthetic) {
  ModelArgsRegistry().emplace_back(&app, this);
  app.add_option("-m,--model", model,
                 "Hugging Face model folder, .gguf file or .onnx file (or a folder holding one)");
  if (allow_synthetic) {
    app.add_option("--synthetic", synthetic, "built-in preset name or config.json: random weights");
    app.add_option(
        "--dtype", dtype,
        "weight type: bf16, f16, f32 (synthetic weights) or a quantization preset/type (q8_0, "
        "q4_0, "
        "q4_k_m, i4g, q4_k, q6_k, ...: matmul weights quantized at load, also for -m FOLDER)");
  } else {
    app.add_option("--dtype", dtype,
                   "quantize the matmul weights at load (q8_0, q4_0, q4_k_m, i4g, q6_k, ...)");
  }
  app.add_option("--tokenizer", tokenizer,
                 "tokenizer folder or tokenizer.json (for synthetic models)");
  app.add_option("--backend", backend, "cpu or vulkan");
  app.add_option("--device", device, "GPU index or name");
  app.add_option("--devices", devices,
                 "split the model over several devices, in order: cpu or a GPU index/name each "
                 "(cpu,0  0,1  0,0 opens one GPU twice); the last runs the head");
  app.add_option("--split", split,
                 "how --devices share the model: layer (pipeline stages) or head (tensor parallel)")
      ->check(CLI::IsMember({"layer", "head"}));
  app.add_option("--split-layers", split_layers,
                 "decoder layers per --devices entry, e.g. 10,18 (default: by memory)");
  app.add_option("-t,--threads", threads, "CPU threads (0: all)");
  app.add_option("-c,--context", context, "context tokens per sequence (0: min(model, 4096))");
  AddKvTypeOption(app, kv_type);
  app.add_option("--seed", seed, "seed (synthetic weights, sampling)");
  app.add_flag("--profile", profile, "per-op timing");
}

void AddKvTypeOption(CLI::App& app, std::string& kv_type) {
  app.add_option("--kv-type", kv_type,
                 "KV cache type: f32, f16, q8_0 or q4_0 (default: f16 on GPUs, f32 on the CPU)");
}

std::shared_ptr<Model> ModelArgs::Load() const {
  if (!kv_type.empty()) ParseKvType(kv_type);  // a bad --kv-type fails before the model loads
  // A dense --dtype is the type of synthetic weights; anything else names a quantization policy
  // applied at load (src/runtime/convert.cpp) to synthetic weights (made in bf16) or a folder's.
  bool dense = dtype.empty();
  if (!dense) {
    try {
      const DType t = ParseDType(dtype);
      dense = t == DType::kF32 || t == DType::kF16 || t == DType::kBF16;
    } catch (const Error&) {
    }
  }
  // Folders: any explicit --dtype converts the matmul weights (f16 included); synthetic models
  // are made in a dense --dtype, or quantized tensor by tensor as they are made.
  LoadOptions lo;
  lo.tokenizer = tokenizer;
  lo.threads = threads;
  if (!dtype.empty() && (!dense || synthetic.empty()))
    lo.quantize = std::make_shared<const QuantPolicy>(BuiltinQuantPolicy(dtype));
  if (!synthetic.empty()) {
    lo.synthetic = synthetic;
    lo.seed = seed;
    lo.synthetic_dtype = dense && !dtype.empty() ? ParseDType(dtype) : DType::kBF16;
    return Model::Synthetic(synthetic, lo);
  }
  ES_CHECK(!model.empty(), "no model given: pass -m PATH or --synthetic NAME");
  return Model::Load(model, lo);
}

BackendOptions ModelArgs::MakeBackendOptions() const {
  BackendOptions bo;
  bo.threads = threads;
  bo.device = device;
  bo.profile = profile;
  return bo;
}

std::unique_ptr<Runner> ModelArgs::MakeRunner(std::shared_ptr<Model> m, int n_slots) const {
  RunnerOptions ro;
  ro.n_slots = n_slots;
  ro.context = context;
  if (!kv_type.empty()) ro.kv_dtype = ParseKvType(kv_type);
  SplitOptions so;
  so.devices = devices, so.split = split, so.layer_counts = split_layers;
  return MakeSplitRunner(std::move(m), backend, MakeBackendOptions(), ro, so);
}

void SpecArgs::Add(CLI::App& app) {
  app.add_option(
      "--draft", draft,
      "speculative decoding with a draft model: folder, .gguf, or 'target' (the target's weights)");
  app.add_option("--draft-dtype", draft_dtype,
                 "quantize the draft model at load (q4_0, q8_0, ...)");
  app.add_option("--spec", spec,
                 "speculative decoding without a draft model: ngram (prompt lookup) or mtp (the "
                 "model's own multi-token-prediction layer, DeepSeek-V3/R1)")
      ->check(CLI::IsMember({"ngram", "mtp"}));
  app.add_option("--spec-k", k, "tokens drafted per verification step (1..32)")
      ->check(CLI::Range(1, 32));
}

std::unique_ptr<Drafter> SpecArgs::Make(const ModelArgs& target_args,
                                        const std::shared_ptr<Model>& target,
                                        Runner& target_runner) const {
  ES_CHECK(draft.empty() || spec.empty(), "--draft and --spec ", spec,
           " are alternatives: pass one");
  if (spec == "ngram") return std::make_unique<NgramDrafter>();
  if (spec == "mtp") return std::make_unique<MtpDrafter>(target_runner);
  if (draft.empty()) return nullptr;
  std::shared_ptr<Model> dm = target;
  if (draft != "target" || !draft_dtype.empty()) {
    ModelArgs da = target_args;
    da.dtype = draft_dtype;
    if (draft != "target") da.model = draft, da.synthetic.clear();
    dm = da.Load();
  }
  CheckSameTokenizer(*target, *dm);
  return std::make_unique<ModelDrafter>(target_args.MakeRunner(dm), int(target->vocab_size()));
}

void EndpointArgs::AddServer(CLI::App& app) {
  app.add_option("--host", host, "address to bind (default 127.0.0.1)");
  app.add_option("--port", port, "port (default 8080; 0: any free port)")
      ->check(CLI::Range(0, 65535));
  app.add_option("--alias", model_name,
                 "model name clients ask for (default: folder or file name)");
  app.add_option("--api-key", api_keys, "accepted API key (repeatable; none: no authentication)");
}

void EndpointArgs::AddClient(CLI::App& app) {
  app.add_option("--url", url, "server base URL (default http://HOST:PORT)");
  app.add_option("--host", host, "server address (default 127.0.0.1)");
  app.add_option("--port", port, "server port (default 8080)")->check(CLI::Range(1, 65535));
  app.add_option("--model,--alias", model_name, "model name to ask for");
  app.add_option("--api-key", api_keys, "API key to send")->expected(1);
}

std::string EndpointArgs::BaseUrl() const {
  if (!url.empty()) return url;
  return "http://" + (host.empty() ? std::string("127.0.0.1") : host) + ":" +
         std::to_string(port < 0 ? 8080 : port);
}

void CheckIds(const std::vector<int32_t>& ids, const Model& model) {
  for (int32_t t : ids)
    ES_CHECK(t < model.vocab_size(), "token id ", t, " is outside the vocabulary (",
             model.vocab_size(), " tokens)");
}

void AddQuantTypeOptions(CLI::App& app, std::string& type, std::string& policy, int& threads,
                         const std::string& type_names) {
  app.add_option(
      "--type", type,
      "preset (q8_0, q4_0, q4_k_m, i4g) or one type for every weight (" + type_names + ")");
  app.add_option("--policy", policy, "JSON policy file (configs/quant/*.json); overrides --type");
  app.add_option("-t,--threads", threads, "threads (default: all)");
}

std::vector<int32_t> ParseIds(const std::string& s) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    const std::string item = s.substr(i, j - i);
    try {
      size_t used = 0;
      const long long v = std::stoll(item, &used);
      ES_CHECK(used == item.size() && v >= 0 && v <= INT32_MAX, "bad token id '", item,
               "' in --ids");
      ids.push_back(int32_t(v));
    } catch (const std::logic_error&) {
      Fail("bad token id '", item, "' in --ids");
    }
    i = j + 1;
  }
  ES_CHECK(!ids.empty(), "--ids is empty");
  return ids;
}

}  // namespace es::tools
