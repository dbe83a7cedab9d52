// Pre-tokenizers of tokenizer.json ("pre_tokenizer"): Split (PCRE2 regex or literal, every split
// behavior, invert), ByteLevel (add_prefix_space, use_regex with GPT-2's regex, byte -> char
// map), Digits, Metaspace, Whitespace, WhitespaceSplit, Punctuation, CharDelimiterSplit,
// Sequence. Each one replaces every piece that is not an added token by its sub-pieces.
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "pieces.h"

namespace es::tok {

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  void PreTokenize(std::vector<Piece>* pieces) const;
  // Appends the sub-pieces of one (non added-token) piece.
  virtual void SplitOne(Piece&& piece, std::vector<Piece>* out) const = 0;
};

// null json -> nullptr. Unknown "type" -> es::Error naming it; `where` names the JSON field.
std::unique_ptr<PreTokenizer> MakePreTokenizer(const nlohmann::json& j, const std::string& where);
// A Split(regex, Isolated) followed by ByteLevel(add_prefix_space=false, use_regex=false): what a
// GGUF "gpt2"-style vocabulary implies. Empty regex: ByteLevel with GPT-2's own regex.
std::unique_ptr<PreTokenizer> MakeByteLevelSplit(const std::string& regex);

}  // namespace es::tok
