// The KV cache on the device: one allocation per (layer, part) from its own pool, laid out
// [slot][capacity][width] in the cache type (f32 or f16). ReadRow copies one row back (tests).
#pragma once

#include <memory>
#include <vector>

#include "edgeseek/backends/backend.h"
#include "memory.h"

namespace es::vk {

class VkKv final : public KvStorage {
 public:
  // Keeps the device and the staging ring alive for as long as the cache lives.
  VkKv(std::shared_ptr<Device> dev, std::shared_ptr<StagingRing> staging, const KvSpec& spec,
       int n_slots, int64_t capacity, const PoolLimits& limits);
  ~VkKv() override;
  const KvSpec& spec() const override { return spec_; }
  int n_slots() const override { return n_slots_; }
  int64_t capacity() const override { return capacity_; }
  size_t bytes() const override { return bytes_; }
  void ReadRow(int slot, int layer, int part, int64_t pos, float* dst) const override;
  const Allocation& part(int layer, int p) const { return parts_[size_t(layer * 2 + p)]; }
  uint64_t peak_bytes() const { return pool_->peak_block_bytes(); }
  uint64_t id() const { return id_; }

 private:
  std::shared_ptr<Device> dev_;
  std::shared_ptr<StagingRing> staging_;
  KvSpec spec_;
  int n_slots_;
  int64_t capacity_;
  size_t bytes_ = 0;
  std::unique_ptr<MemoryPool> pool_;
  std::vector<Allocation> parts_;  // [layer * 2 + part]
  uint64_t id_;                    // unique per storage (keys recorded programs)
};

}  // namespace es::vk
