// `edgeseek logits -m PATH --ids 1,2,3 --out FILE [--backend cpu]`: one prefill; writes float32
// little-endian logits, one row of `vocab` values per input position.
#include <cstdio>

#include "common.h"
#include "edgeseek/internal/core/error.h"
#include "verb.h"

namespace es::tools {
namespace {

VerbRun Setup(CLI::App& app) {
  auto args = std::make_shared<ModelArgs>();
  auto ids = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  args->Add(app);
  app.add_option("--ids", *ids, "comma-separated token ids")->required();
  app.add_option("--out", *out, "output file (f32 little-endian, [positions, vocab])")->required();
  return [=]() {
    const std::vector<int32_t> toks = ParseIds(*ids);
    auto model = args->Load();
    CheckIds(toks, *model);
    auto runner = args->MakeRunner(model);
    Batch b;
    b.Add(0, 0, toks, /*all_logits=*/true);
    b.Finalize();
    std::vector<float> logits;
    runner->Forward(b, &logits);
    FILE* f = std::fopen(out->c_str(), "wb");
    ES_CHECK(f, "cannot write '", *out, "'");
    const size_t n = std::fwrite(logits.data(), 4, logits.size(), f);
    std::fclose(f);
    ES_CHECK(n == logits.size(), "error writing '", *out, "'");
    return 0;
  };
}

VerbRegistrar reg("logits", "one prefill; write all positions' logits as f32", Setup);

}  // namespace
}  // namespace es::tools
