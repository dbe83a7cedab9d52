// BPE word splitting and the rank-ordered merge loop (same order as `tokenizers`' Word::merge_all:
// lowest rank first, ties by leftmost position).
#include "bpe_model.h"

#include <cstdio>
#include <queue>

#include "edgeseek/internal/core/error.h"
#include "utf8.h"

namespace es::tok {

BpeModel::BpeModel(Vocab vocab, const std::vector<std::pair<std::string, std::string>>& merges,
                   BpeOptions options, const std::string& where)
    : vocab_(std::move(vocab)), opt_(std::move(options)) {
  int32_t max_id = -1;
  for (const auto& [tok, id] : vocab_) {
    if (id < 0) Fail(where, ".vocab: negative id ", id, " for token '", tok, "'");
    max_id = std::max(max_id, id);
  }
  id_to_token_.assign(static_cast<size_t>(max_id + 1), std::string());
  has_id_.assign(static_cast<size_t>(max_id + 1), false);
  for (const auto& [tok, id] : vocab_) {
    // Two tokens with one id would decode that id to either of them.
    if (has_id_[id])
      Fail(where, ".vocab: id ", id, " is given to both '", id_to_token_[id], "' and '", tok, "'");
    id_to_token_[id] = tok;
    has_id_[id] = true;
  }
  merges_.reserve(merges.size() * 2);
  const size_t prefix_len = opt_.continuing_subword_prefix.size();
  for (size_t r = 0; r < merges.size(); ++r) {
    const auto& [a, b] = merges[r];
    const int32_t ia = TokenToId(a), ib = TokenToId(b);
    if (ia < 0 || ib < 0)
      Fail(where, ".merges[", r, "]: token '", ia < 0 ? a : b, "' is not in the vocabulary");
    // With a continuing-subword prefix the merged token drops the right side's prefix.
    std::string merged = a;
    if (prefix_len && b.compare(0, prefix_len, opt_.continuing_subword_prefix) == 0)
      merged += b.substr(prefix_len);
    else
      merged += b;
    const int32_t im = TokenToId(merged);
    if (im < 0)
      Fail(where, ".merges[", r, "]: merged token '", merged, "' is not in the vocabulary");
    const uint64_t key = (uint64_t(uint32_t(ia)) << 32) | uint32_t(ib);
    merges_.insert_or_assign(
        key, std::make_pair(int32_t(r), im));  // a repeated pair: last wins, as in `tokenizers`
  }
  if (!opt_.unk_token.empty()) {
    unk_id_ = TokenToId(opt_.unk_token);
    if (unk_id_ < 0) Fail(where, ".unk_token: '", opt_.unk_token, "' is not in the vocabulary");
  }
}

int32_t BpeModel::TokenToId(std::string_view token) const {
  auto it = vocab_.find(token);
  return it == vocab_.end() ? -1 : it->second;
}

const std::string* BpeModel::IdToToken(int32_t id) const {
  if (id < 0 || size_t(id) >= id_to_token_.size() || !has_id_[id]) return nullptr;
  return &id_to_token_[id];
}

void BpeModel::AddAlias(int32_t id, const std::string& token) {
  ES_CHECK(id >= 0, "vocabulary: negative id ", id, " for token '", token, "'");
  if (size_t(id) >= id_to_token_.size()) {
    id_to_token_.resize(size_t(id) + 1);
    has_id_.resize(size_t(id) + 1, false);
  }
  if (has_id_[id])
    Fail("vocabulary: id ", id, " is given to both '", id_to_token_[id], "' and '", token, "'");
  id_to_token_[id] = token;
  has_id_[id] = true;
}

void BpeModel::Tokenize(std::string_view word, std::vector<int32_t>* out) const {
  if (word.empty()) return;
  if (opt_.ignore_merges) {
    const int32_t id = TokenToId(word);
    if (id >= 0) {
      out->push_back(id);
      return;
    }
  }
  const bool cacheable = word.size() <= kMaxCachedWordBytes;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mu_);
    auto it = cache_.find(word);
    if (it != cache_.end()) {
      out->insert(out->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t first = out->size();
  TokenizeUncached(word, out);
  if (cacheable) {
    std::vector<int32_t> ids(out->begin() + first, out->end());
    std::lock_guard<std::mutex> lock(cache_mu_);
    if (cache_.size() >= kMaxCacheEntries) cache_.clear();
    cache_.emplace(std::string(word), std::move(ids));
  }
}

namespace {

struct Symbol {
  int32_t id;
  int32_t prev, next;  // -1 at the ends
  bool alive;
};

struct MergeCand {
  int32_t rank;
  int32_t pos;
  int32_t new_id;
  bool operator>(const MergeCand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};

}  // namespace

void BpeModel::TokenizeUncached(std::string_view word, std::vector<int32_t>* out) const {
  std::vector<Symbol> sym;
  sym.reserve(word.size());
  auto add = [&sym](int32_t id) {
    const int32_t n = static_cast<int32_t>(sym.size());
    sym.push_back({id, n - 1, -1, true});
    if (n > 0) sym[n - 1].next = n;
  };
  int32_t pending_unk = -1;  // an unk waiting to be emitted (so that it can be fused)
  std::string buf;
  size_t i = 0;
  while (i < word.size()) {
    const size_t b = i;
    i += Utf8Len(static_cast<unsigned char>(word[i]));
    const bool is_first = b == 0, is_last = i >= word.size();
    std::string_view piece = word.substr(b, i - b);
    if ((!is_first && !opt_.continuing_subword_prefix.empty()) ||
        (is_last && !opt_.end_of_word_suffix.empty())) {
      buf.clear();
      if (!is_first) buf += opt_.continuing_subword_prefix;
      buf += piece;
      if (is_last) buf += opt_.end_of_word_suffix;
      piece = buf;
    }
    const int32_t id = TokenToId(piece);
    if (id >= 0) {
      if (pending_unk >= 0) {
        add(pending_unk);
        pending_unk = -1;
      }
      add(id);
      continue;
    }
    if (opt_.byte_fallback) {
      std::vector<int32_t> bytes;
      bool ok = true;
      for (const char c : piece) {
        char name[8];
        std::snprintf(name, sizeof(name), "<0x%02X>", static_cast<unsigned char>(c));
        const int32_t bid = TokenToId(name);
        if (bid < 0) {
          ok = false;
          break;
        }
        bytes.push_back(bid);
      }
      if (ok) {
        // As in `tokenizers`, a pending unk is not flushed before byte pieces.
        for (const int32_t bid : bytes) add(bid);
        continue;
      }
    }
    if (unk_id_ >= 0) {
      if (pending_unk >= 0 && !opt_.fuse_unk) add(pending_unk);
      pending_unk = unk_id_;
    }
    // No unk token: the character is dropped, as `tokenizers` does.
  }
  if (pending_unk >= 0) add(pending_unk);

  if (sym.size() > 1) {
    std::priority_queue<MergeCand, std::vector<MergeCand>, std::greater<>> heap;
    auto lookup = [this](int32_t a, int32_t b) -> const std::pair<int32_t, int32_t>* {
      auto it = merges_.find((uint64_t(uint32_t(a)) << 32) | uint32_t(b));
      return it == merges_.end() ? nullptr : &it->second;
    };
    for (size_t k = 0; k + 1 < sym.size(); ++k)
      if (const auto* m = lookup(sym[k].id, sym[k + 1].id))
        heap.push({m->first, int32_t(k), m->second});
    while (!heap.empty()) {
      const MergeCand top = heap.top();
      heap.pop();
      Symbol& cur = sym[top.pos];
      if (!cur.alive || cur.next < 0) continue;
      const int32_t next_pos = cur.next;
      const auto* m = lookup(cur.id, sym[next_pos].id);
      if (!m || m->second != top.new_id) continue;  // stale entry
      cur.id = top.new_id;
      Symbol& right = sym[next_pos];
      right.alive = false;
      cur.next = right.next;
      if (right.next >= 0) sym[right.next].prev = top.pos;
      if (cur.prev >= 0)
        if (const auto* pm = lookup(sym[cur.prev].id, cur.id))
          heap.push({pm->first, cur.prev, pm->second});
      if (cur.next >= 0)
        if (const auto* nm = lookup(cur.id, sym[cur.next].id))
          heap.push({nm->first, top.pos, nm->second});
    }
  }
  for (const auto& s : sym)
    if (s.alive) out->push_back(s.id);
}

}  // namespace es::tok
