// Jinja lexer (see lexer.h). Mirrors jinja2's lexer rules: the root rule finds the earliest
// `{{`, `{%` or `{#` and applies OptionalLStrip to the text before it; tag states end at
// `-%}\s*`, `+%}`, `%}\n?` (blocks), `-}}\s*`, `}}` (variables), `-#}\s*`, `+#}`, `#}\n?`
// (comments), but only while brackets inside the tag are balanced.
#include "jinja/lexer.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "edgeseek/internal/core/error.h"
#include "jinja/pystr.h"

namespace es::jinja {

std::string Where(const std::string& name, int line, int col) {
  return name + ":" + std::to_string(line) + ":" + std::to_string(col);
}

namespace {

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsNameChar(char c) { return IsNameStart(c) || IsDigit(c); }
int HexVal(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class Lexer {
 public:
  Lexer(std::string src, std::string name) : src_(std::move(src)), name_(std::move(name)) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> Run() {
    const size_t n = src_.size();
    while (pos_ < n) {
      const size_t t = FindTag(pos_);
      if (t == std::string::npos) {
        Emit(Tok::kData, src_.substr(pos_), pos_);
        break;
      }
      std::string text = src_.substr(pos_, t - pos_);
      const char kind = src_[t + 1];
      size_t p = t + 2;
      char sign = 0;
      if (p < n && (src_[p] == '-' || src_[p] == '+')) sign = src_[p++];
      size_t raw_body = 0;
      if (kind == '%') raw_body = MatchRawBegin(p);
      StripBefore(text, sign, kind != '{');
      if (!text.empty()) Emit(Tok::kData, text, pos_);
      if (kind == '#') {
        LexComment(t, p);
      } else if (raw_body) {
        LexRaw(t, raw_body);
      } else {
        LexTag(t, p, kind);
      }
    }
    out_.push_back(Token{Tok::kEof, "", 0, 0, 0, 0});
    Locate(src_.size(), out_.back());
    return std::move(out_);
  }

 private:
  [[noreturn]] void Fail(size_t at, const std::string& msg) {
    Token tmp;
    Locate(at, tmp);
    es::Fail(Where(name_, tmp.line, tmp.col), ": ", msg);
  }

  // Tokens are located in increasing order, so the column is counted on from the previous
  // location when it is on the same line: counting from the line start each time made lexing
  // quadratic in the length of a long line (a 280 KB one-line template took 10 s).
  void Locate(size_t at, Token& tok) {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), at);
    const size_t line = size_t(it - line_starts_.begin());
    const size_t start = line_starts_[line - 1];
    if (line != last_line_ || at < last_at_) {
      last_line_ = line;
      last_at_ = start;
      last_col_ = 1;
    }
    last_col_ += CodepointCount(std::string_view(src_).substr(last_at_, at - last_at_));
    last_at_ = at;
    tok.line = int(line);
    tok.col = int(last_col_);
  }

  void Emit(Tok type, std::string text, size_t at) {
    Token tok{type, std::move(text), 0, 0, 0, 0};
    Locate(at, tok);
    out_.push_back(std::move(tok));
  }

  size_t FindTag(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i)
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#'))
        return i;
    return std::string::npos;
  }

  // Length in bytes of the whitespace code point at i, or 0.
  size_t SpaceAt(size_t i) const {
    if (i >= src_.size()) return 0;
    size_t j = i;
    char32_t c = NextCodepoint(src_, j);
    return PyIsSpace(c) ? j - i : 0;
  }
  size_t SkipSpace(size_t i) const {
    while (size_t k = SpaceAt(i)) i += k;
    return i;
  }
  bool At(size_t i, const char* s) const { return src_.compare(i, std::strlen(s), s) == 0; }

  // OptionalLStrip: `-` strips all trailing whitespace; otherwise, unless `+` or a variable tag,
  // the indentation between the last newline (or a line start) and the tag is removed.
  void StripBefore(std::string& text, char sign, bool lstrip_applies) {
    if (sign == '-') {
      text = PyStrip(text, std::nullopt, false, true);
    } else if (sign != '+' && lstrip_applies) {
      const size_t nl = text.rfind('\n');
      const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
      if ((l_pos > 0 || line_starting_) && l_pos < text.size() &&
          PyIsSpaceStr(std::string_view(text).substr(l_pos)))
        text.resize(l_pos);
    }
  }

  // `{%(-|+)?\s*raw\s*(-%}\s*|%})`: returns the offset after it, or 0.
  size_t MatchRawBegin(size_t p) const {
    size_t q = SkipSpace(p);
    if (!At(q, "raw")) return 0;
    q = SkipSpace(q + 3);
    if (At(q, "-%}")) return SkipSpace(q + 3);
    if (At(q, "%}")) return q + 2;
    return 0;
  }

