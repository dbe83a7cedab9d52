// The sampling distribution (src/backends/sampling.cpp): the host twin of the device sampler
// draws from RowDistribution, and RowDistribution is the CPU sampler's (src/runtime/sampler.cpp)
// — checked by frequencies over many draws (total variation distance well under what a wrong
// kept set or a wrong normalisation gives), plus the exact cases (top_k = 1, tiny top_p, bans,
// greedy after penalties) and determinism per seed.
#include "edgeseek/internal/backends/sampling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <string>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/runtime/sampler.h"

namespace es {
namespace {

std::vector<float> Row(int vocab, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> n(0.0f, 2.0f);
  std::vector<float> l(static_cast<size_t>(vocab));
  for (auto& v : l) v = n(g);
  l[5] = l[9] = 4.5f;  // a tie
  return l;
}

double TotalVariation(const std::map<int32_t, double>& freq,
                      const std::vector<std::pair<int32_t, double>>& dist) {
  std::map<int32_t, double> all = freq;
  for (auto& [id, p] : dist) all[id] += 0;
  double tv = 0;
  for (auto& [id, f] : all) {
    double p = 0;
    for (auto& [i, q] : dist)
      if (i == id) p = q;
    tv += std::fabs(f - p);
  }
  return tv / 2;
}

struct Params {
  float t;
  int k;
  float top_p, min_p, rp, pres, freq;
};

TEST(Sampling, HostTwinAndCpuSamplerDrawFromRowDistribution) {
  const int V = 101, N = 20000;
  const std::vector<float> l = Row(V, 4);
  const std::vector<int32_t> history = {5, 5, 17, 60};
  for (const Params& q :
       {Params{1.0f, 0, 1.0f, 0, 1, 0, 0}, Params{0.6f, 10, 1.0f, 0, 1, 0, 0},
        Params{1.2f, 0, 0.7f, 0, 1, 0, 0}, Params{1.0f, 0, 1.0f, 0.1f, 1, 0, 0},
        Params{1.5f, 30, 0.9f, 0.02f, 1, 0, 0}, Params{0.9f, 0, 0.95f, 0, 1.4f, 0.3f, 0.2f}}) {
    SamplingParams sp;
    sp.temperature = q.t;
    sp.top_k = q.k;
    sp.top_p = q.top_p;
    sp.min_p = q.min_p;
    sp.repeat_penalty = q.rp;
    sp.presence_penalty = q.pres;
    sp.frequency_penalty = q.freq;
    sp.seed = 11;
    Sampler cpu(sp), dev(sp);
    RowSampling rs;
    ASSERT_TRUE(dev.DeviceParams(history, {}, &rs));
    const auto dist = RowDistribution(l.data(), V, rs);
    double total = 0;
    for (auto& [id, p] : dist) total += p;
    EXPECT_NEAR(total, 1.0, 1e-9);
    std::map<int32_t, double> f_cpu, f_twin;
    for (int i = 0; i < N; ++i) {
      f_cpu[cpu.Sample(l.data(), V, history)] += 1.0 / N;
      ASSERT_TRUE(dev.DeviceParams(history, {}, &rs));
      f_twin[SampleRowHost(l.data(), V, rs)] += 1.0 / N;
    }
    SCOPED_TRACE("t=" + std::to_string(q.t) + " k=" + std::to_string(q.k) +
                 " p=" + std::to_string(q.top_p));
    EXPECT_LT(TotalVariation(f_cpu, dist), 0.03);
    EXPECT_LT(TotalVariation(f_twin, dist), 0.03);
  }
}

TEST(Sampling, ExactCases) {
  const int V = 64;
  std::vector<float> l = Row(V, 9);
  l[20] = 9.0f;
  RowSampling s;
  s.top_k = 1;
  for (uint32_t seed = 0; seed < 50; ++seed) {
    s.seed = seed;
    EXPECT_EQ(SampleRowHost(l.data(), V, s), 20);
  }
  s.top_k = 0;
  s.top_p = 1e-6f;
  for (uint32_t seed = 0; seed < 50; ++seed) {
    s.seed = seed;
    EXPECT_EQ(SampleRowHost(l.data(), V, s), 20);
  }
  s.top_p = 1.0f;
  s.temperature = 0;
  s.counts = {{20, -1}};  // banned: the next best
  std::vector<float> masked = l;
  masked[20] = -INFINITY;
  EXPECT_EQ(SampleRowHost(l.data(), V, s), Argmax(masked.data(), V));
  s.counts.clear();
  for (int i = 0; i < V; ++i) s.counts.push_back({i, -1});
  EXPECT_EQ(SampleRowHost(l.data(), V, s), 0);  // everything banned
  // Determinism: a seed gives one id.
  RowSampling t;
  t.temperature = 1.5f;
  t.seed = 1234;
  const int32_t a = SampleRowHost(l.data(), V, t);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(SampleRowHost(l.data(), V, t), a);
  EXPECT_GE(SamplingUniform(7, 3), 0.0f);
  EXPECT_LT(SamplingUniform(7, 3), 1.0f);
}

// NaN or +inf logits are an error naming the token in argmax and in every sampler mode, wherever
// the value sits (a NaN at or before the maximum made argmax pick token 0: issue 23); -inf is a
// masked token and stays legal.
TEST(Sampling, NanOrInfiniteLogitsAreAnErrorNotTokenZero) {
  constexpr int kVocab = 37;
  for (const float bad : {NAN, INFINITY}) {
    for (const int col : {0, 17, kVocab - 1}) {
      std::vector<float> l = Row(kVocab, 3);
      l[size_t(col)] = bad;
      const std::string want = "token " + std::to_string(col) + " is";
      try {
        Argmax(l.data(), kVocab);
        ADD_FAILURE() << "argmax accepted " << bad << " at " << col;
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
      }
      for (const float t : {0.0f, 0.7f}) {
        SamplingParams p;
        p.temperature = t;
        Sampler s(p);
        EXPECT_THROW(s.Sample(l.data(), kVocab, {}), Error) << bad << " " << col << " " << t;
      }
    }
  }
  std::vector<float> l = Row(kVocab, 3);
  l[0] = -INFINITY;
  EXPECT_EQ(Argmax(l.data(), kVocab), int(std::max_element(l.begin(), l.end()) - l.begin()));
}

// Argmax is the lowest index of the largest logit at every length (the vector lanes and the
// tail), with ties, -inf masks and the largest value in either part.
TEST(Sampling, ArgmaxIsTheFirstLargestAtEveryLength) {
  std::mt19937 rng(5);
  for (int vocab : {1, 2, 15, 16, 17, 31, 33, 47, 64, 100, 151936}) {
    for (int trial = 0; trial < 6; ++trial) {
      std::vector<float> l(static_cast<size_t>(vocab));
      std::uniform_int_distribution<int> level(-3, 3);  // few values: many ties
      for (float& x : l) x = float(level(rng));
      if (trial % 2 == 1)  // masked rows: most ids at -inf
        for (size_t i = 0; i < l.size(); ++i)
          if (rng() % 4 != 0) l[i] = -INFINITY;
      if (trial == 4) std::fill(l.begin(), l.end(), -INFINITY);
      if (trial == 5) l[size_t(vocab - 1)] = 9.0f;  // the maximum in the last (tail) element
      const int want = int(std::max_element(l.begin(), l.end()) - l.begin());
      EXPECT_EQ(Argmax(l.data(), vocab), want) << "vocab " << vocab << " trial " << trial;
      SamplingParams p;  // greedy: Sample takes the same argmax without copying the row
      p.temperature = 0;
      Sampler s(p);
      EXPECT_EQ(s.Sample(l.data(), vocab, {}), want) << "vocab " << vocab << " trial " << trial;
    }
  }
}

// An allow-mask (RowSampling::allow: constrained decoding) acts exactly as -inf logits on the ids
// it leaves out, for greedy and sampled rows, at vocab sizes that are not a multiple of 64: a
// mask of one id, of the last id, of ids either side of a 64-bit word boundary, a random one and
// one shorter than the vocabulary (ids past its words are banned).
TEST(Sampling, AllowMaskActsAsMinusInfinity) {
  std::mt19937 rng(7);
  for (const int V : {1, 63, 65, 101, 130}) {
    const std::vector<float> l = Row(std::max(V, 10), uint32_t(V));  // Row writes ids 5 and 9
    std::vector<std::vector<int32_t>> sets = {{V / 2}, {V - 1}, {V - 1, 0}};
    if (V > 64) sets.push_back({63, 64});
    std::vector<int32_t> random;
    for (int id = 0; id < V; ++id)
      if (rng() % 10 < 3) random.push_back(id);
    sets.push_back(random);
    for (const auto& set : sets) {
      std::vector<uint64_t> allow((size_t(V) + 63) / 64, 0);
      for (int32_t id : set) allow[size_t(id) / 64] |= uint64_t(1) << (id % 64);
      // Shorter than the vocabulary: only the first word (ids past it are banned).
      for (const bool shortened : {false, true}) {
        std::vector<uint64_t> a = allow;
        if (shortened) a.resize(1);
        std::vector<float> ref(l.begin(), l.begin() + V);
        for (int id = 0; id < V; ++id)
          if (!Allowed(a, id)) ref[size_t(id)] = -INFINITY;
        std::vector<int32_t> kept;  // the allowed ids
        for (int id = 0; id < V; ++id)
          if (ref[size_t(id)] > -INFINITY) kept.push_back(id);
        for (const Params& q :
             {Params{0.0f, 0, 1.0f, 0, 1, 0, 0}, Params{1.0f, 0, 1.0f, 0, 1, 0, 0},
              Params{0.8f, 3, 0.9f, 0, 1.3f, 0.2f, 0}}) {
          RowSampling s;
          s.temperature = q.t;
          s.top_k = q.k;
          s.top_p = q.top_p;
          s.repeat_penalty = q.rp;
          s.presence_penalty = q.pres;
          s.counts = {{0, 2}};
          s.allow = a;
          RowSampling plain = s;
          plain.allow.clear();
          SCOPED_TRACE("V " + std::to_string(V) + " set of " + std::to_string(set.size()) +
                       (shortened ? " shortened" : "") + " t " + std::to_string(q.t));
          EXPECT_EQ(RowDistribution(l.data(), V, s), RowDistribution(ref.data(), V, plain));
          for (uint32_t seed = 0; seed < 24; ++seed) {
            s.seed = plain.seed = seed;
            const int32_t id = SampleRowHost(l.data(), V, s);
            ASSERT_EQ(id, SampleRowHost(ref.data(), V, plain)) << "seed " << seed;
            if (kept.empty()) {
              EXPECT_EQ(id, 0);  // everything banned: id 0, as for bans
            } else {
              EXPECT_TRUE(Allowed(a, id)) << "picked " << id;
            }
            if (kept.size() == 1) {
              EXPECT_EQ(id, kept[0]);
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace es
