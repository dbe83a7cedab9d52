// Quantization quality: how far a quantized model's next-token distributions are from a
// reference model's over the same token sequence. Per position t with reference logits r[t, :]
// and test logits q[t, :] (both [vocab]):
//   KL(t)  = Σ_v p_v (log p_v − log q_v),  p = softmax(r[t]), q = softmax(q[t])   (nats, in double)
//   top-1  = argmax r[t] == argmax q[t]
// and over all positions: mean and max KL, the 99th percentile of KL, the top-1 agreement in %,
// and the relative L2 error of the logits ‖q − r‖ / ‖r‖.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "edgeseek/internal/runtime/runner.h"

namespace es {

struct QualityStats {
  int64_t positions = 0;
  double mean_kl = 0, max_kl = 0, p99_kl = 0;
  double top1_agreement = 0;  // percent
  double rel_l2 = 0;
};

// Accumulates positions one at a time (reference row and test row of `vocab` logits each).
class QualityAccumulator {
 public:
  explicit QualityAccumulator(int64_t vocab) : vocab_(vocab) {}
  void Add(const float* ref, const float* test);
  QualityStats Result() const;

 private:
  int64_t vocab_;
  std::vector<double> kl_;
  int64_t agree_ = 0;
  double diff2_ = 0, ref2_ = 0;
};

// All positions' logits of `tokens` as one sequence, in prefill chunks of `chunk` tokens (slot 0
// of `runner`, which must start empty and hold tokens.size() positions; it is released after):
// [tokens.size(), vocab] row-major.
std::vector<float> SequenceLogits(Runner& runner, const std::vector<int32_t>& tokens,
                                  int chunk = 128);

// KL / top-1 / L2 of test logits against reference logits, both [positions, vocab].
QualityStats CompareLogits(const std::vector<float>& ref, const std::vector<float>& test,
                           int64_t vocab);

// KV cache types against a reference type with the weights fixed (docs/quantization.md, "KV
// cache types"): make_runner(type) gives a runner of the model whose cache has that type; the
// logits of `tokens` (SequenceLogits, chunks of `chunk`) with each of `types` against those with
// `ref`. One result per type, in order.
std::vector<QualityStats> CompareKvTypes(
    const std::function<std::unique_ptr<Runner>(DType)>& make_runner,
    const std::vector<int32_t>& tokens, DType ref, const std::vector<DType>& types,
    int chunk = 128);

// Deterministic token ids in [0, vocab) for synthetic models (splitmix64 of the seed).
std::vector<int32_t> RandomTokens(int64_t n, int64_t vocab, uint64_t seed);

}  // namespace es
