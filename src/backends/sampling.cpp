// Host twin of the device sampler and the exact distribution (see sampling.h).
#include "edgeseek/internal/backends/sampling.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace es {
namespace {

uint32_t Key(float v) {  // order-preserving: larger float, larger key
  uint32_t b;
  std::memcpy(&b, &v, 4);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
// (key a, id ia) ranks above (key b, id ib): larger key, then lower id.
bool Above(uint32_t a, uint32_t ia, uint32_t b, uint32_t ib) {
  return a > b || (a == b && ia < ib);
}

// The row after penalties and bans, the effective temperature and top-k, the max of l / T.
struct Prepared {
  std::vector<float> l;
  float T = 1.0f;
  int64_t top_k = 0;
  float m = -std::numeric_limits<float>::infinity();
  int64_t finite = 0;
};

Prepared Prepare(const float* logits, int64_t vocab, const RowSampling& s) {
  Prepared p;
  p.l.assign(logits, logits + vocab);
  if (!s.allow.empty())
    for (int64_t c = 0; c < vocab; ++c)
      if (!Allowed(s.allow, c)) p.l[size_t(c)] = -std::numeric_limits<float>::infinity();
  for (const auto& [id, n] : s.counts) {
    if (id < 0 || id >= vocab) continue;
    float& l = p.l[size_t(id)];
    if (n < 0) {
      l = -std::numeric_limits<float>::infinity();
      continue;
    }
    if (s.repeat_penalty != 1.0f) l = l > 0 ? l / s.repeat_penalty : l * s.repeat_penalty;
    l -= s.presence_penalty + s.frequency_penalty * float(n);
  }
  const bool greedy = !(s.temperature > 0.0f);
  p.T = greedy ? 1.0f : s.temperature;
  p.top_k = greedy ? 1 : s.top_k;
  for (float l : p.l)
    if (l > -std::numeric_limits<float>::infinity()) {
      p.m = std::max(p.m, l / p.T);
      ++p.finite;
    }
  return p;
}

}  // namespace

float SamplingUniform(uint32_t seed, uint32_t round) {
  uint32_t h = seed ^ (round * 0x9E3779B9u);
  h ^= h >> 16;
  h *= 0x7feb352du;
  h ^= h >> 15;
  h *= 0x846ca68bu;
  h ^= h >> 16;
  return float(h >> 8) * (1.0f / 16777216.0f);
}

int32_t SampleRowHost(const float* logits, int64_t vocab, const RowSampling& s) {
  const Prepared p = Prepare(logits, vocab, s);
  if (p.finite == 0) return 0;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  // Top-k threshold: the k-th (key, id) in rank order.
  const bool cut = p.top_k > 0 && p.top_k < p.finite;
  uint32_t key_k = 0, id_k = uint32_t(vocab);
  if (cut) {
    std::vector<std::pair<uint32_t, uint32_t>> ranked;
    ranked.reserve(size_t(p.finite));
    for (int64_t c = 0; c < vocab; ++c)
      if (p.l[size_t(c)] > kNegInf) ranked.emplace_back(Key(p.l[size_t(c)] / p.T), uint32_t(c));
    std::nth_element(
        ranked.begin(), ranked.begin() + (p.top_k - 1), ranked.end(),
        [](const auto& a, const auto& b) { return Above(a.first, a.second, b.first, b.second); });
    key_k = ranked[size_t(p.top_k - 1)].first;
    id_k = ranked[size_t(p.top_k - 1)].second;
  }
  auto in_top_k = [&](uint32_t k, uint32_t c) { return !cut || !Above(key_k, id_k, k, c); };
  float z = 0;
  for (int64_t c = 0; c < vocab; ++c) {
    const float l = p.l[size_t(c)];
    if (l > kNegInf && in_top_k(Key(l / p.T), uint32_t(c))) z += std::exp(l / p.T - p.m);
  }
  const float pcut = s.min_p > 0 ? (1.0f / z) * s.min_p : 0.0f;
  // Probability of id c if it is a candidate (in the top-k set, passing min_p, ranked above the
  // bound), else -1.
  bool bounded = false;
  uint32_t lo = 0, lo_id = 0;
  auto prob = [&](int64_t c, bool use_bound) -> float {
    const float l = p.l[size_t(c)];
    if (!(l > kNegInf)) return -1;
    const float v = l / p.T;
    const uint32_t k = Key(v);
    if (!in_top_k(k, uint32_t(c))) return -1;
    const float pr = std::exp(v - p.m) / z;
    if (pr < pcut || (use_bound && bounded && !Above(k, uint32_t(c), lo, lo_id))) return -1;
    return pr;
  };
  for (uint32_t round = 0;; ++round) {
    float total = 0;
    for (int64_t c = 0; c < vocab; ++c)
      if (const float pr = prob(c, true); pr >= 0) total += pr;
    const float target = SamplingUniform(s.seed, round) * total;
    float acc = 0;
    int64_t j = -1, last = 0;
    for (int64_t c = 0; c < vocab && j < 0; ++c) {
      const float pr = prob(c, true);
      if (pr < 0) continue;
      last = c;
      acc += pr;
      if (target < acc) j = c;
    }
    if (j < 0) j = last;
    if (s.top_p >= 1.0f || round >= 255) return int32_t(j);
    const uint32_t kj = Key(p.l[size_t(j)] / p.T);
    float above = 0;
    for (int64_t c = 0; c < vocab; ++c) {
      const float pr = prob(c, false);
      if (pr >= 0 && Above(Key(p.l[size_t(c)] / p.T), uint32_t(c), kj, uint32_t(j))) above += pr;
    }
    if (above == 0 || above < s.top_p) return int32_t(j);
    lo = kj;
    lo_id = uint32_t(j);
    bounded = true;
  }
}

std::vector<std::pair<int32_t, double>> RowDistribution(const float* logits, int64_t vocab,
                                                        const RowSampling& s) {
  const Prepared p = Prepare(logits, vocab, s);
  std::vector<std::pair<int32_t, double>> out;
  if (p.finite == 0) return {{0, 1.0}};
  std::vector<std::pair<float, int32_t>> c;
  for (int64_t i = 0; i < vocab; ++i)
    if (p.l[size_t(i)] > -std::numeric_limits<float>::infinity())
      c.emplace_back(p.l[size_t(i)] / p.T, int32_t(i));
  std::sort(c.begin(), c.end(), [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  });
  if (p.top_k > 0 && p.top_k < int64_t(c.size())) c.resize(size_t(p.top_k));
  double z = 0;
  for (auto& [v, id] : c) z += std::exp(double(v) - double(p.m));
  double cum = 0, kept = 0;
  const double p0 = 1.0 / z;
  for (auto& [v, id] : c) {
    const double pr = std::exp(double(v) - double(p.m)) / z;
    if (s.min_p > 0 && pr < p0 * s.min_p) break;
    if (s.top_p < 1.0f && !out.empty() && cum >= s.top_p) break;
    out.emplace_back(id, pr);
    cum += pr;
    kept += pr;
  }
  for (auto& [id, pr] : out) pr /= kept;
  return out;
}

}  // namespace es
