// Helpers shared by the tokenizer tests: loading the real tokenizers once per process, base64,
// JSONL reading, and building a Tokenizer from a tokenizer.json snippet.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "edgeseek/internal/tokenizer/tokenizer.h"

namespace es::test {

// .cache/tokenizers/<name> under the source dir; the test FAILS (throws) when it is absent.
const Tokenizer& RealTokenizer(const std::string& name);
std::string RealTokenizerDir(const std::string& name);
std::string Base64Decode(const std::string& s);
std::vector<nlohmann::json> ReadJsonl(const std::string& path);
// A byte-level BPE over the 256 byte characters plus `merges`, with the given components merged
// into the tokenizer.json object (keys "normalizer", "pre_tokenizer", ... of `extra`).
nlohmann::json ByteLevelJson(const std::vector<std::string>& merges, const nlohmann::json& extra);
std::unique_ptr<Tokenizer> FromJsonText(const std::string& tokenizer_json,
                                        const std::string& config_json = "");

}  // namespace es::test
