// GBNF text → Grammar IR (grammar.h). The syntax is llama.cpp's (grammars/README.md there):
//   name ::= alternatives          rules; a rule ends where the next `name ::=` begins
//   a b | c                         sequences and alternatives
//   "lit"  [a-z0-9_] [^"\\]  .      literals, classes (negated), any character
//   ( ... )  x*  x+  x?  x{m} x{m,} x{m,n}   groups and repetitions
//   # comment to end of line;  escapes \n \r \t \\ \" \[ \] \- \^ \/ \xHH \uHHHH \UHHHHHHHH
// Groups and repetitions become helper rules named "<rule>/<n>" (a name GBNF cannot write), so
// Matcher sees plain rules.
#include <unordered_map>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/grammar/grammar.h"

namespace es::grammar {

class GbnfParser {
 public:
  GbnfParser(std::string_view text, const GrammarLimits& lim) : s_(text), lim_(lim) {}

  Grammar Parse(const std::string& root) {
    ES_CHECK(s_.size() <= lim_.max_text_bytes, "grammar: ", s_.size(),
             " bytes is more than the limit of ", lim_.max_text_bytes);
    SkipSpace();
    while (i_ < s_.size()) {
      const size_t at = i_;
      std::string name = Name();
      ES_CHECK(!name.empty(), Where(at), "expected a rule name");
      SkipSpace();
      ES_CHECK(s_.substr(i_, 3) == "::=", Where(i_), "expected '::=' after '", name, "'");
      i_ += 3;
      const int id = RuleId(name);
      ES_CHECK(!defined_[size_t(id)], Where(at), "rule '", name, "' is defined twice");
      defined_[size_t(id)] = true;
      current_ = name;
      g_.rules_[size_t(id)].alternatives = Alternatives(0);
      SkipSpace();
      ES_CHECK(i_ >= s_.size() || AtDefinition(), Where(i_), "unexpected character '",
               std::string(1, s_[i_]), "'");
    }
    for (size_t r = 0; r < g_.rules_.size(); ++r)
      ES_CHECK(defined_[r], "grammar: rule '", g_.rules_[r].name, "' is used but never defined");
    g_.Finish(root, lim_);
    return std::move(g_);
  }

 private:
  std::string Where(size_t at) const {
    size_t line = 1;
    for (size_t k = 0; k < at && k < s_.size(); ++k) line += s_[k] == '\n';
    return "grammar line " + std::to_string(line) + ": ";
  }
  void SkipSpace() {
    while (i_ < s_.size()) {
      const char c = s_[i_];
      if (c == '#') {
        while (i_ < s_.size() && s_[i_] != '\n') ++i_;
      } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++i_;
      } else {
        break;
      }
    }
  }
  static bool NameChar(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
  }
  std::string Name() {
    const size_t b = i_;
    while (i_ < s_.size() && NameChar(s_[i_])) ++i_;
    return std::string(s_.substr(b, i_ - b));
  }
  // Whether a rule definition `name ::=` starts at i_ (it ends the rule being parsed).
  bool AtDefinition() const {
    size_t k = i_;
    while (k < s_.size() && NameChar(s_[k])) ++k;
    if (k == i_) return false;
    while (k < s_.size() && (s_[k] == ' ' || s_[k] == '\t' || s_[k] == '\n' || s_[k] == '\r')) ++k;
    return s_.substr(k, 3) == "::=";
  }
  int RuleId(const std::string& name) {
    auto it = ids_.find(name);
    if (it != ids_.end()) return it->second;
    ES_CHECK(g_.rules_.size() < lim_.max_rules, "grammar: more than ", lim_.max_rules, " rules");
    g_.rules_.push_back(Rule{name, {}});
    defined_.push_back(false);
    ids_[name] = int(g_.rules_.size() - 1);
    return int(g_.rules_.size() - 1);
  }
  int HelperRule(std::vector<Sequence> alts) {
    const int id = RuleId(current_ + "/" + std::to_string(++helpers_));
    defined_[size_t(id)] = true;
    g_.rules_[size_t(id)].alternatives = std::move(alts);
    return id;
  }
  static Element RuleRef(int id) {
    Element e;
    e.kind = Element::Kind::kRule;
    e.rule = id;
    return e;
  }
  void Count(size_t n) {
    elements_ += n;
    ES_CHECK(elements_ <= lim_.max_elements, "grammar: more than ", lim_.max_elements, " elements");
  }

