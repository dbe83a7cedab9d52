// Generation on one sequence slot: chunked prefill, then one token per step with the KV cache.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "edgeseek/runtime/runner.h"
#include "edgeseek/runtime/sampler.h"

namespace es {

struct GenerateOptions {
  int max_new_tokens = 16;
  int min_new_tokens = 0;          // EOS ids are masked until this many tokens exist
  std::vector<int32_t> eos_ids;    // stop (and masked before min_new_tokens)
  SamplingParams sampling;
  int prefill_chunk = 512;
  // Called with each new id; return false to stop.
  std::function<bool(int32_t)> on_token;
};

struct GenerateStats {
  double prefill_s = 0;
  std::vector<double> token_s;  // per decode step
  bool stopped_by_eos = false;
};

// Generates after `prompt` in `slot` (whose cache must be empty); returns the new ids.
std::vector<int32_t> Generate(Runner& runner, int slot, const std::vector<int32_t>& prompt,
                              const GenerateOptions& opts, GenerateStats* stats = nullptr);

}  // namespace es
