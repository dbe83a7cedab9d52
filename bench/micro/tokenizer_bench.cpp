// Tokenizer encode/decode throughput on one core (Google Benchmark), for the real tokenizers in
// .cache/tokenizers (scripts/fetch_test_data.sh) and the tiny test tokenizer. Input: ~1 MB of
// English made deterministically from the English cases of tests/golden/tokenizer/corpus.jsonl
// (sentences drawn with a fixed seed, words shuffled within sentences so the word cache sees a
// realistic mix of repeats and new words). Reports bytes/s of input text.
//   ES_SOURCE_DIR=. ./build/tokenizer_bench --benchmark_filter=Encode
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "edgeseek/internal/tokenizer/tokenizer.h"

namespace {

std::string SourceDir() {
  const char* s = std::getenv("ES_SOURCE_DIR");
  return s ? s : ".";
}

const std::string& EnglishText() {
  static const std::string text = [] {
    std::vector<std::string> words;
    std::ifstream f(SourceDir() + "/tests/golden/tokenizer/corpus.jsonl");
    std::string line;
    while (std::getline(f, line)) {
      const auto j = nlohmann::json::parse(line);
      if (!j.contains("text") || j["name"].get<std::string>().rfind("en_", 0) != 0) continue;
      std::istringstream ss(j["text"].get<std::string>());
      std::string w;
      while (ss >> w) words.push_back(w);
    }
    if (words.empty())
      words = {"The", "quick", "brown", "fox", "jumps", "over", "the", "lazy", "dog."};
    std::mt19937 rng(1234);
    std::string out;
    while (out.size() < (1 << 20)) {
      const int n = 5 + int(rng() % 20);
      for (int i = 0; i < n; ++i) {
        out += words[rng() % words.size()];
        out += ' ';
      }
      out.back() = rng() % 4 == 0 ? '\n' : ' ';
    }
    return out;
  }();
  return text;
}

const es::Tokenizer* Get(const std::string& name) {
  static std::vector<std::pair<std::string, std::unique_ptr<es::Tokenizer>>> cache;
  for (auto& [n, t] : cache)
    if (n == name) return t.get();
  const std::string path = name == "tiny" ? SourceDir() + "/tests/data/tiny_tokenizer"
                                          : SourceDir() + "/.cache/tokenizers/" + name;
  cache.emplace_back(name, es::Tokenizer::Load(path));
  return cache.back().second.get();
}

void BM_Encode(benchmark::State& state, const std::string& name) {
  const es::Tokenizer* t = Get(name);
  const std::string& text = EnglishText();
  size_t n_ids = 0;
  for (auto _ : state) {
    auto ids = t->Encode(text);
    n_ids = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(text.size()));
  state.counters["tokens"] = double(n_ids);
}

void BM_Decode(benchmark::State& state, const std::string& name) {
  const es::Tokenizer* t = Get(name);
  const auto ids = t->Encode(EnglishText());
  for (auto _ : state) {
    auto s = t->Decode(ids);
    benchmark::DoNotOptimize(s.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(EnglishText().size()));
}

BENCHMARK_CAPTURE(BM_Encode, deepseek_v3, std::string("deepseek_v3"))
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Encode, qwen3, std::string("qwen3"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Encode, llama3_1, std::string("llama3_1"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Encode, tiny, std::string("tiny"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Decode, qwen3, std::string("qwen3"))->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
