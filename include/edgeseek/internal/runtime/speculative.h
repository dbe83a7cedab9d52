// Speculative decoding (issue 18, item 4): a drafter proposes up to k tokens to follow a
// sequence, the target model scores all of them in ONE forward pass of k+1 rows (the last
// accepted token and the k drafts, every row an output row), and an acceptance rule keeps the
// longest prefix the target agrees with, plus one token of its own. Lossless:
//   - greedy: a draft is accepted while it equals the target's pick for that row, so the output
//     is the one plain decoding gives, token for token;
//   - sampled: the standard rule (Leviathan et al. 2023, Chen et al. 2023): accept draft d with
//     probability min(1, p(d) / q(d)), else draw from norm(max(0, p - q)) and stop; after k
//     accepted drafts, a bonus token from the last row's p. Every emitted token is then
//     distributed exactly as the target's sampler would draw it, whatever q is.
// p is Sampler::Distribution of the target's row, with the history (prompt + tokens emitted so
// far, accepted drafts included) the sampler would see, the same banned ids and constraint mask:
// the sampler's own code, not a copy. q is the drafter's distribution for that token; a
// deterministic drafter (n-gram lookup, greedy draft model) has q one-hot at its token.
//
// KV: the target's forward writes positions [pos, pos+k] of the slot; rejected positions hold
// junk that the next step overwrites (Runner::Forward needs only [0, pos0) valid). The same holds
// for the draft model's slot, whose valid prefix ModelDrafter tracks by the tokens it holds.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "edgeseek/internal/runtime/runner.h"
#include "edgeseek/internal/runtime/sampler.h"

namespace es {

// A drafter's own sampler for sampled (non-greedy) requests: made again when the request's
// sampling parameters change, seeded apart from the target's (the request's seed ^ salt) so that
// drafting never consumes the target's draws.
class DraftSampler {
 public:
  explicit DraftSampler(uint64_t salt) : salt_(salt) {}
  Sampler& For(const SamplingParams& sp);
  Sampler& current() { return *sampler_; }  // the last For's

 private:
  uint64_t salt_;
  SamplingParams params_;
  std::unique_ptr<Sampler> sampler_;
};

// ---- drafters --------------------------------------------------------------------------------
struct Draft {
  std::vector<int32_t> tokens;  // [m], m <= k
  // probs[i]: the distribution tokens[i] was drawn from (Sampler::Distribution of the drafter's
  // row); empty: the drafter is deterministic (q one-hot at each token).
  std::vector<Sampler::Candidates> probs;
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  virtual std::string name() const = 0;  // "ngram", "draft model NAME"
  // A new sequence starts with `prompt`: a drafter with state prepares for it (the draft model
  // prefills its slot from scratch, so that this cost lands in the prefill, not in a decode step).
  // Optional: Propose also works on a history it has not seen.
  virtual void Begin(const std::vector<int32_t>& prompt) { (void)prompt; }
  // Up to k tokens to follow `history` (prompt + generated; the next token goes at position
  // history.size()). `sampling`: the request's parameters; a drafter that samples draws with
  // them (temperature <= 0: greedy). Fewer than k (or none) when it has nothing to propose.
  virtual void Propose(const std::vector<int32_t>& history, int k, const SamplingParams& sampling,
                       Draft* out) = 0;
};

// Prompt lookup: the last n tokens (n = max_n down to min_n) are searched for in the earlier
// history (prompt + generated), latest occurrence first; the up to k tokens that followed it are
// the draft. Deterministic (q one-hot). Costs O(history x n) per step on the host.
class NgramDrafter : public Drafter {
 public:
  explicit NgramDrafter(int max_n = 3, int min_n = 1);
  std::string name() const override { return "ngram"; }
  void Propose(const std::vector<int32_t>& history, int k, const SamplingParams& sampling,
               Draft* out) override;

