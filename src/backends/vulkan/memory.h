// Device memory: a pool that takes large VkDeviceMemory blocks per memory type and sub-allocates
// buffers from them (alignment, first-fit free list with coalescing, reuse), and the staging ring
// that uploads weights once.
//
// Each block is one VkDeviceMemory bound to one VkBuffer covering it; an Allocation is a range of
// that buffer (descriptors bind buffer + offset + range). Blocks never exceed the device's
// maxMemoryAllocationSize nor its maxStorageBufferRange, so any allocation can be bound whole;
// a tensor larger than that is split by its owner (weights: row chunks, see WeightStore).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "vk_api.h"

namespace es::vk {

class Device;

// Pure range bookkeeping over [0, size): first fit, free ranges kept sorted and coalesced.
class RangeAllocator {
 public:
  explicit RangeAllocator(uint64_t size);
  // Offset of a fresh range of `bytes` aligned to `align` (a power of two), or nullopt.
  std::optional<uint64_t> Alloc(uint64_t bytes, uint64_t align);
  void Free(uint64_t offset, uint64_t bytes);
  uint64_t size() const { return size_; }
  uint64_t free_bytes() const;
  size_t free_ranges() const { return free_.size(); }
  bool empty() const { return free_.size() == 1 && free_.begin()->second == size_; }

 private:
  uint64_t size_;
  std::map<uint64_t, uint64_t> free_;  // offset -> length, disjoint and non-adjacent
};

struct Allocation {
  VkBuffer buffer = VK_NULL_HANDLE;  // the block's buffer (not owned)
  uint64_t offset = 0;               // within the buffer
  uint64_t size = 0;
  uint8_t* mapped = nullptr;  // host pointer at offset (host-visible pools only)
  int block = -1;             // pool-internal
  uint64_t buffer_size = 0;   // size of `buffer` (the whole block)
  explicit operator bool() const { return buffer != VK_NULL_HANDLE; }
};

struct PoolLimits {
  uint64_t block_bytes = 256ull << 20;  // preferred block size
  uint64_t max_range = 0;               // 0: the device's (min of storage range, allocation size)
  uint64_t budget = 0;                  // 0: unlimited; else fail past this many block bytes
};

class MemoryPool {
 public:
  enum class Kind { kDevice, kHostVisible, kReadback };
  MemoryPool(Device& dev, Kind kind, std::string label, PoolLimits limits = {});
  ~MemoryPool();
  MemoryPool(const MemoryPool&) = delete;
  MemoryPool& operator=(const MemoryPool&) = delete;

  // A range of `bytes` for tensor `what`; throws es::Error naming `what` when the device is out
  // of memory, the budget is spent, or `bytes` exceeds max_range().
  Allocation Alloc(uint64_t bytes, const std::string& what);
  void Free(const Allocation& a);
  // The largest single allocation (callers split bigger tensors).
  uint64_t max_range() const { return max_range_; }
  uint64_t alignment() const { return align_; }
  uint64_t block_bytes() const { return current_; }
  uint64_t peak_block_bytes() const { return peak_; }
  size_t n_blocks() const;

 private:
  struct Block {
    VkDeviceMemory memory = VK_NULL_HANDLE;  // owned
    VkBuffer buffer = VK_NULL_HANDLE;        // owned
    uint8_t* mapped = nullptr;
    std::unique_ptr<RangeAllocator> ranges;
  };
  // A range of `bytes` (already rounded) in a block with room, else in a new block.
  Allocation Place(uint64_t bytes, const std::string& what);
  int NewBlock(uint64_t bytes, const std::string& what);
  void ReleaseBlock(Block& b);

  Device& dev_;
  Kind kind_;
  std::string label_;
  PoolLimits limits_;
  uint32_t memory_type_ = 0;
  uint64_t max_range_ = 0, align_ = 256;
  uint64_t current_ = 0, peak_ = 0;
  uint64_t used_ = 0;  // live allocations' bytes (Device::ledger() sums every pool's)
  bool device_local_ = false, host_visible_ = false;  // of memory_type_
  std::vector<Block> blocks_;
};

// Host-visible ring used to copy host bytes into device allocations (weights, KV rows) and back.
class StagingRing {
 public:
  StagingRing(Device& dev, uint64_t bytes = 64ull << 20);
  ~StagingRing();
  // Copies `bytes` from host `src` to `dst` at `dst_offset` (both relative to the allocation).
  void Upload(const void* src, uint64_t bytes, const Allocation& dst, uint64_t dst_offset = 0);
  void Download(const Allocation& src, uint64_t src_offset, uint64_t bytes, void* dst);
  double upload_seconds() const { return upload_s_; }

 private:
  Device& dev_;
  std::unique_ptr<MemoryPool> pool_;
  Allocation ring_;
  double upload_s_ = 0;
};

}  // namespace es::vk
