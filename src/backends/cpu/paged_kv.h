// The CPU backend's KV cache: one pool of kKvBlockTokens-token blocks and a block table per slot
// (backend.h, KvStorage). A block holds every layer and part of its tokens, laid out
// [layer][part][kKvBlockTokens][row] with rows of the cache type (f32, f16, q8_0 or q4_0:
// RowBytes(type, width) bytes, kernels/kv_row.h). KvRows::Row is the one place where the CPU
// backend turns (slot, pos) into memory: KV stores, attention and MLA all go through it.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#ifndef MADV_POPULATE_WRITE  // Linux 5.14's value, for older headers
#define MADV_POPULATE_WRITE 23
#endif

#include "cpu/kernels/kv_row.h"
#include "edgeseek/internal/backends/backend.h"
#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/core/tensor.h"
#include "edgeseek/internal/quant/blocks.h"

namespace es::cpu {

// The rows of one (slot, layer, part), addressed through the slot's block table. Cheap to copy;
// valid while the storage lives and the table is unchanged (one Compute call).
class KvRows {
 public:
  KvRows(uint8_t* base, const int32_t* table, size_t block_stride, size_t row_bytes, DType type)
      : base_(base),
        table_(table),
        block_stride_(block_stride),
        row_bytes_(row_bytes),
        type_(type) {}
  // Row of token `pos`: block table_[pos / B] of the pool, row pos % B inside it.
  uint8_t* Row(int64_t pos) const {
    const uint64_t p = uint64_t(pos);
    return base_ + size_t(table_[p / kKvBlockTokens]) * block_stride_ +
           size_t(p % kKvBlockTokens) * row_bytes_;
  }
  DType type() const { return type_; }

 private:
  uint8_t* base_;         // pool + offset of (layer, part) inside a block
  const int32_t* table_;  // [blocks_per_slot] pool block of each block of positions
  size_t block_stride_;   // bytes per block
  size_t row_bytes_;      // bytes per row
  DType type_;            // the cache type
};

class CpuKv final : public KvStorage {
 public:
  CpuKv(const KvSpec& spec, int n_slots, int64_t capacity, int64_t n_blocks)
      : spec_(spec), n_slots_(n_slots), capacity_(capacity), n_blocks_(n_blocks) {
    ES_CHECK(KvTypeSupported(spec.dtype), "cpu backend: KV cache type ", Name(spec.dtype),
             " is not supported (f32, f16, q8_0 or q4_0)");
    for (int p = 0; p < 2; ++p)
      ES_CHECK(spec.width[p] % BlockElems(spec.dtype) == 0, "cpu backend: a ", Name(spec.dtype),
               " KV cache needs widths that are multiples of ", BlockElems(spec.dtype), " (part ",
               p, " is ", spec.width[p], ")");
    ES_CHECK(n_slots >= 1 && capacity >= 1 && n_blocks >= 1, "cpu backend: a KV cache of ", n_slots,
             " slots of ", capacity, " tokens in ", n_blocks, " blocks (all must be >= 1)");
    row_bytes_[0] = RowBytes(spec.dtype, spec.width[0]);
    row_bytes_[1] = spec.width[1] ? RowBytes(spec.dtype, spec.width[1]) : 0;
    block_bytes_ = (row_bytes_[0] + row_bytes_[1]) * size_t(spec.n_layers) * kKvBlockTokens;
    // calloc of a large block maps zero pages lazily: memory is committed as blocks are written.
    pool_ = static_cast<uint8_t*>(std::calloc(block_bytes_ * size_t(n_blocks_), 1));
    ES_CHECK(pool_, "out of memory allocating a KV pool of ", n_blocks_, " blocks (",
             block_bytes_ * size_t(n_blocks_), " bytes)");
    // Each slot starts on its own contiguous blocks where the pool has them (the unpaged
    // layout); the rest start unmapped.
    const int64_t bps = blocks_per_slot();
    tables_.assign(size_t(n_slots), std::vector<int32_t>(size_t(bps), -1));
    mapped_.assign(size_t(n_slots), 0);
    for (int s = 0; s < n_slots; ++s) {
      int64_t i = 0;
      for (; i < bps && int64_t(s) * bps + i < n_blocks_; ++i)
        tables_[size_t(s)][size_t(i)] = int32_t(s * bps + i);
      mapped_[size_t(s)] = i == bps ? capacity_ : i * kKvBlockTokens;
    }
  }
  ~CpuKv() override { std::free(pool_); }
  CpuKv(const CpuKv&) = delete;
  CpuKv& operator=(const CpuKv&) = delete;

