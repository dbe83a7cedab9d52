#include "grammar_util.h"

#include <fstream>

#include "edgeseek/internal/tokenizer/tokenizer.h"
#include "test_util.h"

namespace es::grammar::test {

std::shared_ptr<const TokenTrie> SmallVocab() {
  std::vector<std::string> v{""};
  for (int b = 0; b < 256; ++b) v.push_back(std::string(1, char(b)));
  for (const char* t :
       {"{",      "{\"",    "\":",      "\": ", "\",",  "\", \"",       "\"}",   "}}",
        "]}",     "},",     "[{",       "[[",   "]]",   "true",         "false", "null",
        "nul",    "tr",     "ue",       "12",   "345",  "-1",           "0.",    ".5",
        "e+",     "1e9",    "  ",       "\n",   "\n  ", "    ",         "name",  "age",
        "\"name", "city",   "ok\"",     "a,b",  "\\n",  "\\u00",        "\\\"",  "é",
        "\xC3",   "\xA9\"", "\xE2\x82", "\xAC", "日本", "\xF0\x9F\x98", "\x80"})
    v.push_back(t);
  return std::make_shared<TokenTrie>(std::move(v));
}

std::shared_ptr<const TokenTrie> QwenVocab() {
  const std::string path = es::test::SourceDir() + "/.cache/tokenizers/qwen3/tokenizer.json";
  if (!std::ifstream(path)) return nullptr;
  static std::shared_ptr<const TokenTrie> cached = [&] {
    auto tok = Tokenizer::Load(es::test::SourceDir() + "/.cache/tokenizers/qwen3");
    std::vector<std::string> bytes(151936);
    for (int i = 0; i < tok->vocab_size() && i < 151936; ++i)
      if (!tok->IsSpecial(i)) bytes[size_t(i)] = tok->TokenBytes(i);
    return std::make_shared<const TokenTrie>(std::move(bytes));
  }();
  return cached;
}

std::string RandomWalk(Matcher m, const TokenTrie& vocab, uint64_t seed, int max_tokens,
                       bool* complete) {
  std::mt19937_64 rng(seed);
  std::string text;
  *complete = false;
  for (int step = 0; step < max_tokens; ++step) {
    if (m.accepting() && (!m.can_continue() || rng() % 4 == 0)) {
      *complete = true;
      return text;
    }
    const std::vector<uint64_t>& mask = m.Mask();
    std::vector<int32_t> allowed;
    for (int32_t id = 0; id < vocab.vocab_size(); ++id)
      if ((mask[size_t(id) >> 6] >> (id & 63)) & 1) allowed.push_back(id);
    if (allowed.empty()) return text;
    const int32_t pick = allowed[rng() % allowed.size()];
    if (!m.Accept(pick)) return text + "<<mask allowed a token Accept refused>>";
    text += vocab.bytes(pick);
  }
  *complete = m.accepting();
  return text;
}

}  // namespace es::grammar::test
