// The benchmark suite of `edgeseek bench` (issue 20 item 5; docs/benchmarks.md):
//   --suite FILE.json   a matrix {"name", "repetitions", "matrix": {"models": [...], "dtypes",
//                       "backends", "threads", "prompts", "gen", "batches"}} run case by case
//                       (one load per model/dtype/backend/threads), one JSON line a case:
//                       {"case": {...}, "result": BenchResult::ToJson(), "env": {commit, cpu,
//                       time, ...}}, to --out FILE.jsonl and, with --report DIR, into
//                       DIR/results.jsonl with gnuplot plots (decode tokens/s against the batch,
//                       prefill tokens/s against the prompt length).
//   --compare OLD.jsonl the new results (the suite just run, or --results NEW.jsonl) against old
//                       ones, case by case: ratios, and regressions beyond the noise (slower by
//                       more than both runs' spreads together and at least 5%) flagged; exit 3
//                       when there is one.
// Models: a path (folder, .gguf, .onnx) or "synthetic:PRESET".
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common.h"

namespace es::tools {

struct SuiteCase {
  std::string model, dtype, backend;
  int threads = 0, n_prompt = 512, n_gen = 128, batch = 1;
  bool SameLoad(const SuiteCase& o) const {
    return model == o.model && dtype == o.dtype && backend == o.backend && threads == o.threads;
  }
};

// The cases of a suite file, in matrix order; *reps its repetitions. One clear error for a bad
// file.
std::vector<SuiteCase> ReadSuite(const std::string& path, int* reps);
int RunSuite(const std::string& suite, const std::string& out_path, const std::string& report,
             const std::string& tokenizer);
int CompareResults(const std::string& old_path, const std::string& new_path);

}  // namespace es::tools
