// Constrained-decoding mask cost per decode step (Google Benchmark, one core) over the Qwen3
// vocabulary padded to 151,936 ids (.cache/tokenizers/qwen3, scripts/fetch_test_data.sh):
// Mask() for a JSON-schema state plus ApplyMask over a row of logits — what the engine pays per
// constrained row and step. "Cached" is a state met before (the steady case: masks are cached
// per automaton state); "FirstVisit" builds the state's mask by walking the token trie.
//   ES_SOURCE_DIR=. ./build/grammar_bench
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "edgeseek/internal/grammar/json_schema.h"
#include "edgeseek/internal/grammar/matcher.h"
#include "edgeseek/internal/tokenizer/tokenizer.h"

namespace {

using namespace es::grammar;

std::string SourceDir() {
  const char* s = std::getenv("ES_SOURCE_DIR");
  return s ? s : ".";
}

std::shared_ptr<const TokenTrie> Vocab() {
  static std::shared_ptr<const TokenTrie> v = [] {
    auto tok = es::Tokenizer::Load(SourceDir() + "/.cache/tokenizers/qwen3");
    std::vector<std::string> bytes(151936);
    for (int i = 0; i < tok->vocab_size() && i < 151936; ++i)
      if (!tok->IsSpecial(i)) bytes[size_t(i)] = tok->TokenBytes(i);
    return std::make_shared<const TokenTrie>(std::move(bytes));
  }();
  return v;
}

std::shared_ptr<const Grammar> Schema() {
  static auto g = std::make_shared<
      const Grammar>(Grammar::ParseGbnf(SchemaToGbnf(SchemaModel::Parse(nlohmann::ordered_json::parse(
      R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer","minimum":0,"maximum":150},
          "tags":{"type":"array","items":{"type":"string"}},"ok":{"type":"boolean"}},
          "required":["name","age","tags","ok"],"additionalProperties":false})")))));
  return g;
}

// Prefixes that end in typical states: inside a string value, before a key, inside an integer,
// inside an array of strings, at the start.
const char* kPrefixes[] = {"{\"name\": \"Ada Lov", "{\"name\": \"Ada\", ",
                           "{\"name\": \"Ada\", \"age\": 3",
                           "{\"name\": \"Ada\", \"age\": 36, \"tags\": [\"x\", \"", ""};
const char* kLabels[] = {"in_string", "before_key", "in_integer", "in_array_string", "start"};

void BM_MaskCached(benchmark::State& state) {
  Matcher m(Schema(), Vocab());
  if (!m.AcceptText(kPrefixes[state.range(0)])) state.SkipWithError("prefix refused");
  std::vector<float> logits(151936, 0.5f), row(logits.size());
  m.Mask();  // first visit outside the timing
  int allowed = 0;
  for (auto _ : state) {
    row = logits;  // the engine's row is fresh every step
    allowed = ApplyMask(m.Mask(), row.data(), int(row.size()));
    benchmark::DoNotOptimize(row.data());
  }
  state.SetLabel(std::string(kLabels[state.range(0)]) + " allowed=" + std::to_string(allowed));
}
BENCHMARK(BM_MaskCached)->DenseRange(0, 4)->Unit(benchmark::kMicrosecond);

void BM_CopyRowOnly(benchmark::State& state) {  // the row copy above, to subtract
  std::vector<float> logits(151936, 0.5f), row(logits.size());
  for (auto _ : state) {
    row = logits;
    benchmark::DoNotOptimize(row.data());
  }
}
BENCHMARK(BM_CopyRowOnly)->Unit(benchmark::kMicrosecond);

void BM_MaskFirstVisit(benchmark::State& state) {
  for (auto _ : state) {
    Matcher m(Schema(), Vocab());
    m.AcceptText(kPrefixes[state.range(0)]);
    benchmark::DoNotOptimize(m.Mask().data());
  }
  state.SetLabel(kLabels[state.range(0)]);
}
BENCHMARK(BM_MaskFirstVisit)->DenseRange(0, 4)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
