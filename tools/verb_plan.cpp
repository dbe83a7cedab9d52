// `edgeseek plan -m MODEL | --synthetic NAME [--type T] --device PROFILE [--context N]
// [--prompt P] [--gen G] [--batch B] [--kv-type T] [--devices N --split layer|head] [--json]`:
// memory and predicted prefill / decode tokens/s of a model on a device profile, without loading
// the model (runtime/plan.h; docs/plan.md).
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/runtime/device_profile.h"
#include "edgeseek/internal/runtime/plan.h"
#include "edgeseek/internal/runtime/runner.h"
#include "verb.h"

namespace es::tools {
namespace {

struct PlanArgs {
  std::string model, synthetic, type, device, kv_type, split = "layer";
  int64_t context = 4096;
  int prompt = 512, gen = 128, batch = 1, devices = 1;
  bool json = false;
};

VerbRun Setup(CLI::App& app) {
  auto a = std::make_shared<PlanArgs>();
  app.add_option("-m,--model", a->model, "Hugging Face model folder or .gguf file");
  app.add_option("--synthetic", a->synthetic, "built-in preset or config.json");
  app.add_option("--type", a->type,
                 "weights as `convert --type` writes them: q4_0, q8_0, q4_k_m, i4g, f16, bf16, ... "
                 "(synthetic default bf16; a model file keeps its own types unless given)");
  app.add_option("--device", a->device,
                 "device profile: a name in configs/devices or a .json path");
  app.add_option("-c,--context", a->context, "KV capacity per sequence (memory)");
  app.add_option("-p,--prompt", a->prompt, "prompt tokens (prefill: one chunk)");
  app.add_option("-n,--gen", a->gen, "generated tokens (decode at depth prompt + gen/2)");
  app.add_option("-b,--batch", a->batch, "sequences decoding together (rows of a decode step)");
  app.add_option("--kv-type", a->kv_type,
                 "KV cache type: f32|f16|q8_0|q4_0 (default: the backend's)");
  app.add_option("--devices", a->devices, "devices the model is split over");
  app.add_option("--split", a->split, "layer | head: how --devices N splits the model");
  app.add_flag("--json", a->json, "one JSON object");
  return [a]() {
    ES_CHECK(a->model.empty() != a->synthetic.empty(),
             a->model.empty() ? "no model given: pass -m PATH or --synthetic NAME"
                              : "pass -m PATH or --synthetic NAME, not both");
    ES_CHECK(!a->device.empty(),
             "no device given: pass --device NAME (configs/devices/NAME.json) or a profile path");
    ES_CHECK(a->split == "layer" || a->split == "head", "--split must be layer or head (got '",
             a->split, "')");
    const DeviceProfile dev = LoadDeviceProfile(a->device);
    ModelWeights w = a->synthetic.empty()
                         ? DescribeModelFile(a->model)
                         : DescribeSynthetic(a->synthetic, a->type.empty() ? "bf16" : a->type);
    if (!a->model.empty() && !a->type.empty()) RetypeWeights(w, a->type);
    PlanOptions o;
    o.context = a->context;
    o.prompt = a->prompt;
    o.gen = a->gen;
    o.batch = a->batch;
    o.devices = a->devices;
    o.split = a->split == "head" ? PlanSplit::kHead : PlanSplit::kLayer;
    // The runner's defaults: f32 on the CPU (lossless, docs/log/2026-12-02-cpu-kv-cache-types.md),
    // f16 on GPUs.
    o.kv_type = !a->kv_type.empty()    ? ParseKvType(a->kv_type)
                : dev.backend == "cpu" ? DType::kF32
                                       : DType::kF16;
    const Plan p = MakePlan(w, dev, o);
    if (a->json)
      std::printf("%s\n", PlanToJson(p).dump().c_str());
    else
      std::printf("%s", PlanTable(p).c_str());
    return 0;
  };
}

const VerbRegistrar kReg("plan", "memory and predicted tokens/s of a model on a device profile",
                         Setup);

}  // namespace
}  // namespace es::tools
