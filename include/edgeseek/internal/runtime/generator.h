// Generation on one sequence slot: chunked prefill, then one token per step with the KV cache.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "edgeseek/internal/runtime/runner.h"
#include "edgeseek/internal/runtime/sampler.h"
#include "edgeseek/internal/runtime/speculative.h"

namespace es {

struct GenerateOptions {
  int max_new_tokens = 16;
  int min_new_tokens = 0;        // EOS ids are masked until this many tokens exist
  std::vector<int32_t> eos_ids;  // stop (and masked before min_new_tokens)
  SamplingParams sampling;
  int prefill_chunk = 512;
  // Called with each new id; return false to stop.
  std::function<bool(int32_t)> on_token;
  // Speculative decoding (speculative.h): after the first token, each step drafts up to spec_k
  // tokens and verifies them in one forward of spec_k + 1 rows. Null: one token a step. The
  // drafter is used from this thread only; a ModelDrafter must run on its own slot.
  Drafter* drafter = nullptr;
  int spec_k = 4;
};

struct GenerateStats {
  double prefill_s = 0;
  std::vector<double> token_s;  // per decode step (with speculation: per draft + verify step)
  std::vector<double> draft_s;  // per speculative step: the drafter's part of token_s
  int64_t decode_tokens = 0;    // tokens the decode steps emitted (token_s.size() without drafts)
  bool stopped_by_eos = false;
  SpecStats spec;  // speculative steps (zeros without a drafter)
};

// Generates after `prompt` in `slot` (whose cache must be empty); returns the new ids.
std::vector<int32_t> Generate(Runner& runner, int slot, const std::vector<int32_t>& prompt,
                              const GenerateOptions& opts, GenerateStats* stats = nullptr);

}  // namespace es
