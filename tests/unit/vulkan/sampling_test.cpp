// Sampling on the device (sample.comp through VulkanBackend::ComputeSample): for each parameter
// set, rows of the same logits with different seeds give the ids of the host twin
// (SampleRowHost: same rounds, same uniforms) — all but float-rounding near-ties — and the kept
// set of the exact distribution (RowDistribution); penalties and bans are applied on the device.
#include "edgeseek/internal/backends/sampling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

#include "edgeseek/internal/core/error.h"
#include "test_util.h"
#include "vk_util.h"

namespace es::test {
namespace {

class VulkanSampling : public VulkanTest {};

struct Case {
  const char* name;
  RowSampling s;
};

std::vector<Case> Cases() {
  std::vector<Case> c;
  RowSampling s;
  s.temperature = 0.8f;
  c.push_back({"temperature", s});
  s.top_k = 7;
  c.push_back({"top_k", s});
  s.top_k = 0;
  s.top_p = 0.6f;
  c.push_back({"top_p", s});
  s.top_p = 1.0f;
  s.min_p = 0.05f;
  c.push_back({"min_p", s});
  s.top_k = 40;
  s.top_p = 0.9f;
  s.min_p = 0.01f;
  s.temperature = 1.3f;
  c.push_back({"combined", s});
  RowSampling pen;
  pen.temperature = 0.7f;
  pen.repeat_penalty = 1.3f;
  pen.presence_penalty = 0.5f;
  pen.frequency_penalty = 0.25f;
  pen.counts = {{3, 2}, {700, 1}, {10, -1}, {500, 4}};
  c.push_back({"penalties", pen});
  RowSampling greedy;
  greedy.temperature = 0;
  greedy.repeat_penalty = 2.0f;
  greedy.counts = {{3, 1}};
  c.push_back({"greedy_after_penalty", greedy});
  greedy.counts = {{10, -1}};  // the maximum banned: ids 3 and 700 tie, the lower id wins
  greedy.repeat_penalty = 1.0f;
  c.push_back({"greedy_tie", greedy});
  RowSampling plain;  // greedy without penalties: the pick in the masking pass
  plain.temperature = 0;
  c.push_back({"greedy", plain});
  return c;
}

TEST_F(VulkanSampling, SamplingOnTheDeviceMatchesTheHostTwin) {
  constexpr int kRows = 96, kVocab = 1001;
  // One logits row (a peaked head, a tie, a long tail) repeated kRows times.
  Tensor X = RandomTensor("x", DType::kF32, {kRows, kVocab}, 21);
  float* x = static_cast<float*>(MutableData(X));
  for (int c = 0; c < kVocab; ++c) x[c] = 3.0f * x[c];
  x[3] = 6.0f;
  x[700] = 6.0f;  // tie with id 3
  x[259] = 6.0f;  // and with 3 in the same invocation's ids (3 + 256)
  x[10] = 8.0f;   // the maximum (banned in one case)
  x[500] = 5.5f;
  for (int r = 1; r < kRows; ++r) std::copy(x, x + kVocab, x + size_t(r) * kVocab);
  auto kv = SharedVulkan().CreateKv(KvSpec{1, {2, 2}, DType::kF32}, 1, kRows + 1);
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    std::vector<RowSampling> rows(kRows, c.s);
    for (int r = 0; r < kRows; ++r) rows[size_t(r)].seed = 0x9e3779b9u * uint32_t(r + 1) + 17u;
    Graph g;
    g.Add(Make(Op::kGetRows, "rows", {Input(g, X, kRows)}, {kRows, kVocab}));
    std::vector<int32_t> ids(kRows, -1);
    SharedVulkan().ComputeSample(g, RowsBatch(kRows), *kv, rows.data(), ids.data());
    const auto dist = RowDistribution(x, kVocab, c.s);
    std::set<int32_t> kept;
    for (auto& [id, p] : dist) kept.insert(id);
    int agree = 0;
    for (int r = 0; r < kRows; ++r) {
      EXPECT_TRUE(kept.count(ids[size_t(r)])) << "row " << r << " picked " << ids[size_t(r)];
      agree += ids[size_t(r)] == SampleRowHost(x, kVocab, rows[size_t(r)]);
    }
    EXPECT_GE(agree, kRows - 2) << "device and host twin disagree on " << kRows - agree << " rows";
    // The same seeds give the same ids (the program is reused).
    std::vector<int32_t> again(kRows, -1);
    SharedVulkan().ComputeSample(g, RowsBatch(kRows), *kv, rows.data(), again.data());
    EXPECT_EQ(again, ids);
    if (c.s.temperature <= 0) {
      for (int32_t id : ids) EXPECT_EQ(id, dist[0].first);
    } else {
      EXPECT_GT(std::set<int32_t>(ids.begin(), ids.end()).size(), kept.size() > 1 ? 1u : 0u);
    }
  }
}

TEST_F(VulkanSampling, SamplingRejectsTooManyPenalizedIds) {
  Tensor X = RandomTensor("x", DType::kF32, {1, 8}, 3);
  Graph g;
  g.Add(Make(Op::kGetRows, "rows", {Input(g, X, 1)}, {1, 8}));
  auto kv = SharedVulkan().CreateKv(KvSpec{1, {2, 2}, DType::kF32}, 1, 4);
  RowSampling s;
  for (int i = 0; i <= kMaxSamplingCounts; ++i) s.counts.push_back({i, 1});
  int32_t id = -1;
  EXPECT_THROW(SharedVulkan().ComputeSample(g, RowsBatch(1), *kv, &s, &id), Error);
}

// A NaN or infinite logit in a row is an error naming the row, for greedy and drawn rows alike,
// also where the id is banned (the check reads the logits before bans write -inf) (issue 23).
TEST_F(VulkanSampling, SamplingFlagsNonFiniteLogits) {
  constexpr int kVocab = 1001;
  for (const float bad : {NAN, INFINITY, -INFINITY}) {
    for (const int col : {0, 500, kVocab - 1}) {
      for (const float temperature : {0.0f, 0.8f}) {
        Tensor X = RandomTensor("x", DType::kF32, {2, kVocab}, 4);
        static_cast<float*>(MutableData(X))[kVocab + col] = bad;
        Graph g;
        g.Add(Make(Op::kGetRows, "rows", {Input(g, X, 2)}, {2, kVocab}));
        auto kv = SharedVulkan().CreateKv(KvSpec{1, {2, 2}, DType::kF32}, 1, 4);
        std::vector<RowSampling> rows(2);
        for (RowSampling& s : rows) {
          s.temperature = temperature;
          s.counts = {{col, -1}};
        }
        std::vector<int32_t> ids(2);
        std::string msg;
        try {
          SharedVulkan().ComputeSample(g, RowsBatch(2), *kv, rows.data(), ids.data());
        } catch (const Error& e) {
          msg = e.what();
        }
        EXPECT_NE(msg.find("non-finite logit"), std::string::npos)
            << bad << " " << col << " " << temperature;
        EXPECT_NE(msg.find("output row 1"), std::string::npos) << msg;
      }
    }
  }
}

// Allow-masks (constrained decoding) on the device: a batch mixing unmasked rows with masked
// greedy and sampled rows — a mask of one id, of the last id, of ids either side of 32- and
// 64-bit word boundaries, random masks, a mask shorter than the vocabulary — picks, row for
// row, the id of the host twin with the same mask (vocab 1001: not a multiple of 32).
TEST_F(VulkanSampling, AllowMasksMatchTheHostTwin) {
  constexpr int kRows = 48, kVocab = 1001;
  Tensor X = RandomTensor("x", DType::kF32, {kRows, kVocab}, 33);
  float* x = static_cast<float*>(MutableData(X));
  for (int64_t c = 0; c < int64_t(kRows) * kVocab; ++c) x[c] *= 3.0f;
  for (int r = 0; r < kRows; ++r) x[size_t(r) * kVocab + 10] = 9.0f;  // masked out in most rows
  std::mt19937 rng(5);
  std::vector<RowSampling> rows(kRows);
  for (int r = 0; r < kRows; ++r) {
    RowSampling& s = rows[size_t(r)];
    s.seed = 0x9e3779b9u * uint32_t(r + 1) + 5u;
    s.temperature = r % 2 == 0 ? 0.0f : 0.9f;  // greedy and sampled rows alternate
    if (r % 4 == 3) {
      s.top_k = 5;
      s.top_p = 0.9f;
      s.counts = {{3, 2}, {64, -1}};
    }
    std::vector<int32_t> set;
    const int kind = r % 8 / 2;  // 0: no mask, then one id, word boundaries, random
    if (kind == 0) continue;
    if (kind == 1) set = {r < 24 ? (r * 37) % kVocab : kVocab - 1};
    if (kind == 2) set = {31, 32, 63, 64, 65};
    if (kind == 3)
      for (int id = 0; id < kVocab; ++id)
        if (rng() % 4 == 0) set.push_back(id);
    s.allow.assign((kVocab + 63) / 64, 0);
    for (int32_t id : set) s.allow[size_t(id) / 64] |= uint64_t(1) << (id % 64);
    if (r == 47) s.allow.resize(3);  // ids past 191 banned
  }
  Graph g;
  g.Add(Make(Op::kGetRows, "rows", {Input(g, X, kRows)}, {kRows, kVocab}));
  auto kv = SharedVulkan().CreateKv(KvSpec{1, {2, 2}, DType::kF32}, 1, kRows + 1);
  std::vector<int32_t> ids(kRows, -1);
  SharedVulkan().ComputeSample(g, RowsBatch(kRows), *kv, rows.data(), ids.data());
  int masked = 0;
  for (int r = 0; r < kRows; ++r) {
    const RowSampling& s = rows[size_t(r)];
    EXPECT_EQ(ids[size_t(r)], SampleRowHost(x + size_t(r) * kVocab, kVocab, s)) << "row " << r;
    EXPECT_TRUE(Allowed(s.allow, ids[size_t(r)])) << "row " << r << " picked " << ids[size_t(r)];
    masked += !s.allow.empty();
    if (s.allow.empty() && s.temperature <= 0) {
      EXPECT_EQ(ids[size_t(r)], 10) << "row " << r;
    }
  }
  EXPECT_EQ(masked, kRows * 3 / 4);
  // The program is reused: masks are written on every run (none this time).
  for (RowSampling& s : rows) s.allow.clear();
  SharedVulkan().ComputeSample(g, RowsBatch(kRows), *kv, rows.data(), ids.data());
  for (int r = 0; r < kRows; r += 2) EXPECT_EQ(ids[size_t(r)], 10) << "row " << r;
}

// Greedy rows without penalties over a real vocabulary (151,936 ids, more than 4,096: their pick
// comes from sample.comp's parts of ~1,024 ids, the PARTIAL variant), next to rows that take the
// whole-row pass in the same step (a drawn row, a greedy row with a penalty): unmasked, a tie
// between parts (the lower id wins), a mask of one id in the last part, a mask whose allowed
// maximum ties across parts, a mask allowing nothing (id 0, as a short row), a random mask, a mask
// shorter than the vocabulary — each the host twin's id. Then a NaN in one fast row, at an id its
// mask leaves out: an error naming that row.
TEST_F(VulkanSampling, GreedyRowsOfALongVocabularyTakeTheirPickFromParts) {
  constexpr int kRows = 9, kVocab = 151936;
  Tensor X = RandomTensor("x", DType::kF32, {kRows, kVocab}, 47);
  float* x = static_cast<float*>(MutableData(X));
  for (int64_t c = 0; c < int64_t(kRows) * kVocab; ++c) x[c] *= 3.0f;
  auto at = [&](int r, int c) -> float& { return x[size_t(r) * kVocab + size_t(c)]; };
  const size_t words = (kVocab + 63) / 64;
  auto allow = [&](const std::vector<int32_t>& set) {
    std::vector<uint64_t> a(words, 0);
    for (int32_t id : set) a[size_t(id) / 64] |= uint64_t(1) << (id % 64);
    return a;
  };
  std::vector<RowSampling> rows(kRows);
  for (RowSampling& rs : rows) rs.temperature = 0;
  at(0, 77777) = 9.0f;                  // 0: unmasked, the maximum in a middle part
  at(1, 1000) = at(1, 100000) = 10.0f;  // 1: unmasked, a tie between parts
  rows[2].allow = allow({kVocab - 1});  // 2: one id, in the last part
  at(3, 5000) = at(3, 140000) = 7.0f;   // 3: the allowed maximum ties across parts
  rows[3].allow = allow({5000, 140000, 140001, 17});
  rows[4].allow = allow({});  // 4: nothing allowed
  std::mt19937 rng(11);
  std::vector<int32_t> quarter;
  for (int id = 0; id < kVocab; ++id)
    if (rng() % 4 == 0) quarter.push_back(id);
  rows[5].allow = allow(quarter);  // 5: a random quarter
  rows[6].allow = allow({3, 191, 5000});
  rows[6].allow.resize(3);         // 6: shorter than the vocabulary (ids past 191 banned)
  rows[7].temperature = 0.9f;      // 7: drawn, masked: the whole-row pass (allowed; the host twin's
  rows[7].allow = allow(quarter);  // sums over 38k candidates round differently)
  rows[7].seed = 12345;
  rows[8].repeat_penalty = 2.0f;  // 8: greedy with a penalty: the whole-row pass
  rows[8].counts = {{77777, 1}};
  at(8, 77777) = 5.0f;  // 2.5 after the penalty: below the tail's maximum (~3)
  Graph g;
  g.Add(Make(Op::kGetRows, "rows", {Input(g, X, kRows)}, {kRows, kVocab}));
  auto kv = SharedVulkan().CreateKv(KvSpec{1, {2, 2}, DType::kF32}, 1, kRows + 1);
  std::vector<int32_t> ids(kRows, -1);
  SharedVulkan().ComputeSample(g, RowsBatch(kRows), *kv, rows.data(), ids.data());
  for (int r = 0; r < kRows; ++r) {
    if (r == 7) continue;
    EXPECT_EQ(ids[size_t(r)], SampleRowHost(&at(r, 0), kVocab, rows[size_t(r)])) << "row " << r;
  }
  const std::vector<int32_t> want = {77777, 1000, kVocab - 1, 5000, 0};
  for (size_t r = 0; r < want.size(); ++r) EXPECT_EQ(ids[r], want[r]) << "row " << r;
  EXPECT_TRUE(Allowed(rows[5].allow, ids[5]));
  EXPECT_TRUE(Allowed(rows[6].allow, ids[6]));
  EXPECT_TRUE(Allowed(rows[7].allow, ids[7]));
  EXPECT_NE(ids[8], 77777);
  bool parts = false;
  for (const std::string& n : SharedVulkan().counters().shaders)
    parts |= n.rfind("sample_partial", 0) == 0;
  EXPECT_TRUE(parts);
  // The weights are uploaded once: the NaN goes into a table of its own.
  Tensor X2 = RandomTensor("x2", DType::kF32, {kRows, kVocab}, 47);
  float* x2 = static_cast<float*>(MutableData(X2));
  std::copy(x, x + size_t(kRows) * kVocab, x2);
  x2[size_t(3) * kVocab + 150001] = NAN;  // banned by row 3's mask; read before it
  Graph g2;
  g2.Add(Make(Op::kGetRows, "rows", {Input(g2, X2, kRows)}, {kRows, kVocab}));
  std::string msg;
  try {
    SharedVulkan().ComputeSample(g2, RowsBatch(kRows), *kv, rows.data(), ids.data());
  } catch (const Error& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("non-finite logit"), std::string::npos) << msg;
  EXPECT_NE(msg.find("output row 3"), std::string::npos) << msg;
}

}  // namespace
}  // namespace es::test
