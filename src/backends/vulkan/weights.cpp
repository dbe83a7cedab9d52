// Weight upload and chunking (see weights.h).
#include "weights.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "edgeseek/quant/blocks.h"

namespace es::vk {

uint64_t DeviceRowBytes(DType t, int64_t cols) {
  if (t != DType::kQ8_0 && t != DType::kQ4_0) return RowBytes(t, cols);
  const uint64_t blocks = uint64_t(cols) / kQK;
  const uint64_t quant = blocks * (t == DType::kQ8_0 ? 32 : 16);
  return quant + (blocks + 7) / 8 * 16;  // f16 scales padded to 16 bytes
}

void RepackQuantRow(DType t, const uint8_t* src, int64_t cols, uint8_t* dst) {
  const int64_t blocks = cols / kQK;
  const size_t qb = t == DType::kQ8_0 ? 32 : 16;  // quant bytes per block
  const size_t bb = t == DType::kQ8_0 ? sizeof(BlockQ8_0) : sizeof(BlockQ4_0);
  uint8_t* scales = dst + size_t(blocks) * qb;
  std::memset(scales, 0, size_t(DeviceRowBytes(t, cols)) - size_t(blocks) * qb);
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* blk = src + size_t(b) * bb;
    std::memcpy(scales + 2 * b, blk, 2);              // d (f16) comes first in both blocks
    std::memcpy(dst + size_t(b) * qb, blk + 2, qb);   // then the quants
  }
}

WeightStore::~WeightStore() {
  for (auto& [k, w] : weights_)
    for (auto& c : w->chunks) pool_.Free(c.alloc);
}

bool WeightStore::DropStale(const Tensor& t) {
  bool dropped = false;
  for (bool f32 : {false, true}) {
    auto it = weights_.find(Key{t.data, t.nbytes, int(t.dtype), f32});
    if (it == weights_.end() || !it->second->has_owner) continue;
    const auto live = it->second->owner.lock();
    if (live && live.get() == t.owner.get()) continue;
    for (auto& c : it->second->chunks) pool_.Free(c.alloc);
    weights_.erase(it);
    dropped = true;
  }
  return dropped;
}

const DeviceWeight& WeightStore::Get(const Tensor& t) {
  ES_CHECK(Supported(t.dtype), "vulkan: weight '", t.name, "' has type ", Name(t.dtype),
           "; the Vulkan backend reads f32, f16, bf16, q8_0 and q4_0 weights");
  ES_CHECK(!IsQuantized(t.dtype) || (!t.shape.empty() && t.cols() % kQK == 0), "vulkan: weight '",
           t.name, "' of type ", Name(t.dtype), " has rows of ", t.shape.empty() ? 0 : t.cols(),
           " elements, not a multiple of ", kQK);
  Key key{t.data, t.nbytes, int(t.dtype), false};
  auto it = weights_.find(key);
  if (it != weights_.end()) return *it->second;
  return Upload(t, t.data, t.dtype, key);
}

const DeviceWeight& WeightStore::GetF32(const Tensor& t) {
  if (t.dtype == DType::kF32) return Get(t);
  Key key{t.data, t.nbytes, int(t.dtype), true};
  auto it = weights_.find(key);
  if (it != weights_.end()) return *it->second;
  const std::vector<float> f = ToF32(t);
  return Upload(t, f.data(), DType::kF32, key);
}

const DeviceWeight& WeightStore::Upload(const Tensor& t, const void* data, DType dtype, Key key) {
  auto w = std::make_unique<DeviceWeight>();
  w->dtype = dtype;
  w->cols = t.shape.empty() ? 1 : t.cols();
  w->owner = t.owner;
  w->has_owner = t.owner != nullptr;
  w->rows = w->cols ? t.numel() / w->cols : 0;
  const uint64_t row_bytes = DeviceRowBytes(dtype, w->cols);
  const bool repack = dtype == DType::kQ8_0 || dtype == DType::kQ4_0;
  const uint64_t src_row_bytes = RowBytes(dtype, w->cols);
  std::vector<uint8_t> packed;
  ES_CHECK(row_bytes <= pool_.max_range(), "vulkan: one row of weight '", t.name, "' (", row_bytes,
           " bytes) exceeds the device's largest buffer range");
  // Rows per chunk: as many as fit, a multiple of 8 so chunk starts stay 16-byte aligned.
  int64_t per = int64_t(pool_.max_range() / std::max<uint64_t>(row_bytes, 1));
  if (per >= 8) per -= per % 8;
  const uint8_t* src = static_cast<const uint8_t*>(data);
  for (int64_t r0 = 0; r0 < std::max<int64_t>(w->rows, 1); r0 += per) {
    const int64_t n = std::min(per, w->rows - r0);
    DeviceWeight::Chunk c;
    c.row0 = r0;
    c.rows = n;
    const uint64_t bytes = uint64_t(n) * row_bytes;
    c.alloc = pool_.Alloc(bytes, t.name);
    if (bytes && repack) {
      packed.resize(bytes);
      for (int64_t r = 0; r < n; ++r)
        RepackQuantRow(dtype, src + uint64_t(r0 + r) * src_row_bytes, w->cols,
                       packed.data() + uint64_t(r) * row_bytes);
      staging_.Upload(packed.data(), bytes, c.alloc);
    } else if (bytes) {
      staging_.Upload(src + uint64_t(r0) * row_bytes, bytes, c.alloc);
    }
    bytes_ += c.alloc.size;
    w->chunks.push_back(c);
    if (w->rows == 0) break;
  }
  return *(weights_[key] = std::move(w));
}

}  // namespace es::vk