  std::vector<Sequence> Alternatives(int depth) {
    ES_CHECK(depth <= lim_.max_nesting, Where(i_), "groups nested deeper than ", lim_.max_nesting);
    std::vector<Sequence> alts;
    alts.push_back(SequenceOf(depth));
    SkipSpace();
    while (i_ < s_.size() && s_[i_] == '|') {
      ++i_;
      alts.push_back(SequenceOf(depth));
      SkipSpace();
    }
    return alts;
  }

  Sequence SequenceOf(int depth) {
    Sequence seq;
    while (true) {
      SkipSpace();
      if (i_ >= s_.size() || s_[i_] == '|' || s_[i_] == ')' || AtDefinition()) break;
      Sequence atom = Atom(depth);
      SkipSpace();
      if (i_ < s_.size() && (s_[i_] == '*' || s_[i_] == '+' || s_[i_] == '?' || s_[i_] == '{'))
        atom = Repeat(std::move(atom));
      Count(atom.size());
      seq.insert(seq.end(), atom.begin(), atom.end());
    }
    return seq;
  }

  Sequence Atom(int depth) {
    const char c = s_[i_];
    if (c == '"') {
      ++i_;
      Sequence lit;
      while (true) {
        ES_CHECK(i_ < s_.size(), Where(i_), "unterminated string literal");
        if (s_[i_] == '"') break;
        Element e;
        const uint32_t cp = Char();
        e.ranges.push_back({cp, cp});
        lit.push_back(std::move(e));
      }
      ++i_;
      return lit;
    }
    if (c == '[') return {CharClass()};
    if (c == '.') {
      ++i_;
      Element any;
      any.negated = true;  // no range excluded: every character
      return {any};
    }
    if (c == '(') {
      ++i_;
      std::vector<Sequence> alts = Alternatives(depth + 1);
      SkipSpace();
      ES_CHECK(i_ < s_.size() && s_[i_] == ')', Where(i_), "expected ')'");
      ++i_;
      if (alts.size() == 1) return std::move(alts[0]);
      return {RuleRef(HelperRule(std::move(alts)))};
    }
    if (NameChar(c)) return {RuleRef(RuleId(Name()))};
    Fail(Where(i_), "unexpected character '", std::string(1, c), "'");
  }

  Element CharClass() {
    ++i_;  // '['
    Element e;
    if (i_ < s_.size() && s_[i_] == '^') {
      e.negated = true;
      ++i_;
    }
    while (true) {
      ES_CHECK(i_ < s_.size(), Where(i_), "unterminated character class");
      if (s_[i_] == ']') break;
      const uint32_t lo = Char();
      uint32_t hi = lo;
      if (i_ + 1 < s_.size() && s_[i_] == '-' && s_[i_ + 1] != ']') {
        ++i_;
        hi = Char();
        ES_CHECK(lo <= hi, Where(i_), "character range is backwards");
      }
      e.ranges.push_back({lo, hi});
    }
    ++i_;
    return e;
  }

  // One character of a literal or class: an escape or a UTF-8 sequence.
  uint32_t Char() {
    unsigned char c = static_cast<unsigned char>(s_[i_]);
    if (c == '\\') {
      ES_CHECK(i_ + 1 < s_.size(), Where(i_), "escape at end of text");
      const char e = s_[i_ + 1];
      i_ += 2;
      switch (e) {
        case 'n':
          return '\n';
        case 'r':
          return '\r';
        case 't':
          return '\t';
        case 'x':
          return Hex(2);
        case 'u':
          return Hex(4);
        case 'U':
          return Hex(8);
        case '\\':
        case '"':
        case '[':
        case ']':
        case '-':
        case '^':
        case '/':
          return uint32_t(e);
        default:
          Fail(Where(i_), "unknown escape '\\", std::string(1, e), "'");
      }
    }
    int n = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : -1;
    ES_CHECK(n >= 0 && i_ + size_t(n) < s_.size(), Where(i_), "invalid UTF-8");
    uint32_t cp = n == 0 ? c : c & (0x3Fu >> n);
    for (int k = 1; k <= n; ++k) {
      const unsigned char d = static_cast<unsigned char>(s_[i_ + size_t(k)]);
      ES_CHECK((d & 0xC0) == 0x80, Where(i_), "invalid UTF-8");
      cp = (cp << 6) | (d & 0x3F);
    }
    i_ += size_t(n) + 1;
    return cp;
  }
  uint32_t Hex(int digits) {
    uint32_t v = 0;
    for (int k = 0; k < digits; ++k, ++i_) {
      ES_CHECK(i_ < s_.size(), Where(i_), "short hex escape");
      const char h = s_[i_];
      const int d = h >= '0' && h <= '9'   ? h - '0'
                    : h >= 'a' && h <= 'f' ? h - 'a' + 10
                    : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                           : -1;
      ES_CHECK(d >= 0, Where(i_), "bad hex digit '", std::string(1, h), "'");
      v = v * 16 + uint32_t(d);
    }
    ES_CHECK(v <= 0x10FFFF, Where(i_), "code point above U+10FFFF");
    return v;
  }

