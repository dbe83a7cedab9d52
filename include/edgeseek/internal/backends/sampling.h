// One output row's sampling parameters for Backend::ComputeSample (sampling on the device), and
// the host twin of the device sampler.
//
// The distribution is the CPU sampler's (src/runtime/sampler.cpp): penalties over the history
// (repeat: l > 0 ? l / rp : l * rp; then - (presence + frequency * count)), banned ids at -inf,
// x = l / temperature, the top_k by (x desc, id asc), p = softmax over them, min_p keeps
// p >= p_max * min_p, top_p keeps the prefix of that order whose mass before each id is < top_p,
// then a draw ∝ p. An allow-mask (constrained decoding: a grammar's next-token set) bans every id
// whose bit is clear before all of that, exactly as a ban does. The device draws by rejection
// (src/backends/vulkan/shaders/sample.comp): j ∝ p over the candidates in id order, accepted when
// the mass ranked above it is < top_p, else the candidates shrink to those ranked above j and it
// draws again, each round's uniform a hash of `seed` and the round. SampleRowHost runs the same
// rounds on the host (the CPU default of ComputeSample and the tests' reference); RowDistribution
// gives the exact kept set and probabilities.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace es {

struct RowSampling {
  float temperature = 1.0f;  // <= 0: greedy (after penalties)
  int32_t top_k = 0;         // 0: off
  float top_p = 1.0f;        // >= 1: off
  float min_p = 0.0f;        // 0: off
  float repeat_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  uint32_t seed = 0;  // this draw's random bits (from the request's seeded generator)
  // Distinct ids of the history with their counts; count -1: banned (logit -inf).
  std::vector<std::pair<int32_t, int32_t>> counts;
  // Empty: every id allowed. Else bit id % 64 of word id / 64 set when id may be picked; ids
  // with a clear bit, or past the words, are banned (logit -inf).
  std::vector<uint64_t> allow;
};

// Whether `allow` (RowSampling::allow) lets id be picked.
inline bool Allowed(const std::vector<uint64_t>& allow, int64_t id) {
  return allow.empty() ||
         (size_t(id >> 6) < allow.size() && ((allow[size_t(id >> 6)] >> (id & 63)) & 1u) != 0);
}

// Most (id, count) entries a row may carry to the device; rows with more sample on the host.
constexpr int kMaxSamplingCounts = 4096;

// The device sampler's uniform in [0, 1) for `round` of a row seeded `seed` (24 bits).
float SamplingUniform(uint32_t seed, uint32_t round);

// The id the device sampler picks for this row (same rounds and uniforms; f32 arithmetic).
int32_t SampleRowHost(const float* logits, int64_t vocab, const RowSampling& s);

// The exact distribution of the pick: (id, probability) of every kept id, in (x desc, id asc)
// order, probabilities summing to 1 (in double).
std::vector<std::pair<int32_t, double>> RowDistribution(const float* logits, int64_t vocab,
                                                        const RowSampling& s);

}  // namespace es
