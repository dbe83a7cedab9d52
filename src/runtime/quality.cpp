// Quantization quality metrics (include/edgeseek/internal/runtime/quality.h).
#include "edgeseek/internal/runtime/quality.h"

#include <algorithm>
#include <cmath>

#include "edgeseek/internal/core/error.h"

namespace es {

namespace {

// log-softmax of n logits into out (double).
void LogSoftmax(const float* x, int64_t n, std::vector<double>* out) {
  out->resize(size_t(n));
  double mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, double(x[i]));
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(double(x[i]) - mx);
  const double lse = mx + std::log(sum);
  for (int64_t i = 0; i < n; ++i) (*out)[size_t(i)] = double(x[i]) - lse;
}

int64_t ArgMax(const float* x, int64_t n) { return std::max_element(x, x + n) - x; }

}  // namespace

void QualityAccumulator::Add(const float* ref, const float* test) {
  std::vector<double> lp, lq;
  LogSoftmax(ref, vocab_, &lp);
  LogSoftmax(test, vocab_, &lq);
  double kl = 0;
  for (int64_t i = 0; i < vocab_; ++i) {
    const double p = std::exp(lp[size_t(i)]);
    if (p > 0) kl += p * (lp[size_t(i)] - lq[size_t(i)]);
    const double d = double(test[i]) - double(ref[i]);
    diff2_ += d * d;
    ref2_ += double(ref[i]) * double(ref[i]);
  }
  kl_.push_back(std::max(0.0, kl));  // rounding can make a tiny KL negative
  agree_ += ArgMax(ref, vocab_) == ArgMax(test, vocab_);
}

QualityStats QualityAccumulator::Result() const {
  QualityStats s;
  s.positions = int64_t(kl_.size());
  if (kl_.empty()) return s;
  double sum = 0;
  for (double k : kl_) sum += k;
  s.mean_kl = sum / double(kl_.size());
  s.max_kl = *std::max_element(kl_.begin(), kl_.end());
  std::vector<double> sorted = kl_;
  std::sort(sorted.begin(), sorted.end());
  s.p99_kl =
      sorted[std::min(sorted.size() - 1, size_t(std::ceil(0.99 * double(sorted.size()))) - 1)];
  s.top1_agreement = 100.0 * double(agree_) / double(kl_.size());
  s.rel_l2 = ref2_ > 0 ? std::sqrt(diff2_ / ref2_) : std::sqrt(diff2_);
  return s;
}

std::vector<float> SequenceLogits(Runner& runner, const std::vector<int32_t>& tokens, int chunk) {
  ES_CHECK(!tokens.empty(), "quality: empty token sequence");
  ES_CHECK(int64_t(tokens.size()) <= runner.context(), "quality: ", tokens.size(),
           " tokens do not fit the context of ", runner.context(), " (raise -c)");
  const int slot = runner.AcquireSlot();
  ES_CHECK(slot >= 0, "quality: no free slot");
  const int64_t vocab = runner.model().vocab_size();
  std::vector<float> all(tokens.size() * size_t(vocab));
  std::vector<float> part;
  try {
    for (size_t p = 0; p < tokens.size(); p += size_t(chunk)) {
      const size_t n = std::min(tokens.size() - p, size_t(chunk));
      Batch b;
      b.Add(slot, int64_t(p),
            std::vector<int32_t>(tokens.begin() + int64_t(p), tokens.begin() + int64_t(p + n)),
            /*all_logits=*/true);
      b.Finalize();
      runner.Forward(b, &part);
      ES_ASSERT(part.size() == n * size_t(vocab));
      std::copy(part.begin(), part.end(), all.begin() + int64_t(p * size_t(vocab)));
    }
  } catch (...) {
    runner.ReleaseSlot(slot);
    throw;
  }
  runner.ReleaseSlot(slot);
  return all;
}

QualityStats CompareLogits(const std::vector<float>& ref, const std::vector<float>& test,
                           int64_t vocab) {
  ES_CHECK(vocab > 0 && ref.size() == test.size() && ref.size() % size_t(vocab) == 0,
           "quality: logits of different sizes (", ref.size(), " and ", test.size(),
           " values, vocabulary ", vocab, ")");
  QualityAccumulator acc(vocab);
  for (size_t p = 0; p < ref.size(); p += size_t(vocab)) acc.Add(ref.data() + p, test.data() + p);
  return acc.Result();
}

std::vector<QualityStats> CompareKvTypes(
    const std::function<std::unique_ptr<Runner>(DType)>& make_runner,
    const std::vector<int32_t>& tokens, DType ref, const std::vector<DType>& types, int chunk) {
  std::vector<float> want;
  int64_t vocab = 0;
  {
    auto r = make_runner(ref);
    ES_CHECK(r->kv_type() == ref, "quality: the reference runner has a ", Name(r->kv_type()),
             " KV cache, not ", Name(ref));
    vocab = r->model().vocab_size();
    want = SequenceLogits(*r, tokens, chunk);
  }
  std::vector<QualityStats> out;
  for (DType t : types) {
    auto r = make_runner(t);
    ES_CHECK(r->kv_type() == t, "quality: the runner has a ", Name(r->kv_type()), " KV cache, not ",
             Name(t));
    out.push_back(CompareLogits(want, SequenceLogits(*r, tokens, chunk), vocab));
  }
  return out;
}

std::vector<int32_t> RandomTokens(int64_t n, int64_t vocab, uint64_t seed) {
  ES_CHECK(vocab > 0 && n >= 0, "quality: bad token count ", n, " or vocabulary ", vocab);
  std::vector<int32_t> out(static_cast<size_t>(n));
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 0x2545f4914f6cdd1dull;
  for (auto& t : out) {
    x += 0x9e3779b97f4a7c15ull;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    t = int32_t(z % uint64_t(vocab));
  }
  return out;
}

}  // namespace es