  int Number() {
    SkipSpace();
    const size_t b = i_;
    int64_t v = 0;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') {
      v = v * 10 + (s_[i_++] - '0');
      ES_CHECK(v <= lim_.max_repeat, Where(b), "repetition count above the limit of ",
               lim_.max_repeat);
    }
    ES_CHECK(i_ > b, Where(b), "expected a number");
    return int(v);
  }

  // x* → R ::= x R | ε;  x? → R ::= x | ε;  x{m,n} → x..x (m times) then n-m nested options.
  Sequence Repeat(Sequence atom) {
    int lo = 0, hi = -1;  // hi -1: unbounded
    const char op = s_[i_++];
    if (op == '+')
      lo = 1;
    else if (op == '?')
      hi = 1;
    else if (op == '{') {
      lo = Number();
      SkipSpace();
      if (s_.substr(i_, 1) == ",") {
        ++i_;
        SkipSpace();
        if (i_ < s_.size() && s_[i_] != '}') hi = Number();
      } else {
        hi = lo;
      }
      SkipSpace();
      ES_CHECK(i_ < s_.size() && s_[i_] == '}', Where(i_), "expected '}'");
      ++i_;
      ES_CHECK(hi < 0 || lo <= hi, Where(i_), "repetition {", lo, ",", hi, "} is backwards");
    }
    // "" or () repeated is still nothing (atom[0] below read past an empty atom: found by
    // tests/fuzz/targets/grammar.cpp under UBSan).
    if (atom.empty()) return atom;
    if (atom.size() > 1) atom = {RuleRef(HelperRule({atom}))};
    Sequence out;
    for (int k = 0; k < lo; ++k) out.push_back(atom[0]);
    if (hi < 0) {
      const int r = RuleId(current_ + "/" + std::to_string(++helpers_));
      defined_[size_t(r)] = true;
      g_.rules_[size_t(r)].alternatives = {{atom[0], RuleRef(r)}, {}};
      out.push_back(RuleRef(r));
    } else if (hi > lo) {
      int prev = HelperRule({{atom[0]}, {}});
      for (int k = 1; k < hi - lo; ++k) prev = HelperRule({{atom[0], RuleRef(prev)}, {}});
      out.push_back(RuleRef(prev));
    }
    Count(out.size() + 4);
    return out;
  }

  std::string_view s_;
  GrammarLimits lim_;
  size_t i_ = 0, elements_ = 0;
  Grammar g_;
  std::unordered_map<std::string, int> ids_;
  std::vector<bool> defined_;
  std::string current_;
  int helpers_ = 0;
};

Grammar Grammar::ParseGbnf(std::string_view text, const std::string& root,
                           const GrammarLimits& lim) {
  return GbnfParser(text, lim).Parse(root);
}

std::string GbnfLiteral(std::string_view s) {
  std::string o = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      o += '\\';
      o += char(c);
    } else if (c == '\n') {
      o += "\\n";
    } else if (c == '\r') {
      o += "\\r";
    } else if (c == '\t') {
      o += "\\t";
    } else if (c < 0x20) {
      static const char* kHex = "0123456789ABCDEF";
      o += "\\x";
      o += kHex[c >> 4];
      o += kHex[c & 15];
    } else {
      o += char(c);
    }
  }
  return o + "\"";
}

}  // namespace es::grammar
