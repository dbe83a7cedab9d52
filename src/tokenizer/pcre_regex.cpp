// PCRE2 wrapper: compile with UTF+UCP and JIT, iterate matches with a per-thread match block.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "pcre_regex.h"

#include <pcre2.h>

#include <cctype>

#include "edgeseek/internal/core/error.h"
#include "utf8.h"

namespace es::tok {
namespace {

// Oniguruma's \s (Unicode White_Space) as class contents.
constexpr const char* kSpaceClass =
    "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}"
    "\\x{202F}\\x{205F}\\x{3000}";

std::string RewriteSpaces(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 64);
  int class_depth = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char n = p[i + 1];
      if (n == 's') {
        out += class_depth ? std::string(kSpaceClass) : "[" + std::string(kSpaceClass) + "]";
      } else if (n == 'S' && !class_depth) {
        out += "[^" + std::string(kSpaceClass) + "]";
      } else {
        out.push_back(c);
        out.push_back(n);
      }
      ++i;
      continue;
    }
    if (c == '[') {
      // A POSIX class [:alpha:] inside a class does not open a new level.
      if (class_depth && i + 1 < p.size() && p[i + 1] == ':') {
        const size_t e = p.find(":]", i + 2);
        if (e != std::string_view::npos) {
          out.append(p.substr(i, e + 2 - i));
          i = e + 1;
          continue;
        }
      }
      ++class_depth;
      out.push_back(c);
      // A ']' right after '[' or '[^' is a literal.
      if (i + 1 < p.size() && p[i + 1] == '^') {
        out.push_back('^');
        ++i;
      }
      if (i + 1 < p.size() && p[i + 1] == ']') {
        out.push_back(']');
        ++i;
      }
      continue;
    }
    if (c == ']' && class_depth) --class_depth;
    out.push_back(c);
  }
  return out;
}

struct MatchData {
  pcre2_match_data* md = pcre2_match_data_create(8, nullptr);
  ~MatchData() { pcre2_match_data_free(md); }
};

}  // namespace

Regex::Regex(std::string_view pattern, std::string_view where) {
  const std::string p = RewriteSpaces(pattern);
  int err = 0;
  PCRE2_SIZE off = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(p.data()), p.size(),
                                   PCRE2_UTF | PCRE2_UCP, &err, &off, nullptr);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    Fail(where, ": invalid regex '", pattern, "': ", reinterpret_cast<const char*>(msg),
         " (at pattern offset ", off, ")");
  }
  jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;  // else the interpreter
  code_ = code;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

void Regex::FindAll(std::string_view text, std::vector<std::pair<size_t, size_t>>* out) const {
  thread_local MatchData tl;
  auto* code = static_cast<pcre2_code*>(code_);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  size_t last_end = std::string::npos;
  while (pos <= text.size()) {
    const int rc =
        jit_ ? pcre2_jit_match(code, subject, text.size(), pos, 0, tl.md, nullptr)
             : pcre2_match(code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, tl.md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof(msg));
      Fail("regex match failed: ", reinterpret_cast<const char*>(msg));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(tl.md);
    const size_t s = ov[0], e = ov[1];
    if (s == e && e == last_end) {
      // Empty match glued to the previous one: retry one character further.
      if (s >= text.size()) break;
      pos = s + Utf8Len(static_cast<unsigned char>(text[s]));
      continue;
    }
    out->emplace_back(s, e);
    last_end = e;
    if (s == e) {
      if (e >= text.size()) break;
      pos = e + Utf8Len(static_cast<unsigned char>(text[e]));
    } else {
      pos = e;
    }
  }
}

std::string Regex::Escape(std::string_view literal) {
  std::string out;
  for (const char c : literal) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x80 && !std::isalnum(u)) out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

}  // namespace es::tok
