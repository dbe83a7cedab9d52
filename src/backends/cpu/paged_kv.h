// The CPU backend's KV cache: one pool of kKvBlockTokens-token blocks and a block table per slot
// (backend.h, KvStorage). A block holds every layer and part of its tokens, laid out
// [layer][part][kKvBlockTokens][width] in f32. KvRows::Row is the one place where the CPU
// backend turns (slot, pos) into memory: KV stores, attention and MLA all go through it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "edgeseek/backends/backend.h"
#include "edgeseek/core/error.h"

namespace es::cpu {

// The rows of one (slot, layer, part), addressed through the slot's block table. Cheap to copy;
// valid while the storage lives and the table is unchanged (one Compute call).
class KvRows {
 public:
  KvRows(float* base, const int32_t* table, size_t block_stride, size_t width)
      : base_(base), table_(table), block_stride_(block_stride), width_(width) {}
  // Row of token `pos`: block table_[pos / B] of the pool, row pos % B inside it.
  float* Row(int64_t pos) const {
    const uint64_t p = uint64_t(pos);
    return base_ + size_t(table_[p / kKvBlockTokens]) * block_stride_ + size_t(p % kKvBlockTokens) * width_;
  }

 private:
  float* base_;            // pool + offset of (layer, part) inside a block
  const int32_t* table_;   // [blocks_per_slot] pool block of each block of positions
  size_t block_stride_;    // floats per block
  size_t width_;           // floats per row
};

class CpuKv final : public KvStorage {
 public:
  CpuKv(const KvSpec& spec, int n_slots, int64_t capacity, int64_t n_blocks)
      : spec_(spec), n_slots_(n_slots), capacity_(capacity), n_blocks_(n_blocks) {
    ES_CHECK(spec.dtype == DType::kF32, "cpu backend: KV cache type ", Name(spec.dtype),
             " is not supported yet (use f32)");
    ES_CHECK(n_slots >= 1 && capacity >= 1 && n_blocks >= 1, "cpu backend: a KV cache of ", n_slots,
             " slots of ", capacity, " tokens in ", n_blocks, " blocks (all must be >= 1)");
    per_token_ = size_t(spec.width[0] + spec.width[1]) * size_t(spec.n_layers);
    block_floats_ = per_token_ * kKvBlockTokens;
    // calloc of a large block maps zero pages lazily: memory is committed as blocks are written.
    pool_ = static_cast<float*>(std::calloc(block_floats_ * size_t(n_blocks_), 4));
    ES_CHECK(pool_, "out of memory allocating a KV pool of ", n_blocks_, " blocks (",
             block_floats_ * 4 * size_t(n_blocks_), " bytes)");
    // Each slot starts on its own contiguous blocks where the pool has them (the unpaged
    // layout); the rest start unmapped.
    const int64_t bps = blocks_per_slot();
    tables_.assign(size_t(n_slots), std::vector<int32_t>(size_t(bps), -1));
    mapped_.assign(size_t(n_slots), 0);
    for (int s = 0; s < n_slots; ++s) {
      int64_t i = 0;
      for (; i < bps && int64_t(s) * bps + i < n_blocks_; ++i) tables_[size_t(s)][size_t(i)] = int32_t(s * bps + i);
      mapped_[size_t(s)] = i == bps ? capacity_ : i * kKvBlockTokens;
    }
  }
  ~CpuKv() override { std::free(pool_); }
  CpuKv(const CpuKv&) = delete;
  CpuKv& operator=(const CpuKv&) = delete;

  const KvSpec& spec() const override { return spec_; }
  int n_slots() const override { return n_slots_; }
  int64_t capacity() const override { return capacity_; }
  size_t bytes() const override { return block_floats_ * 4 * size_t(n_blocks_); }
  bool paged() const override { return true; }
  int64_t n_blocks() const override { return n_blocks_; }
  void SetBlockTable(int slot, const int32_t* blocks, int n) override {
    ES_CHECK(slot >= 0 && slot < n_slots_, "KV block table: slot ", slot, " outside [0, ", n_slots_, ")");
    ES_CHECK(n >= 0 && n <= blocks_per_slot(), "KV block table of slot ", slot, ": ", n,
             " blocks, a slot holds at most ", blocks_per_slot());
    auto& t = tables_[size_t(slot)];
    for (int i = 0; i < n; ++i) {
      ES_CHECK(blocks[i] >= 0 && blocks[i] < n_blocks_, "KV block table of slot ", slot, ": block ",
               blocks[i], " outside the pool of ", n_blocks_);
      t[size_t(i)] = blocks[i];
    }
    std::fill(t.begin() + n, t.end(), -1);
    mapped_[size_t(slot)] = std::min<int64_t>(int64_t(n) * kKvBlockTokens, capacity_);
  }
  // Positions [0, mapped_tokens(slot)) of the slot have blocks.
  int64_t mapped_tokens(int slot) const { return mapped_[size_t(slot)]; }

  void ReadRow(int slot, int layer, int part, int64_t pos, float* dst) const override {
    ES_CHECK(slot >= 0 && slot < n_slots_ && pos >= 0 && pos < mapped_tokens(slot), "KV ReadRow: slot ",
             slot, " position ", pos, " is not mapped");
    std::memcpy(dst, Rows(slot, layer, part).Row(pos), size_t(spec_.width[part]) * 4);
  }
  KvRows Rows(int slot, int layer, int part) const {
    ES_ASSERT(slot >= 0 && slot < n_slots_);
    const size_t w0 = size_t(spec_.width[0]), w1 = size_t(spec_.width[1]);
    const size_t off = kKvBlockTokens * (size_t(layer) * (w0 + w1) + (part ? w0 : 0));
    return KvRows(pool_ + off, tables_[size_t(slot)].data(), block_floats_, size_t(spec_.width[part]));
  }

 private:
  KvSpec spec_;
  int n_slots_;
  int64_t capacity_;
  int64_t n_blocks_;
  size_t per_token_ = 0;     // floats per token (all layers and parts)
  size_t block_floats_ = 0;  // floats per block
  float* pool_ = nullptr;    // [n_blocks][block_floats], owned
  std::vector<std::vector<int32_t>> tables_;  // [slot][blocks_per_slot], -1 = unmapped
  std::vector<int64_t> mapped_;               // [slot] tokens with blocks
};

}  // namespace es::cpu
