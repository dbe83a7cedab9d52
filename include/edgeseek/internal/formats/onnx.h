// ONNX reader: a .onnx file (protobuf ModelProto, parsed with the generated classes of Debian's
// libonnx-dev) -> an OpGraph (edgeseek/internal/graph/op_graph.h) whose constants view the mapped
// files.
//
//  - Initializers with raw_data are views of the mapped .onnx file: the reader walks the wire
//    format with protobuf's CodedInputStream to find where each raw_data field lies and parses
//    every message without those bytes, so weights are not copied — except a view whose address
//    is not a multiple of its element size (raw_data lies wherever the protobuf put it): reading
//    it as f32/f16/i32 would be undefined behaviour, so it is copied into aligned memory. External
//    data (data_location EXTERNAL: location / offset / length, paths relative to the model's
//    folder) are views of the mapped data files. Typed fields (float_data, int32_data, ...) are
//    copied (small tensors: what exporters write for scalars and shapes).
//  - Constant nodes become constants; int64/bool/int8 shape-like tensors become int_constants.
//  - Graph inputs and outputs keep their dynamic axes as symbols (batch_size, sequence_length,
//    past_sequence_length, total_sequence_length, ...).
// A truncated or corrupt file, an external file outside the model's folder or too short, or a
// tensor whose bytes disagree with its shape is one es::Error naming the file and the tensor.
#pragma once

#include <string>

#include "edgeseek/internal/graph/op_graph.h"

namespace es {

struct OnnxModelInfo {
  int64_t ir_version = 0;
  std::string producer_name, producer_version;
  size_t file_bytes = 0, external_bytes = 0;
  size_t aligned_copies = 0, aligned_copy_bytes = 0;  // misaligned raw_data copied to align it
};

// Reads `path` (a .onnx file). Throws es::Error naming the file and what is wrong.
OpGraph ReadOnnx(const std::string& path, OnnxModelInfo* info = nullptr);

}  // namespace es
