// Fuzz target: the structured-output compilers (src/grammar/). The first byte picks the input:
// even, the rest is GBNF (Grammar::ParseGbnf); odd, a JSON schema compiled as the server does
// (SchemaModel::Parse, SchemaToGbnf, then ParseGbnf of its output, which is where a schema that
// no value satisfies is refused: Grammar::Finish decides it). Every failure must be one
// es::Error; text that is not JSON is a nlohmann parse error, which the server answers first.
#include "edgeseek/internal/grammar/grammar.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/grammar/json_schema.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string text = es::fuzz::Expand(data + 1, size - 1);
  if (data[0] % 2 == 0) {
    try {
      es::grammar::Grammar::ParseGbnf(text);
    } catch (const es::Error&) {
    }
    return 0;
  }
  nlohmann::ordered_json schema;
  try {
    schema = nlohmann::ordered_json::parse(text, nullptr, true, false);
  } catch (const nlohmann::json::exception&) {
    return 0;
  }
  try {
    es::grammar::Grammar::ParseGbnf(
        es::grammar::SchemaToGbnf(es::grammar::SchemaModel::Parse(schema)));
  } catch (const es::Error&) {
  }
  return 0;
}
