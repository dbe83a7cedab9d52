// KvBlockPool: the bookkeeping of one paged KV pool (backend.h, KvStorage::SetBlockTable) —
// which blocks are free, which sequences reference which, and the prefix cache.
//
// Every block is in one of three states:
//   free     no reference, no cached content;
//   used     referenced by one or more running sequences (a cached block may be shared);
//   cached   (a flag, orthogonal to used) a full block registered under the hash of its tokens
//            and of everything before it. Once its last reference goes, it waits in an LRU
//            list ("evictable") until a sequence looks it up again or Allocate needs its space.
//
// Prefix cache: the key of block i of a sequence is the hash chain
//   h_i = ChainHash(h_{i-1}, tokens[i*B, (i+1)*B)),   h_{-1} = ScopeSeed(scope),
// so equal keys mean equal tokens at equal positions from the sequence start: for a causal
// model the block's K/V (and MLA latent) are then the same, and a sequence may read it instead
// of computing it. The scope (a tenant, or "" for shared) seeds the chain, so blocks are never
// shared across scopes. A lookup also compares the block's own tokens and its parent's key, so
// reusing a block takes a 64-bit collision of the parent's key, not just of its own. Cached
// blocks are read-only: only a block's first writer writes it, and only before it is full.
//
// Not thread-safe: one engine thread owns a pool.
#pragma once

#include <array>
#include <cstdint>
#include <list>
#include <string>
#include <unordered_map>
#include <vector>

#include "edgeseek/internal/backends/backend.h"

namespace es {

class KvBlockPool {
 public:
  using Tokens = std::array<int32_t, kKvBlockTokens>;

  KvBlockPool(int64_t n_blocks, bool prefix_cache);

  int64_t n_blocks() const { return int64_t(blocks_.size()); }
  bool prefix_cache() const { return prefix_cache_; }
  int64_t free_blocks() const { return int64_t(free_.size()); }
  int64_t used_blocks() const { return used_; }
  int64_t cached_blocks() const { return int64_t(by_hash_.size()); }
  int64_t evictable_blocks() const { return int64_t(lru_.size()); }
  // Blocks Allocate can hand out now (free, or evictable).
  int64_t available() const { return free_blocks() + evictable_blocks(); }

  // A block for a sequence to write, with one reference: a free block, else the least recently
  // released cached block (evicted: its key is forgotten); -1 when every block is referenced.
  int32_t Allocate();
  // Drops one reference; at zero a cached block becomes evictable (most recent), another free.
  void Release(int32_t block);

  static uint64_t ScopeSeed(const std::string& scope);
  static uint64_t ChainHash(uint64_t prev, const int32_t* tokens);  // kKvBlockTokens tokens
  // The cached block with key `hash` holding `tokens` after a block keyed `prev`, with one more
  // reference (an evictable one leaves the LRU list); -1 when there is none.
  int32_t Lookup(uint64_t hash, uint64_t prev, const int32_t* tokens);
  // Registers a full block its sequence has written (and holds). If the key is already cached
  // (another sequence computed the same block meanwhile), nothing changes: this copy stays
  // private and is freed on release.
  void Publish(int32_t block, uint64_t hash, uint64_t prev, const int32_t* tokens);

  int refs(int32_t block) const { return blocks_[size_t(block)].refs; }
  bool cached(int32_t block) const { return blocks_[size_t(block)].cached; }

 private:
  struct Block {
    int refs = 0;
    bool cached = false;
    uint64_t hash = 0, prev = 0;
    Tokens tokens{};
    std::list<int32_t>::iterator lru;  // valid while cached and refs == 0
  };
  void Evict(int32_t block);  // an evictable block loses its key and becomes free

  bool prefix_cache_;
  std::vector<Block> blocks_;
  std::vector<int32_t> free_;  // LIFO: recently freed (still resident) memory goes first
  std::list<int32_t> lru_;     // evictable, least recently released first
  std::unordered_map<uint64_t, int32_t> by_hash_;
  int64_t used_ = 0;
};

}  // namespace es
