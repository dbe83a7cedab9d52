// Python str operations on UTF-8 strings (see pystr.h).
#include "jinja/pystr.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstdio>

#include "jinja/budget.h"
#include "jinja/value.h"

namespace es::jinja {

char32_t NextCodepoint(std::string_view s, size_t& i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    ++i;
    return b0;
  }
  int n = b0 >= 0xF0 ? 3 : b0 >= 0xE0 ? 2 : 1;
  char32_t c = b0 & (0x3F >> n);
  ++i;
  for (int k = 0; k < n && i < s.size(); ++k, ++i)
    c = (c << 6) | (static_cast<unsigned char>(s[i]) & 0x3F);
  return c;
}

std::u32string DecodeUtf8(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) out.push_back(NextCodepoint(s, i));
  return out;
}

void AppendUtf8(char32_t c, std::string& out) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::string EncodeUtf8(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) AppendUtf8(c, out);
  return out;
}

size_t FindInvalidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b0 = static_cast<unsigned char>(s[i]);
    if (b0 < 0x80) {
      ++i;
      continue;
    }
    int n;
    char32_t min;
    if (b0 >= 0xC2 && b0 <= 0xDF) {
      n = 1;
      min = 0x80;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
      n = 2;
      min = 0x800;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
      n = 3;
      min = 0x10000;
    } else
      return i;
    if (i + n >= s.size()) return i;
    char32_t c = b0 & (0x3F >> n);
    for (int k = 1; k <= n; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if ((b & 0xC0) != 0x80) return i;
      c = (c << 6) | (b & 0x3F);
    }
    if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return i;
    i += n + 1;
  }
  return std::string_view::npos;
}

size_t CodepointCount(std::string_view s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

// str.isspace(): bidirectional class WS, B or S, or category Zs.
bool PyIsSpace(char32_t c) {
  switch (c) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x1C:
    case 0x1D:
    case 0x1E:
    case 0x1F:
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200A;
  }
}

std::string PyStrip(std::string_view s, const std::optional<std::string>& chars, bool left,
                    bool right) {
  std::u32string u = DecodeUtf8(s);
  std::u32string set;
  if (chars) set = DecodeUtf8(*chars);
  auto strip_me = [&](char32_t c) {
    return chars ? set.find(c) != std::u32string::npos : PyIsSpace(c);
  };
  size_t b = 0, e = u.size();
  if (left)
    while (b < e && strip_me(u[b])) ++b;
  if (right)
    while (e > b && strip_me(u[e - 1])) --e;
  return EncodeUtf8(std::u32string_view(u).substr(b, e - b));
}

std::vector<std::string> PySplit(std::string_view s, const std::optional<std::string>& sep,
                                 int64_t maxsplit, bool from_right) {
  std::vector<std::string> out;
  if (maxsplit < 0) maxsplit = INT64_MAX;
  if (!sep) {
    std::u32string u = DecodeUtf8(s);
    if (!from_right) {
      size_t i = 0, n = u.size();
      while (true) {
        while (i < n && PyIsSpace(u[i])) ++i;
        if (i >= n) break;
        if (int64_t(out.size()) == maxsplit) {
          size_t e = n;
          while (e > i && PyIsSpace(u[e - 1])) --e;
          out.push_back(EncodeUtf8(std::u32string_view(u).substr(i, e - i)));
          break;
        }
        size_t j = i;
        while (j < n && !PyIsSpace(u[j])) ++j;
        out.push_back(EncodeUtf8(std::u32string_view(u).substr(i, j - i)));
        i = j;
      }
    } else {
      size_t e = u.size();
      while (true) {
        while (e > 0 && PyIsSpace(u[e - 1])) --e;
        if (e == 0) break;
        if (int64_t(out.size()) == maxsplit) {
          size_t b = 0;
          while (b < e && PyIsSpace(u[b])) ++b;
          out.push_back(EncodeUtf8(std::u32string_view(u).substr(b, e - b)));
          break;
        }
        size_t j = e;
        while (j > 0 && !PyIsSpace(u[j - 1])) --j;
        out.push_back(EncodeUtf8(std::u32string_view(u).substr(j, e - j)));
        e = j;
      }
      std::reverse(out.begin(), out.end());
    }
    return out;
  }
  if (sep->empty()) throw OpError("ValueError: empty separator");
  if (!from_right) {
    size_t pos = 0;
    while (int64_t(out.size()) < maxsplit) {
      size_t f = s.find(*sep, pos);
      if (f == std::string_view::npos) break;
      out.emplace_back(s.substr(pos, f - pos));
      pos = f + sep->size();
    }
    out.emplace_back(s.substr(pos));
  } else {
    size_t end = s.size();
    int64_t splits = 0;
    std::vector<std::string> rev;
    while (splits < maxsplit && end >= sep->size()) {
      size_t f = s.rfind(*sep, end - sep->size());
      if (f == std::string_view::npos) break;
      rev.emplace_back(s.substr(f + sep->size(), end - f - sep->size()));
      end = f;
      ++splits;
    }
    rev.emplace_back(s.substr(0, end));
    out.assign(rev.rbegin(), rev.rend());
  }
  return out;
}