  void LexComment(size_t t, size_t p) {
    for (size_t q = p; q + 1 < src_.size(); ++q) {
      size_t end = 0;
      if (src_[q] == '+' && At(q + 1, "#}")) {
        end = q + 3;
      } else if (src_[q] == '-' && At(q + 1, "#}")) {
        end = SkipSpace(q + 3);
      } else if (At(q, "#}")) {
        end = q + 2;
        if (end < src_.size() && src_[end] == '\n') ++end;
      }
      if (end) {
        line_starting_ = src_[end - 1] == '\n';
        pos_ = end;
        return;
      }
    }
    Fail(t, "missing end of comment tag '#}'");
  }

  void LexRaw(size_t t, size_t body) {
    line_starting_ = src_[body - 1] == '\n';
    for (size_t q = body; q + 1 < src_.size(); ++q) {
      if (!At(q, "{%")) continue;
      size_t r = q + 2;
      char sign = 0;
      if (r < src_.size() && (src_[r] == '-' || src_[r] == '+')) sign = src_[r++];
      r = SkipSpace(r);
      if (!At(r, "endraw")) continue;
      r = SkipSpace(r + 6);
      size_t end = 0;
      if (At(r, "+%}")) {
        end = r + 3;
      } else if (At(r, "-%}")) {
        end = SkipSpace(r + 3);
      } else if (At(r, "%}")) {
        end = r + 2;
        if (end < src_.size() && src_[end] == '\n') ++end;
      }
      if (!end) continue;
      std::string text = src_.substr(body, q - body);
      StripBefore(text, sign, true);
      if (!text.empty()) Emit(Tok::kData, text, body);
      line_starting_ = src_[end - 1] == '\n';
      pos_ = end;
      return;
    }
    Fail(t, "missing end of raw directive '{% endraw %}'");
  }

  void LexTag(size_t t, size_t p, char kind) {
    Emit(kind == '%' ? Tok::kBlockBegin : Tok::kVarBegin, kind == '%' ? "{%" : "{{", t);
    std::vector<char> balance;
    const size_t n = src_.size();
    while (true) {
      if (p >= n)
        Fail(t, kind == '%' ? "unexpected end of template: missing '%}' for this block tag"
                            : "unexpected end of template: missing '}}' for this expression");
      if (balance.empty()) {
        size_t end = 0;
        if (kind == '%') {
          if (At(p, "+%}")) {
            end = p + 3;
          } else if (At(p, "-%}")) {
            end = SkipSpace(p + 3);
          } else if (At(p, "%}")) {
            end = p + 2;
            if (end < n && src_[end] == '\n') ++end;
          }
        } else {
          if (At(p, "-}}"))
            end = SkipSpace(p + 3);
          else if (At(p, "}}"))
            end = p + 2;
        }
        if (end) {
          Emit(kind == '%' ? Tok::kBlockEnd : Tok::kVarEnd, kind == '%' ? "%}" : "}}", p);
          line_starting_ = src_[end - 1] == '\n';
          pos_ = end;
          return;
        }
      }
      if (size_t k = SpaceAt(p)) {
        p += k;
        continue;
      }
      const char c = src_[p];
      if (IsDigit(c)) {
        p = LexNumber(p);
      } else if (IsNameStart(c)) {
        size_t q = p;
        while (q < n && IsNameChar(src_[q])) ++q;
        Emit(Tok::kName, src_.substr(p, q - p), p);
        p = q;
      } else if (c == '\'' || c == '"') {
        p = LexString(p);
      } else {
        static const char* kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
        std::string op;
        for (const char* two : kTwo)
          if (At(p, two)) op = two;
        if (op.empty() && std::strchr("+-/*%~[](){}<>=.:|,;", c) && c != '\0')
          op = std::string(1, c);
        if (op.empty()) Fail(p, std::string("unexpected character '") + c + "' in tag");
        if (op == "(")
          balance.push_back(')');
        else if (op == "[")
          balance.push_back(']');
        else if (op == "{")
          balance.push_back('}');
        else if (op == ")" || op == "]" || op == "}") {
          if (balance.empty()) Fail(p, "unexpected '" + op + "'");
          if (balance.back() != op[0])
            Fail(p, "unexpected '" + op + "', expected '" + std::string(1, balance.back()) + "'");
          balance.pop_back();
        }
        Emit(Tok::kOp, op, p);
        p += op.size();
      }
    }
  }

  // Digits with single '_' separators; returns the end offset.
  size_t Digits(size_t p) const {
    size_t q = p;
    while (q < src_.size() && IsDigit(src_[q])) {
      ++q;
      if (q + 1 < src_.size() && src_[q] == '_' && IsDigit(src_[q + 1])) ++q;
    }
    return q;
  }

