// Tensor helpers.
#include "edgeseek/internal/core/tensor.h"

#include <cstdlib>
#include <cstring>
#include <sstream>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/core/half.h"

namespace es {

std::string ShapeStr(const Shape& s) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << ']';
  return os.str();
}

int64_t NumElements(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

namespace {
Tensor Alloc(std::string name, DType dtype, Shape shape, bool zero) {
  Tensor t;
  t.name = std::move(name);
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.nbytes = RowBytes(dtype, t.cols()) * size_t(t.rows());
  // 64-byte aligned for SIMD loads.
  const size_t padded = (t.nbytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, padded ? padded : 64);
  ES_CHECK(p != nullptr, "out of memory allocating ", t.nbytes, " bytes for tensor ", t.name);
  if (zero)
    std::memset(p, 0, padded ? padded : 64);
  else
    std::memset(static_cast<uint8_t*>(p) + t.nbytes, 0, (padded ? padded : 64) - t.nbytes);
  t.data = p;
  t.owner = std::shared_ptr<const void>(p, [](const void* q) { std::free(const_cast<void*>(q)); });
  return t;
}
}  // namespace

Tensor AllocTensor(std::string name, DType dtype, Shape shape) {
  return Alloc(std::move(name), dtype, std::move(shape), true);
}

Tensor AllocTensorForWrite(std::string name, DType dtype, Shape shape) {
  return Alloc(std::move(name), dtype, std::move(shape), false);
}

void ConvertRowToF32(DType t, const void* src, float* dst, int64_t n) {
  switch (t) {
    case DType::kF32:
      std::memcpy(dst, src, size_t(n) * 4);
      return;
    case DType::kF16: {
      auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = F16ToF32(s[i]);
      return;
    }
    case DType::kBF16: {
      auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = BF16ToF32(s[i]);
      return;
    }
    case DType::kF8E4M3: {
      auto* s = static_cast<const uint8_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = F8E4M3ToF32(s[i]);
      return;
    }
    case DType::kI32: {
      auto* s = static_cast<const int32_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = float(s[i]);
      return;
    }
    default:
      Fail("cannot convert ", Name(t),
           " elements to f32 here (quantized types go through src/quant)");
  }
}

std::vector<float> ToF32(const Tensor& t) {
  std::vector<float> out(size_t(t.numel()));
  ConvertRowToF32(t.dtype, t.data, out.data(), t.numel());
  return out;
}

}  // namespace es
