// `edgeseek quantize IN.gguf OUT.gguf --type q8_0|q4_0|q4_k_m|i4g|<type> [--policy FILE] [-t N]`:
// requantizes a GGUF file by policy (src/formats/gguf_quantize.cpp), with a progress bar on
// stderr when it is a terminal and one summary line at the end either way.

#include <cstdio>
#include <memory>
#include <string>

#include "common.h"
#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/core/progress.h"
#include "edgeseek/internal/formats/gguf_quantize.h"
#include "edgeseek/internal/formats/quant_policy.h"
#include "verb.h"

namespace es::tools {
namespace {

struct QuantizeArgs {
  std::string in, out, type, policy;
  int threads = 0;
};

int Run(const QuantizeArgs& a) {
  if (a.type.empty() && a.policy.empty()) Fail("quantize: give --type or --policy");
  const QuantPolicy policy =
      a.policy.empty() ? BuiltinQuantPolicy(a.type) : LoadQuantPolicy(a.policy);
  GgufQuantizeOptions opt;
  opt.threads = a.threads;
  std::unique_ptr<Progress> bar;  // made at the first report, which knows the total
  opt.progress = [&bar](uint64_t done, uint64_t total, const std::string& tensor) {
    if (!bar) bar = std::make_unique<Progress>("quantizing", total, Progress::Unit::kBytes);
    bar->Set(done, tensor);
  };
  const GgufQuantizeStats st = QuantizeGguf(a.in, a.out, policy, opt);
  bar.reset();  // the progress line erased before the summary
  std::string types;
  for (const auto& [t, n] : st.out_types)
    types += (types.empty() ? "" : ", ") + std::to_string(n) + " " + std::string(Name(t));
  std::fprintf(stderr,
               "quantized %s -> %s (%s): %zu tensors (%zu requantized, %zu copied; %s), %.1f MB -> "
               "%.1f MB in %.2f s\n",
               a.in.c_str(), a.out.c_str(), policy.name.c_str(), st.tensors, st.requantized,
               st.copied, types.c_str(), double(st.in_bytes) / 1e6, double(st.out_bytes) / 1e6,
               st.seconds);
  return 0;
}

VerbRun Setup(CLI::App& sub) {
  auto a = std::make_shared<QuantizeArgs>();
  sub.add_option("input", a->in, "input GGUF file")->required();
  sub.add_option("output", a->out, "output GGUF file")->required();
  AddQuantTypeOptions(sub, a->type, a->policy, a->threads,
                      "f16, bf16, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k");
  return [a] { return Run(*a); };
}

const VerbRegistrar kReg("quantize", "requantize a GGUF file (mixed precision by policy)", Setup);

}  // namespace
}  // namespace es::tools