  size_t LexNumber(size_t p) {
    const size_t n = src_.size();
    auto strip = [&](size_t a, size_t b) {
      std::string s = src_.substr(a, b - a);
      s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
      return s;
    };
    // float_re: digits ((.digits)? e[+-]?digits | .digits), not preceded by '.'
    const bool after_dot = p > 0 && src_[p - 1] == '.';
    size_t q = Digits(p);
    if (!after_dot) {
      size_t f = q;
      bool frac = false;
      if (f + 1 < n && src_[f] == '.' && IsDigit(src_[f + 1])) {
        f = Digits(f + 1);
        frac = true;
      }
      size_t e = f;
      bool exp = false;
      if (e < n && (src_[e] == 'e' || src_[e] == 'E')) {
        size_t x = e + 1;
        if (x < n && (src_[x] == '+' || src_[x] == '-')) ++x;
        if (x < n && IsDigit(src_[x])) {
          e = Digits(x);
          exp = true;
        }
      }
      if (exp || frac) {
        const size_t end = exp ? e : f;
        Token tok{Tok::kFloat, src_.substr(p, end - p),
                  0,           std::strtod(strip(p, end).c_str(), nullptr),
                  0,           0};
        Locate(p, tok);
        out_.push_back(std::move(tok));
        return end;
      }
    }
    // integer_re: 0b / 0o / 0x prefixes, [1-9](_?\d)*, 0(_?0)*
    int base = 10;
    size_t start = p, end;
    if (src_[p] == '0' && p + 1 < n && std::strchr("bBoOxX", src_[p + 1]) && src_[p + 1] != '\0') {
      const char b = char(src_[p + 1] | 0x20);
      base = b == 'b' ? 2 : b == 'o' ? 8 : 16;
      end = p + 2;
      while (end < n && ((HexVal(src_[end]) >= 0 && HexVal(src_[end]) < base) ||
                         (src_[end] == '_' && end + 1 < n && HexVal(src_[end + 1]) >= 0)))
        ++end;
      start = p + 2;
    } else if (src_[p] == '0') {
      end = p + 1;
      while (end < n &&
             (src_[end] == '0' || (src_[end] == '_' && end + 1 < n && src_[end + 1] == '0')))
        ++end;
    } else {
      end = q;
    }
    const std::string digits = strip(start, end);
    errno = 0;
    const long long v = std::strtoll(digits.c_str(), nullptr, base);
    if (errno == ERANGE) Fail(p, "integer literal out of range: " + src_.substr(p, end - p));
    Token tok{Tok::kInt, src_.substr(p, end - p), v, 0, 0, 0};
    Locate(p, tok);
    out_.push_back(std::move(tok));
    return end;
  }

  size_t LexString(size_t p) {
    const char quote = src_[p];
    size_t q = p + 1;
    std::string val;
    while (true) {
      if (q >= src_.size()) Fail(p, "unterminated string literal");
      const char c = src_[q];
      if (c == quote) break;
      if (c != '\\') {
        val.push_back(c);
        ++q;
        continue;
      }
      if (q + 1 >= src_.size()) Fail(p, "unterminated string literal");
      const char e = src_[q + 1];
      q += 2;
      switch (e) {
        case '\\':
          val.push_back('\\');
          break;
        case '\'':
          val.push_back('\'');
          break;
        case '"':
          val.push_back('"');
          break;
        case 'a':
          val.push_back('\a');
          break;
        case 'b':
          val.push_back('\b');
          break;
        case 'f':
          val.push_back('\f');
          break;
        case 'n':
          val.push_back('\n');
          break;
        case 'r':
          val.push_back('\r');
          break;
        case 't':
          val.push_back('\t');
          break;
        case 'v':
          val.push_back('\v');
          break;
        case '\n':
          break;  // line continuation
        case 'x':
        case 'u':
        case 'U': {
          const int len = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          char32_t cp = 0;
          for (int k = 0; k < len; ++k) {
            if (q + k >= src_.size() || HexVal(src_[q + k]) < 0)
              Fail(q - 2, std::string("truncated \\") + e + " escape in string literal");
            cp = cp * 16 + char32_t(HexVal(src_[q + k]));
          }
          if (cp > 0x10FFFF) Fail(q - 2, "illegal Unicode character in string literal");
          AppendUtf8(cp, val);
          q += len;
          break;
        }
        case 'N':
          Fail(q - 2, "\\N{...} escapes are not supported");
        default:
          if (e >= '0' && e <= '7') {
            char32_t cp = char32_t(e - '0');
            for (int k = 0; k < 2 && q < src_.size() && src_[q] >= '0' && src_[q] <= '7'; ++k, ++q)
              cp = cp * 8 + char32_t(src_[q] - '0');
            AppendUtf8(cp, val);
          } else {
            val.push_back('\\');
            val.push_back(e);
          }
      }
    }
    Token tok{Tok::kString, std::move(val), 0, 0, 0, 0};
    Locate(p, tok);
    out_.push_back(std::move(tok));
    return q + 1;
  }

  std::string src_, name_;
  std::vector<size_t> line_starts_;
  std::vector<Token> out_;
  size_t pos_ = 0;
  bool line_starting_ = true;
  size_t last_line_ = 0, last_at_ = 0, last_col_ = 1;  // Locate's cursor
};

}  // namespace

std::vector<Token> Lex(const std::string& source, const std::string& name) {
  std::string src;
  src.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      src.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      src.push_back(source[i]);
    }
  }
  if (!src.empty() && src.back() == '\n') src.pop_back();
  return Lexer(std::move(src), name).Run();
}

}  // namespace es::jinja
