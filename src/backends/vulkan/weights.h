// Device-resident weights: each model tensor is uploaded once through the staging ring (at
// PrepareWeight, or at the first graph that uses it) and stays in the weight pool. Tensors
// larger than the device's largest bindable range (an embedding of 152064x3584 f16 is 1.09 GB)
// are split into row chunks; ops that take such weights dispatch once per chunk. Small vectors
// read as f32 by shaders (norm weights, biases) get an f32 copy when stored in another type.
// Block-quantized tensors (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K) are repacked into
// word-aligned rows of sections (every block's quants, then high bits, then scales, each padded
// to 16 bytes; layout in shaders/wload.glsl) so shaders read them as uint words. A layer's routed
// experts are stacked per projection (ExpertStack): bound once, addressed by expert stride.
#pragma once

#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "edgeseek/internal/core/tensor.h"
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
// A block-type weight is repacked on the host this many bytes of rows at a time (at least one
// row) on its way to the staging ring: a whole tensor's repacked copy beside the host weights
// was the largest term of peak RSS past the weights (the 7B's Q8_0 lm_head, 0.58 GB; plan30).
constexpr uint64_t kRepackChunkBytes = uint64_t(16) << 20;
// Repacks one GGUF row of blocks of t (cols % BlockElems(t) == 0) into the device layout (dst
// holds DeviceRowBytes bytes).
void RepackQuantRow(DType t, const uint8_t* src, int64_t cols, uint8_t* dst);

// One projection (gate, up or down) of a layer's routed experts, stacked: expert e's rows lie at
// byte `offset(e)` of `blocks[e / per_block]`, each expert `expert_bytes` after the previous one,
// in the device row layout of `dtype`. Blocks are filled with whole experts up to the device's
// largest bindable range, so any expert count and size binds (a V3 layer's 256 experts of
// 2048 x 7168 f16 are 7.5 GB a projection: two blocks where the range is 4 GiB).
struct ExpertStack {
  DType dtype = DType::kF32;
  int64_t n = 0, rows = 0, cols = 0;
  int64_t per_block = 0;      // experts per block
  uint64_t expert_bytes = 0;  // rows x DeviceRowBytes(dtype, cols)
  std::vector<Allocation> blocks;
  // Each member's host owner (expired = that tensor is gone) and whether it had one.
  std::vector<std::pair<std::weak_ptr<const void>, bool>> owners;
  const Allocation& block_of(int64_t e) const { return blocks[size_t(e / per_block)]; }
  // Byte offset of expert e inside its block's buffer.
  uint64_t offset(int64_t e) const {
    return block_of(e).offset + uint64_t(e % per_block) * expert_bytes;
  }
};

class WeightStore {
 public:
  WeightStore(MemoryPool& pool, StagingRing& staging) : pool_(pool), staging_(staging) {}
  ~WeightStore();
  // The tensor in its own type (dense f32/f16/bf16), uploading it on first use.
  const DeviceWeight& Get(const Tensor& t);
  // The tensor as f32 in one chunk (for norm weights, biases, router bias).
  const DeviceWeight& GetF32(const Tensor& t);
  // The experts (one projection of one layer, expert order) stacked, uploading them on first use;
  // throws naming the tensor whose shape or type differs from the first expert's.
  const ExpertStack& GetExperts(const std::vector<const Tensor*>& experts);
  // Whether tensor t is a member of a stack (then Get has no copy of its own to make).
  bool Stacked(const Tensor& t) const { return stack_of_.count(t.data) != 0; }
  static bool Supported(DType t) {
    return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16 || Repacked(t);
  }
  uint64_t bytes() const { return bytes_; }
  // Drops device copies whose host tensor has died (a new tensor may reuse its address);
  // returns true when something was dropped (recorded programs must then be rebuilt).
  bool DropStale(const Tensor& t);

 private:
  using Key = std::tuple<const void*, size_t, int, bool>;  // data, bytes, dtype, as f32
  using StackKey = std::vector<const void*>;               // the experts' data, in order
  const DeviceWeight& Upload(const Tensor& t, const void* data, DType dtype, Key key);
  // Rows [0, n) of `src` (host rows of `dtype`, `cols` elements) into `dst` at `dst_offset`, in
  // the device layout (repacked for block types).
  void UploadRows(const uint8_t* src, DType dtype, int64_t cols, int64_t n, const Allocation& dst,
                  uint64_t dst_offset);
  void FreeStack(const StackKey& key);
  MemoryPool& pool_;
  StagingRing& staging_;
  std::map<Key, std::unique_ptr<DeviceWeight>> weights_;
  std::map<StackKey, std::unique_ptr<ExpertStack>> stacks_;
  std::map<const void*, std::pair<StackKey, size_t>> stack_of_;  // member data -> (stack, index)
  uint64_t bytes_ = 0;
};

}  // namespace es::vk
