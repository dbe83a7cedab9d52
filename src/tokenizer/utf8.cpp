// UTF-8 validation/repair and Unicode character predicates (categories from utf8proc).
#include "utf8.h"

#include <utf8proc.h>

#include "edgeseek/internal/core/error.h"

namespace es::tok {

size_t ValidSeqLen(std::string_view s, size_t i) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  const unsigned c = p[i];
  if (c < 0x80) return 1;
  // Unicode Table 3-7 (well-formed UTF-8 byte sequences).
  unsigned lo = 0x80, hi = 0xBF;
  size_t len;
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + 1 >= n || p[i + 1] < lo || p[i + 1] > hi) return 0;
  for (size_t k = 2; k < len; ++k)
    if (i + k >= n || p[i + k] < 0x80 || p[i + k] > 0xBF) return 0;
  return len;
}

bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const size_t l = ValidSeqLen(s, i);
    if (l == 0) return false;
    i += l;
  }
  return true;
}

// Length of the maximal prefix of a well-formed sequence starting at s[i] (>= 1): the bytes that
// one U+FFFD replaces ("substitution of maximal subparts", what Rust's from_utf8_lossy does).
static size_t MaximalSubpart(std::string_view s, size_t i) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const unsigned c = p[i];
  unsigned lo = 0x80, hi = 0xBF;
  size_t len;
  if (c >= 0xC2 && c <= 0xDF)
    len = 2;
  else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else
    return 1;
  size_t k = 1;
  if (i + k < s.size() && p[i + k] >= lo && p[i + k] <= hi) {
    ++k;
    while (k < len && i + k < s.size() && p[i + k] >= 0x80 && p[i + k] <= 0xBF) ++k;
  }
  return k;
}

std::string ToValidUtf8(std::string_view s) {
  if (IsValidUtf8(s)) return std::string(s);
  std::string out;
  out.reserve(s.size() + 8);
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      out.push_back(s[i++]);
      continue;
    }
    const size_t l = ValidSeqLen(s, i);
    if (l) {
      out.append(s.substr(i, l));
      i += l;
    } else {
      out.append("\xEF\xBF\xBD");
      i += MaximalSubpart(s, i);
    }
  }
  return out;
}

void AppendUtf8(std::string* out, uint32_t cp) {
  if (cp < 0x80) {
    out->push_back(char(cp));
  } else if (cp < 0x800) {
    out->push_back(char(0xC0 | (cp >> 6)));
    out->push_back(char(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(char(0xE0 | (cp >> 12)));
    out->push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(char(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(char(0xF0 | (cp >> 18)));
    out->push_back(char(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(char(0x80 | (cp & 0x3F)));
  }
}

bool IsWhitespace(uint32_t cp) {
  // The White_Space property (what Rust's char::is_whitespace and regex \s use).
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

static utf8proc_category_t Category(uint32_t cp) {
  return utf8proc_category(static_cast<utf8proc_int32_t>(cp));
}

bool IsNumeric(uint32_t cp) {
  const auto c = Category(cp);
  return c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_NO;
}

bool IsAlphanumeric(uint32_t cp) {
  const auto c = Category(cp);
  return (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO) || IsNumeric(cp) ||
         c == UTF8PROC_CATEGORY_MN || c == UTF8PROC_CATEGORY_MC;
}

bool IsWordChar(uint32_t cp) {
  const auto c = Category(cp);
  return (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO) ||
         (c >= UTF8PROC_CATEGORY_MN && c <= UTF8PROC_CATEGORY_ME) || c == UTF8PROC_CATEGORY_ND ||
         c == UTF8PROC_CATEGORY_PC || cp == 0x200C || cp == 0x200D;
}

bool IsPunctuation(uint32_t cp) {
  if (cp < 0x80)
    return (cp >= 0x21 && cp <= 0x2F) || (cp >= 0x3A && cp <= 0x40) || (cp >= 0x5B && cp <= 0x60) ||
           (cp >= 0x7B && cp <= 0x7E);
  const auto c = Category(cp);
  return c >= UTF8PROC_CATEGORY_PC && c <= UTF8PROC_CATEGORY_PO;
}

uint32_t SingleCodePoint(const std::string& s, const char* key, const std::string& where) {
  size_t i = 0;
  if (s.empty() || !IsValidUtf8(s)) Fail(where, ": '", key, "' must be one character");
  const uint32_t cp = NextCodePoint(s, &i);
  if (i != s.size()) Fail(where, ": '", key, "' must be one character, got '", s, "'");
  return cp;
}

}  // namespace es::tok
