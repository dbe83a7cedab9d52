// End-to-end benchmark of a model on a backend: load time, prefill and decode tokens/s (median
// of repetitions), peak RSS, KV bytes per token, and decode's achieved share of the machine's
// measured memory bandwidth (bytes of weights + KV read per token × tokens/s ÷ bandwidth).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "edgeseek/internal/runtime/runner.h"
#include "edgeseek/internal/runtime/speculative.h"

namespace es {

struct BenchOptions {
  int n_prompt = 512;
  int n_gen = 128;
  int reps = 3;
  int threads = 0;
  // Sequences decoding together: each timed pass prefills `batch` prompts (one after another),
  // then takes n_gen steps of `batch` rows, one a sequence (continuous batching's decode
  // steps). Decode tokens/s counts every row; the per-token times are the steps'.
  int batch = 1;
  std::string device;  // GPU backends: the device, for the copy-bandwidth probe
  // Speculative decoding (batch 1): each repetition is a pair, the pass without drafts then the
  // same pass with them (greedy, so both emit the same tokens); decode tokens/s, acceptance and
  // tokens per verification step are the speculative passes', the speed-up the median of the
  // pairs' ratios. Null: no speculation.
  Drafter* drafter = nullptr;
  int spec_k = 4;
  // > 0: the prompt is a random pattern of this many tokens, repeated (prompt lookup's case).
  int prompt_pattern = 0;
};

struct BenchResult {
  std::string model, backend, backend_desc;
  int threads = 0, n_prompt = 0, n_gen = 0, reps = 0, batch = 1;
  int warmups = 0;  // untimed passes before the reps (at least 1, until 1 s)
  double load_s = 0;
  double prefill_tokens_per_s = 0, decode_tokens_per_s = 0;
  double ttft_s = 0;                              // prefill of n_prompt + first token
  std::vector<double> prefill_runs, decode_runs;  // tokens/s per repetition
  double decode_p50_ms = 0, decode_p95_ms = 0, decode_p99_ms = 0;
  // Where a decode step's time went (Linux; zeros elsewhere), p50 / p95 over all timed steps:
  // the process's CPU time (all threads), the time its runnable threads waited for a core (the
  // run queue: other processes on the cores), involuntary context switches and page faults. A
  // long step with little CPU and much run-queue wait was the machine, not the engine. Zeros with
  // a drafter (the reads would tax only the speculative side: bench.cpp).
  double step_cpu_p50_ms = 0, step_cpu_p95_ms = 0;
  double step_wait_p50_ms = 0, step_wait_p95_ms = 0;
  double step_preempt_p50 = 0, step_preempt_p95 = 0;  // involuntary switches a step
  double step_faults_p50 = 0, step_faults_p95 = 0;    // minor + major page faults a step
  double first_step_ms = 0;  // median over reps of each rep's first decode step (after prefill)
  size_t peak_rss_bytes = 0;
  // The backend's own allocations at peak (a GPU's pools: weights, KV, arenas, staging; empty on
  // the CPU). On a discrete GPU these, not peak RSS, hold the model. A layer split reports the
  // head's backend only.
  BackendMemory memory;
  size_t weight_bytes = 0, active_bytes_per_token = 0;
  size_t kv_bytes_per_token = 0;  // of the runner's KV cache type (kv_type)
  std::string kv_type;
  double mem_bandwidth_gbs = 0;  // measured read bandwidth
  double decode_bandwidth_fraction = 0;
  // With BenchOptions::drafter (else empty / zeros).
  std::string spec_drafter;
  int spec_k = 0;
  SpecStats spec;                        // over the timed speculative passes
  double plain_decode_tokens_per_s = 0;  // median of the pairs' passes without drafts
  std::vector<double> plain_decode_runs;
  double spec_speedup = 0;  // median over pairs of spec / plain decode tokens/s
  // A speculative step's split, medians over the timed steps: drafting, then the verification
  // (the forward of up to k + 1 rows and the acceptance); a plain step of the same pairs. The
  // verification bound is the speed-up a free drafter would give at this acceptance:
  // tokens_per_step x plain_step / verify (with draft = target, the issue's "verification cost
  // bound"; drafting with the target itself costs k plain steps on top).
  double spec_draft_ms = 0, spec_verify_ms = 0, plain_step_ms = 0;
  double spec_verify_bound = 0;
  nlohmann::json ToJson() const;
};

// Bytes of weights one decode step reads: routed experts at their active share, one row of an
// untied embedding table, none of kv_b_proj (MLA decode reads its absorbed copies).
size_t ActiveWeightBytes(const Model& m);
// Streams a buffer much larger than the caches with all threads; GB/s of reads.
double MeasureReadBandwidth(int threads, size_t bytes = size_t(1) << 30);
size_t PeakRssBytes();

BenchResult RunBench(Runner& runner, const BenchOptions& opts, double load_s);

}  // namespace es
