// Fuzz target: a config.json through ParseHfConfig and its validation (src/models/config.cpp),
// as a checkpoint with 4 layers would bound it. Every failure must be one es::Error.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>

#include "edgeseek/core/error.h"
#include "edgeseek/models/config.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(es::fuzz::Expand(data, size));
  } catch (const nlohmann::json::exception&) {
    return 0;
  }
  try {
    es::ParseHfConfig(j, "config.json", 4);
  } catch (const es::Error&) {
  }
  return 0;
}
