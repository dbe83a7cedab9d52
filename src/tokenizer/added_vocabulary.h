// AddedVocabulary: the "added_tokens" of tokenizer.json, matched before the model sees the text,
// as `tokenizers` does: first the tokens with normalized=false on the raw text, then, after each
// remaining piece is normalized, the tokens with normalized=true (their normalized form) on the
// normalized pieces. Matching is leftmost-longest (the aho-corasick crate's LeftmostLongest, which
// `tokenizers` uses) in time linear in the text: an Aho-Corasick automaton over the reversed
// tokens, run from the text's end, gives the longest token starting at every byte in one pass;
// the matches are then taken left to right. lstrip/rstrip swallow whitespace next to a match,
// single_word rejects matches inside a word.
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
// 30, Qwen3's 20); the automaton holds a node per byte of the tokens: a 10 MB token took 5 s and
// 828 MB to load.
inline constexpr size_t kMaxAddedTokenBytes = 256;

class AddedVocabulary {
 public:
  // `normalizer` (may be null) gives the normalized form of normalized=true tokens. Throws
  // es::Error for a token longer than kMaxAddedTokenBytes or two tokens with one id.
  void Build(std::vector<AddedToken> tokens, const Normalizer* normalizer);
  const std::vector<AddedToken>& tokens() const { return tokens_; }
  // A token only decoded: its content is an earlier id's (IdOf and matching keep that one).
  // Throws es::Error when its id is already taken. After Build.
  void AddDecodeOnly(AddedToken token);
  const AddedToken* ById(int32_t id) const;
  int32_t IdOf(std::string_view content) const;  // -1 if absent

  // Splits every non-token piece on the tokens of one matcher (raw: normalized=false tokens;
  // otherwise the normalized=true ones). Empty pieces are dropped.
  void Split(std::vector<Piece>* pieces, bool normalized_trie) const;

  // Aho-Corasick automaton over reversed strings: fed a text backwards, it knows after each byte
  // text[i] the longest added string that starts at i. Building and matching are linear in the
  // tokens' and the text's bytes (each failure link followed undoes an earlier step down).
  class Matcher {
   public:
    bool empty() const { return nodes_.size() == 1; }
    // Adds s (reversed); the first token added with a given content keeps it.
    void Add(std::string_view s, int32_t token);
    void Finish();  // failure and output links; after the last Add, before matching
    // longest[i]: the node of the longest string starting at text[i], or -1; for every i
    // (4 bytes per byte of text, held only while one piece is split).
    void LongestFrom(std::string_view text, std::vector<int32_t>* longest) const;
    int32_t token(int32_t node) const { return nodes_[node].token; }  // the caller's index
    size_t length(int32_t node) const { return nodes_[node].depth; }

   private:
    struct Node {
      std::vector<std::pair<uint8_t, int32_t>> next;  // children, sorted by byte
      int32_t fail = 0;    // the node of the longest proper suffix that is in the automaton
      int32_t out = -1;    // this node or the nearest on its failure chain that ends a string
      int32_t token = -1;  // the string ending exactly here, if any
      uint32_t depth = 0;
    };
    int32_t Child(int32_t n, uint8_t c) const;
    int32_t Step(int32_t n, uint8_t c) const;  // goto, following failure links
    std::vector<Node> nodes_{Node{}};
    int32_t root_next_[256] =
        {};  // the root's children as a table (Finish): most bytes start nothing
  };

 private:
  void SplitOne(Piece&& p, const Matcher& matcher, std::vector<Piece>* out) const;

  std::vector<AddedToken> tokens_;
  std::unordered_map<int32_t, size_t> by_id_;
  Vocab by_content_;
  Matcher raw_, norm_;
};

}  // namespace es::tok
