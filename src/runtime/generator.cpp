// Generation loop: chunked prefill, then one token a step, or speculative steps of a drafter.
#include "edgeseek/internal/runtime/generator.h"

#include <algorithm>
#include <chrono>

#include "edgeseek/internal/core/error.h"

namespace es {

namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// One generation's state: the tokens so far, the sampler, the last forward's ids or logits.
class Generation {
 public:
  Generation(Runner& runner, int slot, const std::vector<int32_t>& prompt,
             const GenerateOptions& opts, GenerateStats* stats)
      : runner_(runner),
        slot_(slot),
        opts_(opts),
        stats_(stats),
        vocab_(runner.model().vocab_size()),
        sampler_(opts.sampling),
        history_(prompt),
        device_sampling_(runner.backend().device_sampling()),
        pos_(int64_t(prompt.size())) {}

  // Chunked prefill: logits only for the last chunk's last token.
  void Prefill(const std::vector<int32_t>& prompt) {
    const int chunk = std::max(1, opts_.prefill_chunk);
    for (size_t b = 0; b < prompt.size(); b += size_t(chunk)) {
      const size_t e = std::min(prompt.size(), b + size_t(chunk));
      Batch batch;
      batch.Add(slot_, int64_t(b),
                std::vector<int32_t>(prompt.begin() + long(b), prompt.begin() + long(e)));
      batch.Finalize();
      if (e < prompt.size())
        runner_.ForwardArgmax(batch, &ids_);  // only the cache matters: the least to download
      else
        Forward(batch);
    }
  }

  // Emits the token that follows the last forward; false when generation stops after it.
  bool EmitNext() { return Emit(NextId()); }

  // One token a step until a stop.
  void PlainSteps() {
    for (bool go_on = true; go_on;) {
      const auto ts = Clock::now();
      Batch batch;
      batch.Add(slot_, pos_++, {history_.back()});
      batch.Finalize();
      Forward(batch);
      const int32_t id = NextId();
      if (stats_) {
        stats_->token_s.push_back(SecondsSince(ts));
        ++stats_->decode_tokens;
      }
      go_on = Emit(id);
    }
  }

  // Speculative steps: draft k, verify k + 1 rows in one forward, emit the accepted prefix and
  // the target's own next token (speculative.h), until a stop.
  void SpeculativeSteps() {
    Draft draft;
    std::vector<float> dense;
    std::vector<int32_t> toks;
    for (bool go_on = true; go_on;) go_on = SpeculativeStep(draft, dense, toks);
  }

  std::vector<int32_t>& out() { return out_; }

 private:
  // EOS is banned until min_new_tokens have been generated.
  std::vector<int32_t> BannedNow() const {
    return int(out_.size()) < opts_.min_new_tokens ? opts_.eos_ids : std::vector<int32_t>{};
  }

  // Greedy without penalties and with nothing banned: the backend's argmax (on the device for
  // GPU backends, so only the id comes back); other sampling on a backend that samples on the
  // device: ComputeSample, again only the id; otherwise the logits and the sampler.
  void Forward(const Batch& batch) {
    const std::vector<int32_t> banned = BannedNow();
    have_id_ = true;
    if (sampler_.plain_greedy() && banned.empty()) {
      runner_.ForwardArgmax(batch, &ids_);
    } else if (device_sampling_ && sampler_.DeviceParams(history_, banned, &rows_[0])) {
      runner_.ForwardSample(batch, rows_, &ids_);
    } else {
      have_id_ = false;
      runner_.Forward(batch, &logits_);
    }
  }

  int32_t NextId() {
    return have_id_ ? ids_[0] : sampler_.Sample(logits_.data(), vocab_, history_, BannedNow());
  }

  // Emits one id; false when generation stops after it (a callback, EOS, max_new_tokens).
  bool Emit(int32_t id) {
    out_.push_back(id);
    history_.push_back(id);
    if (opts_.on_token && !opts_.on_token(id)) return false;
    if (std::find(opts_.eos_ids.begin(), opts_.eos_ids.end(), id) != opts_.eos_ids.end()) {
      if (stats_) stats_->stopped_by_eos = true;
      return false;
    }
    return int(out_.size()) < opts_.max_new_tokens;
  }

