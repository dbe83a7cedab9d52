// The CPU backend's paged KV cache on real (golden) models, dense K/V (llama3) and the MLA
// latent (dsv2_lite): scattered block tables give the same logits bit for bit as the contiguous
// layout over ragged contexts; blocks shared from another sequence's prefix give the same logits
// as computing the prefix; the engine's output is bit-identical with and without the prefix
// cache.
#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "edgeseek/internal/backends/backend.h"
#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/models/config.h"
#include "edgeseek/internal/runtime/engine.h"
#include "edgeseek/internal/runtime/model.h"
#include "edgeseek/internal/runtime/runner.h"
#include "test_util.h"

namespace es {
namespace {

std::shared_ptr<Model> Golden(const std::string& name) {
  return Model::Load(test::SourceDir() + "/tests/golden/data/models/" + name);
}

std::vector<int32_t> Tokens(int n, int seed, int vocab) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(int32_t((seed * 131 + i * 17 + 3) % vocab));
  return t;
}

RunnerOptions Paged(const Model& m, int slots, int64_t ctx, int64_t blocks) {
  RunnerOptions ro;
  ro.n_slots = slots;
  ro.context = ctx;
  ro.kv_memory_bytes =
      size_t(blocks) * kKvBlockTokens * m.config().MakeKvSpec(DType::kF32).BytesPerToken();
  return ro;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

class PagedKv : public ::testing::TestWithParam<std::string> {};

TEST_P(PagedKv, ScatteredBlocksEqualContiguousOverRaggedContexts) {
  auto m = Golden(GetParam());
  const int V = m->vocab_size();
  // The reference: each sequence alone in a one-slot cache on its own contiguous blocks (the
  // CPU backend's rows do not depend on the rest of the batch).
  std::vector<std::unique_ptr<Runner>> solo;
  RunnerOptions ro;
  ro.context = 96;
  for (int s = 0; s < 3; ++s)
    solo.push_back(std::make_unique<Runner>(m, CreateBackend("cpu", {}), ro));
  // The paged cache: 18 blocks (3 slots x 6), handed out backwards and interleaved, so no
  // slot's blocks are adjacent or in order.
  Runner paged(m, CreateBackend("cpu", {}), Paged(*m, 3, 96, 18));
  ASSERT_TRUE(paged.kv_paged());
  ASSERT_EQ(paged.kv_blocks(), 18);
  for (int s = 0; s < 3; ++s) {
    std::vector<int32_t> table;
    for (int i = 0; i < 6; ++i) table.push_back(int32_t(17 - (i * 3 + (2 - s))));
    paged.SetBlockTable(s, table);
  }
  const std::vector<int> lens = {5, 37, 20};  // ragged; 37 crosses two block boundaries
  std::vector<std::vector<int32_t>> next(3);
  std::vector<int64_t> pos(3, 0);
  for (int s = 0; s < 3; ++s) next[size_t(s)] = Tokens(lens[size_t(s)], s, V);
  for (int step = 0; step < 14; ++step) {  // the prefill, then decodes across more boundaries
    Batch b;
    for (int s = 0; s < 3; ++s) b.Add(s, pos[size_t(s)], next[size_t(s)]);
    b.Finalize();
    std::vector<float> got;
    paged.Forward(b, &got);
    for (int s = 0; s < 3; ++s) {
      Batch one;
      one.Add(0, pos[size_t(s)], next[size_t(s)]);
      one.Finalize();
      std::vector<float> want;
      solo[size_t(s)]->Forward(one, &want);
      const std::vector<float> row(got.begin() + s * V, got.begin() + (s + 1) * V);
      ASSERT_TRUE(SameBits(row, want))
          << GetParam() << " step " << step << " sequence " << s << ": paged logits differ";
      pos[size_t(s)] += int64_t(next[size_t(s)].size());
      next[size_t(s)] = {int32_t((step * 7 + s) % V)};
    }
  }
  std::vector<float> r1(size_t(paged.kv().spec().width[1])), r2(r1.size());
  for (int64_t p : {0, 15, 16, 40}) {
    solo[1]->kv().ReadRow(0, 1, 1, p, r1.data());
    paged.kv().ReadRow(1, 1, 1, p, r2.data());
    EXPECT_TRUE(SameBits(r1, r2)) << "row " << p;
  }
}

TEST_P(PagedKv, SharedPrefixBlocksGiveTheLogitsOfComputingThePrefix) {
  auto m = Golden(GetParam());
  const int V = m->vocab_size();
  const auto p = Tokens(40, 1, V);
  auto q = std::vector<int32_t>(p.begin(), p.begin() + 32);
  for (int32_t t : Tokens(13, 2, V)) q.push_back(t);
  RunnerOptions ro;
  ro.context = 64;
  Runner ref(m, CreateBackend("cpu", {}), ro);
  // The reference computes q in the chunks the shared run does (its prefix, then the 13 rows
  // after it): an MLA model's chunk of many rows may take the non-absorbed form on the CPU
  // (backends/cpu/mla_form.h), so one 45-row chunk would differ from them in the last bits.
  std::vector<float> want;
  Batch prefix;
  prefix.Add(0, 0, std::vector<int32_t>(q.begin(), q.begin() + 32));
  prefix.Finalize();
  ref.Forward(prefix, &want);
  Batch rest;
  rest.Add(0, 32, std::vector<int32_t>(q.begin() + 32, q.end()));
  rest.Finalize();
  ref.Forward(rest, &want);

  Runner paged(m, CreateBackend("cpu", {}), Paged(*m, 2, 64, 8));
  paged.SetBlockTable(0, {6, 2, 4});
  paged.SetBlockTable(1, {0, 1, 3});
  std::vector<float> logits;
  Batch bp;
  bp.Add(0, 0, p);
  bp.Add(1, 0, Tokens(40, 7, V));  // other tokens in slot 1's first blocks
  bp.Finalize();
  paged.Forward(bp, &logits);
  paged.SetBlockTable(1, {6, 2, 5});  // now q's first two blocks are p's
  Batch bq;
  bq.Add(1, 32, std::vector<int32_t>(q.begin() + 32, q.end()));
  bq.Finalize();
  paged.Forward(bq, &logits);
  EXPECT_TRUE(SameBits(logits, want)) << GetParam() << ": logits over shared blocks differ";
}

TEST_P(PagedKv, UnmappedPositionIsAClearError) {
  auto m = Golden(GetParam());
  Runner paged(m, CreateBackend("cpu", {}), Paged(*m, 2, 64, 3));
  paged.SetBlockTable(1, {2});
  Batch b;
  b.Add(1, 10, Tokens(8, 3, m->vocab_size()));  // positions 16, 17 have no block
  b.Finalize();
  std::vector<float> logits;
  try {
    paged.Forward(b, &logits);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has no KV block"), std::string::npos) << e.what();
  }
  EXPECT_THROW(paged.SetBlockTable(0, {3}), Error);  // outside the pool of 3
}

INSTANTIATE_TEST_SUITE_P(Models, PagedKv, ::testing::Values("llama3", "dsv2_lite"));

// Requests sharing a system prompt and turns of a chat, sampled, through the engine on the CPU
// backend: the tokens with the prefix cache equal those without, bit for bit (the CPU backend
// is batch- and, for this model, chunk-invariant, so reused K/V are the K/V the request would
// have computed; an MLA model's chunks may take either MLA form, backends/cpu/mla_form.h).
TEST(PrefixCacheCpu, OutputIsIdenticalWithAndWithoutTheCache) {
  auto m = Golden("llama3");
  const int V = m->vocab_size();
  auto run = [&](bool cache, int64_t* hits) {
    RunnerOptions ro;
    ro.n_slots = 3;
    ro.context = 160;
    auto queue = std::make_shared<RequestQueue>(QosPolicy{});
    EngineOptions eo;
    eo.prefix_cache = cache;
    eo.max_batch_tokens = 24;  // chunked prefill
    Engine e(WrapRunner(std::make_unique<Runner>(m, CreateBackend("cpu", {}), ro)), queue, eo);
    std::map<std::string, std::vector<int32_t>> out;
    const auto sys = Tokens(37, 9, V);
    auto submit = [&](const std::string& id, std::vector<int32_t> prompt, uint64_t seed) {
      auto r = std::make_shared<SeqRequest>();
      r->id = id;
      r->prompt = std::move(prompt);
      r->max_tokens = 12;
      r->sampling.temperature = 0.8f;
      r->sampling.seed = seed;
      r->on_event = [&out, id](const SeqEvent& ev) {
        if (ev.kind == SeqEventKind::kToken) out[id].push_back(ev.token);
      };
      queue->Push(r);
    };
    // Two at once (the second may share the first's blocks as they are published), then one
    // after, then a second turn of the first conversation.
    auto with = [&](std::vector<int32_t> a, const std::vector<int32_t>& b) {
      a.insert(a.end(), b.begin(), b.end());
      return a;
    };
    submit("a", with(sys, Tokens(6, 1, V)), 1);
    submit("b", with(sys, Tokens(9, 2, V)), 2);
    while (e.Step()) {
    }
    submit("c", with(sys, Tokens(20, 3, V)), 3);
    while (e.Step()) {
    }
    submit("a2", with(with(with(sys, Tokens(6, 1, V)), out["a"]), Tokens(5, 4, V)), 4);
    while (e.Step()) {
    }
    *hits = e.stats().prefix_hit_tokens;
    EXPECT_EQ(e.stats().kv_blocks_used, 0);
    return out;
  };
  int64_t hits_on = 0, hits_off = 0;
  const auto on = run(true, &hits_on), off = run(false, &hits_off);
  // a and b start together (nothing published yet); c reuses the system prompt's 2 whole
  // blocks; a2 the 3 whole blocks of a's 37 + 6 + 11 tokens in KV.
  EXPECT_EQ(hits_on, 32 + 48);
  EXPECT_EQ(hits_off, 0);
  ASSERT_EQ(on.size(), 4u);
  for (auto& [id, toks] : off) {
    EXPECT_EQ(toks.size(), 12u) << id;
    EXPECT_EQ(on.at(id), toks) << id << ": output changed with the prefix cache";
  }
}

}  // namespace
}  // namespace es
