// Weight upload and chunking (see weights.h).
#include "weights.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "edgeseek/internal/quant/blocks.h"

namespace es::vk {

namespace {
constexpr uint64_t Pad16(uint64_t b) { return (b + 15) / 16 * 16; }
// Bytes per block of each section of a repacked row (wload.glsl): quants, high bits, scales.
// f16-per-block scale sections are counted in half blocks (2 bytes) and padded as a whole.
struct QuantLayout {
  int block = 0;            // elements per block
  uint64_t qs = 0, qh = 0;  // quant and high-bit bytes per block
  uint64_t meta = 0;        // scale bytes per block (Q4_K/Q5_K meta words, Q6_K int8 scales, dm)
  bool d16 = false;         // an f16 d per block follows (Q8_0, Q4_0, Q5_0, Q6_K)
};
bool LayoutOf(DType t, QuantLayout* l) {
  switch (t) {
    case DType::kQ8_0:
      *l = {32, 32, 0, 0, true};
      return true;
    case DType::kQ4_0:
      *l = {32, 16, 0, 0, true};
      return true;
    case DType::kQ4_1:
      *l = {32, 16, 0, 4, false};
      return true;
    case DType::kQ5_0:
      *l = {32, 16, 4, 0, true};
      return true;
    case DType::kQ5_1:
      *l = {32, 16, 4, 4, false};
      return true;
    case DType::kQ4_K:
      *l = {256, 128, 0, 20, false};
      return true;
    case DType::kQ5_K:
      *l = {256, 128, 32, 20, false};
      return true;
    case DType::kQ6_K:
      *l = {256, 128, 64, 16, true};
      return true;
    case DType::kI4F:
      *l = {32, 16, 0, 8, false};
      return true;
    default:
      return false;
  }
}
}  // namespace

bool Repacked(DType t) {
  QuantLayout l;
  return LayoutOf(t, &l);
}

uint64_t DeviceRowBytes(DType t, int64_t cols) {
  QuantLayout l;
  if (!LayoutOf(t, &l)) return RowBytes(t, cols);
  const uint64_t nb = uint64_t(cols) / uint64_t(l.block);
  return Pad16(nb * l.qs) + Pad16(nb * l.qh) + Pad16(nb * l.meta) + (l.d16 ? Pad16(nb * 2) : 0);
}

void RepackQuantRow(DType t, const uint8_t* src, int64_t cols, uint8_t* dst) {
  QuantLayout l;
  ES_ASSERT(LayoutOf(t, &l) && cols % l.block == 0);
  const size_t nb = size_t(cols / l.block);
  std::memset(dst, 0, size_t(DeviceRowBytes(t, cols)));
  uint8_t* qs = dst;
  uint8_t* qh = qs + Pad16(nb * l.qs);
  uint8_t* meta = qh + Pad16(nb * l.qh);
  uint8_t* d16 = meta + Pad16(nb * l.meta);
  for (size_t b = 0; b < nb; ++b) {
    switch (t) {
      case DType::kQ8_0: {
        const auto* k = reinterpret_cast<const BlockQ8_0*>(src) + b;
        std::memcpy(qs + 32 * b, k->qs, 32);
        std::memcpy(d16 + 2 * b, &k->d, 2);
        break;
      }
      case DType::kQ4_0: {
        const auto* k = reinterpret_cast<const BlockQ4_0*>(src) + b;
        std::memcpy(qs + 16 * b, k->qs, 16);
        std::memcpy(d16 + 2 * b, &k->d, 2);
        break;
      }
      case DType::kQ4_1: {
        const auto* k = reinterpret_cast<const BlockQ4_1*>(src) + b;
        std::memcpy(qs + 16 * b, k->qs, 16);
        std::memcpy(meta + 4 * b, &k->d, 2);
        std::memcpy(meta + 4 * b + 2, &k->m, 2);
        break;
      }
      case DType::kQ5_0: {
        const auto* k = reinterpret_cast<const BlockQ5_0*>(src) + b;
        std::memcpy(qs + 16 * b, k->qs, 16);
        std::memcpy(qh + 4 * b, k->qh, 4);
        std::memcpy(d16 + 2 * b, &k->d, 2);
        break;
      }
      case DType::kQ5_1: {
        const auto* k = reinterpret_cast<const BlockQ5_1*>(src) + b;
        std::memcpy(qs + 16 * b, k->qs, 16);
        std::memcpy(qh + 4 * b, k->qh, 4);
        std::memcpy(meta + 4 * b, &k->d, 2);
        std::memcpy(meta + 4 * b + 2, &k->m, 2);
        break;
      }
      case DType::kQ4_K:
      case DType::kQ5_K: {
        // Meta: d | dmin << 16, then per 64-chunk c: sc(2c), mn(2c), sc(2c+1), mn(2c+1).
        const uint8_t* scales;
        uint8_t* m = meta + 20 * b;
        if (t == DType::kQ4_K) {
          const auto* k = reinterpret_cast<const BlockQ4_K*>(src) + b;
          std::memcpy(qs + 128 * b, k->qs, 128);
          std::memcpy(m, &k->d, 2);
          std::memcpy(m + 2, &k->dmin, 2);
          scales = k->scales;
        } else {
          const auto* k = reinterpret_cast<const BlockQ5_K*>(src) + b;
          std::memcpy(qs + 128 * b, k->qs, 128);
          std::memcpy(qh + 32 * b, k->qh, 32);
          std::memcpy(m, &k->d, 2);
          std::memcpy(m + 2, &k->dmin, 2);
          scales = k->scales;
        }
        for (int j = 0; j < 8; ++j) UnpackScaleMinK4(j, scales, m + 4 + 2 * j, m + 5 + 2 * j);
        break;
      }
      case DType::kQ6_K: {
        const auto* k = reinterpret_cast<const BlockQ6_K*>(src) + b;
        std::memcpy(qs + 128 * b, k->ql, 128);
        std::memcpy(qh + 64 * b, k->qh, 64);
        std::memcpy(meta + 16 * b, k->scales, 16);
        std::memcpy(d16 + 2 * b, &k->d, 2);
        break;
      }
      case DType::kI4F: {  // meta: d (f32 bits), z as a word
        const auto* k = reinterpret_cast<const BlockI4F*>(src) + b;
        const uint32_t z = k->z;
        std::memcpy(qs + 16 * b, k->qs, 16);
        std::memcpy(meta + 8 * b, &k->d, 4);
        std::memcpy(meta + 8 * b + 4, &z, 4);
        break;
      }
      default:
        ES_ASSERT(false);
    }
  }
}

WeightStore::~WeightStore() {
  for (auto& [k, w] : weights_)
    for (auto& c : w->chunks) pool_.Free(c.alloc);
  for (auto& [k, s] : stacks_)
    for (auto& b : s->blocks) pool_.Free(b);
}

void WeightStore::FreeStack(const StackKey& key) {
  auto it = stacks_.find(key);
  if (it == stacks_.end()) return;
  for (auto& b : it->second->blocks) {
    bytes_ -= b.size;
    pool_.Free(b);
  }
  for (const void* d : key) stack_of_.erase(d);
  stacks_.erase(it);
}

const ExpertStack& WeightStore::GetExperts(const std::vector<const Tensor*>& experts) {
  ES_CHECK(!experts.empty(), "vulkan: an expert stack needs at least one expert");
  StackKey key;
  for (const Tensor* t : experts) key.push_back(t->data);
  if (auto it = stacks_.find(key); it != stacks_.end()) return *it->second;
  const Tensor& first = *experts[0];
  ES_CHECK(Supported(first.dtype) && first.dtype != DType::kI4F, "vulkan: expert weight '",
           first.name, "' has type ", Name(first.dtype),
           ", which the Vulkan backend does not read for experts");
  ES_CHECK(first.shape.size() == 2 &&
               (!IsQuantized(first.dtype) || first.cols() % BlockElems(first.dtype) == 0),
           "vulkan: expert weight '", first.name, "' must be a matrix with rows of whole blocks");
  for (const Tensor* t : experts)
    ES_CHECK(t->dtype == first.dtype && t->shape == first.shape, "vulkan: expert weight '", t->name,
             "' is ", Name(t->dtype), " ", ShapeStr(t->shape), " but '", first.name, "' is ",
             Name(first.dtype), " ", ShapeStr(first.shape),
             " (the experts of one projection share one type and shape)");
  auto s = std::make_unique<ExpertStack>();
  s->dtype = first.dtype;
  s->n = int64_t(experts.size());
  s->rows = first.rows();
  s->cols = first.cols();
  for (const Tensor* t : experts) s->owners.emplace_back(t->owner, t->owner != nullptr);
  s->expert_bytes = uint64_t(s->rows) * DeviceRowBytes(s->dtype, s->cols);
  ES_CHECK(s->expert_bytes <= pool_.max_range(), "vulkan: expert weight '", first.name, "' (",
           s->expert_bytes, " bytes) exceeds the device's largest buffer range");
  s->per_block =
      std::max<int64_t>(1, int64_t(pool_.max_range() / std::max<uint64_t>(s->expert_bytes, 1)));
  for (int64_t e0 = 0; e0 < s->n; e0 += s->per_block) {
    const int64_t ne = std::min(s->per_block, s->n - e0);
    Allocation a = pool_.Alloc(uint64_t(ne) * s->expert_bytes, first.name + " (expert stack)");
    bytes_ += a.size;
    s->blocks.push_back(a);
    for (int64_t e = 0; e < ne; ++e)
      UploadRows(static_cast<const uint8_t*>(experts[size_t(e0 + e)]->data), s->dtype, s->cols,
                 s->rows, a, uint64_t(e) * s->expert_bytes);
  }
  for (size_t i = 0; i < key.size(); ++i) stack_of_[key[i]] = {key, i};
  return *(stacks_[key] = std::move(s));
}

void WeightStore::UploadRows(const uint8_t* src, DType dtype, int64_t cols, int64_t n,
                             const Allocation& dst, uint64_t dst_offset) {
  const uint64_t row_bytes = DeviceRowBytes(dtype, cols), bytes = uint64_t(n) * row_bytes;
  if (!bytes) return;
  if (!Repacked(dtype)) {
    staging_.Upload(src, bytes, dst, dst_offset);
    return;
  }
  const uint64_t src_row_bytes = RowBytes(dtype, cols);
  const int64_t chunk = std::max<int64_t>(1, int64_t(kRepackChunkBytes / row_bytes));
  std::vector<uint8_t> packed(uint64_t(std::min(chunk, n)) * row_bytes);
  for (int64_t r0 = 0; r0 < n; r0 += chunk) {
    const int64_t m = std::min(chunk, n - r0);
    for (int64_t r = 0; r < m; ++r)
      RepackQuantRow(dtype, src + uint64_t(r0 + r) * src_row_bytes, cols,
                     packed.data() + uint64_t(r) * row_bytes);
    staging_.Upload(packed.data(), uint64_t(m) * row_bytes, dst,
                    dst_offset + uint64_t(r0) * row_bytes);
  }
}

bool WeightStore::DropStale(const Tensor& t) {
  bool dropped = false;
  if (auto it = stack_of_.find(t.data); it != stack_of_.end()) {
    const auto& [owner, has_owner] = stacks_.at(it->second.first)->owners[it->second.second];
    const auto live = owner.lock();
    if (has_owner && !(live && live.get() == t.owner.get())) {
      FreeStack(StackKey(it->second.first));
      dropped = true;
    }
  }
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
           "; the Vulkan backend reads f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, "
           "q6_k and i4f weights");
  ES_CHECK(!IsQuantized(t.dtype) || (!t.shape.empty() && t.cols() % BlockElems(t.dtype) == 0),
           "vulkan: weight '", t.name, "' of type ", Name(t.dtype), " has rows of ",
           t.shape.empty() ? 0 : t.cols(), " elements, not a multiple of ", BlockElems(t.dtype));
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
  const uint64_t src_row_bytes = RowBytes(dtype, w->cols);
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
    UploadRows(src + uint64_t(r0) * src_row_bytes, dtype, w->cols, n, c.alloc, 0);
    bytes_ += c.alloc.size;
    w->chunks.push_back(c);
    if (w->rows == 0) break;
  }
  return *(weights_[key] = std::move(w));
}

}  // namespace es::vk
