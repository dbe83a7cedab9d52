// Device KV cache (see kv_storage.h).
#include "kv_storage.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "edgeseek/internal/core/half.h"
#include "edgeseek/internal/quant/blocks.h"

namespace es::vk {

VkKv::VkKv(std::shared_ptr<Device> dev, std::shared_ptr<StagingRing> staging, const KvSpec& spec,
           int n_slots, int64_t capacity, int64_t n_blocks, const PoolLimits& limits)
    : dev_(std::move(dev)),
      staging_(std::move(staging)),
      spec_(spec),
      n_slots_(n_slots),
      capacity_(capacity),
      n_blocks_(n_blocks) {
  static std::atomic<uint64_t> next{1};
  id_ = next++;
  ES_CHECK(spec.dtype == DType::kF32 || spec.dtype == DType::kF16 || spec.dtype == DType::kQ8_0 ||
               spec.dtype == DType::kQ4_0,
           "vulkan: KV cache type ", Name(spec.dtype),
           " is not supported (f32, f16, q8_0 or q4_0)");
  ES_CHECK(n_slots > 0 && capacity > 0 && n_blocks > 0,
           "vulkan: KV cache needs slots, capacity and blocks");
  // Each slot starts on its own contiguous blocks where the pool has them (the unpaged layout).
  const int64_t bps = blocks_per_slot();
  tables_.assign(size_t(n_slots) * size_t(bps), -1);
  mapped_.assign(size_t(n_slots), 0);
  for (int s = 0; s < n_slots; ++s) {
    int64_t i = 0;
    for (; i < bps && int64_t(s) * bps + i < n_blocks_; ++i)
      tables_[size_t(s * bps + i)] = int32_t(s * bps + i);
    mapped_[size_t(s)] = i == bps ? capacity_ : i * kKvBlockTokens;
  }
  pool_ = std::make_unique<MemoryPool>(*dev_, MemoryPool::Kind::kDevice, "kv", limits);
  parts_.resize(size_t(spec.n_layers) * 2);
  for (int l = 0; l < spec.n_layers; ++l)
    for (int p = 0; p < 2; ++p) {
      if (!spec.width[p]) continue;
      ES_CHECK(spec.dtype != DType::kF16 || spec.width[p] % 2 == 0,
               "vulkan: an f16 KV cache needs even widths (part ", p, " is ", spec.width[p], ")");
      ES_CHECK(!IsQuantized(spec.dtype) || spec.width[p] % kQK == 0, "vulkan: a ", Name(spec.dtype),
               " KV cache needs widths that are multiples of ", kQK, " (part ", p, " is ",
               spec.width[p], ")");
      const uint64_t b = uint64_t(n_blocks) * kKvBlockTokens * RowBytes(spec.dtype, spec.width[p]);
      parts_[size_t(l) * 2 + size_t(p)] =
          pool_->Alloc(b, "kv cache layer " + std::to_string(l) + " part " + std::to_string(p));
      bytes_ += b;
    }
}

VkKv::~VkKv() {
  for (auto& a : parts_) pool_->Free(a);
}

void VkKv::SetBlockTable(int slot, const int32_t* blocks, int n) {
  ES_CHECK(slot >= 0 && slot < n_slots_, "KV block table: slot ", slot, " outside [0, ", n_slots_,
           ")");
  const int64_t bps = blocks_per_slot();
  ES_CHECK(n >= 0 && n <= bps, "KV block table of slot ", slot, ": ", n,
           " blocks, a slot holds at most ", bps);
  int32_t* t = tables_.data() + size_t(slot) * size_t(bps);
  for (int i = 0; i < n; ++i) {
    ES_CHECK(blocks[i] >= 0 && blocks[i] < n_blocks_, "KV block table of slot ", slot, ": block ",
             blocks[i], " outside the pool of ", n_blocks_);
    t[i] = blocks[i];
  }
  std::fill(t + n, t + bps, -1);
  mapped_[size_t(slot)] = std::min<int64_t>(int64_t(n) * kKvBlockTokens, capacity_);
}

void VkKv::ReadRow(int slot, int layer, int part, int64_t pos, float* dst) const {
  ES_CHECK(slot >= 0 && slot < n_slots_ && layer >= 0 && layer < spec_.n_layers && part >= 0 &&
               part < 2 && spec_.width[part] && pos >= 0 && pos < mapped_tokens(slot),
           "vulkan: KV ReadRow out of range (slot ", slot, ", layer ", layer, ", part ", part,
           ", pos ", pos, ")");
  const int64_t w = spec_.width[part];
  const uint64_t rb = RowBytes(spec_.dtype, w);
  const int32_t block =
      tables_[size_t(slot) * size_t(blocks_per_slot()) + size_t(pos / kKvBlockTokens)];
  const uint64_t r = uint64_t(pos % kKvBlockTokens);
  if (!IsQuantized(spec_.dtype)) {
    const uint64_t off = (uint64_t(block) * kKvBlockTokens + r) * rb;
    std::vector<uint8_t> raw(rb);
    staging_->Download(this->part(layer, part), off, rb, raw.data());
    ConvertRowToF32(spec_.dtype, raw.data(), dst, w);
    return;
  }
  // kv_type.glsl: a 16-row block holds the rows' quants, then their scales; the row's GGUF
  // blocks are put back together from the two.
  const uint64_t qb = spec_.dtype == DType::kQ8_0 ? uint64_t(w) : uint64_t(w) / 2,
                 nb = uint64_t(w) / kQK;
  const uint64_t base = uint64_t(block) * kKvBlockTokens * rb;
  std::vector<uint8_t> q(qb), d(nb * 2), blocks(rb);
  staging_->Download(this->part(layer, part), base + r * qb, qb, q.data());
  staging_->Download(this->part(layer, part), base + kKvBlockTokens * qb + r * nb * 2, nb * 2,
                     d.data());
  const uint64_t bq = qb / nb, bb = rb / nb;  // quant bytes and GGUF bytes per block
  for (uint64_t i = 0; i < nb; ++i) {
    std::memcpy(&blocks[i * bb], &d[i * 2], 2);
    std::memcpy(&blocks[i * bb + 2], &q[i * bq], bq);
  }
  Dequantize(spec_.dtype, blocks.data(), dst, w);
}

}  // namespace es::vk
