// Speculative decoding: drafters (n-gram lookup, a draft model) and the acceptance rule
// (edgeseek/internal/runtime/speculative.h).
#include "edgeseek/internal/runtime/speculative.h"

#include <algorithm>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/models/config.h"
#include "edgeseek/internal/tokenizer/tokenizer.h"

namespace es {

Sampler& DraftSampler::For(const SamplingParams& sp) {
  const SamplingParams& a = params_;
  const bool same = sampler_ && a.temperature == sp.temperature && a.top_k == sp.top_k &&
                    a.top_p == sp.top_p && a.min_p == sp.min_p &&
                    a.repeat_penalty == sp.repeat_penalty &&
                    a.presence_penalty == sp.presence_penalty &&
                    a.frequency_penalty == sp.frequency_penalty && a.seed == sp.seed;
  if (!same) {
    params_ = sp;
    SamplingParams own = sp;
    own.seed = sp.seed ^ salt_;  // a generator of its own, not the target's
    sampler_ = std::make_unique<Sampler>(own);
  }
  return *sampler_;
}

// ---- n-gram (prompt lookup) --------------------------------------------------------------------
NgramDrafter::NgramDrafter(int max_n, int min_n) : max_n_(max_n), min_n_(min_n) {
  ES_CHECK(min_n_ >= 1 && max_n_ >= min_n_, "n-gram drafter: need 1 <= min_n <= max_n, got ",
           min_n_, "..", max_n_);
}

void NgramDrafter::Propose(const std::vector<int32_t>& h, int k, const SamplingParams&,
                           Draft* out) {
  out->tokens.clear();
  out->probs.clear();
  if (k <= 0) return;
  const size_t len = h.size();
  for (int n = max_n_; n >= min_n_; --n) {
    if (len <= size_t(n)) continue;
    const int32_t* suffix = h.data() + (len - size_t(n));
    // Latest earlier occurrence of the suffix: start j < len - n, so something follows it.
    for (size_t j = len - size_t(n); j-- > 0;) {
      if (!std::equal(suffix, suffix + n, h.data() + j)) continue;
      const size_t from = j + size_t(n);
      const size_t to = std::min(len, from + size_t(k));
      out->tokens.assign(h.begin() + long(from), h.begin() + long(to));
      return;
    }
  }
}

// ---- draft model -------------------------------------------------------------------------------
void CheckSameTokenizer(const Model& target, const Model& draft) {
  const std::string pair =
      "draft model '" + draft.name() + "' and target model '" + target.name() + "'";
  const Tokenizer* td = draft.tokenizer();
  const Tokenizer* tt = target.tokenizer();
  // Embedding tables may be padded differently (R1-Distill-Qwen-1.5B has 151,936 rows, the 7B
  // 152,064, one tokenizer): with both tokenizers the check is theirs below, and drafts stay
  // below both models' sizes (ModelDrafter's target_vocab); without, the sizes.
  ES_CHECK((td && tt) || draft.vocab_size() == target.vocab_size(), pair,
           " have different vocabularies: ", draft.vocab_size(), " vs ", target.vocab_size(),
           " tokens (the draft must share the tokenizer)");
  ES_CHECK(draft.generation().bos_id == target.generation().bos_id, pair,
           " have different BOS ids: ", draft.generation().bos_id, " vs ",
           target.generation().bos_id);
  auto ids = [](std::vector<int32_t> v) {
    std::sort(v.begin(), v.end());
    std::string s;
    for (int32_t i : v) s += (s.empty() ? "" : ",") + std::to_string(i);
    return "[" + s + "]";
  };
  ES_CHECK(ids(draft.generation().eos_ids) == ids(target.generation().eos_ids), pair,
           " have different EOS ids: ", ids(draft.generation().eos_ids), " vs ",
           ids(target.generation().eos_ids));
  if (!td || !tt) return;
  // GGUF files list their padding rows as tokens too: the tokenizers may differ in length, and
  // must agree on every id both hold (drafts stay below both sizes).
  ES_CHECK(td->bos_id() == tt->bos_id() && td->bos_token() == tt->bos_token(), pair,
           " have different BOS tokens: ", td->bos_id(), " '", td->bos_token(), "' vs ",
           tt->bos_id(), " '", tt->bos_token(), "'");
  ES_CHECK(td->eos_id() == tt->eos_id() && td->eos_token() == tt->eos_token(), pair,
           " have different EOS tokens: ", td->eos_id(), " '", td->eos_token(), "' vs ",
           tt->eos_id(), " '", tt->eos_token(), "'");
  const int32_t common = std::min(td->vocab_size(), tt->vocab_size());
  for (int32_t id = 0; id < common; ++id) {
    const bool sd = td->IsSpecial(id), st = tt->IsSpecial(id);
    const std::string a = td->TokenText(id), b = tt->TokenText(id);
    if (sd || st)
      ES_CHECK(sd == st && a == b, pair, " have different special tokens at id ", id, ": '", a, "'",
               sd ? "" : " (not special)", " vs '", b, "'", st ? "" : " (not special)");
    ES_CHECK(a == b, pair, " have different tokens at id ", id, ": '", a, "' vs '", b, "'");
  }
}

ModelDrafter::ModelDrafter(std::unique_ptr<Runner> draft, int target_vocab)
    : runner_(std::move(draft)), target_vocab_(target_vocab) {
  ES_ASSERT(runner_);
  slot_ = runner_->AcquireSlot();
  ES_CHECK(slot_ >= 0, "draft model '", runner_->model().name(), "': its runner has no free slot");
}

std::string ModelDrafter::name() const { return "draft model " + runner_->model().name(); }

void ModelDrafter::Feed(const std::vector<int32_t>& h, int64_t from, int64_t n, bool argmax) {
  constexpr int64_t kChunk = 512;
  for (int64_t b = from; b < n; b += kChunk) {
    const int64_t e = std::min(n, b + kChunk);
    Batch batch;
    batch.Add(slot_, b, std::vector<int32_t>(h.begin() + long(b), h.begin() + long(e)));
    batch.Finalize();
    if (argmax || e < n)
      runner_->ForwardArgmax(batch, &ids_);  // only the cache matters: the least to download
    else
      runner_->Forward(batch, &logits_);
  }
}

void ModelDrafter::Begin(const std::vector<int32_t>& prompt) {
  // All but the last token (Propose feeds that one: its row drafts).
  cached_.clear();
  const int64_t n = std::min<int64_t>(int64_t(prompt.size()) - 1, runner_->context());
  if (n <= 0) return;
  Feed(prompt, 0, n, true);
  cached_.assign(prompt.begin(), prompt.begin() + long(n));
}

void ModelDrafter::Propose(const std::vector<int32_t>& history, int k, const SamplingParams& sp,
                           Draft* out) {
  out->tokens.clear();
  out->probs.clear();
  const int64_t n = int64_t(history.size());
  // Drafting k tokens feeds positions up to n + k - 2 of the draft's slot.
  k = int(std::min<int64_t>(k, runner_->context() - n + 1));
  if (k <= 0 || n == 0) return;
  // Ids past the target's table (a draft's padding rows) are never drafted.
  const int vocab = target_vocab_ > 0 ? std::min(runner_->model().vocab_size(), target_vocab_)
                                      : runner_->model().vocab_size();
  // Plain greedy: the argmax of the draft's rows; else its sampler (greedy with penalties is a
  // forced pick there, so the drafts follow the target's rule).
  const bool greedy = Sampler(sp).plain_greedy();
  Sampler* draw = greedy ? nullptr : &sampler_.For(sp);
  // What the slot already holds of `history` (at least the last token is fed: its row drafts).
  int64_t keep = 0;
  const int64_t have = std::min<int64_t>(int64_t(cached_.size()), n - 1);
  while (keep < have && cached_[size_t(keep)] == history[size_t(keep)]) ++keep;
  Feed(history, keep, n, greedy);
  cached_.assign(history.begin(), history.end());
  std::vector<int32_t> hist;  // history + drafts so far, for the draft sampler's penalties
  if (!greedy) hist = history;
  for (int i = 0; i < k; ++i) {
    int32_t d;
    if (greedy) {
      d = ids_.at(0);
      if (d >= vocab) break;  // a padding row won: no draft past here
    } else {
      Sampler::Candidates q;
      if (draw->Distribution(logits_.data(), vocab, hist, {}, &q))
        d = draw->Draw(q);
      else
        d = q[0].second;
      out->probs.push_back(std::move(q));
      hist.push_back(d);
    }
    out->tokens.push_back(d);
    if (i + 1 == k) break;
    cached_.push_back(d);
    Feed(cached_, n + i, n + i + 1, greedy);
  }
}

// ---- acceptance --------------------------------------------------------------------------------
int32_t AcceptDraftToken(const Sampler::Candidates& p, int32_t d, const Sampler::Candidates* q,
                         int vocab, Sampler& sampler, std::vector<float>* dense, bool* accepted) {
  ES_ASSERT(!p.empty() && d >= 0 && d < vocab);
  // q as a dense row (only its support is touched, and cleared again below). A one-hot q (a
  // deterministic drafter; every greedy step) needs no row: q(id) is 1 at d and 0 elsewhere, so
  // greedy verification does no work that scales with the vocabulary.
  std::vector<float>& qd = *dense;
  if (q) {
    if (qd.size() < size_t(vocab)) qd.assign(size_t(vocab), 0.0f);
    for (const auto& [pr, id] : *q) qd[size_t(id)] = pr;
  }
  auto q_of = [&](int32_t id) { return q ? qd[size_t(id)] : (id == d ? 1.0f : 0.0f); };
  float pd = 0;
  for (const auto& [pr, id] : p)
    if (id == d) pd = pr;
  const float q_d = q_of(d);
  // Accept with probability min(1, p(d) / q(d)): no draw when p(d) >= q(d) (certain), none when
  // p(d) == 0 (impossible), so greedy verification never touches the generator.
  bool ok = pd >= q_d || (pd > 0 && sampler.Uniform() * double(q_d) < double(pd));
  int32_t tok = d;
  if (!ok) {
    // The residual norm(max(0, p - q)): its support lies inside p's.
    Sampler::Candidates r;
    for (const auto& [pr, id] : p) {
      const float v = pr - q_of(id);
      if (v > 0) r.emplace_back(v, id);
    }
    if (r.empty()) r = p;                                 // p == q up to rounding: p itself
    tok = r.size() == 1 ? r[0].second : sampler.Draw(r);  // Draw weighs by the unnormalized mass
  }
  if (q)
    for (const auto& [pr, id] : *q) qd[size_t(id)] = 0.0f;
  *accepted = ok;
  return tok;
}

int Verify(const VerifyStep& s, Sampler& sampler, std::vector<float>* dense, SpecStats* stats) {
  const Draft& dr = *s.draft;
  const int m = int(dr.tokens.size());
  ES_ASSERT(dr.probs.empty() || int(dr.probs.size()) == m);
  SpecStats local;
  local.steps = 1;
  local.drafted = m;
  Sampler::Candidates p;
  for (int i = 0; i <= m; ++i) {
    if (!s.target(i, &p)) break;
    int32_t tok;
    bool accepted = false;
    if (i < m) {
      tok = AcceptDraftToken(p, dr.tokens[size_t(i)],
                             dr.probs.empty() ? nullptr : &dr.probs[size_t(i)], s.vocab, sampler,
                             dense, &accepted);
    } else {
      tok = p.size() == 1 ? p[0].second : sampler.Draw(p);  // the bonus token, from p itself
    }
    local.accepted += accepted;
    ++local.emitted;
    if (!s.emit(tok) || !accepted) break;
  }
  if (stats) stats->Add(local);
  return int(local.accepted);
}

}  // namespace es
