// Requantizing a GGUF file by policy (what `edgeseek quantize` runs): every tensor is
// dequantized from its source type and quantized to the type ChooseType picks, rows spread over
// a thread pool; tensors whose type does not change are copied byte for byte. The input is
// mmapped and the output written a slice of rows at a time (StreamStepRows), so memory holds
// one slice, not a tensor or the model. Metadata is
// copied, with general.file_type and general.quantization_version updated. The output is a
// pure function of the input file and the policy (not of the thread count).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "edgeseek/internal/core/dtype.h"
#include "edgeseek/internal/formats/quant_policy.h"

namespace es {

class ThreadPool;

// Re-encodes `rows` rows of `cols` elements from src_type (row r at src_row(r)) as dst_type into
// `out` (rows × RowBytes(dst_type, cols) bytes), rows spread over `pool`. Each row is encoded by
// the same scalar code whichever thread runs it, so the bytes do not depend on the thread count.
// A row that cannot be encoded (a non-finite weight) fails with "<where>: tensor <name> row <r>:
// <why>", naming the lowest such row whatever the timing; r counts from `first_row` (the row of
// the tensor that src_row(0) is, when a tensor is re-encoded a slice at a time).
void RequantizeRows(ThreadPool& pool, DType src_type,
                    const std::function<const uint8_t*(int64_t)>& src_row, DType dst_type,
                    int64_t rows, int64_t cols, uint8_t* out, const std::string& where,
                    const std::string& name, int64_t first_row = 0);

// Rows a streaming converter re-encodes per step: about 8 MB of input or output (the larger),
// at least one. Convert, quantize and quantize-at-load hold one such slice (plus the thread
// scratch rows) instead of a whole tensor.
int64_t StreamStepRows(size_t in_row_bytes, size_t out_row_bytes);

// Hands the resident pages of [data, data + nbytes) back to the kernel (the whole pages inside
// it). Only for views of a read-only file mapping (GGUF, safetensors): the pages refault from the
// file if read again, so nothing changes but RSS, which then holds what is being converted
// instead of every page read so far. On anonymous memory it would zero the bytes.
void DropMappedPages(const void* data, size_t nbytes);

struct GgufQuantizeOptions {
  int threads = 0;  // <= 0: one per hardware thread
  // Called after each tensor: bytes of input processed so far, total input tensor bytes, and
  // the tensor just finished.
  std::function<void(uint64_t done, uint64_t total, const std::string& tensor)> progress;
};

struct GgufQuantizeStats {
  size_t tensors = 0;
  size_t requantized = 0;  // converted to another type
  size_t copied = 0;       // kept verbatim
  uint64_t in_bytes = 0;   // tensor data bytes in / out
  uint64_t out_bytes = 0;
  std::map<DType, size_t> out_types;  // tensor count per output type
  double seconds = 0;
};

GgufQuantizeStats QuantizeGguf(const std::string& in_path, const std::string& out_path,
                               const QuantPolicy& policy, const GgufQuantizeOptions& options = {});

}  // namespace es
