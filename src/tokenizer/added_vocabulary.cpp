// Added-token matching (AddedVocabulary::find_matches in `tokenizers`).
#include "added_vocabulary.h"

#include <algorithm>

#include "edgeseek/internal/core/error.h"
#include "normalizers.h"
#include "utf8.h"

namespace es::tok {

// ---- Matcher: Aho-Corasick over reversed strings --------------------------------------------

int32_t AddedVocabulary::Matcher::Child(int32_t n, uint8_t c) const {
  if (n == 0) return root_next_[c];
  const auto& nx = nodes_[n].next;
  auto it = std::lower_bound(nx.begin(), nx.end(), std::make_pair(c, int32_t(-1)),
                             [](const auto& a, const auto& b) { return a.first < b.first; });
  return it != nx.end() && it->first == c ? it->second : -1;
}

int32_t AddedVocabulary::Matcher::Step(int32_t n, uint8_t c) const {
  for (;;) {
    const int32_t t = Child(n, c);
    if (t >= 0) return t;
    if (n == 0) return 0;
    n = nodes_[n].fail;
  }
}

void AddedVocabulary::Matcher::Add(std::string_view s, int32_t token) {
  if (s.empty()) return;
  int32_t n = 0;
  for (size_t k = s.size(); k-- > 0;) {
    const auto c = static_cast<uint8_t>(s[k]);
    auto& nx = nodes_[n].next;
    auto it = std::lower_bound(nx.begin(), nx.end(), std::make_pair(c, int32_t(-1)),
                               [](const auto& a, const auto& b) { return a.first < b.first; });
    if (it != nx.end() && it->first == c) {
      n = it->second;
    } else {
      const int32_t child = static_cast<int32_t>(nodes_.size());
      const uint32_t depth = nodes_[n].depth + 1;
      nx.insert(it, {c, child});  // `nx` is not used after nodes_ grows
      nodes_.push_back(Node{});
      nodes_.back().depth = depth;
      n = child;
    }
  }
  if (nodes_[n].token < 0) nodes_[n].token = token;
}

void AddedVocabulary::Matcher::Finish() {
  std::fill(std::begin(root_next_), std::end(root_next_), -1);
  for (const auto& [c, child] : nodes_[0].next) root_next_[c] = child;
  // Breadth first, so a node's failure target (shallower) is finished before the node.
  std::vector<int32_t> queue;
  queue.reserve(nodes_.size());
  nodes_[0].fail = 0;
  nodes_[0].out = -1;
  for (const auto& [c, child] : nodes_[0].next) {
    nodes_[child].fail = 0;
    queue.push_back(child);
  }
  for (size_t q = 0; q < queue.size(); ++q) {
    const int32_t n = queue[q];
    Node& node = nodes_[n];
    node.out = node.token >= 0 ? n : nodes_[node.fail].out;
    for (const auto& [c, child] : node.next) {
      nodes_[child].fail = Step(node.fail, c);
      queue.push_back(child);
    }
  }
}

void AddedVocabulary::Matcher::LongestFrom(std::string_view text,
                                           std::vector<int32_t>* longest) const {
  longest->assign(text.size(), -1);
  int32_t n = 0;
  // Fed backwards, the state after text[i] is the longest reversed-string prefix that ends the
  // reversed text so far, i.e. the longest automaton string that is a prefix of text[i..]; its
  // output link is the longest added string starting at i (the failure chain only gets shorter).
  for (size_t i = text.size(); i-- > 0;) {
    n = Step(n, static_cast<uint8_t>(text[i]));
    (*longest)[i] = nodes_[n].out;
  }
}

// ---- AddedVocabulary ------------------------------------------------------------------------

void AddedVocabulary::Build(std::vector<AddedToken> tokens, const Normalizer* normalizer) {
  tokens_ = std::move(tokens);
  by_id_.clear();
  by_content_.clear();
  raw_ = Matcher{};
  norm_ = Matcher{};
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
  raw_.Finish();
  norm_.Finish();
}

void AddedVocabulary::AddDecodeOnly(AddedToken token) {
  if (auto it = by_id_.find(token.id); it != by_id_.end())
    Fail("added tokens '", tokens_[it->second].content, "' and '", token.content,
         "' have the same id ", token.id);
  by_id_[token.id] = tokens_.size();
  tokens_.push_back(std::move(token));
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
  const Matcher& matcher = normalized_trie ? norm_ : raw_;
  std::vector<Piece> out;
  out.reserve(pieces->size());
  for (auto& p : *pieces) {
    if (p.added_id >= 0)
      out.push_back(std::move(p));
    else if (matcher.empty()) {
      if (!p.text.empty()) out.push_back(std::move(p));
    } else
      SplitOne(std::move(p), matcher, &out);
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

void AddedVocabulary::SplitOne(Piece&& p, const Matcher& matcher, std::vector<Piece>* out) const {
  const std::string& s = p.text;
  // The longest token starting at every byte, in one linear pass; then leftmost-longest
  // matches are taken left to right, each search resuming after the previous match.
  std::vector<int32_t> longest;
  matcher.LongestFrom(s, &longest);
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
    const int32_t node = longest[i];
    if (node < 0) {
      ++i;
      while (i < s.size() && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) ++i;
      continue;
    }
    const AddedToken& t = tokens_[matcher.token(node)];
    size_t start = i, stop = i + matcher.length(node);
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
