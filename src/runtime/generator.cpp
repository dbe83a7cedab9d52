// Generation loop: chunked prefill, then one token a step, or speculative steps of a drafter.
#include "edgeseek/internal/runtime/generator.h"

#include <algorithm>
#include <chrono>

#include "edgeseek/internal/core/error.h"

namespace es {

std::vector<int32_t> Generate(Runner& runner, int slot, const std::vector<int32_t>& prompt,
                              const GenerateOptions& opts, GenerateStats* stats) {
  using Clock = std::chrono::steady_clock;
  ES_CHECK(!prompt.empty(), "generation needs at least one prompt token");
  const int vocab = runner.model().vocab_size();
  std::vector<float> logits;
  std::vector<int32_t> history = prompt, out, ids;
  Sampler sampler(opts.sampling);
  // Greedy without penalties and with nothing banned: the backend's argmax (on the device for
  // GPU backends, so only the id comes back); otherwise the logits and the sampler.
  auto banned_now = [&] {
    return int(out.size()) < opts.min_new_tokens ? opts.eos_ids : std::vector<int32_t>{};
  };
  // Other sampling on a backend that samples on the device: ComputeSample, again only the id.
  const bool device_sampling = runner.backend().device_sampling();
  std::vector<RowSampling> rows(1);
  bool have_id = false;  // the next token is ids[0] (else: sample from logits)
  auto forward = [&](const Batch& batch) {
    const std::vector<int32_t> banned = banned_now();
    have_id = true;
    if (sampler.plain_greedy() && banned.empty())
      runner.ForwardArgmax(batch, &ids);
    else if (device_sampling && sampler.DeviceParams(history, banned, &rows[0]))
      runner.ForwardSample(batch, rows, &ids);
    else {
      have_id = false;
      runner.Forward(batch, &logits);
    }
  };
  auto t0 = Clock::now();
  // Chunked prefill: logits only for the last chunk's last token.
  const int chunk = std::max(1, opts.prefill_chunk);
  for (size_t b = 0; b < prompt.size(); b += size_t(chunk)) {
    const size_t e = std::min(prompt.size(), b + size_t(chunk));
    Batch batch;
    batch.Add(slot, int64_t(b),
              std::vector<int32_t>(prompt.begin() + long(b), prompt.begin() + long(e)));
    batch.Finalize();
    if (e < prompt.size())
      runner.ForwardArgmax(batch, &ids);  // only the cache matters: the least to download
    else
      forward(batch);
  }
  if (opts.drafter) opts.drafter->Begin(prompt);  // the draft model's prefill is prefill too
  if (stats) stats->prefill_s = std::chrono::duration<double>(Clock::now() - t0).count();
  if (opts.max_new_tokens <= 0) return out;
  // Emits one id; false when generation stops after it (a callback, EOS, max_new_tokens).
  auto emit = [&](int32_t id) {
    out.push_back(id);
    history.push_back(id);
    if (opts.on_token && !opts.on_token(id)) return false;
    if (std::find(opts.eos_ids.begin(), opts.eos_ids.end(), id) != opts.eos_ids.end()) {
      if (stats) stats->stopped_by_eos = true;
      return false;
    }
    return int(out.size()) < opts.max_new_tokens;
  };
  bool go_on = emit(have_id ? ids[0] : sampler.Sample(logits.data(), vocab, history, banned_now()));
  // KV holds positions [0, pos); history.back() goes at pos.
  int64_t pos = int64_t(prompt.size());
  if (!opts.drafter) {
    while (go_on) {
      const auto ts = Clock::now();
      Batch batch;
      batch.Add(slot, pos++, {history.back()});
      batch.Finalize();
      forward(batch);
      const int32_t id =
          have_id ? ids[0] : sampler.Sample(logits.data(), vocab, history, banned_now());
      if (stats) {
        stats->token_s.push_back(std::chrono::duration<double>(Clock::now() - ts).count());
        ++stats->decode_tokens;
      }
      go_on = emit(id);
    }
    return out;
  }
  // Speculative steps: draft k, verify k + 1 rows in one forward, emit the accepted prefix and
  // the target's own next token (speculative.h). k never drafts past max_new_tokens (the last
  // row's token is the step's extra one) nor past the context.
  Draft draft;
  std::vector<float> dense;
  std::vector<int32_t> toks;
  while (go_on) {
    const auto ts = Clock::now();
    const int64_t left = int64_t(opts.max_new_tokens) - int64_t(out.size());
    const int k = int(std::max<int64_t>(
        0, std::min<int64_t>({opts.spec_k, left - 1, runner.context() - pos - 1})));
    draft.tokens.clear();
    draft.probs.clear();
    if (k > 0) opts.drafter->Propose(history, k, opts.sampling, &draft);
    const auto td = Clock::now();
    ES_ASSERT(draft.tokens.size() <= size_t(k));
    toks.assign(1, history.back());
    toks.insert(toks.end(), draft.tokens.begin(), draft.tokens.end());
    Batch batch;
    batch.Add(slot, pos, toks, /*all_logits=*/true);
    batch.Finalize();
    // Greedy without penalties: the k + 1 argmax ids are all the verification needs (computed
    // on the device by GPU backends; no logit row comes back, no distribution is built). A row
    // whose id is banned there (EOS before min_new_tokens) is computed again alone with its
    // logits (its KV is rewritten with the same values) and picked by the sampler.
    const bool argmax_only = sampler.plain_greedy();
    if (argmax_only)
      runner.ForwardArgmax(batch, &ids);
    else
      runner.Forward(batch, &logits);
    const size_t before = out.size();
    VerifyStep step;
    step.draft = &draft;
    step.vocab = vocab;
    step.target = [&](int i, Sampler::Candidates* p) {
      const std::vector<int32_t> banned = banned_now();
      size_t row = size_t(i);
      if (argmax_only) {
        const int32_t id = ids[size_t(i)];
        if (std::find(banned.begin(), banned.end(), id) == banned.end()) {
          p->assign(1, {1.0f, id});
          return true;
        }
        Batch one;
        one.Add(slot, pos + i, {toks[size_t(i)]});
        one.Finalize();
        runner.Forward(one, &logits);
        row = 0;
      }
      sampler.Distribution(logits.data() + row * size_t(vocab), vocab, history, banned, p);
      return true;
    };
    step.emit = [&](int32_t id) { return go_on = emit(id); };
    Verify(step, sampler, &dense, stats ? &stats->spec : nullptr);
    // The last token and the accepted drafts are now valid KV; the rest is overwritten later.
    pos += int64_t(out.size() - before);
    if (stats) {
      stats->token_s.push_back(std::chrono::duration<double>(Clock::now() - ts).count());
      stats->draft_s.push_back(std::chrono::duration<double>(td - ts).count());
      stats->decode_tokens += int64_t(out.size() - before);
    }
  }
  return out;
}

}  // namespace es
