// Device-resident weights: each model tensor is uploaded once through the staging ring (at
// PrepareWeight, or at the first graph that uses it) and stays in the weight pool. Tensors
// larger than the device's largest bindable range (an embedding of 152064x3584 f16 is 1.09 GB)
// are split into row chunks; ops that take such weights dispatch once per chunk. Small vectors
// read as f32 by shaders (norm weights, biases) get an f32 copy when stored in another type.
// Block-quantized tensors (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K) are repacked into
// word-aligned rows of sections (every block's quants, then high bits, then scales, each padded
// to 16 bytes; layout in shaders/wload.glsl) so shaders read them as uint words.
#pragma once

#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "edgeseek/core/tensor.h"
#include "memory.h"

namespace es::vk {

struct DeviceWeight {
  DType dtype = DType::kF32;
  int64_t rows = 0, cols = 0;
  struct Chunk {
    Allocation alloc;
    int64_t row0 = 0, rows = 0;
  };
  std::vector<Chunk> chunks;
  std::weak_ptr<const void> owner;  // the host tensor's owner: expired = the tensor is gone
  bool has_owner = false;
};

// Whether tensors of type t are repacked at upload (the block-quantized types Supported takes).
bool Repacked(DType t);
// Bytes of one device row of `cols` elements of `t` (the repacked layout for block types; a
// multiple of 16 then).
uint64_t DeviceRowBytes(DType t, int64_t cols);
// Repacks one GGUF row of blocks of t (cols % BlockElems(t) == 0) into the device layout (dst
// holds DeviceRowBytes bytes).
void RepackQuantRow(DType t, const uint8_t* src, int64_t cols, uint8_t* dst);

class WeightStore {
 public:
  WeightStore(MemoryPool& pool, StagingRing& staging) : pool_(pool), staging_(staging) {}
  ~WeightStore();
  // The tensor in its own type (dense f32/f16/bf16), uploading it on first use.
  const DeviceWeight& Get(const Tensor& t);
  // The tensor as f32 in one chunk (for norm weights, biases, router bias).
  const DeviceWeight& GetF32(const Tensor& t);
  static bool Supported(DType t) {
    return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16 || Repacked(t);
  }
  uint64_t bytes() const { return bytes_; }
  // Drops device copies whose host tensor has died (a new tensor may reuse its address);
  // returns true when something was dropped (recorded programs must then be rebuilt).
  bool DropStale(const Tensor& t);

 private:
  using Key = std::tuple<const void*, size_t, int, bool>;  // data, bytes, dtype, as f32
  const DeviceWeight& Upload(const Tensor& t, const void* data, DType dtype, Key key);
  MemoryPool& pool_;
  StagingRing& staging_;
  std::map<Key, std::unique_ptr<DeviceWeight>> weights_;
  uint64_t bytes_ = 0;
};

}  // namespace es::vk
