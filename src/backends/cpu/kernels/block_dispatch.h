// The one list of block-quantized weight types the CPU matmul kernels take, and the switch from a
// run-time DType to the block struct (include/edgeseek/internal/quant/blocks.h) that their
// templates are instantiated on — shared by the x86/portable driver (matmul_quant-inl.h) and the
// ARM64 one (matmul_quant_arm.cpp), so that a new type is added in one place.
//
//   DispatchBlockType(wtype, [&](auto tag) {
//     using Block = typename decltype(tag)::type;   // e.g. BlockQ4_K
//     ...
//   });
#pragma once

#include "edgeseek/internal/core/dtype.h"
#include "edgeseek/internal/quant/blocks.h"

namespace es::cpu {

// Names a block struct without making one (its value is never read).
template <class Block>
struct BlockTag {
  using type = Block;
};

// Calls f(BlockTag<Block>{}) for wtype's block struct and returns true; returns false without
// calling f for a type the quantized kernels do not take (dense or Q8_K).
template <class F>
bool DispatchBlockType(DType wtype, F&& f) {
  switch (wtype) {
    case DType::kQ8_0:
      f(BlockTag<BlockQ8_0>{});
      return true;
    case DType::kQ4_0:
      f(BlockTag<BlockQ4_0>{});
      return true;
    case DType::kQ4_1:
      f(BlockTag<BlockQ4_1>{});
      return true;
    case DType::kQ5_0:
      f(BlockTag<BlockQ5_0>{});
      return true;
    case DType::kQ5_1:
      f(BlockTag<BlockQ5_1>{});
      return true;
    case DType::kI4G:
      f(BlockTag<BlockI4G>{});
      return true;
    case DType::kQ4_K:
      f(BlockTag<BlockQ4_K>{});
      return true;
    case DType::kQ5_K:
      f(BlockTag<BlockQ5_K>{});
      return true;
    case DType::kQ6_K:
      f(BlockTag<BlockQ6_K>{});
      return true;
    default:
      return false;
  }
}

}  // namespace es::cpu
