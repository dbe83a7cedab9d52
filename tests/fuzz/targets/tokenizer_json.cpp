// Fuzz target: a tokenizer.json through the loader (src/tokenizer/tokenizer.cpp: limits, ids,
// added tokens, the pipeline), then a short text encoded and decoded again. Every failure must
// be one es::Error.
#include <cstddef>
#include <cstdint>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/tokenizer/tokenizer.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  es::fuzz::TempFile file(es::fuzz::Expand(data, size), "_tokenizer.json");
  try {
    auto tok = es::Tokenizer::Load(file.path());
    const auto ids = tok->Encode("Hello world, 123 <|im_end|> \xe4\xbd\xa0\xe5\xa5\xbd!", true);
    tok->Decode(ids);
  } catch (const es::Error&) {
  }
  return 0;
}
