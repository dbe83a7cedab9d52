// The added-token matcher (AddedVocabulary, issue 23): leftmost-longest splitting as `tokenizers`
// does it, checked against a brute-force twin over random token sets that are prefixes, suffixes
// and overlaps of one another, and linear in the text: the old per-position trie walk took
// 255 steps per byte on a run of near-matches (8 MB: 2·10^9 steps, 8.5 s here), the automaton
// one step per byte.
#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <string>
#include <vector>

#include "tokenizer/added_vocabulary.h"

namespace es::tok {
namespace {

struct Split {
  std::string text;
  int32_t id;
  bool operator==(const Split&) const = default;
};

std::vector<Split> SplitAll(const AddedVocabulary& v, const std::string& text) {
  std::vector<Piece> pieces{Piece{text, -1, true}};
  v.Split(&pieces, /*normalized_trie=*/false);
  std::vector<Split> out;
  for (auto& p : pieces) out.push_back({p.text, p.added_id});
  return out;
}

// The definition: from the left, the earliest position where some token starts, the longest
// token there (the first listed among equal contents), then on after it.
std::vector<Split> Reference(const std::vector<AddedToken>& toks, const std::string& s) {
  std::vector<Split> out;
  size_t from = 0, i = 0;
  while (i < s.size()) {
    int best = -1;
    for (size_t k = 0; k < toks.size(); ++k) {
      const std::string& c = toks[k].content;
      if (s.compare(i, c.size(), c) == 0 &&
          (best < 0 || c.size() > toks[size_t(best)].content.size()))
        best = int(k);
    }
    if (best < 0) {
      ++i;
      continue;
    }
    if (from < i) out.push_back({s.substr(from, i - from), -1});
    const auto& t = toks[size_t(best)];
    out.push_back({t.content, t.id});
    i += t.content.size();
    from = i;
  }
  if (from < s.size()) out.push_back({s.substr(from), -1});
  return out;
}

TEST(AddedMatcher, LeftmostLongestMatchesBruteForce) {
  std::mt19937 rng(23);
  auto word = [&](size_t max_len) {
    std::string w(1 + rng() % max_len, 'a');
    for (char& c : w) c = char('a' + rng() % 3);
    return w;
  };
  for (int round = 0; round < 400; ++round) {
    std::vector<AddedToken> toks;
    const size_t n = 1 + rng() % 12;
    for (size_t k = 0; k < n; ++k) {
      AddedToken t;
      // Prefixes, suffixes and infixes of earlier tokens, so failure links matter.
      if (k > 0 && rng() % 2) {
        const std::string& base = toks[rng() % toks.size()].content;
        const size_t b = rng() % base.size(), e = b + 1 + rng() % (base.size() - b);
        t.content = base.substr(b, e - b);
      } else {
        t.content = word(7);
      }
      t.id = int32_t(1000 + k);
      toks.push_back(t);
    }
    AddedVocabulary v;
    v.Build(toks, nullptr);
    for (int q = 0; q < 8; ++q) {
      const std::string text = rng() % 4 ? word(60) : "";
      const auto got = SplitAll(v, text);
      const auto want = Reference(toks, text);
      ASSERT_EQ(got.size(), want.size()) << "round " << round << " text '" << text << "'";
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_EQ(got[i], want[i]) << "round " << round << " text '" << text << "' piece " << i;
    }
  }
}

TEST(AddedMatcher, OverlapsAndMultiByteText) {
  std::vector<AddedToken> toks = {
      {"<a>", 1}, {"<a><b>", 2}, {"a><b", 3}, {"b>x", 4}, {"\xC3\xA9t\xC3\xA9", 5}, {"<a>", 6}};
  AddedVocabulary v;
  v.Build(toks, nullptr);
  // "<a><b>" at 0 is longer than "<a>"; "a><b" starts later than it and loses.
  EXPECT_EQ(SplitAll(v, "<a><b>x"), (std::vector<Split>{{"<a><b>", 2}, {"x", -1}}));
  EXPECT_EQ(SplitAll(v, "<a><b"), (std::vector<Split>{{"<a>", 1}, {"<b", -1}}));
  EXPECT_EQ(SplitAll(v, "a><b>x"), (std::vector<Split>{{"a><b", 3}, {">x", -1}}));
  EXPECT_EQ(SplitAll(v, "\xC3\xA9t\xC3\xA9t\xC3\xA9"),
            (std::vector<Split>{{"\xC3\xA9t\xC3\xA9", 5}, {"t\xC3\xA9", -1}}));
  EXPECT_EQ(SplitAll(v, "plain"), (std::vector<Split>{{"plain", -1}}));
}

TEST(AddedMatcher, LinearInTheText) {
  // Every token shares a long prefix with the text; the old matcher walked it at each byte.
  std::vector<AddedToken> toks;
  for (int k = 1; k <= 255; k += 6) toks.push_back({std::string(size_t(k), 'a') + "b", 2000 + k});
  toks.push_back({std::string(255, 'a') + "b", 1999});
  AddedVocabulary v;
  v.Build(toks, nullptr);
  const std::string text = std::string(8 << 20, 'a') + "b";
  const auto t0 = std::chrono::steady_clock::now();
  const auto got = SplitAll(v, text);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].text.size(), (8u << 20) - 255);
  EXPECT_EQ(got[1].id, 1999);
  EXPECT_LT(s, 2.5) << "8 MB of near-matches took " << s << " s";
}

}  // namespace
}  // namespace es::tok