 private:
  int max_n_, min_n_;
};

// Throws es::Error naming both models and what differs unless `draft` can draft for `target`:
// the same vocabulary size (logit rows), the same BOS / EOS ids, and, where both carry a
// tokenizer, the same tokenizer vocabulary size and the same special tokens (ids and strings).
void CheckSameTokenizer(const Model& target, const Model& draft);

// A second model on its own Runner (one slot, the same backend kind as the target's), drafting
// k tokens greedily (temperature <= 0, penalties applied over the history) or by sampling with the
// request's parameters (its own generator, seeded from the request's seed). It does not see
// banned ids or constraint masks: a draft they forbid is simply rejected. Its KV follows the
// target's sequence: the tokens its slot holds are kept, and each Propose feeds only what differs
// from `history` (the accepted drafts are already there; rejected ones are overwritten).
class ModelDrafter : public Drafter {
 public:
  // target_vocab (> 0): the target's embedding rows; drafts stay below it and the draft's.
  explicit ModelDrafter(std::unique_ptr<Runner> draft, int target_vocab = 0);
  std::string name() const override;
  void Begin(const std::vector<int32_t>& prompt) override;
  void Propose(const std::vector<int32_t>& history, int k, const SamplingParams& sampling,
               Draft* out) override;
  const Runner& runner() const { return *runner_; }
  // Tokens whose KV the draft slot holds (for tests).
  const std::vector<int32_t>& cached() const { return cached_; }

 private:
  std::unique_ptr<Runner> runner_;
  int target_vocab_ = 0;
  int slot_ = -1;
  std::vector<int32_t> cached_;  // tokens at positions [0, cached_.size()) of the slot
  DraftSampler sampler_{0x9e3779b97f4a7c15ull};  // for sampled drafts
  // Feeds history[from, n) at positions [from, n); the last row's logits (or argmax when
  // `argmax`) are left in logits_ / ids_.
  void Feed(const std::vector<int32_t>& history, int64_t from, int64_t n, bool argmax);
  std::vector<float> logits_;
  std::vector<int32_t> ids_;
};

// DeepSeek-V3/R1's multi-token-prediction (MTP) module as the drafter (ModelArch::mtp(): the
// model's own layer model.layers.<n_layers>.*, trained to predict the token after next). Row i of
// the module reads the target's normalized hidden state h_i (model.norm of the last layer's
// output, which the checkpoint's own modeling code hands the module; Runner::SetHiddenSink
// delivers it) and the token t_{i+1}, at position i, and its logits predict t_{i+2}:
//   catch-up  the module's cache gets rows (h_j, t_{j+1}) for every position j <= n-2 of the
//             history (n tokens) it does not hold yet: the prompt (Begin), then each step's
//             accepted rows; the row at n-2 drafts d_1 (its t_{n-1} is the token just emitted)
//   chain     draft i+1 comes from the module's own output h' of draft i (shared_head.norm of
//             the block, as vLLM and SGLang recycle it) and the token d_i, at position n-2+i:
//             one MTP layer reused k times, so k > 1 drafts are weaker than the first (the
//             paper trains depth 1; acceptance falls along the chain)
// Embeddings at position 0 are zeroed, as vLLM's deepseek_mtp does (the module never saw that
// row in training). Its KV cache (one layer, the target's KV type, slots and context) follows the
// target's sequences like ModelDrafter's: positions whose hidden state or next token changed are
// recomputed, the chain's rows are junk that the next catch-up overwrites. Drafts are greedy
// (argmax) or sampled with the request's parameters on a generator of its own (q recorded).
// The target must outlive the drafter. The module's rows enter its graphs as their input
// (Batch::input): any backend, recorded programs reused from step to step.
class MtpDrafter : public Drafter {
 public:
  // Throws es::Error naming the model when it has no MTP module.
  explicit MtpDrafter(Runner& target);
  ~MtpDrafter() override;
  std::string name() const override { return "mtp"; }
  void Begin(const std::vector<int32_t>& prompt) override;
  void Propose(const std::vector<int32_t>& history, int k, const SamplingParams& sampling,
               Draft* out) override;
  // Positions [0, n) of `slot` whose module rows are cached (for tests).
  int64_t cached(int slot) const { return int64_t(slots_.at(size_t(slot)).next.size()); }