  // One speculative step; false when generation stops. k never drafts past max_new_tokens (the
  // last row's token is the step's extra one) nor past the context.
  bool SpeculativeStep(Draft& draft, std::vector<float>& dense, std::vector<int32_t>& toks) {
    const auto ts = Clock::now();
    const int64_t left = int64_t(opts_.max_new_tokens) - int64_t(out_.size());
    const int k = int(std::max<int64_t>(
        0, std::min<int64_t>({opts_.spec_k, left - 1, runner_.context() - pos_ - 1})));
    draft.tokens.clear();
    draft.probs.clear();
    if (k > 0) opts_.drafter->Propose(history_, k, opts_.sampling, &draft);
    const auto td = Clock::now();
    ES_ASSERT(draft.tokens.size() <= size_t(k));
    toks.assign(1, history_.back());
    toks.insert(toks.end(), draft.tokens.begin(), draft.tokens.end());
    Batch batch;
    batch.Add(slot_, pos_, toks, /*all_logits=*/true);
    batch.Finalize();
    // Greedy without penalties: the k + 1 argmax ids are all the verification needs (computed
    // on the device by GPU backends; no logit row comes back, no distribution is built). A row
    // whose id is banned there (EOS before min_new_tokens) is computed again alone with its
    // logits (its KV is rewritten with the same values) and picked by the sampler.
    const bool argmax_only = sampler_.plain_greedy();
    if (argmax_only)
      runner_.ForwardArgmax(batch, &ids_);
    else
      runner_.Forward(batch, &logits_);
    const size_t before = out_.size();
    bool go_on = true;
    VerifyStep step;
    step.draft = &draft;
    step.vocab = vocab_;
    step.target = [&](int i, Sampler::Candidates* p) {
      const std::vector<int32_t> banned = BannedNow();
      size_t row = size_t(i);
      if (argmax_only) {
        const int32_t id = ids_[size_t(i)];
        if (std::find(banned.begin(), banned.end(), id) == banned.end()) {
          p->assign(1, {1.0f, id});
          return true;
        }
        Batch one;
        one.Add(slot_, pos_ + i, {toks[size_t(i)]});
        one.Finalize();
        runner_.Forward(one, &logits_);
        row = 0;
      }
      sampler_.Distribution(logits_.data() + row * size_t(vocab_), vocab_, history_, banned, p);
      return true;
    };
    step.emit = [&](int32_t id) { return go_on = Emit(id); };
    Verify(step, sampler_, &dense, stats_ ? &stats_->spec : nullptr);
    // The last token and the accepted drafts are now valid KV; the rest is overwritten later.
    pos_ += int64_t(out_.size() - before);
    if (stats_) {
      stats_->token_s.push_back(SecondsSince(ts));
      stats_->draft_s.push_back(std::chrono::duration<double>(td - ts).count());
      stats_->decode_tokens += int64_t(out_.size() - before);
    }
    return go_on;
  }

  Runner& runner_;
  const int slot_;
  const GenerateOptions& opts_;
  GenerateStats* stats_;  // may be null
  const int vocab_;
  Sampler sampler_;
  std::vector<int32_t> history_;  // prompt + out_
  std::vector<int32_t> out_;      // the generated tokens
  const bool device_sampling_;
  std::vector<float> logits_;             // the last forward's logits (when !have_id_)
  std::vector<int32_t> ids_;              // its ids (argmax or device-sampled)
  std::vector<RowSampling> rows_ = {{}};  // the device sampler's one row
  bool have_id_ = false;                  // the next token is ids_[0] (else: from logits_)
  int64_t pos_;  // KV holds positions [0, pos_); history_.back() goes at pos_
};

}  // namespace

std::vector<int32_t> Generate(Runner& runner, int slot, const std::vector<int32_t>& prompt,
                              const GenerateOptions& opts, GenerateStats* stats) {
  ES_CHECK(!prompt.empty(), "generation needs at least one prompt token");
  Generation g(runner, slot, prompt, opts, stats);
  const auto t0 = Clock::now();
  // The cache pages this generation may write, committed now: the decode steps then take no page
  // faults (a lazily committed cache faulted in a new page per layer and part every few tokens).
  // A drafter's verify steps write up to spec_k rows ahead.
  runner.ReserveKv(slot, int64_t(prompt.size()) + std::max(opts.max_new_tokens, 0) +
                             (opts.drafter ? opts.spec_k : 0));
  g.Prefill(prompt);
  if (opts.drafter) opts.drafter->Begin(prompt);  // the draft model's prefill is prefill too
  if (stats) stats->prefill_s = SecondsSince(t0);
  if (opts.max_new_tokens <= 0) return g.out();
  if (!g.EmitNext()) return std::move(g.out());
  if (opts.drafter)
    g.SpeculativeSteps();
  else
    g.PlainSteps();
  return std::move(g.out());
}

}  // namespace es
