// `edgeseek tokenize`: text on stdin -> JSON id array (or ids -> text with --decode), through the
// library Tokenizer. Contract used by outside checks:
//   edgeseek tokenize --tokenizer PATH [--special] [--jsonl] [--decode]
// --jsonl: one {"text": ...} (or {"ids": [...]} with --decode) per input line, one JSON result per
// output line. Bad input names the line (and JSON byte position) and exits non-zero.
#include <cstdio>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/tokenizer/tokenizer.h"
#include "verb.h"

namespace es::tools {
namespace {

struct TokenizeArgs {
  std::string tokenizer;
  bool special = false, jsonl = false, decode = false;
};

std::vector<int32_t> IdsFromJson(const nlohmann::json& a, const Tokenizer& tok,
                                 const std::string& where) {
  if (!a.is_array()) Fail(where, ": expected a JSON array of token ids");
  std::vector<int32_t> ids;
  ids.reserve(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    if (!a[i].is_number_integer()) Fail(where, ": element ", i, " is not an integer id");
    const int64_t v = a[i].get<int64_t>();
    if (v < 0 || v > INT32_MAX || !tok.IsValid(static_cast<int32_t>(v)))
      Fail(where, ": id ", v, " at index ", i, " is out of range (vocabulary size ",
           tok.vocab_size(), ")");
    ids.push_back(static_cast<int32_t>(v));
  }
  return ids;
}

nlohmann::json ParseLine(const std::string& line, const std::string& where) {
  try {
    return nlohmann::json::parse(line);
  } catch (const nlohmann::json::parse_error& e) {
    Fail(where, ": malformed JSON at byte ", e.byte, ": ", e.what());
  }
}

int RunTokenize(const TokenizeArgs& a) {
  const auto tok = Tokenizer::Load(a.tokenizer);
  std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  std::string out;
  if (!a.jsonl) {
    if (a.decode) {
      const auto ids = IdsFromJson(ParseLine(input, "stdin"), *tok, "stdin");
      out = tok->Decode(ids, false);
    } else {
      out = nlohmann::json(tok->Encode(input, a.special)).dump() + "\n";
    }
  } else {
    size_t pos = 0, line_no = 0;
    while (pos < input.size()) {
      size_t nl = input.find('\n', pos);
      if (nl == std::string::npos) nl = input.size();
      std::string line = input.substr(pos, nl - pos);
      pos = nl + 1;
      ++line_no;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank line
      const std::string where = "stdin line " + std::to_string(line_no);
      const nlohmann::json j = ParseLine(line, where);
      if (a.decode) {
        const nlohmann::json& arr = j.is_object() && j.contains("ids") ? j["ids"] : j;
        const std::string text = tok->Decode(IdsFromJson(arr, *tok, where), false);
        out += nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
               "\n";
      } else {
        if (!j.is_object() || !j.contains("text") || !j["text"].is_string())
          Fail(where, ": expected an object {\"text\": \"...\"}");
        out += nlohmann::json(tok->Encode(j["text"].get<std::string>(), a.special)).dump() + "\n";
      }
    }
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  std::fflush(stdout);
  return 0;
}

VerbRun Setup(CLI::App& sub) {
  auto args = std::make_shared<TokenizeArgs>();
  sub.add_option("--tokenizer", args->tokenizer, "folder with tokenizer.json, or a tokenizer.json")
      ->required();
  sub.add_flag("--special", args->special,
               "add special tokens (post-processor, add_bos/eos_token)");
  sub.add_flag("--jsonl", args->jsonl, "one JSON object per input line");
  sub.add_flag("--decode", args->decode, "input is ids, output is text");
  return [args] { return RunTokenize(*args); };
}

VerbRegistrar reg("tokenize", "text on stdin -> token ids (or ids -> text with --decode)", Setup);

}  // namespace
}  // namespace es::tools
