// Device KV cache (see kv_storage.h).
#include "kv_storage.h"

#include <atomic>

#include "edgeseek/core/half.h"

namespace es::vk {

VkKv::VkKv(std::shared_ptr<Device> dev, std::shared_ptr<StagingRing> staging, const KvSpec& spec,
           int n_slots, int64_t capacity, const PoolLimits& limits)
    : dev_(std::move(dev)), staging_(std::move(staging)), spec_(spec), n_slots_(n_slots),
      capacity_(capacity) {
  static std::atomic<uint64_t> next{1};
  id_ = next++;
  ES_CHECK(spec.dtype == DType::kF32 || spec.dtype == DType::kF16, "vulkan: KV cache type ",
           Name(spec.dtype), " is not supported (f32 or f16)");
  ES_CHECK(n_slots > 0 && capacity > 0, "vulkan: KV cache needs slots and capacity");
  pool_ = std::make_unique<MemoryPool>(*dev_, MemoryPool::Kind::kDevice, "kv", limits);
  parts_.resize(size_t(spec.n_layers) * 2);
  for (int l = 0; l < spec.n_layers; ++l)
    for (int p = 0; p < 2; ++p) {
      if (!spec.width[p]) continue;
      ES_CHECK(spec.dtype != DType::kF16 || spec.width[p] % 2 == 0,
               "vulkan: an f16 KV cache needs even widths (part ", p, " is ", spec.width[p], ")");
      const uint64_t b = uint64_t(n_slots) * uint64_t(capacity) * RowBytes(spec.dtype, spec.width[p]);
      parts_[size_t(l * 2 + p)] =
          pool_->Alloc(b, "kv cache layer " + std::to_string(l) + " part " + std::to_string(p));
      bytes_ += b;
    }
}

VkKv::~VkKv() {
  for (auto& a : parts_) pool_->Free(a);
}

void VkKv::ReadRow(int slot, int layer, int part, int64_t pos, float* dst) const {
  ES_CHECK(slot >= 0 && slot < n_slots_ && layer >= 0 && layer < spec_.n_layers && part >= 0 &&
               part < 2 && spec_.width[part] && pos >= 0 && pos < capacity_,
           "vulkan: KV ReadRow out of range (slot ", slot, ", layer ", layer, ", part ", part,
           ", pos ", pos, ")");
  const int64_t w = spec_.width[part];
  const uint64_t rb = RowBytes(spec_.dtype, w);
  const uint64_t off = (uint64_t(slot) * uint64_t(capacity_) + uint64_t(pos)) * rb;
  std::vector<uint8_t> raw(rb);
  staging_->Download(this->part(layer, part), off, rb, raw.data());
  ConvertRowToF32(spec_.dtype, raw.data(), dst, w);
}

}  // namespace es::vk
