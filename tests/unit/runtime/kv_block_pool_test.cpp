// KvBlockPool: allocation and references, the hash-chained prefix cache (scope, divergence,
// whole-token comparison) and LRU eviction of unreferenced cached blocks.
#include "edgeseek/internal/runtime/kv_block_pool.h"

#include <gtest/gtest.h>

#include <vector>

namespace es {
namespace {

KvBlockPool::Tokens Block(int seed) {
  KvBlockPool::Tokens t;
  for (int i = 0; i < kKvBlockTokens; ++i) t[size_t(i)] = seed * 100 + i;
  return t;
}

TEST(KvBlockPool, AllocatesEveryBlockOnceThenRefuses) {
  KvBlockPool p(3, true);
  std::vector<int32_t> got;
  for (int i = 0; i < 3; ++i) got.push_back(p.Allocate());
  EXPECT_EQ(got, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(p.Allocate(), -1);
  EXPECT_EQ(p.used_blocks(), 3);
  EXPECT_EQ(p.available(), 0);
  p.Release(1);
  EXPECT_EQ(p.free_blocks(), 1);
  EXPECT_EQ(p.Allocate(), 1);
}

TEST(KvBlockPool, ChainKeysDependOnScopeOrderAndEveryToken) {
  const auto a = Block(1), b = Block(2);
  const uint64_t s = KvBlockPool::ScopeSeed(""), t = KvBlockPool::ScopeSeed("tenant-a");
  EXPECT_NE(s, t);
  EXPECT_NE(KvBlockPool::ChainHash(s, a.data()), KvBlockPool::ChainHash(t, a.data()));
  const uint64_t ab = KvBlockPool::ChainHash(KvBlockPool::ChainHash(s, a.data()), b.data());
  const uint64_t ba = KvBlockPool::ChainHash(KvBlockPool::ChainHash(s, b.data()), a.data());
  EXPECT_NE(ab, ba);
  auto a2 = a;
  a2[kKvBlockTokens - 1] += 1;
  EXPECT_NE(KvBlockPool::ChainHash(s, a.data()), KvBlockPool::ChainHash(s, a2.data()));
}

TEST(KvBlockPool, PublishedBlockIsSharedAndSurvivesItsWriter) {
  KvBlockPool p(4, true);
  const auto toks = Block(7);
  const uint64_t seed = KvBlockPool::ScopeSeed("");
  const uint64_t key = KvBlockPool::ChainHash(seed, toks.data());
  const int32_t b = p.Allocate();
  p.Publish(b, key, seed, toks.data());
  EXPECT_EQ(p.cached_blocks(), 1);
  EXPECT_EQ(p.Lookup(key, seed, toks.data()), b);  // a second reader while the writer holds it
  EXPECT_EQ(p.refs(b), 2);
  p.Release(b);
  p.Release(b);
  EXPECT_EQ(p.used_blocks(), 0);
  EXPECT_EQ(p.evictable_blocks(), 1);
  EXPECT_EQ(p.free_blocks(), 3);
  EXPECT_EQ(p.Lookup(key, seed, toks.data()), b);  // after its last reader left
  EXPECT_EQ(p.evictable_blocks(), 0);
  // The same key with other tokens or another parent is not this block.
  auto other = toks;
  other[3] = -5;
  EXPECT_EQ(p.Lookup(key, seed, other.data()), -1);
  EXPECT_EQ(p.Lookup(key, seed + 1, toks.data()), -1);
}

TEST(KvBlockPool, EvictsTheLeastRecentlyReleasedOnlyWhenNothingIsFree) {
  KvBlockPool p(3, true);
  const uint64_t seed = KvBlockPool::ScopeSeed("");
  std::vector<uint64_t> keys;
  std::vector<int32_t> blocks;
  for (int i = 0; i < 3; ++i) {
    const auto t = Block(i);
    keys.push_back(KvBlockPool::ChainHash(seed, t.data()));
    blocks.push_back(p.Allocate());
    p.Publish(blocks.back(), keys.back(), seed, t.data());
  }
  // Released in the order 1, 0, 2: block 1 is the least recently released.
  p.Release(blocks[1]);
  p.Release(blocks[0]);
  p.Release(blocks[2]);
  EXPECT_EQ(p.cached_blocks(), 3);
  EXPECT_EQ(p.available(), 3);
  EXPECT_EQ(p.Allocate(), blocks[1]);
  EXPECT_EQ(p.cached_blocks(), 2);
  const auto t1 = Block(1);
  EXPECT_EQ(p.Lookup(keys[1], seed, t1.data()), -1) << "an evicted block must be forgotten";
  const auto t0 = Block(0);
  EXPECT_EQ(p.Lookup(keys[0], seed, t0.data()), blocks[0]);  // still cached, now referenced
  EXPECT_EQ(p.Allocate(), blocks[2]);                        // the only evictable one left
  EXPECT_EQ(p.Allocate(), -1);
}

TEST(KvBlockPool, DuplicatePublishKeepsTheFirstAndFreesTheCopy) {
  KvBlockPool p(2, true);
  const auto t = Block(3);
  const uint64_t seed = KvBlockPool::ScopeSeed("");
  const uint64_t key = KvBlockPool::ChainHash(seed, t.data());
  const int32_t a = p.Allocate(), b = p.Allocate();
  p.Publish(a, key, seed, t.data());
  p.Publish(b, key, seed, t.data());  // two sequences computed the same block at once
  EXPECT_EQ(p.cached_blocks(), 1);
  p.Release(b);
  EXPECT_EQ(p.free_blocks(), 1);
  p.Release(a);
  EXPECT_EQ(p.evictable_blocks(), 1);
}

TEST(KvBlockPool, DisabledCacheNeverMatches) {
  KvBlockPool p(2, false);
  const auto t = Block(3);
  const uint64_t seed = KvBlockPool::ScopeSeed("");
  const uint64_t key = KvBlockPool::ChainHash(seed, t.data());
  const int32_t a = p.Allocate();
  p.Publish(a, key, seed, t.data());
  EXPECT_EQ(p.cached_blocks(), 0);
  EXPECT_EQ(p.Lookup(key, seed, t.data()), -1);
  p.Release(a);
  EXPECT_EQ(p.free_blocks(), 2);
}

}  // namespace
}  // namespace es
