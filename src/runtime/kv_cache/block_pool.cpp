// KvBlockPool (edgeseek/internal/runtime/kv_block_pool.h): free list, references, the hash-chained
// prefix cache and its LRU eviction.
#include <algorithm>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/runtime/kv_block_pool.h"

namespace es {

namespace {
// splitmix64's finalizer: every input bit reaches every output bit, so chained keys of blocks
// that differ in one token differ everywhere.
uint64_t Mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
}  // namespace

KvBlockPool::KvBlockPool(int64_t n_blocks, bool prefix_cache)
    : prefix_cache_(prefix_cache), blocks_(size_t(std::max<int64_t>(n_blocks, 0))) {
  ES_CHECK(n_blocks >= 1, "KV pool: ", n_blocks, " blocks (needs at least one)");
  free_.reserve(blocks_.size());
  // Lowest id on top: with an untouched pool, sequences fill blocks from the start of the pool.
  for (int64_t b = n_blocks - 1; b >= 0; --b) free_.push_back(int32_t(b));
}

int32_t KvBlockPool::Allocate() {
  if (free_.empty() && !lru_.empty()) Evict(lru_.front());
  if (free_.empty()) return -1;
  const int32_t b = free_.back();
  free_.pop_back();
  blocks_[size_t(b)].refs = 1;
  ++used_;
  return b;
}

void KvBlockPool::Release(int32_t b) {
  ES_ASSERT(b >= 0 && size_t(b) < blocks_.size());
  Block& k = blocks_[size_t(b)];
  ES_ASSERT(k.refs > 0);
  if (--k.refs > 0) return;
  --used_;
  if (k.cached) {
    k.lru = lru_.insert(lru_.end(), b);
  } else {
    free_.push_back(b);
  }
}

void KvBlockPool::Evict(int32_t b) {
  Block& k = blocks_[size_t(b)];
  ES_ASSERT(k.cached && k.refs == 0);
  lru_.erase(k.lru);
  by_hash_.erase(k.hash);
  k.cached = false;
  free_.push_back(b);
}

uint64_t KvBlockPool::ScopeSeed(const std::string& scope) {
  uint64_t h = Mix(0x6b765f73636f7065ull ^ scope.size());  // "kv_scope"
  for (unsigned char c : scope) h = Mix(h ^ c);
  return h;
}

uint64_t KvBlockPool::ChainHash(uint64_t prev, const int32_t* tokens) {
  uint64_t h = Mix(prev);
  for (int i = 0; i < kKvBlockTokens; ++i) h = Mix(h ^ uint32_t(tokens[i]));
  return h;
}

int32_t KvBlockPool::Lookup(uint64_t hash, uint64_t prev, const int32_t* tokens) {
  if (!prefix_cache_) return -1;
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return -1;
  Block& k = blocks_[size_t(it->second)];
  if (k.prev != prev || !std::equal(k.tokens.begin(), k.tokens.end(), tokens)) return -1;
  if (k.refs++ == 0) {
    lru_.erase(k.lru);
    ++used_;
  }
  return it->second;
}

void KvBlockPool::Publish(int32_t b, uint64_t hash, uint64_t prev, const int32_t* tokens) {
  if (!prefix_cache_) return;
  ES_ASSERT(b >= 0 && size_t(b) < blocks_.size() && blocks_[size_t(b)].refs > 0);
  Block& k = blocks_[size_t(b)];
  if (k.cached || by_hash_.count(hash)) return;
  k.cached = true;
  k.hash = hash;
  k.prev = prev;
  std::copy(tokens, tokens + kKvBlockTokens, k.tokens.begin());
  by_hash_.emplace(hash, b);
}

}  // namespace es