 private:
  struct HiddenRow {
    int32_t token = 0;     // the row's input token
    std::vector<float> h;  // [D]
  };
  struct SlotState {
    std::map<int64_t, HiddenRow> hidden;  // the target's rows by position, not yet used
    std::vector<int32_t> next;  // next[j]: the token t_{j+1} the cached row j was computed with
    int32_t first = -1;         // t_0 of the cached rows
    uint64_t stamp = 0;         // when the target last ran this slot
  };
  void OnHidden(const Batch& batch, const float* hidden);
  // The slots holding a hidden row of history[n-2] at n-2 (n = history.size()), the one the
  // target ran last first.
  std::vector<int> Candidates(const std::vector<int32_t>& history) const;
  // Catches up the first candidate that holds the hidden rows the history needs; -1 if none.
  int CatchUpAny(const std::vector<int32_t>& history);
  // Caches rows [.., n-2] of `history` in `slot` (n = history.size() >= 2); the module's output
  // of row n-2 is left in h_. False (nothing changed) when a hidden row it needs is missing.
  bool CatchUp(int slot, const std::vector<int32_t>& history);
  // Input row r = [embed(token) (zero at position 0) | h].
  void SetRow(int r, int64_t pos, int32_t token, const float* h);
  // The module over input rows [0, n) at positions pos0.. of slot; h_ = its last output row.
  void RunModule(int slot, int64_t pos0, int n);
  // The next draft from h_ at position pos (greedy, or sampled: its distribution in *q).
  int32_t Pick(int slot, int64_t pos, bool greedy, const std::vector<int32_t>& hist,
               Sampler::Candidates* q);

  Runner& target_;
  const ModelArch& arch_;
  int64_t D_ = 0;
  int vocab_ = 0;
  std::unique_ptr<KvStorage> kv_;
  std::vector<SlotState> slots_;
  uint64_t clock_ = 0;
  std::vector<float> in_;  // [>= rows, 2D]: the module's input rows
  std::vector<float> h_;   // [D]: the module's last output row (the head's input)
  std::map<int, std::unique_ptr<const Graph>> graphs_;  // the module's graph by row count
  std::unique_ptr<const Graph> head_;                   // shared_head.head over h_
  std::vector<float> module_out_, logits_;
  std::vector<int32_t> ids_;
  DraftSampler sampler_{0x6a09e667f3bcc908ull};  // for sampled drafts
};

// ---- verification ----------------------------------------------------------------------------
// Acceptance of one drafted token `d` against the target's distribution p (Candidates). q: the
// draft's distribution (null: one-hot at d). `dense` is scratch, all zero on entry and on return,
// grown to `vocab` floats when q is given (a one-hot q needs none: greedy verification costs
// O(|p|), nothing per vocabulary entry). Returns the token to emit; *accepted says whether it is d.
int32_t AcceptDraftToken(const Sampler::Candidates& p, int32_t d, const Sampler::Candidates* q,
                         int vocab, Sampler& sampler, std::vector<float>* dense, bool* accepted);

// Counters of speculative steps (the bench and /metrics report them).
struct SpecStats {
  int64_t steps = 0;     // verification forwards
  int64_t drafted = 0;   // tokens proposed
  int64_t accepted = 0;  // drafted tokens accepted
  int64_t emitted = 0;   // tokens emitted by the steps (accepted + one per step unless cut short)
  double acceptance() const { return drafted ? double(accepted) / double(drafted) : 0.0; }
  double tokens_per_step() const { return steps ? double(emitted) / double(steps) : 0.0; }
  void Add(const SpecStats& o) {
    steps += o.steps, drafted += o.drafted, accepted += o.accepted, emitted += o.emitted;
  }
};

// Walks the verification rows of one step in order. Row i (0..m) is the target's prediction
// after the drafts [0, i); `target(i, &p)` fills p for it (called after the tokens of rows < i
// were emitted, so the caller's history, banned ids and constraint state are those of the row)
// and returns false when nothing may follow; `emit(token)` returns false to stop (EOS, length,
// a callback). Stops at the first rejection; after m acceptances, row m gives a bonus token.
// Returns how many drafts were accepted.
struct VerifyStep {
  const Draft* draft = nullptr;
  int vocab = 0;
  std::function<bool(int, Sampler::Candidates*)> target;
  std::function<bool(int32_t)> emit;
};
int Verify(const VerifyStep& step, Sampler& sampler, std::vector<float>* dense, SpecStats* stats);

}  // namespace es
