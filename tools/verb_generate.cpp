// `edgeseek generate -m PATH --ids 1,2,3 -n N --temp 0`: continuation computed incrementally with
// the KV cache; exactly N new ids (EOS masked as transformers' min_new_tokens does), printed
// space-separated on stdout. --draft MODEL / --spec ngram|mtp --spec-k K: speculative decoding (the
// same ids when greedy), with its acceptance on stderr.
#include <cstdio>

#include "common.h"
#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/runtime/generator.h"
#include "verb.h"

namespace es::tools {
namespace {

VerbRun Setup(CLI::App& app) {
  auto args = std::make_shared<ModelArgs>();
  auto ids = std::make_shared<std::string>();
  auto n = std::make_shared<int>(16);
  auto sp = std::make_shared<SamplingParams>();
  auto spec = std::make_shared<SpecArgs>();
  sp->temperature = 0.0f;
  args->Add(app);
  app.add_option("--ids", *ids, "comma-separated prompt token ids")->required();
  app.add_option("-n,--n-predict", *n, "new tokens")->check(CLI::NonNegativeNumber);
  app.add_option("--temp", sp->temperature, "temperature (0: greedy)");
  app.add_option("--top-k", sp->top_k, "top-k");
  app.add_option("--top-p", sp->top_p, "top-p");
  app.add_option("--min-p", sp->min_p, "min-p");
  app.add_option("--repeat-penalty", sp->repeat_penalty, "repeat penalty");
  spec->Add(app);
  return [=]() {
    const std::vector<int32_t> toks = ParseIds(*ids);
    auto model = args->Load();
    CheckIds(toks, *model);
    auto runner = args->MakeRunner(model);
    const std::unique_ptr<Drafter> drafter = spec->Make(*args, model, *runner);
    GenerateOptions go;
    go.max_new_tokens = *n;
    go.min_new_tokens = *n;
    go.eos_ids = model->generation().eos_ids;
    go.sampling = *sp;
    go.sampling.seed = args->seed;
    if (*n == 0) {
      std::printf("\n");
      return 0;
    }
    go.drafter = drafter.get();
    go.spec_k = spec->k;
    GenerateStats gs;
    const auto out = Generate(*runner, runner->AcquireSlot(), toks, go, &gs);
    for (size_t i = 0; i < out.size(); ++i) std::printf("%s%d", i ? " " : "", out[i]);
    std::printf("\n");
    if (drafter)
      std::fprintf(stderr,
                   "speculative: %s, k=%d: %lld steps, %lld drafted, %lld accepted (%.1f%%), %.2f "
                   "tokens/step\n",
                   drafter->name().c_str(), spec->k, (long long)gs.spec.steps,
                   (long long)gs.spec.drafted, (long long)gs.spec.accepted,
                   100 * gs.spec.acceptance(), gs.spec.tokens_per_step());
    return 0;
  };
}

VerbRegistrar reg("generate", "continue token ids with the KV cache; print new ids", Setup);

}  // namespace
}  // namespace es::tools
