// The engine's paged KV over FakeStepModel (whose logits hash the token history read back
// through the block tables, so a wrong block changes the output): admission and preemption by
// blocks, zero leaked blocks after requests drop mid-stream, the prefix cache (shared system
// prompt, multi-turn chat, divergence inside a block, an identical prompt, eviction, tenant
// scopes), each against the same request run alone without the cache.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "edgeseek/internal/runtime/engine.h"
#include "engine_harness.h"
#include "fake_model.h"

namespace es {
namespace {

using test::Harness;
using test::Prompt;

std::vector<int32_t> Concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The tokens of one request run alone on a fresh engine without the prefix cache.
std::vector<int32_t> Solo(const std::vector<int32_t>& prompt, int max_tokens, float temp,
                          uint64_t seed) {
  EngineOptions eo;
  eo.prefix_cache = false;
  Harness h(1, 512, eo);
  h.Submit(h.Make("x", prompt, max_tokens, temp, seed));
  h.RunAll();
  return h.out["x"].tokens;
}

// Runs one request to its end on `h` and returns it (its prefix_hit_tokens says what it reused).
std::shared_ptr<SeqRequest> RunOne(Harness& h, const std::string& id,
                                   const std::vector<int32_t>& prompt, int max_tokens,
                                   float temp = 0.7f, uint64_t seed = 5,
                                   const std::string& scope = "") {
  auto r = h.Make(id, prompt, max_tokens, temp, seed);
  r->prefix_scope = scope;
  h.Submit(r);
  h.RunAll();
  return r;
}

void ExpectNoLeak(Harness& h) {
  const EngineStats s = h.engine->stats();
  EXPECT_EQ(s.running, 0);
  EXPECT_EQ(s.kv_blocks_used, 0);
  EXPECT_EQ(s.kv_tokens_reserved, 0);
  EXPECT_EQ(s.kv_blocks_free + s.kv_blocks_cached, s.kv_blocks_total);
  EXPECT_EQ(h.model->used_slots(), 0);
}

TEST(KvPaging, PoolSmallerThanSlotsTimesContextPreemptsAndKeepsEveryOutput) {
  // 4 slots of 512 tokens would need 128 blocks; the pool has 10. Six requests of 30 + 60
  // tokens (6 blocks each) cannot all hold their blocks at once.
  const int kN = 6;
  std::vector<std::vector<int32_t>> solo;
  for (int i = 0; i < kN; ++i) solo.push_back(Solo(Prompt(30, i), 60, 0.9f, uint64_t(100 + i)));
  Harness h(4, 512, {}, {}, false, /*kv_blocks=*/10);
  for (int i = 0; i < kN; ++i)
    h.Submit(h.Make("r" + std::to_string(i), Prompt(30, i), 60, 0.9f, uint64_t(100 + i)));
  int max_running = 0;
  while (h.engine->Step()) {
    max_running = std::max(max_running, h.engine->stats().running);
    EXPECT_LE(h.engine->stats().kv_blocks_used, 10);
  }
  for (int i = 0; i < kN; ++i) {
    EXPECT_EQ(h.out["r" + std::to_string(i)].tokens, solo[size_t(i)]) << "request " << i;
    EXPECT_EQ(h.out["r" + std::to_string(i)].finish, FinishReason::kLength);
  }
  EXPECT_GE(max_running, 2);
  EXPECT_GT(h.engine->stats().kv_preemptions, 0);
  ExpectNoLeak(h);
}

TEST(KvPaging, ShortRequestsOutnumberWhatSlotsTimesContextWouldHold) {
  // A pool of 16 blocks is 256 tokens: one slot's context. Eight short requests run at once.
  Harness h(8, 256, {}, {}, false, /*kv_blocks=*/16);
  for (int i = 0; i < 8; ++i) h.Submit(h.Make("r" + std::to_string(i), Prompt(8, i), 4));
  h.engine->Step();
  EXPECT_EQ(h.engine->stats().running, 8);
  h.RunAll();
  for (int i = 0; i < 8; ++i) EXPECT_EQ(h.out["r" + std::to_string(i)].tokens.size(), 4u);
  ExpectNoLeak(h);
}

TEST(KvPaging, AnOverdueHigherClassPreemptsWhenThePoolIsShortThoughSlotsAreFree) {
  QosPolicy qos;
  qos.classes = {{"hi", 1, 1e-6, false}, {"lo", 1, 0, true}};
  const auto lo_solo = Solo(Prompt(40, 5), 24, 0.9f, 77),
             lo2_solo = Solo(Prompt(40, 6), 24, 0.9f, 78);
  // 8 slots but 8 blocks: two low requests of 40 + 24 tokens (4 blocks each) fill the pool
  // without ever preempting each other.
  Harness h(8, 512, {}, qos, false, /*kv_blocks=*/8);
  h.Submit(h.Make("lo", Prompt(40, 5), 24, 0.9f, 77, 1));
  h.Submit(h.Make("lo2", Prompt(40, 6), 24, 0.9f, 78, 1));
  for (int i = 0; i < 5; ++i) h.engine->Step();
  h.step = 5;
  ASSERT_EQ(h.engine->stats().running, 2);
  h.Submit(h.Make("hi", Prompt(30, 1), 5, 0, 0, 0));
  h.RunAll();
  EXPECT_LE(h.out["hi"].first_step, 7) << "the high request waited for a low one to finish";
  EXPECT_EQ(h.out["lo"].preempted + h.out["lo2"].preempted, 1);
  EXPECT_EQ(h.out["lo"].tokens, lo_solo);
  EXPECT_EQ(h.out["lo2"].tokens, lo2_solo);
  ExpectNoLeak(h);
}

TEST(KvPaging, ManyRequestsDroppingMidStreamLeaveNoBlockBehind) {
  Harness h(8, 256, {}, {}, false, /*kv_blocks=*/40);
  std::vector<std::shared_ptr<SeqRequest>> reqs;
  std::mt19937 rng(7);
  for (int i = 0; i < 64; ++i) {
    auto r = h.Make("r" + std::to_string(i), Concat(Prompt(20, 0), Prompt(int(rng() % 30) + 1, i)),
                    30 + i % 17, 0.8f, uint64_t(i));
    reqs.push_back(r);
    h.Submit(r);
  }
  // Every third request is dropped a few tokens in (the client went away mid-stream).
  for (int step = 0; h.engine->Step(); ++step) {
    for (int i = 0; i < 64; i += 3)
      if (h.out["r" + std::to_string(i)].tokens.size() >= size_t(1 + i % 5))
        reqs[size_t(i)]->cancel = true;
  }
  int cancelled = 0;
  for (int i = 0; i < 64; ++i) {
    const FinishReason f = h.out["r" + std::to_string(i)].finish;
    EXPECT_EQ(f, i % 3 == 0 ? FinishReason::kCancelled : FinishReason::kLength) << i;
    cancelled += f == FinishReason::kCancelled;
  }
  EXPECT_EQ(cancelled, 22);
  ExpectNoLeak(h);
  EXPECT_GT(h.engine->stats().prefix_hit_tokens, 0);  // the shared 20-token start
}

TEST(KvPaging, SharedSystemPromptIsReusedAndTheOutputUnchanged) {
  const auto sys = Prompt(40, 9);
  const auto a = Concat(sys, Prompt(5, 1)), b = Concat(sys, Prompt(7, 2));
  Harness h(2, 512);
  RunOne(h, "a", a, 10);
  const int64_t computed_a = h.engine->stats().prompt_tokens;
  auto rb = RunOne(h, "b", b, 10);
  EXPECT_EQ(rb->prefix_hit_tokens, 32);  // the system prompt's two whole blocks
  EXPECT_EQ(h.out["b"].tokens, Solo(b, 10, 0.7f, 5));
  EXPECT_EQ(h.engine->stats().prompt_tokens - computed_a, int64_t(b.size()) - 32);
  EXPECT_EQ(h.engine->stats().prefix_lookup_tokens, int64_t(a.size() + b.size()));
  EXPECT_EQ(h.engine->stats().prefix_hit_tokens, 32);
  ExpectNoLeak(h);
}

TEST(KvPaging, MultiTurnChatReusesTheEarlierTurnsIncludingGeneratedTokens) {
  Harness h(1, 512);
  const auto turn1 = Prompt(37, 3);
  RunOne(h, "t1", turn1, 30);
  const auto reply = h.out["t1"].tokens;
  ASSERT_EQ(reply.size(), 30u);
  // The KV holds the prompt and all generated tokens but the last (never fed back).
  const int64_t in_kv = int64_t(turn1.size() + reply.size()) - 1;
  const auto turn2 = Concat(Concat(turn1, reply), Prompt(9, 4));
  auto r2 = RunOne(h, "t2", turn2, 8);
  EXPECT_EQ(r2->prefix_hit_tokens, in_kv / kKvBlockTokens * kKvBlockTokens);
  EXPECT_EQ(h.out["t2"].tokens, Solo(turn2, 8, 0.7f, 5));
  ExpectNoLeak(h);
}

TEST(KvPaging, DivergenceInsideABlockRecomputesFromThatBlock) {
  auto a = Prompt(50, 5), b = a;
  b[20] = b[20] == 33 ? 34 : 33;  // differs in block 1 (positions 16..31)
  Harness h(2, 512);
  RunOne(h, "a", a, 12);
  auto rb = RunOne(h, "b", b, 12);
  EXPECT_EQ(rb->prefix_hit_tokens, 16);
  EXPECT_EQ(h.out["b"].tokens, Solo(b, 12, 0.7f, 5));
  // a's later blocks were not touched by b: a again reuses all of its whole prompt blocks.
  auto ra = RunOne(h, "a2", a, 12);
  EXPECT_EQ(ra->prefix_hit_tokens, 48);
  EXPECT_EQ(h.out["a2"].tokens, h.out["a"].tokens);
  ExpectNoLeak(h);
}

TEST(KvPaging, ABlockCachedAfterAnotherPrefixIsNotReused) {
  // x and z are cached as first blocks, y only after z: a request x + y may reuse x but not y
  // (its K/V depend on what came before it), though its tokens are the same.
  const auto x = Prompt(16, 1), y = Prompt(16, 2), z = Prompt(16, 3), tail = Prompt(5, 4);
  Harness h(1, 512);
  RunOne(h, "x", Concat(x, tail), 3);
  RunOne(h, "zy", Concat(Concat(z, y), tail), 3);
  const auto xy = Concat(Concat(x, y), tail);
  auto r = RunOne(h, "xy", xy, 8);
  EXPECT_EQ(r->prefix_hit_tokens, 16);
  EXPECT_EQ(h.out["xy"].tokens, Solo(xy, 8, 0.7f, 5));
  ExpectNoLeak(h);
}

TEST(KvPaging, IdenticalPromptOfWholeBlocksStillComputesItsLastBlock) {
  const auto p = Prompt(48, 6);  // exactly three blocks
  Harness h(2, 512);
  RunOne(h, "a", p, 6);
  auto r = RunOne(h, "b", p, 6);
  EXPECT_EQ(r->prefix_hit_tokens, 32);  // the last token's logits are needed: block 2 is recomputed
  EXPECT_EQ(h.out["b"].tokens, h.out["a"].tokens);
  // Both at once: the second shares the first's published blocks while the first still runs.
  h.Submit(h.Make("c", p, 6, 0.7f, 5));
  h.Submit(h.Make("d", p, 6, 0.7f, 5));
  h.RunAll();
  EXPECT_EQ(h.out["c"].tokens, h.out["a"].tokens);
  EXPECT_EQ(h.out["d"].tokens, h.out["a"].tokens);
  ExpectNoLeak(h);
}

TEST(KvPaging, LeastRecentlyUsedBlocksAreEvictedAndAMissIsRecomputedCorrectly) {
  Harness h(1, 256, {}, {}, false, /*kv_blocks=*/8);
  const auto x = Prompt(64, 11);
  RunOne(h, "x", x, 4);
  EXPECT_GT(h.engine->stats().kv_blocks_cached, 0);
  // Other prompts fill the pool: x's blocks are the least recently used and go first.
  for (int i = 0; i < 4; ++i) RunOne(h, "y" + std::to_string(i), Prompt(60, 20 + i), 4);
  EXPECT_LE(h.engine->stats().kv_blocks_cached, 8);
  auto rx = RunOne(h, "x2", x, 4);
  EXPECT_EQ(rx->prefix_hit_tokens, 0);
  EXPECT_EQ(h.out["x2"].tokens, h.out["x"].tokens);
  // The last y is still cached (most recently released).
  auto ry = RunOne(h, "y3b", Prompt(60, 23), 4);
  EXPECT_GT(ry->prefix_hit_tokens, 0);
  EXPECT_EQ(h.out["y3b"].tokens, h.out["y3"].tokens);
  ExpectNoLeak(h);
}

TEST(KvPaging, PrefixScopesIsolateTenants) {
  const auto p = Prompt(40, 8);
  Harness h(2, 512);
  RunOne(h, "a", p, 5, 0.7f, 5, "client:alice");
  auto rb = RunOne(h, "b", p, 5, 0.7f, 5, "client:bob");
  EXPECT_EQ(rb->prefix_hit_tokens, 0) << "one tenant's cached prompt served to another";
  auto rs = RunOne(h, "s", p, 5, 0.7f, 5, "");
  EXPECT_EQ(rs->prefix_hit_tokens, 0);
  auto ra = RunOne(h, "a2", p, 5, 0.7f, 5, "client:alice");
  EXPECT_EQ(ra->prefix_hit_tokens, 32);
  EXPECT_EQ(h.out["b"].tokens, h.out["a"].tokens);
  EXPECT_EQ(h.out["a2"].tokens, h.out["a"].tokens);
  ExpectNoLeak(h);
}

TEST(KvPaging, PrefixCacheOffNeverReuses) {
  EngineOptions eo;
  eo.prefix_cache = false;
  Harness h(1, 512, eo);
  const auto p = Prompt(40, 8);
  RunOne(h, "a", p, 5);
  auto r = RunOne(h, "b", p, 5);
  EXPECT_EQ(r->prefix_hit_tokens, 0);
  EXPECT_EQ(h.engine->stats().kv_blocks_cached, 0);
  EXPECT_FALSE(h.engine->stats().prefix_cache);
  EXPECT_EQ(h.out["b"].tokens, h.out["a"].tokens);
}

}  // namespace
}  // namespace es
