// Memory pool, range allocator and staging ring (see memory.h).
#include "memory.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "device.h"
#include "edgeseek/internal/backends/backend.h"

namespace es::vk {

// ---- RangeAllocator ------------------------------------------------------------------------
RangeAllocator::RangeAllocator(uint64_t size) : size_(size) {
  if (size) free_[0] = size;
}

std::optional<uint64_t> RangeAllocator::Alloc(uint64_t bytes, uint64_t align) {
  if (bytes == 0) bytes = 1;
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    const uint64_t start = it->first, len = it->second;
    const uint64_t aligned = (start + align - 1) & ~(align - 1);
    if (aligned + bytes > start + len) continue;
    free_.erase(it);
    if (aligned > start) free_[start] = aligned - start;  // head stays free
    if (aligned + bytes < start + len) free_[aligned + bytes] = start + len - aligned - bytes;
    return aligned;
  }
  return std::nullopt;
}

void RangeAllocator::Free(uint64_t offset, uint64_t bytes) {
  if (bytes == 0) bytes = 1;
  auto next = free_.lower_bound(offset);
  ES_ASSERT(next == free_.end() || next->first >= offset + bytes);  // no double free
  // Merge with the following range.
  if (next != free_.end() && next->first == offset + bytes) {
    bytes += next->second;
    next = free_.erase(next);
  }
  // Merge with the preceding range.
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    ES_ASSERT(prev->first + prev->second <= offset);
    if (prev->first + prev->second == offset) {
      prev->second += bytes;
      return;
    }
  }
  free_[offset] = bytes;
}

uint64_t RangeAllocator::free_bytes() const {
  uint64_t s = 0;
  for (auto& [o, l] : free_) s += l;
  return s;
}

// ---- MemoryPool ----------------------------------------------------------------------------
namespace {
uint32_t FindMemoryType(const VkPhysicalDeviceMemoryProperties& mp, uint32_t type_bits,
                        std::initializer_list<VkMemoryPropertyFlags> prefs) {
  for (VkMemoryPropertyFlags want : prefs)
    for (uint32_t i = 0; i < mp.memoryTypeCount; ++i)
      if ((type_bits & (1u << i)) && (mp.memoryTypes[i].propertyFlags & want) == want) return i;
  Fail("vulkan: no suitable memory type");
}
}  // namespace

