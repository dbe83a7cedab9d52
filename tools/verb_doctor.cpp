// `edgeseek doctor [-m MODEL | --synthetic NAME [--type T] [--backend cpu|vulkan] [-c N]]
// [--json]`: checks this machine (Vulkan loader, devices and their features, drivers, RAM / GPU
// heap against the model's plan, CPU SIMD, governor, hugepages, Jetson L4T, RK3588 Mali driver) and
// says how to fix each finding; exit 1 when one blocks the run (runtime/doctor.h).
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/runtime/device_profile.h"
#include "edgeseek/internal/runtime/doctor.h"
#include "edgeseek/internal/runtime/plan.h"
#include "verb.h"

namespace es::tools {
namespace {

struct DoctorArgs {
  std::string model, synthetic, type, backend = "cpu";
  int64_t context = 4096;
  bool json = false;
};

VerbRun Setup(CLI::App& app) {
  auto a = std::make_shared<DoctorArgs>();
  app.add_option("-m,--model", a->model, "check memory for this model (folder or .gguf)");
  app.add_option("--synthetic", a->synthetic, "... or this preset");
  app.add_option("--type", a->type, "weights type for --synthetic (default bf16)");
  app.add_option("--backend", a->backend, "where the model would run: cpu | vulkan");
  app.add_option("-c,--context", a->context, "context for the memory check");
  app.add_flag("--json", a->json, "one JSON object");
  return [a]() {
    ES_CHECK(a->backend == "cpu" || a->backend == "vulkan",
             "--backend must be cpu or vulkan (got '", a->backend, "')");
    DoctorEnv env = SystemDoctorEnv();
    if (!a->model.empty() || !a->synthetic.empty()) {
      const ModelWeights w =
          a->synthetic.empty()
              ? DescribeModelFile(a->model)
              : DescribeSynthetic(a->synthetic, a->type.empty() ? "bf16" : a->type);
      // The memory part of a plan only needs the backend; the rates do not matter here.
      DeviceProfile d;
      d.name = "this machine";
      d.backend = a->backend;
      d.bandwidth.value = d.fp32_flops.value = d.memory_bytes.value = 1;
      d.reserved_bytes.value = a->backend == "cpu" ? double(128 << 20) : double(512 << 20);
      PlanOptions o;
      o.context = a->context;
      o.prompt = int(std::min<int64_t>(512, a->context));
      o.gen = 0;
      o.kv_type = a->backend == "cpu" ? DType::kF32 : DType::kF16;
      const Plan p = MakePlan(w, d, o);
      env.need_bytes = p.memory_bytes;
      env.need_backend = a->backend;
      env.need_what = w.name + " at " + std::to_string(a->context) + " tokens";
    }
    const auto findings = RunDoctor(env);
    if (a->json) {
      std::printf("%s\n", DoctorToJson(findings).dump().c_str());
    } else {
      for (const Finding& f : findings) {
        std::printf("[%-4s] %-20s %s\n", SeverityName(f.severity), f.check.c_str(),
                    f.message.c_str());
        if (!f.fix.empty()) std::printf("       %-20s fix: %s\n", "", f.fix.c_str());
      }
    }
    return DoctorExitCode(findings);
  };
}

const VerbRegistrar kReg("doctor",
                         "check this machine (drivers, features, memory, CPU) and say how to fix",
                         Setup);

}  // namespace
}  // namespace es::tools
