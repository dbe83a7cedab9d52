// Fuzz target: a config.json through LoadHfConfig (src/models/config.cpp: the nesting bound and
// the checked reads of edgeseek/internal/core/json_field.h, ParseHfConfig and its validation), as a
// checkpoint with 4 layers would bound it. Every failure must be one es::Error.
#include <cstddef>
#include <cstdint>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/models/config.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  es::fuzz::TempFile file(es::fuzz::Expand(data, size), "_config.json");
  try {
    es::LoadHfConfig(file.path(), 4);
  } catch (const es::Error&) {
  }
  return 0;
}
