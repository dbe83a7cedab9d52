// Fuzz target: a GGUF file's header, metadata and tensor table (src/formats/gguf_reader.cpp),
// then every metadata value and tensor info read back. Every failure must be one es::Error.
#include <cstddef>
#include <cstdint>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/formats/gguf.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  es::fuzz::TempFile file(std::string(reinterpret_cast<const char*>(data), size), ".gguf");
  try {
    auto f = es::GgufFile::Open(file.path());
    size_t n = 0;
    for (const auto& [key, value] : f->metadata()) n += key.size() + (f->Has(key) ? 1 : 0);
    for (const auto& t : f->tensor_infos()) n += t.name.size();
    if (n == size_t(-1)) std::abort();  // keeps the reads
  } catch (const es::Error&) {
  }
  return 0;
}
