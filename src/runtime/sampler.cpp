// Sampling: penalties, temperature, top-k, top-p, min-p, seeded draw.
#include "edgeseek/internal/runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "edgeseek/internal/core/argmax.h"
#include "edgeseek/internal/core/error.h"

namespace es {

namespace {
// NaN or +inf in logits[vocab] is an error naming the token: a NaN compares false with
// everything, so a max over it took token 0, and decoding emitted token 0 forever (issue 23).
// -inf is a masked (banned) token and stays legal here; the model's own output rows are checked
// for every non-finite value by CheckFiniteLogits before they reach the sampler.
// Finite or -inf (`|`, not `||`: no branch per element, so the loops using it vectorize).
inline bool Legal(float x) { return (x <= 3.402823466e38f) | (x == -INFINITY); }

void CheckNoNanOrPosInf(const float* logits, int vocab, const char* what) {
  bool ok = true;
  for (int i = 0; i < vocab; ++i) ok &= Legal(logits[i]);
  if (ok) return;
  int i = 0;
  while (i < vocab && Legal(logits[i])) ++i;
  Fail(what, ": the logit for token ", i, " is ", logits[i],
       " (not finite): the model's weights or hyperparameters are corrupt");
}
}  // namespace

// Lowest index of the largest logit, the NaN / +inf test in the same pass (core/argmax.h): the
// scalar `logits[i] > logits[best]` loop took ~0.6 ms of a 151,936-id row, a third of a
// constrained decode step's host work.
int32_t Argmax(const float* logits, int vocab) {
  bool ok = true;
  const int64_t best = ArgmaxFirst(logits, vocab, Legal, &ok);
  if (!ok) CheckNoNanOrPosInf(logits, vocab, "argmax");  // names the token and throws
  return int32_t(best);
}

Sampler::Sampler(const SamplingParams& p) : p_(p), rng_(p.seed) {}

bool Sampler::DeviceParams(const std::vector<int32_t>& history, const std::vector<int32_t>& banned,
                           RowSampling* out) {
  std::unordered_map<int32_t, int32_t> counts;
  if (p_.repeat_penalty != 1.0f || p_.presence_penalty != 0.0f || p_.frequency_penalty != 0.0f)
    for (int32_t id : history) ++counts[id];
  for (int32_t b : banned) counts[b] = -1;
  if (counts.size() > size_t(kMaxSamplingCounts)) return false;
  out->temperature = p_.temperature;
  out->top_k = p_.top_k;
  out->top_p = p_.top_p;
  out->min_p = p_.min_p;
  out->repeat_penalty = p_.repeat_penalty;
  out->presence_penalty = p_.presence_penalty;
  out->frequency_penalty = p_.frequency_penalty;
  out->counts.assign(counts.begin(), counts.end());
  out->seed = uint32_t(rng_() >> 32);
  return true;
}

void Sampler::Processed(const float* logits_in, int vocab, const std::vector<int32_t>& history,
                        const std::vector<int32_t>& banned, std::vector<float>* out) const {
  std::vector<float>& logits = *out;
  logits.assign(logits_in, logits_in + vocab);
  for (int32_t b : banned)
    if (b >= 0 && b < vocab) logits[size_t(b)] = -INFINITY;
  if (p_.repeat_penalty != 1.0f || p_.presence_penalty != 0.0f || p_.frequency_penalty != 0.0f) {
    std::unordered_map<int32_t, int> counts;
    for (int32_t id : history)
      if (id >= 0 && id < vocab) ++counts[id];
    for (auto& [id, n] : counts) {
      float& l = logits[size_t(id)];
      if (p_.repeat_penalty != 1.0f) l = l > 0 ? l / p_.repeat_penalty : l * p_.repeat_penalty;
      l -= p_.presence_penalty + p_.frequency_penalty * float(n);
    }
  }
}

TokenLogprobs LogSoftmaxAt(const float* row, int vocab, int32_t id, int top) {
  float mx = -INFINITY;
  for (int i = 0; i < vocab; ++i) mx = std::max(mx, row[i]);
  double sum = 0;
  for (int i = 0; i < vocab; ++i)
    if (row[i] > -INFINITY) sum += std::exp(double(row[i]) - double(mx));
  const float lse = float(double(mx) + std::log(sum));
  TokenLogprobs t;
  t.logprob = id >= 0 && id < vocab ? row[id] - lse : -INFINITY;
  if (top > 0) {
    std::vector<std::pair<float, int32_t>> c;
    for (int i = 0; i < vocab; ++i)
      if (row[i] > -INFINITY) c.emplace_back(row[i], i);
    const size_t k = std::min(c.size(), size_t(top));
    std::partial_sort(c.begin(), c.begin() + long(k), c.end(), [](const auto& a, const auto& b) {
      return a.first > b.first || (a.first == b.first && a.second < b.second);
    });
    for (size_t i = 0; i < k; ++i) t.top.emplace_back(c[i].second, c[i].first - lse);
  }
  return t;
}

bool Sampler::Distribution(const float* logits_in, int vocab, const std::vector<int32_t>& history,
                           const std::vector<int32_t>& banned, Candidates* out) const {
  auto& c = *out;
  c.clear();
  // Greedy with nothing to change in the row (a constrained row is masked in place before this):
  // the argmax of the row itself, with its check, and no copy of it.
  if (plain_greedy() && banned.empty()) {
    c.emplace_back(1.0f, Argmax(logits_in, vocab));
    return false;
  }
  CheckNoNanOrPosInf(logits_in, vocab, "sampler");
  std::vector<float> logits;
  Processed(logits_in, vocab, history, banned, &logits);
  if (p_.temperature <= 0.0f) {
    c.emplace_back(1.0f, Argmax(logits.data(), vocab));
    return false;
  }
  for (int i = 0; i < vocab; ++i)
    if (logits[size_t(i)] > -INFINITY) c.emplace_back(logits[size_t(i)] / p_.temperature, i);
  if (c.empty()) {  // everything banned: the model's own argmax
    c.emplace_back(1.0f, Argmax(logits_in, vocab));
    return false;
  }
  auto by_logit = [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  size_t k = c.size();
  if (p_.top_k > 0 && size_t(p_.top_k) < k) {
    k = size_t(p_.top_k);
    std::partial_sort(c.begin(), c.begin() + long(k), c.end(), by_logit);
    c.resize(k);
  } else {
    std::sort(c.begin(), c.end(), by_logit);
  }
  // Softmax over the survivors.
  const float mx = c[0].first;
  double sum = 0;
  for (auto& [l, id] : c) sum += (l = std::exp(l - mx));
  for (auto& [l, id] : c) l = float(l / sum);
  if (p_.min_p > 0.0f) {
    const float cut = c[0].first * p_.min_p;
    size_t keep = 1;
    while (keep < c.size() && c[keep].first >= cut) ++keep;
    c.resize(keep);
  }
  if (p_.top_p < 1.0f) {
    double cum = 0;
    size_t keep = 0;
    while (keep < c.size()) {
      cum += c[keep].first;
      ++keep;
      if (cum >= p_.top_p) break;
    }
    c.resize(std::max<size_t>(keep, 1));
  }
  // Renormalized over what survived truncation (the draw below weighs by the same numbers).
  double total = 0;
  for (auto& [pr, id] : c) total += pr;
  for (auto& [pr, id] : c) pr = float(pr / total);
  return true;
}

int32_t Sampler::Draw(const Candidates& c) {
  ES_ASSERT(!c.empty());
  double total = 0;
  for (auto& [pr, id] : c) total += pr;
  std::uniform_real_distribution<double> u(0.0, total);
  double r = u(rng_), acc = 0;
  for (auto& [pr, id] : c) {
    acc += pr;
    if (r < acc) return id;
  }
  return c.back().second;
}

double Sampler::Uniform() { return std::uniform_real_distribution<double>(0.0, 1.0)(rng_); }

int32_t Sampler::Sample(const float* logits_in, int vocab, const std::vector<int32_t>& history,
                        const std::vector<int32_t>& banned) {
  // A forced pick (greedy, or every id banned) takes no draw from the generator.
  if (!Distribution(logits_in, vocab, history, banned, &scratch_)) return scratch_[0].second;
  return Draw(scratch_);
}

int TokenConstraint::AllowMask(int vocab, std::vector<uint64_t>* allow) {
  std::vector<float> row(size_t(vocab), 0.0f);
  const int allowed = Apply(row.data(), vocab);
  allow->assign((size_t(vocab) + 63) / 64, 0);
  for (int id = 0; id < vocab; ++id)
    if (row[size_t(id)] > -INFINITY) (*allow)[size_t(id) / 64] |= uint64_t(1) << (id % 64);
  return allowed;
}

}  // namespace es
