// The KV cache on the device: one allocation per (layer, part) from its own pool, laid out
// [n_blocks * kKvBlockTokens][width] in the cache type (f32, f16, q8_0 or q4_0; shaders/
// kv_type.glsl has the layout: the block types keep a 16-row block's quants, then its scales), and
// a block table per slot (backend.h, KvStorage), kept here and copied into every step's batch
// buffer, where the shaders read it through kv_addr.glsl's KvRow. ReadRow copies one row back
// (tests).
#pragma once

#include <memory>
#include <vector>

#include "edgeseek/internal/backends/backend.h"
#include "memory.h"

namespace es::vk {

class VkKv final : public KvStorage {
 public:
  // Keeps the device and the staging ring alive for as long as the cache lives.
  VkKv(std::shared_ptr<Device> dev, std::shared_ptr<StagingRing> staging, const KvSpec& spec,
       int n_slots, int64_t capacity, int64_t n_blocks, const PoolLimits& limits);
  ~VkKv() override;
  const KvSpec& spec() const override { return spec_; }
  int n_slots() const override { return n_slots_; }
  int64_t capacity() const override { return capacity_; }
  size_t bytes() const override { return bytes_; }
  void ReadRow(int slot, int layer, int part, int64_t pos, float* dst) const override;
  bool paged() const override { return true; }
  int64_t n_blocks() const override { return n_blocks_; }
  void SetBlockTable(int slot, const int32_t* blocks, int n) override;
  // Positions [0, mapped_tokens(slot)) of the slot have blocks.
  int64_t mapped_tokens(int slot) const { return mapped_[size_t(slot)]; }
  // Every slot's table, [n_slots][blocks_per_slot] (-1 = unmapped), as the batch buffer holds it.
  const std::vector<int32_t>& tables() const { return tables_; }
  const Allocation& part(int layer, int p) const { return parts_[size_t(layer) * 2 + size_t(p)]; }
  uint64_t peak_bytes() const { return pool_->peak_block_bytes(); }
  uint64_t id() const { return id_; }

 private:
  std::shared_ptr<Device> dev_;
  std::shared_ptr<StagingRing> staging_;
  KvSpec spec_;
  int n_slots_;
  int64_t capacity_;
  int64_t n_blocks_;
  std::vector<int32_t> tables_;
  std::vector<int64_t> mapped_;
  size_t bytes_ = 0;
  std::unique_ptr<MemoryPool> pool_;
  std::vector<Allocation> parts_;  // [layer * 2 + part]
  uint64_t id_;                    // unique per storage (keys recorded programs)
};

}  // namespace es::vk
