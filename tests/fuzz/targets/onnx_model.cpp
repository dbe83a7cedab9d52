// Fuzz target: one ONNX file (src/formats/onnx: the wire-format split, ModelProto parsing,
// initializers as views of the mapped file, the graph's nodes into OpGraph). External data
// files are not given: a tensor that names one must fail as one es::Error, as must every other
// failure.
#include <cstddef>
#include <cstdint>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/formats/onnx.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  es::fuzz::TempFile file(std::string(reinterpret_cast<const char*>(data), size), ".onnx");
  try {
    const es::OpGraph g = es::ReadOnnx(file.path());
    if (g.nodes.size() == size_t(-1)) std::abort();  // keeps the read
  } catch (const es::Error&) {
  }
  return 0;
}
