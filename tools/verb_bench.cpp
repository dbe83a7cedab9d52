// `edgeseek bench -m PATH | --synthetic NAME [--backend cpu] [-p 512] [-n 128] [-b 1[,8,...]] [-t
// T]
// [--json] [--draft MODEL|target | --spec ngram|mtp] [--spec-k K] [--prompt-pattern N]`
// Several batch sizes (-b 1,8,32) run one after another on one loaded model (one runner with the
// largest count's slots); --json then prints one object a line, one per batch size. Speculative
// decoding (docs/speculative.md) applies to batch 1. `--suite FILE.json [--out F.jsonl] [--report
// DIR] [--compare OLD.jsonl]` runs a matrix of benches instead (bench_suite.h).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <thread>

#include "bench_suite.h"
#include "common.h"
#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/runtime/bench.h"
#include "verb.h"

namespace es::tools {
namespace {

// The backend's pools at peak (GPU): device-local and host-visible bytes, and each pool's.
void PrintMemory(const BackendMemory& m) {
  if (m.pools.empty()) return;
  std::printf("device     %.3f GB device-local, %.3f GB host-visible (%s) at peak:",
              double(m.device_local_peak_bytes) / 1e9, double(m.host_visible_peak_bytes) / 1e9,
              m.device_type.c_str());
  for (const BackendMemory::Pool& p : m.pools)
    std::printf(" %s %.3f (%.3f used)", p.name.c_str(), double(p.peak_bytes) / 1e9,
                double(p.peak_used_bytes) / 1e9);
  std::printf(" GB\n");
}

// The text report of one bench; the model/backend/load lines only with `header`.
void Print(const BenchResult& r, bool header) {
  if (header) {
    std::printf("model      %s  (%.2f GB weights, %.2f GB read per token)\n", r.model.c_str(),
                double(r.weight_bytes) / 1e9, double(r.active_bytes_per_token) / 1e9);
    std::printf("backend    %s\n", r.backend_desc.c_str());
    std::printf("load       %.2f s     peak RSS %.2f GB     KV %zu bytes/token (%s)\n", r.load_s,
                double(r.peak_rss_bytes) / 1e9, r.kv_bytes_per_token, r.kv_type.c_str());
    PrintMemory(r.memory);
  }
  std::printf("prefill    %8.2f tokens/s  (pp%d, median of %d)   TTFT %.3f s\n",
              r.prefill_tokens_per_s, r.n_prompt, r.reps, r.ttft_s);
  if (r.batch > 1)
    std::printf(
        "decode     %8.2f tokens/s  (tg%d x %d sequences)  per step p50 %.1f / p95 %.1f / p99 %.1f "
        "ms\n",
        r.decode_tokens_per_s, r.n_gen, r.batch, r.decode_p50_ms, r.decode_p95_ms, r.decode_p99_ms);
  else
    std::printf("decode     %8.2f tokens/s  (tg%d)  per token p50 %.1f / p95 %.1f / p99 %.1f ms\n",
                r.decode_tokens_per_s, r.n_gen, r.decode_p50_ms, r.decode_p95_ms, r.decode_p99_ms);
  if (r.n_gen > 0 && r.spec_drafter.empty())  // not read with drafts (bench.cpp)
    std::printf(
        "steps      first %.1f ms; p50 / p95: CPU %.1f / %.1f ms, run-queue wait %.1f / %.1f ms,"
        " preempted %.0f / %.0f, faults %.0f / %.0f\n",
        r.first_step_ms, r.step_cpu_p50_ms, r.step_cpu_p95_ms, r.step_wait_p50_ms,
        r.step_wait_p95_ms, r.step_preempt_p50, r.step_preempt_p95, r.step_faults_p50,
        r.step_faults_p95);
  if (!r.spec_drafter.empty())
    std::printf(
        "speculative %s, k=%d: acceptance %.1f%% (%lld of %lld), %.2f tokens/step; decode %.2f vs "
        "%.2f tokens/s without: x%.2f (median of %d pairs)\n",
        r.spec_drafter.c_str(), r.spec_k, 100 * r.spec.acceptance(), (long long)r.spec.accepted,
        (long long)r.spec.drafted, r.spec.tokens_per_step(), r.decode_tokens_per_s,
        r.plain_decode_tokens_per_s, r.spec_speedup, r.reps);
  if (!r.spec_drafter.empty())
    std::printf(
        "spec step  p50 draft %.2f ms + verify %.2f ms, plain step %.2f ms: a free drafter would "
        "give x%.2f (the verification bound)\n",
        r.spec_draft_ms, r.spec_verify_ms, r.plain_step_ms, r.spec_verify_bound);
  if (r.mem_bandwidth_gbs > 0)
    std::printf("bandwidth  decode reads %.1f GB/s = %.0f%% of the measured %.1f GB/s\n",
                r.decode_bandwidth_fraction * r.mem_bandwidth_gbs,
                100 * r.decode_bandwidth_fraction, r.mem_bandwidth_gbs);
}

VerbRun Setup(CLI::App& app) {
  auto args = std::make_shared<ModelArgs>();
  auto bo = std::make_shared<BenchOptions>();
  auto json_out = std::make_shared<bool>(false);
  auto batches = std::make_shared<std::vector<int>>(std::vector<int>{1});
  auto spec = std::make_shared<SpecArgs>();
  args->Add(app);
  spec->Add(app);
  app.add_option("--prompt-pattern", bo->prompt_pattern,
                 "repeat a random pattern of this many tokens as the prompt (0: random tokens)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("-p,--n-prompt", bo->n_prompt, "prompt tokens (prefill)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("-n,--n-gen", bo->n_gen, "generated tokens (decode)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("-r,--repetitions", bo->reps, "timed repetitions")->check(CLI::PositiveNumber);
  app.add_option(
         "-b,--batch", *batches,
         "sequences decoding together, one row each a step (1..256); a comma list runs each")
      ->delimiter(',')
      ->check(CLI::Range(1, 256));
  app.add_flag("--json", *json_out, "one JSON object on stdout");
  auto suite = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  auto report = std::make_shared<std::string>();
  auto compare = std::make_shared<std::string>();
  auto results = std::make_shared<std::string>();
  app.add_option("--suite", *suite,
                 "run a benchmark matrix from this JSON file (docs/benchmarks.md)")
      ->check(CLI::ExistingFile);
  app.add_option("--out", *out, "with --suite: write one JSON line per case here");
  app.add_option("--report", *report, "with --suite: results and gnuplot plots into this folder");
  app.add_option("--compare", *compare,
                 "compare with an earlier suite's JSON lines (exit 3 on a regression)")
      ->check(CLI::ExistingFile);
  app.add_option("--results", *results, "with --compare and no --suite: the new JSON lines")
      ->check(CLI::ExistingFile);
  return [=]() {
    if (!suite->empty() || !compare->empty()) {
      ES_CHECK(!suite->empty() || !results->empty(),
               "bench --compare needs --suite (run, then compare) or --results NEW.jsonl");
      ES_CHECK(suite->empty() || results->empty(),
               "bench: --suite and --results exclude each other");
      std::string fresh = *results;
      if (!suite->empty()) {
        fresh = !out->empty() ? *out : (!compare->empty() ? std::string("bench_suite.jsonl") : "");
        RunSuite(*suite, fresh, *report, args->tokenizer);
      }
      return compare->empty() ? 0 : CompareResults(*compare, fresh);
    }
    const auto t0 = std::chrono::steady_clock::now();
    auto model = args->Load();
    if (args->context == 0) args->context = bo->n_prompt + bo->n_gen + 8;
    auto runner = args->MakeRunner(model, *std::max_element(batches->begin(), batches->end()));
    const std::unique_ptr<Drafter> drafter = spec->Make(*args, model, *runner);
    bo->drafter = drafter.get();
    bo->spec_k = spec->k;
    const double load_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    bo->threads = args->threads > 0 ? args->threads : int(std::thread::hardware_concurrency());
    bo->device = args->device;
    for (size_t i = 0; i < batches->size(); ++i) {
      bo->batch = (*batches)[i];
      const BenchResult r = RunBench(*runner, *bo, load_s);
      if (*json_out)
        std::printf("%s\n", r.ToJson().dump().c_str());
      else
        Print(r, i == 0);
      std::fflush(stdout);
    }
    return 0;
  };
}

VerbRegistrar reg("bench", "prefill/decode tokens/s, load time, memory, bandwidth", Setup);

}  // namespace
}  // namespace es::tools