std::string PyReplace(std::string_view s, std::string_view old_s, std::string_view new_s,
                      int64_t count) {
  if (count < 0) count = INT64_MAX;
  std::string out;
  if (old_s.empty()) {
    // Inserts new_s before every code point and at the end, up to count times.
    int64_t done = 0;
    size_t i = 0;
    while (i < s.size()) {
      if (done < count) {
        out += new_s;
        ++done;
        CheckAlloc(out.size() + new_s.size());  // the result can be len(s) * len(new) bytes
      }
      size_t j = i;
      NextCodepoint(s, j);
      out.append(s.substr(i, j - i));
      i = j;
    }
    if (done < count) out += new_s;
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (done < count) {
    size_t f = s.find(old_s, pos);
    if (f == std::string_view::npos) break;
    out.append(s.substr(pos, f - pos));
    out.append(new_s);
    pos = f + old_s.size();
    ++done;
    CheckAlloc(out.size() + new_s.size());
  }
  out.append(s.substr(pos));
  return out;
}

static bool IsCased(char32_t c) {
  auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
}

template <class F>
static std::string MapCodepoints(std::string_view s, F f) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) AppendUtf8(f(NextCodepoint(s, i)), out);
  return out;
}

std::string PyUpper(std::string_view s) {
  return MapCodepoints(s, [](char32_t c) { return char32_t(utf8proc_toupper(int32_t(c))); });
}
std::string PyLower(std::string_view s) {
  return MapCodepoints(s, [](char32_t c) { return char32_t(utf8proc_tolower(int32_t(c))); });
}

std::string PyCapitalize(std::string_view s) {
  bool first = true;
  return MapCodepoints(s, [&](char32_t c) {
    char32_t r =
        first ? char32_t(utf8proc_totitle(int32_t(c))) : char32_t(utf8proc_tolower(int32_t(c)));
    first = false;
    return r;
  });
}

std::string PyTitle(std::string_view s) {
  bool prev_cased = false;
  return MapCodepoints(s, [&](char32_t c) {
    char32_t r = prev_cased ? char32_t(utf8proc_tolower(int32_t(c)))
                            : char32_t(utf8proc_totitle(int32_t(c)));
    prev_cased = IsCased(c);
    return r;
  });
}

static bool IsPrintable(char32_t c) {
  if (c == ' ') return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS:
      return false;
    default:
      return true;
  }
}

std::string PyStrRepr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (size_t i = 0; i < s.size();) {
    size_t start = i;
    char32_t c = NextCodepoint(s, i);
    char buf[16];
    if (c == char32_t(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F) {
      std::snprintf(buf, sizeof buf, "\\x%02x", unsigned(c));
      out += buf;
    } else if (c < 0x80 || IsPrintable(c)) {
      out.append(s.substr(start, i - start));
    } else if (c <= 0xFF) {
      std::snprintf(buf, sizeof buf, "\\x%02x", unsigned(c));
      out += buf;
    } else if (c <= 0xFFFF) {
      std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(c));
      out += buf;
    } else {
      std::snprintf(buf, sizeof buf, "\\U%08x", unsigned(c));
      out += buf;
    }
  }
  out.push_back(quote);
  return out;
}

std::vector<int64_t> PySliceIndices(int64_t n, std::optional<int64_t> start,
                                    std::optional<int64_t> stop, std::optional<int64_t> step) {
  const int64_t st = step.value_or(1);
  if (st == 0) throw OpError("ValueError: slice step cannot be zero");
  int64_t lo, hi;
  auto clamp = [&](std::optional<int64_t> v, int64_t def, int64_t min, int64_t max) {
    if (!v) return def;
    int64_t x = *v;
    if (x < 0) x += n;
    return std::clamp(x, min, max);
  };
  std::vector<int64_t> idx;
  if (st > 0) {
    lo = clamp(start, 0, 0, n);
    hi = clamp(stop, n, 0, n);
    for (int64_t i = lo; i<hi; i = st> hi - i ? hi : i + st) idx.push_back(i);
  } else {
    lo = clamp(start, n - 1, -1, n - 1);
    hi = clamp(stop, -1, -1, n - 1);
    for (int64_t i = lo; i > hi; i = st < hi - i ? hi : i + st) idx.push_back(i);
  }
  return idx;
}

template <class P>
static bool AllCodepoints(std::string_view s, P p) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size();)
    if (!p(NextCodepoint(s, i))) return false;
  return true;
}

static bool IsAlphaCp(char32_t c) {
  auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL ||
         cat == UTF8PROC_CATEGORY_LT || cat == UTF8PROC_CATEGORY_LM || cat == UTF8PROC_CATEGORY_LO;
}
static bool IsDigitCp(char32_t c) {
  return utf8proc_category(static_cast<utf8proc_int32_t>(c)) == UTF8PROC_CATEGORY_ND;
}
static bool IsNumericCp(char32_t c) {
  auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat == UTF8PROC_CATEGORY_ND || cat == UTF8PROC_CATEGORY_NL || cat == UTF8PROC_CATEGORY_NO;
}

bool PyIsDigit(std::string_view s) { return AllCodepoints(s, IsDigitCp); }
bool PyIsAlpha(std::string_view s) { return AllCodepoints(s, IsAlphaCp); }
bool PyIsAlnum(std::string_view s) {
  return AllCodepoints(s, [](char32_t c) { return IsAlphaCp(c) || IsNumericCp(c); });
}
bool PyIsSpaceStr(std::string_view s) { return AllCodepoints(s, PyIsSpace); }

static bool CaseCheck(std::string_view s, bool upper) {
  bool cased = false;
  for (size_t i = 0; i < s.size();) {
    char32_t c = NextCodepoint(s, i);
    auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
    if (cat == UTF8PROC_CATEGORY_LT) return false;
    if (upper ? cat == UTF8PROC_CATEGORY_LL : cat == UTF8PROC_CATEGORY_LU) return false;
    if (upper ? cat == UTF8PROC_CATEGORY_LU : cat == UTF8PROC_CATEGORY_LL) cased = true;
  }
  return cased;
}
bool PyIsUpper(std::string_view s) { return CaseCheck(s, true); }
bool PyIsLower(std::string_view s) { return CaseCheck(s, false); }

}  // namespace es::jinja