  const KvSpec& spec() const override { return spec_; }
  int n_slots() const override { return n_slots_; }
  int64_t capacity() const override { return capacity_; }
  size_t bytes() const override { return block_bytes_ * size_t(n_blocks_); }
  bool paged() const override { return true; }
  int64_t n_blocks() const override { return n_blocks_; }
  void SetBlockTable(int slot, const int32_t* blocks, int n) override {
    ES_CHECK(slot >= 0 && slot < n_slots_, "KV block table: slot ", slot, " outside [0, ", n_slots_,
             ")");
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
  // MADV_POPULATE_WRITE over the rows of positions [0, tokens) of every layer and part, in the
  // slot's mapped blocks. The pool is calloc'd: a page is mapped at its first write, so without
  // this a decode step that starts a page takes a fault per (layer, part) (a 28-layer f32 cache
  // of 1 KB rows: 56 faults every 4th token). Pages are rounded out (the pool's own memory, or
  // the mapping around it: populating changes no byte). Where the kernel has no
  // MADV_POPULATE_WRITE (before 5.14) the range's own pages are touched instead.
  void Reserve(int slot, int64_t tokens) override {
    ES_CHECK(slot >= 0 && slot < n_slots_, "KV Reserve: slot ", slot, " outside [0, ", n_slots_,
             ")");
    const int64_t n = std::min(tokens, mapped_tokens(slot));
    for (int64_t p0 = 0; p0 < n; p0 += kKvBlockTokens) {
      const int64_t rows = std::min<int64_t>(kKvBlockTokens, n - p0);
      if (rows == kKvBlockTokens) {  // the whole block: every layer and part
        PopulateWrite(Rows(slot, 0, 0).Row(p0), block_bytes_);
        continue;
      }
      for (int layer = 0; layer < spec_.n_layers; ++layer)
        for (int part = 0; part < 2; ++part)
          if (row_bytes_[part] > 0)
            PopulateWrite(Rows(slot, layer, part).Row(p0), size_t(rows) * row_bytes_[part]);
    }
  }
  // Positions [0, mapped_tokens(slot)) of the slot have blocks.
  int64_t mapped_tokens(int slot) const { return mapped_[size_t(slot)]; }

  void ReadRow(int slot, int layer, int part, int64_t pos, float* dst) const override {
    ES_CHECK(slot >= 0 && slot < n_slots_ && pos >= 0 && pos < mapped_tokens(slot),
             "KV ReadRow: slot ", slot, " position ", pos, " is not mapped");
    const uint8_t* row = Rows(slot, layer, part).Row(pos);
    if (IsQuantized(spec_.dtype))
      Dequantize(spec_.dtype, row, dst, spec_.width[part]);
    else
      ConvertRowToF32(spec_.dtype, row, dst, spec_.width[part]);
  }
  KvRows Rows(int slot, int layer, int part) const {
    ES_ASSERT(slot >= 0 && slot < n_slots_);
    const size_t off = kKvBlockTokens * (size_t(layer) * (row_bytes_[0] + row_bytes_[1]) +
                                         (part ? row_bytes_[0] : 0));
    return KvRows(pool_ + off, tables_[size_t(slot)].data(), block_bytes_, row_bytes_[size_t(part)],
                  spec_.dtype);
  }

 private:
  static void PopulateWrite(uint8_t* p, size_t n) {
    if (n == 0) return;
    const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE)), a = reinterpret_cast<uintptr_t>(p);
    const uintptr_t lo = a / page * page, hi = (a + n + page - 1) / page * page;
    if (madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_POPULATE_WRITE) == 0) return;
    // A kernel before 5.14 (EINVAL; the 5.10 kernels of many ARM boards): each page of the range
    // itself takes a write that changes no byte, an atomic add of 0 (safe beside another thread
    // writing other rows of the same page).
    for (uintptr_t q = a; q < a + n; q = (q / page + 1) * page)
      __atomic_fetch_add(reinterpret_cast<uint8_t*>(q), uint8_t(0), __ATOMIC_RELAXED);
  }

  KvSpec spec_;
  int n_slots_;
  int64_t capacity_;
  int64_t n_blocks_;
  size_t row_bytes_[2] = {0, 0};              // bytes per row of each part
  size_t block_bytes_ = 0;                    // bytes per block (all layers and parts)
  uint8_t* pool_ = nullptr;                   // [n_blocks][block_bytes], owned
  std::vector<std::vector<int32_t>> tables_;  // [slot][blocks_per_slot], -1 = unmapped
  std::vector<int64_t> mapped_;               // [slot] tokens with blocks
};

}  // namespace es::cpu
