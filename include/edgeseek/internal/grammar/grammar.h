// Grammar IR for constrained decoding: a context-free grammar over Unicode code points, the
// form GBNF text (llama.cpp's grammar syntax) and JSON schemas compile to, and that Matcher
// (matcher.h) runs as a pushdown automaton.
//
// A grammar is a list of rules; a rule is a list of alternatives; an alternative is a sequence
// of elements, each a code point class (ranges, possibly negated) or a reference to a rule.
// Repetitions (*, +, ?, {m,n}) and groups are lowered to helper rules when parsed, so the IR has
// no operators. Compile-time checks keep the matcher finite: every rule referenced is defined,
// no rule is left-recursive (the automaton's closure would not end), and the root derives at
// least one finite string (else "can never be satisfied", the error a contradictory schema
// gets instead of a hang).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace es::grammar {

struct Element {
  enum class Kind : uint8_t { kChars, kRule };
  Kind kind = Kind::kChars;
  bool negated = false;                               // kChars: matches what no range covers
  std::vector<std::pair<uint32_t, uint32_t>> ranges;  // kChars: inclusive code point ranges
  int rule = -1;                                      // kRule
  bool Matches(uint32_t cp) const;
};

using Sequence = std::vector<Element>;

struct Rule {
  std::string name;
  std::vector<Sequence> alternatives;  // empty: matches nothing
};

// Sizes a grammar from outside input may have (issue 23: every parser bounded).
struct GrammarLimits {
  size_t max_text_bytes = 256 * 1024;  // GBNF text
  size_t max_rules = 20000;            // after lowering repetitions
  size_t max_elements = 200000;
  int max_nesting = 64;   // parentheses
  int max_repeat = 4096;  // m and n of {m,n}
};

class Grammar {
 public:
  // Parses GBNF; `root` names the start rule. Throws es::Error naming the line and what is wrong.
  static Grammar ParseGbnf(std::string_view text, const std::string& root = "root",
                           const GrammarLimits& lim = {});

  const std::vector<Rule>& rules() const { return rules_; }
  int root() const { return root_; }
  size_t n_elements() const;

 private:
  friend class GbnfParser;
  // Resolves names, then the checks in the file comment; throws es::Error.
  void Finish(const std::string& root, const GrammarLimits& lim);
  std::vector<Rule> rules_;
  int root_ = -1;
};

// GBNF string literal for `s` (quotes included), escaping what GBNF needs escaped.
std::string GbnfLiteral(std::string_view s);

}  // namespace es::grammar