MemoryPool::MemoryPool(Device& dev, Kind kind, std::string label, PoolLimits limits)
    : dev_(dev), kind_(kind), label_(std::move(label)), limits_(limits) {
  const auto& info = dev.info();
  max_range_ = std::min<uint64_t>(info.max_storage_buffer_range, info.max_memory_allocation);
  if (limits_.max_range) max_range_ = std::min(max_range_, limits_.max_range);
  // Keep ranges a multiple of 16 bytes so that every vec4/uvec4 view stays inside.
  max_range_ &= ~uint64_t(255);
  align_ = std::max<uint64_t>(256, dev.min_storage_alignment());

  // Memory type from a probe buffer's requirements.
  VkBufferCreateInfo bci{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  bci.size = 4096;
  bci.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
              VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  VkBuffer probe;
  VK_CHECK(vkCreateBuffer(dev.handle(), &bci, nullptr, &probe));
  VkMemoryRequirements req;
  vkGetBufferMemoryRequirements(dev.handle(), probe, &req);
  vkDestroyBuffer(dev.handle(), probe, nullptr);
  const auto& mp = dev.memory_properties();
  const VkMemoryPropertyFlags HV =
      VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  switch (kind_) {
    case Kind::kDevice:
      memory_type_ =
          FindMemoryType(mp, req.memoryTypeBits, {VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, 0});
      break;
    case Kind::kHostVisible:  // written by the host, read by shaders: device-local if mappable
      memory_type_ =
          FindMemoryType(mp, req.memoryTypeBits, {HV | VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, HV});
      break;
    case Kind::kReadback:
      memory_type_ =
          FindMemoryType(mp, req.memoryTypeBits, {HV | VK_MEMORY_PROPERTY_HOST_CACHED_BIT, HV});
      break;
  }
  align_ = std::max<uint64_t>(align_, req.alignment);
  const VkMemoryPropertyFlags flags = mp.memoryTypes[memory_type_].propertyFlags;
  device_local_ = (flags & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT) != 0;
  host_visible_ = (flags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) != 0;
}

MemoryPool::~MemoryPool() {
  dev_.ledger().Used(label_, -int64_t(used_));
  for (auto& b : blocks_) ReleaseBlock(b);
}

void MemoryPool::ReleaseBlock(Block& b) {
  if (b.ranges)
    dev_.ledger().Blocks(label_, device_local_, host_visible_, -int64_t(b.ranges->size()));
  if (b.buffer) vkDestroyBuffer(dev_.handle(), b.buffer, nullptr);
  if (b.memory) vkFreeMemory(dev_.handle(), b.memory, nullptr);  // also unmaps
  b = Block{};
}

size_t MemoryPool::n_blocks() const {
  size_t n = 0;
  for (auto& b : blocks_) n += b.buffer != VK_NULL_HANDLE;
  return n;
}

int MemoryPool::NewBlock(uint64_t bytes, const std::string& what) {
  if (limits_.budget && current_ + bytes > limits_.budget)
    Fail("vulkan: out of device memory for '", what, "' (", bytes, " bytes; ", label_,
         " pool holds ", current_, " of its ", limits_.budget, "-byte budget)");
  Block b;
  VkBufferCreateInfo bci{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  bci.size = bytes;
  bci.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
              VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  // The GEMM's decode functions see the weights through buffer references (device addresses).
  const bool address = dev_.coopmat2().block_loads && kind_ == Kind::kDevice;
  if (address) bci.usage |= VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT;
  VK_CHECK(vkCreateBuffer(dev_.handle(), &bci, nullptr, &b.buffer), " for '", what, "'");
  VkMemoryRequirements req;
  vkGetBufferMemoryRequirements(dev_.handle(), b.buffer, &req);
  VkMemoryAllocateInfo ai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
  ai.allocationSize = req.size;
  ai.memoryTypeIndex = memory_type_;
  VkMemoryAllocateFlagsInfo flags{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO};
  flags.flags = VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT;
  if (address) ai.pNext = &flags;
  const VkResult r = vkAllocateMemory(dev_.handle(), &ai, nullptr, &b.memory);
  if (r != VK_SUCCESS) {
    vkDestroyBuffer(dev_.handle(), b.buffer, nullptr);
    Fail("vulkan: out of device memory for '", what, "' (", bytes, " bytes, ", label_,
         " pool holds ", current_, " bytes): ", ResultName(r));
  }
  VK_CHECK(vkBindBufferMemory(dev_.handle(), b.buffer, b.memory, 0));
  if (kind_ != Kind::kDevice) {
    void* p = nullptr;
    VK_CHECK(vkMapMemory(dev_.handle(), b.memory, 0, VK_WHOLE_SIZE, 0, &p), " for '", what, "'");
    b.mapped = static_cast<uint8_t*>(p);
  }
  b.ranges = std::make_unique<RangeAllocator>(bytes);
  dev_.ledger().Blocks(label_, device_local_, host_visible_, int64_t(bytes));
  current_ += bytes;
  peak_ = std::max(peak_, current_);
  for (size_t i = 0; i < blocks_.size(); ++i)
    if (!blocks_[i].buffer) {
      blocks_[i] = std::move(b);
      return int(i);
    }
  blocks_.push_back(std::move(b));
  return int(blocks_.size()) - 1;
}

Allocation MemoryPool::Alloc(uint64_t bytes, const std::string& what) {
  const Allocation a = Place((std::max<uint64_t>(bytes, 4) + 15) & ~uint64_t(15), what);
  used_ += a.size;
  dev_.ledger().Used(label_, int64_t(a.size));
  return a;
}

Allocation MemoryPool::Place(uint64_t bytes, const std::string& what) {
  if (bytes > max_range_)
    Fail("vulkan: tensor '", what, "' needs ", bytes,
         " bytes in one buffer, more than the device allows (", max_range_,
         " = min(maxStorageBufferRange, maxMemoryAllocationSize)); it must be split");
  for (size_t i = 0; i < blocks_.size(); ++i) {
    auto& b = blocks_[i];
    if (!b.buffer) continue;
    if (auto off = b.ranges->Alloc(bytes, align_)) {
      return Allocation{b.buffer,        *off, bytes, b.mapped ? b.mapped + *off : nullptr, int(i),
                        b.ranges->size()};
    }
  }
  const uint64_t block = std::min(max_range_, std::max(limits_.block_bytes, bytes));
  const int bi = NewBlock(block, what);
  auto& b = blocks_[size_t(bi)];
  const auto off = b.ranges->Alloc(bytes, align_);
  ES_ASSERT(off.has_value());
  return Allocation{b.buffer,        *off, bytes, b.mapped ? b.mapped + *off : nullptr, bi,
                    b.ranges->size()};
}

void MemoryPool::Free(const Allocation& a) {
  if (!a) return;
  ES_ASSERT(a.block >= 0 && size_t(a.block) < blocks_.size());
  auto& b = blocks_[size_t(a.block)];
  b.ranges->Free(a.offset, a.size);
  used_ -= a.size;
  dev_.ledger().Used(label_, -int64_t(a.size));
  if (b.ranges->empty()) {  // give whole free blocks back to the driver
    current_ -= b.ranges->size();
    ReleaseBlock(b);
  }
}

// ---- MemoryLedger ---------------------------------------------------------------------------
void MemoryLedger::Blocks(const std::string& name, bool device_local, bool host_visible,
                          int64_t delta) {
  const std::lock_guard<std::mutex> lock(mu_);
  Entry& e = pools_[name];
  e.device_local = device_local, e.host_visible = host_visible;
  e.held = uint64_t(int64_t(e.held) + delta);
  e.peak_held = std::max(e.peak_held, e.held);
  if (!device_local && !host_visible) return;
  uint64_t& total = device_local ? device_local_ : host_;  // ReBAR memory counts as the device's
  total = uint64_t(int64_t(total) + delta);
  device_local_peak_ = std::max(device_local_peak_, device_local_);
  host_peak_ = std::max(host_peak_, host_);
}

void MemoryLedger::Used(const std::string& name, int64_t delta) {
  const std::lock_guard<std::mutex> lock(mu_);
  Entry& e = pools_[name];
  e.used = uint64_t(int64_t(e.used) + delta);
  e.peak_used = std::max(e.peak_used, e.used);
}

BackendMemory MemoryLedger::Report() const {
  const std::lock_guard<std::mutex> lock(mu_);
  BackendMemory m;
  for (const auto& [name, e] : pools_)
    if (e.peak_held)
      m.pools.push_back({name, e.device_local, e.host_visible, e.peak_held, e.peak_used});
  m.device_local_peak_bytes = device_local_peak_;
  m.host_visible_peak_bytes = host_peak_;
  return m;
}

// ---- StagingRing ---------------------------------------------------------------------------
StagingRing::StagingRing(Device& dev, uint64_t bytes) : dev_(dev) {
  pool_ = std::make_unique<MemoryPool>(dev, MemoryPool::Kind::kReadback, "staging",
                                       PoolLimits{bytes, 0, 0});
  ring_ = pool_->Alloc(std::min(bytes, pool_->max_range()), "staging ring");
}

StagingRing::~StagingRing() { pool_->Free(ring_); }

void StagingRing::Upload(const void* src, uint64_t bytes, const Allocation& dst,
                         uint64_t dst_offset) {
  const auto t0 = std::chrono::steady_clock::now();
  const uint8_t* p = static_cast<const uint8_t*>(src);
  ES_ASSERT(dst_offset + bytes <= dst.size);
  for (uint64_t done = 0; done < bytes;) {
    const uint64_t n = std::min(ring_.size, bytes - done);
    std::memcpy(ring_.mapped, p + done, n);
    dev_.RunOnce([&](VkCommandBuffer cb) {
      VkBufferCopy c{ring_.offset, dst.offset + dst_offset + done, n};
      vkCmdCopyBuffer(cb, ring_.buffer, dst.buffer, 1, &c);
    });
    done += n;
  }
  upload_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void StagingRing::Download(const Allocation& src, uint64_t src_offset, uint64_t bytes, void* dst) {
  uint8_t* p = static_cast<uint8_t*>(dst);
  for (uint64_t done = 0; done < bytes;) {
    const uint64_t n = std::min(ring_.size, bytes - done);
    dev_.RunOnce([&](VkCommandBuffer cb) {
      VkBufferCopy c{src.offset + src_offset + done, ring_.offset, n};
      vkCmdCopyBuffer(cb, src.buffer, ring_.buffer, 1, &c);
    });
    std::memcpy(p + done, ring_.mapped, n);
    done += n;
  }
}

}  // namespace es::vk
