// BpeModel: the "model" of tokenizer.json with type BPE. A word (one pre-token, already mapped
// to vocabulary characters) is split into characters, each looked up in the vocabulary (with
// continuing_subword_prefix / end_of_word_suffix, byte_fallback to <0xXX> tokens, unk fused or
// not, or dropped as `tokenizers` does), then merged pairwise by rank: merge ranks live in a
// hash map keyed by the id pair, the merge loop is a binary heap over a linked list of symbols.
// Results for short words are cached (a word seen once costs one hash lookup afterwards).
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace es::tok {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using Vocab = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

struct BpeOptions {
  std::string unk_token;  // "" = none
  std::string continuing_subword_prefix;
  std::string end_of_word_suffix;
  bool fuse_unk = false;
  bool byte_fallback = false;
  bool ignore_merges = false;
};

class BpeModel {
 public:
  // `merges` are (left, right) pairs in rank order; both sides and their concatenation must be in
  // the vocabulary (es::Error naming the merge index otherwise). `where` names the JSON field.
  BpeModel(Vocab vocab, const std::vector<std::pair<std::string, std::string>>& merges,
           BpeOptions options, const std::string& where);

  // Appends the ids of `word`. `word` is valid UTF-8.
  void Tokenize(std::string_view word, std::vector<int32_t>* out) const;

  int32_t TokenToId(std::string_view token) const;  // -1 if absent
  const std::string* IdToToken(int32_t id) const;   // nullptr if absent
  // `id` decodes to `token`, which an earlier id already has; TokenToId keeps that first id.
  // Throws es::Error when `id` is already taken.
  void AddAlias(int32_t id, const std::string& token);
  int32_t max_id() const { return static_cast<int32_t>(id_to_token_.size()) - 1; }
  size_t num_merges() const { return merges_.size(); }

 private:
  void TokenizeUncached(std::string_view word, std::vector<int32_t>* out) const;

  Vocab vocab_;
  std::vector<std::string> id_to_token_;  // [max id + 1]; "" for holes
  std::vector<bool> has_id_;
  // (left id << 32 | right id) -> (rank, merged id)
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;
  BpeOptions opt_;
  int32_t unk_id_ = -1;

  static constexpr size_t kMaxCachedWordBytes = 256;
  static constexpr size_t kMaxCacheEntries = 200000;
  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache_;
};

}  // namespace es::tok
