// Fuzz target: a config.json's text through what LoadHfConfig does after reading the file
// (src/models/config.cpp): json_field::Parse (the nesting bound, then nlohmann), ParseHfConfig
// and its validation, as a checkpoint with 4 layers would bound it. Every failure must be one
// es::Error. In memory: writing each input to a file and reading it back (up to 4 MB once
// Expand has grown it) cost more than the parse.
#include <cstddef>
#include <cstdint>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/core/json_field.h"
#include "edgeseek/internal/models/config.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text = es::fuzz::Expand(data, size);
  try {
    es::ParseHfConfig(es::json_field::Parse(text, "config.json"), "config.json", 4);
  } catch (const es::Error&) {
  }
  return 0;
}
