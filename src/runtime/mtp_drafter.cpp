// MtpDrafter: DeepSeek-V3/R1's multi-token-prediction module as the speculative drafter
// (edgeseek/internal/runtime/speculative.h has the rows it computes and why).
#include <algorithm>
#include <cstring>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/models/arch.h"
#include "edgeseek/internal/quant/blocks.h"
#include "edgeseek/internal/runtime/speculative.h"

namespace es {

namespace {
constexpr int kChunk = 512;       // catch-up rows per forward of the module
constexpr size_t kMaxGraphs = 8;  // module graphs kept (by row count)
}  // namespace

MtpDrafter::MtpDrafter(Runner& target) : target_(target), arch_(target.model().arch()) {
  const ModelConfig& c = target.model().config();
  ES_CHECK(arch_.mtp(), "model '", target.model().name(), "' has no MTP layers to draft with (",
           c.num_nextn_predict_layers == 0
               ? std::string("num_nextn_predict_layers is 0")
               : "num_nextn_predict_layers is " + std::to_string(c.num_nextn_predict_layers) +
                     " but the file carries no model.layers." + std::to_string(c.n_layers) +
                     ".eh_proj / blk." + std::to_string(c.n_layers) + ".nextn.eh_proj",
           "); use --draft MODEL or --spec ngram");
  target_.SetHiddenSink([this](const Batch& b, const float* h) { OnHidden(b, h); });
  D_ = c.hidden_size;
  vocab_ = target.model().vocab_size();
  Backend& be = target_.backend();
  KvSpec spec = c.MakeKvSpec(target_.kv_type());
  spec.n_layers = 1;
  kv_ = be.CreateKv(spec, target_.n_slots(), target_.context());
  slots_.resize(size_t(target_.n_slots()));
  for (const Tensor* w : arch_.MtpWeightList()) be.PrepareWeight(*w);
  h_.assign(size_t(D_), 0.0f);
}

MtpDrafter::~MtpDrafter() { target_.SetHiddenSink(nullptr); }

void MtpDrafter::OnHidden(const Batch& b, const float* hidden) {
  ++clock_;
  for (const BatchSeq& s : b.seqs) {
    SlotState& st = slots_.at(size_t(s.slot));
    st.stamp = clock_;
    // Rows from this position on have a new hidden state: their cached module rows are stale,
    // and so are hidden rows past this forward (junk of rejected drafts, an earlier sequence).
    if (int64_t(st.next.size()) > s.pos0) st.next.resize(size_t(s.pos0));
    const int64_t end = s.pos0 + s.n_tokens;
    st.hidden.erase(st.hidden.lower_bound(end), st.hidden.end());
    for (int r = 0; r < s.n_tokens; ++r) {
      const float* row = hidden + size_t(s.row0 + r) * size_t(D_);
      HiddenRow& hr = st.hidden[s.pos0 + r];
      hr.token = b.tokens[size_t(s.row0 + r)];
      hr.h.assign(row, row + D_);
    }
  }
}

std::vector<int> MtpDrafter::Candidates(const std::vector<int32_t>& history) const {
  std::vector<int> out;
  const int64_t pos = int64_t(history.size()) - 2;
  if (pos < 0) return out;
  for (size_t i = 0; i < slots_.size(); ++i) {
    const auto it = slots_[i].hidden.find(pos);
    if (it != slots_[i].hidden.end() && it->second.token == history[size_t(pos)])
      out.push_back(int(i));
  }
  std::stable_sort(out.begin(), out.end(),
                   [&](int a, int b) { return slots_[size_t(a)].stamp > slots_[size_t(b)].stamp; });
  return out;
}

int MtpDrafter::CatchUpAny(const std::vector<int32_t>& history) {
  for (int slot : Candidates(history))
    if (CatchUp(slot, history)) return slot;
  return -1;
}

void MtpDrafter::SetRow(int r, int64_t pos, int32_t token, const float* h) {
  if (in_.size() < size_t(r + 1) * size_t(2 * D_)) in_.resize(size_t(r + 1) * size_t(2 * D_));
  float* row = in_.data() + size_t(r) * size_t(2 * D_);
  const Tensor& E = *arch_.mtp()->embed;
  ES_CHECK(token >= 0 && token < E.rows(), "MTP draft: token id ", token,
           " is outside the vocabulary (", E.rows(), " tokens)");
  if (pos == 0)
    std::fill(row, row + D_, 0.0f);
  else
    Dequantize(E.dtype, E.bytes() + size_t(token) * E.row_bytes(), row, D_);
  std::memcpy(row + D_, h, size_t(D_) * sizeof(float));
}

void MtpDrafter::RunModule(int slot, int64_t pos0, int n) {
  Batch b;
  b.Add(slot, pos0, std::vector<int32_t>(static_cast<size_t>(n), 0), /*all_logits=*/true);
  b.Finalize();
  b.input = in_.data();  // rows [0, n)
  b.input_cols = 2 * D_;
  auto it = graphs_.find(n);
  if (it == graphs_.end()) {
    if (graphs_.size() >= kMaxGraphs) graphs_.clear();
    it = graphs_.emplace(n, std::make_unique<const Graph>(arch_.BuildMtp(b))).first;
  }
  module_out_.resize(size_t(n) * size_t(D_));
  target_.backend().Compute(*it->second, b, *kv_, module_out_.data());
  std::copy(module_out_.end() - D_, module_out_.end(), h_.begin());
}

bool MtpDrafter::CatchUp(int slot, const std::vector<int32_t>& history) {
  SlotState& st = slots_[size_t(slot)];
  const int64_t last = int64_t(history.size()) - 2;  // the row that drafts
  if (last < 0) return false;
  // Cached rows stay while their next token is the history's; the last is always recomputed
  // (its output drafts).
  int64_t from = 0;
  const int64_t have =
      st.first == history[0] ? std::min<int64_t>(int64_t(st.next.size()), last) : 0;
  while (from < have && st.next[size_t(from)] == history[size_t(from + 1)]) ++from;
  // Each row to compute needs the target's hidden state of that history token.
  for (int64_t j = from; j <= last; ++j) {
    const auto it = st.hidden.find(j);
    if (it == st.hidden.end() || it->second.token != history[size_t(j)]) return false;
  }
  for (int64_t b = from; b <= last; b += kChunk) {
    const int n = int(std::min<int64_t>(kChunk, last + 1 - b));
    for (int r = 0; r < n; ++r)
      SetRow(r, b + r, history[size_t(b + r + 1)], st.hidden.at(b + r).h.data());
    RunModule(slot, b, n);
  }
  st.next.assign(history.begin() + 1, history.end());
  st.first = history[0];
  // Hidden rows before the last are not read again (a changed token there means the target ran
  // that position again, which brings a new row).
  st.hidden.erase(st.hidden.begin(), st.hidden.lower_bound(last));
  return true;
}

int32_t MtpDrafter::Pick(int slot, int64_t pos, bool greedy, const std::vector<int32_t>& hist,
                         Sampler::Candidates* q) {
  Batch b;
  b.Add(slot, pos, {0}, true);
  b.Finalize();
  b.input = h_.data();
  b.input_cols = D_;
  if (!head_) head_ = std::make_unique<const Graph>(arch_.BuildHead(b, /*mtp=*/true));
  if (greedy) {
    ids_.resize(1);
    target_.backend().ComputeArgmax(*head_, b, *kv_, ids_.data());
    return ids_[0];
  }
  logits_.resize(size_t(vocab_));
  target_.backend().Compute(*head_, b, *kv_, logits_.data());
  CheckFiniteLogits(logits_.data(), 1, vocab_);
  Sampler& s = sampler_.current();
  if (s.Distribution(logits_.data(), vocab_, hist, {}, q)) return s.Draw(*q);
  return (*q)[0].second;
}

void MtpDrafter::Begin(const std::vector<int32_t>& prompt) {
  if (prompt.size() >= 2)
    CatchUpAny(prompt);  // the prompt's rows: prefill cost, not a decode step's
}

void MtpDrafter::Propose(const std::vector<int32_t>& history, int k, const SamplingParams& sp,
                         Draft* out) {
  out->tokens.clear();
  out->probs.clear();
  const int64_t n = int64_t(history.size());
  // The chain writes positions n-1 .. n+k-3 of the module's cache.
  k = int(std::min<int64_t>(k, kv_->capacity() - n + 2));
  if (k <= 0 || n < 2) return;
  const int slot = CatchUpAny(history);
  if (slot < 0) return;  // nothing to draft from: a plain step
  const bool greedy = Sampler(sp).plain_greedy();
  if (!greedy) sampler_.For(sp);
  std::vector<int32_t> hist;  // history + drafts so far, for the draft sampler's penalties
  if (!greedy) hist = history;
  for (int i = 0; i < k; ++i) {
    const int64_t pos = n - 2 + i;  // the position of the row h_ came from
    Sampler::Candidates q;
    const int32_t d = Pick(slot, pos, greedy, hist, &q);
    out->tokens.push_back(d);
    if (!greedy) {
      out->probs.push_back(std::move(q));
      hist.push_back(d);
    }
    if (i + 1 == k) break;
    SetRow(0, pos + 1, d, h_.data());
    RunModule(slot, pos + 1, 1);
  }
}

}  // namespace es
