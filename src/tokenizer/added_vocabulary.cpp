// Added-token matching (AddedVocabulary::find_matches in `tokenizers`).
#include "added_vocabulary.h"

#include <algorithm>

#include "edgeseek/core/error.h"

#include "normalizers.h"
#include "utf8.h"

namespace es::tok {

void AddedVocabulary::Trie::Add(std::string_view s, int32_t token) {
  if (s.empty()) return;
  first_byte[static_cast<uint8_t>(s[0])] = true;
  int32_t n = 0;
  for (const char ch : s) {
    const auto c = static_cast<uint8_t>(ch);
    auto& nx = nodes[n].next;
    auto it = std::lower_bound(nx.begin(), nx.end(), std::make_pair(c, int32_t(-1)),
                               [](const auto& a, const auto& b) { return a.first < b.first; });
    if (it != nx.end() && it->first == c) {
      n = it->second;
    } else {
      const int32_t child = static_cast<int32_t>(nodes.size());
      nx.insert(it, {c, child});  // invalidates `nx` only after use
      nodes.push_back(Node{});
      n = child;
    }
  }
  if (nodes[n].token < 0) nodes[n].token = token;
}

int32_t AddedVocabulary::Trie::LongestAt(std::string_view text, size_t i, size_t* len) const {
  int32_t n = 0, best = -1;
  for (size_t k = i; k < text.size(); ++k) {
    const auto c = static_cast<uint8_t>(text[k]);
    const auto& nx = nodes[n].next;
    auto it = std::lower_bound(nx.begin(), nx.end(), std::make_pair(c, int32_t(-1)),
                               [](const auto& a, const auto& b) { return a.first < b.first; });
    if (it == nx.end() || it->first != c) break;
    n = it->second;
    if (nodes[n].token >= 0) {
      best = nodes[n].token;
      *len = k + 1 - i;
    }
  }
  return best;
}

void AddedVocabulary::Build(std::vector<AddedToken> tokens, const Normalizer* normalizer) {
  tokens_ = std::move(tokens);
  by_id_.clear();
  by_content_.clear();
  raw_ = Trie{};
  norm_ = Trie{};
  for (size_t k = 0; k < tokens_.size(); ++k) {
    const AddedToken& t = tokens_[k];
    ES_CHECK(t.content.size() <= kMaxAddedTokenBytes, "added token ", t.id, " is ",
             t.content.size(), " bytes long (at most ", kMaxAddedTokenBytes, " supported)");
    if (auto it = by_id_.find(t.id); it != by_id_.end() && tokens_[it->second].content != t.content)
      Fail("added tokens '", tokens_[it->second].content, "' and '", t.content,
           "' have the same id ", t.id);
    by_id_[t.id] = k;
    by_content_.emplace(t.content, t.id);
    if (t.normalized) {
      std::string n = t.content;
      if (normalizer) normalizer->Normalize(&n);
      norm_.Add(n, int32_t(k));
    } else {
      raw_.Add(t.content, int32_t(k));
    }
  }
}

const AddedToken* AddedVocabulary::ById(int32_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

int32_t AddedVocabulary::IdOf(std::string_view content) const {
  auto it = by_content_.find(content);
  return it == by_content_.end() ? -1 : it->second;
}

void AddedVocabulary::Split(std::vector<Piece>* pieces, bool normalized_trie) const {
  const Trie& trie = normalized_trie ? norm_ : raw_;
  std::vector<Piece> out;
  out.reserve(pieces->size());
  for (auto& p : *pieces) {
    if (p.added_id >= 0) out.push_back(std::move(p));
    else if (trie.empty()) { if (!p.text.empty()) out.push_back(std::move(p)); }
    else SplitOne(std::move(p), trie, &out);
  }
  pieces->swap(out);
}

namespace {

// Code point ending at s[end) (s valid UTF-8, end > 0).
uint32_t LastCodePoint(std::string_view s, size_t end) {
  size_t b = end - 1;
  while (b > 0 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
  return NextCodePoint(s, &b);
}

}  // namespace

void AddedVocabulary::SplitOne(Piece&& p, const Trie& trie, std::vector<Piece>* out) const {
  const std::string& s = p.text;
  size_t start_offset = 0;
  auto emit = [&](size_t b, size_t e, int32_t id) {
    if (e <= b) return;
    Piece q;
    q.text = s.substr(b, e - b);
    q.added_id = id;
    q.at_start = p.at_start && b == 0;
    out->push_back(std::move(q));
  };
  size_t i = 0;
  while (i < s.size()) {
    size_t len = 0;
    const int32_t k = trie.first_byte[static_cast<uint8_t>(s[i])] ? trie.LongestAt(s, i, &len) : -1;
    if (k < 0) {
      ++i;
      while (i < s.size() && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) ++i;
      continue;
    }
    const AddedToken& t = tokens_[k];
    size_t start = i, stop = i + len;
    i = stop;  // the match iterator resumes after the match itself
    if (t.single_word) {
      const bool start_ok = start == 0 || !IsWordChar(LastCodePoint(s, start));
      size_t j = stop;
      const bool stop_ok = stop == s.size() || !IsWordChar(NextCodePoint(s, &j));
      if (!start_ok || !stop_ok) continue;
    }
    if (t.lstrip) {
      size_t ns = start;
      while (ns > 0) {
        size_t b = ns - 1;
        while (b > 0 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
        size_t j = b;
        if (!IsWhitespace(NextCodePoint(s, &j))) break;
        ns = b;
      }
      start = std::max(ns, start_offset);
    }
    if (t.rstrip) {
      while (stop < s.size()) {
        size_t j = stop;
        if (!IsWhitespace(NextCodePoint(s, &j))) break;
        stop = j;
      }
    }
    if (start_offset < start) emit(start_offset, start, -1);
    emit(start, stop, t.id);
    start_offset = stop;
  }
  if (start_offset == 0) {  // no match: the piece goes on as it is, without a copy
    if (!s.empty()) out->push_back(std::move(p));
    return;
  }
  if (start_offset < s.size()) emit(start_offset, s.size(), -1);
}

}  // namespace es::tok
