// AddedVocabulary: the "added_tokens" of tokenizer.json, matched before the model sees the text,
// as `tokenizers` does: first the tokens with normalized=false on the raw text, then, after each
// remaining piece is normalized, the tokens with normalized=true (their normalized form) on the
// normalized pieces. Matching is leftmost-longest over a byte trie; lstrip/rstrip swallow
// whitespace next to a match, single_word rejects matches inside a word.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "bpe_model.h"
#include "pieces.h"

namespace es::tok {

class Normalizer;

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;
  bool lstrip = false, rstrip = false, normalized = false, single_word = false;
};

// Longest added token accepted. Real ones are short (DeepSeek-V3's longest is 33 bytes, Llama 3's
// 30, Qwen3's 20); matching costs up to this many steps per byte of text, and the trie a node
// per byte: a 10 MB token took 5 s and 828 MB to load and made tokenization quadratic.
inline constexpr size_t kMaxAddedTokenBytes = 256;

class AddedVocabulary {
 public:
  // `normalizer` (may be null) gives the normalized form of normalized=true tokens. Throws
  // es::Error for a token longer than kMaxAddedTokenBytes or two tokens with one id.
  void Build(std::vector<AddedToken> tokens, const Normalizer* normalizer);
  const std::vector<AddedToken>& tokens() const { return tokens_; }
  const AddedToken* ById(int32_t id) const;
  int32_t IdOf(std::string_view content) const;  // -1 if absent

  // Splits every non-token piece on the tokens of one trie (raw: normalized=false tokens;
  // otherwise the normalized=true ones). Empty pieces are dropped.
  void Split(std::vector<Piece>* pieces, bool normalized_trie) const;

 private:
  struct Trie {
    struct Node {
      std::vector<std::pair<uint8_t, int32_t>> next;  // sorted by byte
      int32_t token = -1;                             // index into tokens_ when a token ends here
    };
    std::vector<Node> nodes{Node{}};
    bool first_byte[256] = {};
    bool empty() const { return nodes.size() == 1; }
    void Add(std::string_view s, int32_t token);
    // Longest token starting at text[i]: its index and length, or -1.
    int32_t LongestAt(std::string_view text, size_t i, size_t* len) const;
  };
  void SplitOne(Piece&& p, const Trie& trie, std::vector<Piece>* out) const;

  std::vector<AddedToken> tokens_;
  std::unordered_map<int32_t, size_t> by_id_;
  Vocab by_content_;
  Trie raw_, norm_;
};

}  // namespace es::tok
