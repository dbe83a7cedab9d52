// Fuzz target: one safetensors file (its 8-byte length, JSON header and offsets;
// src/formats/safetensors.cpp), then every tensor looked up. Every failure must be one es::Error.
#include <cstddef>
#include <cstdint>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/formats/safetensors.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  es::fuzz::TempFile file(std::string(reinterpret_cast<const char*>(data), size), ".safetensors");
  try {
    auto set = es::SafetensorsSet::Open(file.path());
    size_t n = 0;
    for (const std::string& name : set->Names()) n += set->Get(name).name.size();
    if (n + set->total_bytes() == size_t(-1)) std::abort();  // keeps the reads
  } catch (const es::Error&) {
  }
  return 0;
}
