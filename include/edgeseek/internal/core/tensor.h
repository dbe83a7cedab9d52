// Tensor: a named, typed, shaped view of host bytes. Shapes are row-major, outermost first, as in
// PyTorch and safetensors: a linear weight is [out_features, in_features]; an activation is
// [tokens, features]. `owner` keeps the bytes alive (an mmapped file or a converted buffer), so
// weights are never copied twice: views into an mmap share its owner.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "edgeseek/internal/core/dtype.h"

namespace es {

using Shape = std::vector<int64_t>;

std::string ShapeStr(const Shape& s);  // "[3, 4]"
int64_t NumElements(const Shape& s);

struct Tensor {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  const void* data = nullptr;
  size_t nbytes = 0;
  std::shared_ptr<const void> owner;

  int64_t numel() const { return NumElements(shape); }
  int64_t cols() const { return shape.empty() ? 1 : shape.back(); }
  int64_t rows() const { return cols() == 0 ? 0 : numel() / cols(); }
  size_t row_bytes() const { return RowBytes(dtype, cols()); }
  const uint8_t* bytes() const { return static_cast<const uint8_t*>(data); }
  template <class T>
  const T* as() const {
    return static_cast<const T*>(data);
  }
};

// A tensor that owns fresh storage of the given type and shape (zero-filled).
Tensor AllocTensor(std::string name, DType dtype, Shape shape);
// As AllocTensor, but only the alignment padding past nbytes is zeroed: for a caller that writes
// every byte itself (a synthetic or quantized tensor), so its pages are first touched by the
// threads that fill them rather than by one memset.
Tensor AllocTensorForWrite(std::string name, DType dtype, Shape shape);
// Mutable access to an AllocTensor's bytes (the only tensors the library writes after creation).
inline void* MutableData(Tensor& t) { return const_cast<void*>(t.data); }

// Converts a row-major dense tensor (F32/F16/BF16/F8E4M3) to f32 values.
std::vector<float> ToF32(const Tensor& t);
// Converts n dense elements of type t at src to f32.
void ConvertRowToF32(DType t, const void* src, float* dst, int64_t n);

}  // namespace es
