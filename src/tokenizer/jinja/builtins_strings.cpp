// Filters on strings and numbers (capitalize ... wordcount, int/float/round/abs) and Python's
// str methods (builtins_common.h). Each follows the jinja2 3.1 / Python 3 function it stands for;
// the comment on each names any deliberate difference.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/tokenizer/jinja.h"
#include "jinja/budget.h"
#include "jinja/builtins.h"
#include "jinja/builtins_common.h"
#include "jinja/pystr.h"

namespace es::jinja::builtin {
namespace {

// ---- str methods -------------------------------------------------------------------------------
const char* const kStrMethods[] = {
    "capitalize",   "casefold",    "center",    "count",      "encode",       "endswith",
    "expandtabs",   "find",        "format",    "format_map", "index",        "isalnum",
    "isalpha",      "isascii",     "isdecimal", "isdigit",    "isidentifier", "islower",
    "isnumeric",    "isprintable", "isspace",   "istitle",    "isupper",      "join",
    "ljust",        "lower",       "lstrip",    "maketrans",  "partition",    "removeprefix",
    "removesuffix", "replace",     "rfind",     "rindex",     "rjust",        "rpartition",
    "rsplit",       "rstrip",      "split",     "splitlines", "startswith",   "strip",
    "swapcase",     "title",       "translate", "upper",      "zfill"};

bool IsLineBreak(char32_t c) {
  return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E ||
         c == 0x85 || c == 0x2028 || c == 0x2029;
}

std::vector<std::string> SplitLines(std::string_view s, bool keepends) {
  std::u32string u = DecodeUtf8(s);
  std::vector<std::string> out;
  size_t i = 0, start = 0;
  while (i < u.size()) {
    if (!IsLineBreak(u[i])) {
      ++i;
      continue;
    }
    size_t eol = i + 1;
    if (u[i] == '\r' && eol < u.size() && u[eol] == '\n') ++eol;
    out.push_back(EncodeUtf8(std::u32string_view(u).substr(start, (keepends ? eol : i) - start)));
    start = i = eol;
  }
  if (start < u.size()) out.push_back(EncodeUtf8(std::u32string_view(u).substr(start)));
  return out;
}

// Code-point [start, end) window of s as Python's str methods clamp it.
std::u32string Window(const std::u32string& u, const std::optional<Value>& start,
                      const std::optional<Value>& end, size_t* offset) {
  const int64_t n = int64_t(u.size());
  auto norm = [&](const std::optional<Value>& v, int64_t def) {
    if (!v || v->IsNone()) return def;
    int64_t x = ArgInt(v, def, "slice index");
    if (x < 0) x += n;
    return std::clamp<int64_t>(x, 0, n);
  };
  int64_t b = norm(start, 0), e = norm(end, n);
  if (e < b) e = b;
  *offset = size_t(b);
  return u.substr(size_t(b), size_t(e - b));
}

bool StartsOrEnds(const std::string& s, const CallArgs& args, bool ends) {
  auto a = Bind(ends ? "endswith" : "startswith", args, {"prefix", "start", "end"});
  if (!a[0]) throw OpError("TypeError: startswith/endswith takes at least 1 argument");
  size_t off;
  std::u32string u = DecodeUtf8(s);
  std::string w = EncodeUtf8(Window(u, a[1], a[2], &off));
  std::vector<std::string> candidates;
  if (a[0]->IsString()) {
    candidates.push_back(a[0]->GetString());
  } else if (a[0]->IsList() && a[0]->list().is_tuple) {
    for (const auto& x : a[0]->list().items) {
      if (!x.IsString())
        throw OpError("TypeError: tuple for startswith/endswith must only contain str");
      candidates.push_back(x.GetString());
    }
  } else {
    throw OpError("TypeError: startswith/endswith first arg must be str or a tuple of str, not " +
                  TypeName(*a[0]));
  }
  for (const auto& c : candidates) {
    if (c.size() > w.size()) continue;
    if (ends ? w.compare(w.size() - c.size(), c.size(), c) == 0 : w.compare(0, c.size(), c) == 0)
      return true;
  }
  return false;
}

int64_t FindSub(const std::string& s, const CallArgs& args, const char* name, bool reverse) {
  auto a = Bind(name, args, {"sub", "start", "end"});
  const std::string& sub = ArgStr(a[0], "substring");
  size_t off;
  std::u32string u = DecodeUtf8(s);
  std::u32string w = Window(u, a[1], a[2], &off);
  std::u32string su = DecodeUtf8(sub);
  size_t f = reverse ? w.rfind(su) : w.find(su);
  return f == std::u32string::npos ? -1 : int64_t(f + off);
}

// str.format with positional/named fields and !r/!s conversions; format specs are rejected.
std::string PyFormat(const std::string& fmt, const CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    const char c = fmt[i];
    if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') {
        out.push_back('}');
        ++i;
        continue;
      }
      throw OpError("ValueError: Single '}' encountered in format string");
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    const size_t close = fmt.find('}', i);
    if (close == std::string::npos)
      throw OpError("ValueError: Single '{' encountered in format string");
    std::string field = fmt.substr(i + 1, close - i - 1);
    i = close;
    char conv = 0;
    if (size_t bang = field.find('!'); bang != std::string::npos) {
      conv = bang + 1 < field.size() ? field[bang + 1] : 0;
      field.resize(bang);
    }
    if (field.find(':') != std::string::npos || field.find('.') != std::string::npos ||
        field.find('[') != std::string::npos)
      throw OpError("str.format: format specs and nested fields are not supported");
    Value v;
    if (field.empty() || std::all_of(field.begin(), field.end(), ::isdigit)) {
      const size_t idx = field.empty() ? auto_index++ : size_t(std::stoul(field));
      if (idx >= args.positional.size())
        throw OpError("IndexError: Replacement index " + std::to_string(idx) + " out of range");
      v = args.positional[idx];
    } else {
      bool found = false;
      for (const auto& [k, x] : args.keyword)
        if (k == field) {
          v = x;
          found = true;
        }
      if (!found) throw OpError("KeyError: '" + field + "'");
    }
    out += conv == 'r' ? Repr(v) : ToStr(v);
  }
  return out;
}

Value Pad(const std::string& s, const CallArgs& args, const char* name, int where) {
  auto a = Bind(name, args, {"width", "fillchar"});
  const int64_t width = ArgInt(a[0], 0, "width");
  std::string fill = a[1] ? ArgStr(a[1], "fillchar") : " ";
  const int64_t len = int64_t(CodepointCount(s));
  if (width <= len) return Value::String(s);
  const int64_t total = width - len;
  CheckAlloc(size_t(total) * std::max<size_t>(1, fill.size()) +
             s.size());  // before: width may be 10**12
  int64_t left = where < 0 ? 0 : where > 0 ? total : total / 2 + (total & width & 1);
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += fill;
  out += s;
  for (int64_t i = 0; i < total - left; ++i) out += fill;
  return Value::String(out);
}

// str methods that search: find/index/rfind/rindex, count, startswith/endswith, partition.
std::optional<Value> StrSearchMethod(const std::string& s, const std::string& m, CallArgs& args) {
  if (m == "startswith") return Value::Bool(StartsOrEnds(s, args, false));
  if (m == "endswith") return Value::Bool(StartsOrEnds(s, args, true));
  if (m == "find" || m == "index") {
    int64_t f = FindSub(s, args, m.c_str(), false);
    if (f < 0 && m == "index") throw OpError("ValueError: substring not found");
    return Value::Int(f);
  }
  if (m == "rfind" || m == "rindex") {
    int64_t f = FindSub(s, args, m.c_str(), true);
    if (f < 0 && m == "rindex") throw OpError("ValueError: substring not found");
    return Value::Int(f);
  }
  if (m == "count") {
    auto a = Bind(m, args, {"sub", "start", "end"});
    size_t off;
    std::u32string w = Window(DecodeUtf8(s), a[1], a[2], &off);
    std::u32string sub = DecodeUtf8(ArgStr(a[0], "substring"));
    if (sub.empty()) return Value::Int(int64_t(w.size() + 1));
    int64_t n = 0;
    for (size_t p = w.find(sub); p != std::u32string::npos; p = w.find(sub, p + sub.size())) ++n;
    return Value::Int(n);
  }
  if (m == "partition" || m == "rpartition") {
    auto a = Bind(m, args, {"sep"});
    const std::string& sep = ArgStr(a[0], "sep");
    if (sep.empty()) throw OpError("ValueError: empty separator");
    size_t f = m == "partition" ? s.find(sep) : s.rfind(sep);
    if (f == std::string::npos)
      return m == "partition"
                 ? Value::Tuple({Value::String(s), Value::String(""), Value::String("")})
                 : Value::Tuple({Value::String(""), Value::String(""), Value::String(s)});
    return Value::Tuple({Value::String(s.substr(0, f)), Value::String(sep),
                         Value::String(s.substr(f + sep.size()))});
  }
  return std::nullopt;
}

// str methods that cut, join, pad or format.
std::optional<Value> StrEditMethod(const std::string& s, const std::string& m, CallArgs& args) {
  if (m == "strip" || m == "lstrip" || m == "rstrip") {
    auto a = Bind(m, args, {"chars"});
    return Value::String(PyStrip(s, ArgOptStr(a[0], "chars"), m != "rstrip", m != "lstrip"));
  }
  if (m == "split" || m == "rsplit") {
    auto a = Bind(m, args, {"sep", "maxsplit"});
    std::vector<Value> parts;
    for (auto& p : PySplit(s, ArgOptStr(a[0], "sep"), ArgInt(a[1], -1, "maxsplit"), m == "rsplit"))
      parts.push_back(Value::String(std::move(p)));
    return Value::List(std::move(parts));
  }
  if (m == "splitlines") {
    auto a = Bind(m, args, {"keepends"});
    std::vector<Value> parts;
    for (auto& p : SplitLines(s, a[0] && Truthy(*a[0])))
      parts.push_back(Value::String(std::move(p)));
    return Value::List(std::move(parts));
  }
  if (m == "replace") {
    auto a = Bind(m, args, {"old", "new", "count"});
    return Value::String(
        PyReplace(s, ArgStr(a[0], "old"), ArgStr(a[1], "new"), ArgInt(a[2], -1, "count")));
  }
  if (m == "join") {
    auto a = Bind(m, args, {"iterable"});
    if (!a[0]) throw OpError("TypeError: join() takes exactly one argument");
    std::string out;
    size_t i = 0;
    for (const auto& x : Iterate(*a[0])) {
      if (!x.IsString())
        throw OpError("TypeError: sequence item " + std::to_string(i) +
                      ": expected str instance, " + TypeName(x) + " found");
      if (i++) out += s;
      CheckAlloc(out.size() + x.GetString().size());
      out += x.GetString();
    }
    return Value::String(out);
  }
  if (m == "removeprefix" || m == "removesuffix") {
    auto a = Bind(m, args, {"affix"});
    const std::string& x = ArgStr(a[0], "argument");
    if (m == "removeprefix" && s.compare(0, x.size(), x) == 0)
      return Value::String(s.substr(x.size()));
    if (m == "removesuffix" && !x.empty() && s.size() >= x.size() &&
        s.compare(s.size() - x.size(), x.size(), x) == 0)
      return Value::String(s.substr(0, s.size() - x.size()));
    return Value::String(s);
  }
  if (m == "ljust") return Pad(s, args, "ljust", -1);
  if (m == "rjust") return Pad(s, args, "rjust", 1);
  if (m == "center") return Pad(s, args, "center", 0);
  if (m == "zfill") {
    auto a = Bind(m, args, {"width"});
    const int64_t width = ArgInt(a[0], 0, "width");
    const int64_t len = int64_t(CodepointCount(s));
    if (width <= len) return Value::String(s);
    CheckAlloc(size_t(width) + s.size());
    size_t sign = !s.empty() && (s[0] == '+' || s[0] == '-') ? 1 : 0;
    return Value::String(s.substr(0, sign) + std::string(size_t(width - len), '0') +
                         s.substr(sign));
  }
  if (m == "format") return Value::String(PyFormat(s, args));
  return std::nullopt;
}

}  // namespace

bool IsStrMethod(std::string_view name) {
  for (const char* m : kStrMethods)
    if (name == m) return true;
  return false;
}

Value StrMethod(const std::string& s, const std::string& m, CallArgs& args) {
  ChargeBytes(s.size());  // every method reads the string at least once
  auto none = [&](const char* name) { Bind(name, args, {}); };
  if (m == "upper") return none("upper"), Value::String(PyUpper(s));
  if (m == "lower" || m == "casefold") return none("lower"), Value::String(PyLower(s));
  if (m == "title") return none("title"), Value::String(PyTitle(s));
  if (m == "capitalize") return none("capitalize"), Value::String(PyCapitalize(s));
  if (m == "swapcase") {
    none("swapcase");
    std::string out;
    for (size_t i = 0; i < s.size();) {
      std::string one;
      AppendUtf8(NextCodepoint(s, i), one);
      out += PyIsUpper(one) ? PyLower(one) : PyIsLower(one) ? PyUpper(one) : one;
    }
    return Value::String(out);
  }
  if (m == "isdigit" || m == "isdecimal" || m == "isnumeric")
    return none(m.c_str()), Value::Bool(PyIsDigit(s));
  if (m == "isalpha") return none("isalpha"), Value::Bool(PyIsAlpha(s));
  if (m == "isalnum") return none("isalnum"), Value::Bool(PyIsAlnum(s));
  if (m == "isspace") return none("isspace"), Value::Bool(PyIsSpaceStr(s));
  if (m == "isupper") return none("isupper"), Value::Bool(PyIsUpper(s));
  if (m == "islower") return none("islower"), Value::Bool(PyIsLower(s));
  if (m == "isascii") {
    none("isascii");
    return Value::Bool(std::all_of(s.begin(), s.end(), [](char c) { return (c & 0x80) == 0; }));
  }
  if (auto v = StrSearchMethod(s, m, args)) return *v;
  if (auto v = StrEditMethod(s, m, args)) return *v;
  throw OpError("str method '" + m + "' is not supported");
}

// ---- helpers of the filters --------------------------------------------------------------------
namespace {

Value Round(const Value& v, int64_t precision, const std::string& method) {
  if (method != "common" && method != "ceil" && method != "floor")
    throw OpError("FilterArgumentError: method must be common, ceil or floor");
  if (!v.IsNumber())
    throw OpError("TypeError: type " + TypeName(v) + " doesn't define __round__ method");
  if (method == "common") {
    if (v.IsIntLike() && precision >= 0) return Value::Int(v.GetInt());
    const double x = v.GetFloat();
    if (!std::isfinite(x)) return Value::Float(x);
    char buf[512];
    if (precision >= 0 && precision < 300) {
      // Correctly rounded decimal conversion, ties to even on exact ties: what round() does.
      std::snprintf(buf, sizeof buf, "%.*f", int(precision), x);
      return Value::Float(std::strtod(buf, nullptr));
    }
    const double scale = std::pow(10.0, double(-precision));
    return Value::Float(std::nearbyint(x / scale) * scale);
  }
  const double scale = std::pow(10.0, double(precision));
  const double r =
      method == "ceil" ? std::ceil(v.GetFloat() * scale) : std::floor(v.GetFloat() * scale);
  return Value::Float(r / scale);
}

bool ParsePyInt(std::string s, int base, int64_t* out) {
  s = PyStrip(s, std::nullopt, true, true);
  s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
  if (s.empty()) return false;
  size_t i = 0;
  bool neg = false;
  if (s[0] == '+' || s[0] == '-') {
    neg = s[0] == '-';
    i = 1;
  }
  if ((base == 16 && s.compare(i, 2, "0x") == 0) || (base == 8 && s.compare(i, 2, "0o") == 0) ||
      (base == 2 && s.compare(i, 2, "0b") == 0))
    i += 2;
  if (i >= s.size()) return false;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(s.c_str() + i, &end, base);
  if (errno || *end != '\0' || s[i] == '+' || s[i] == '-' || s[i] == ' ') return false;
  *out = neg ? -v : v;
  return true;
}

bool ParsePyFloat(std::string s, double* out) {
  s = PyStrip(s, std::nullopt, true, true);
  if (s.empty() || s.find("__") != std::string::npos) return false;
  s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
  std::string low = PyLower(s);
  const std::string body = (low[0] == '+' || low[0] == '-') ? low.substr(1) : low;
  if (body == "inf" || body == "infinity" || body == "nan") {
    *out = body == "nan" ? NAN : (low[0] == '-' ? -INFINITY : INFINITY);
    return true;
  }
  if (body.find_first_not_of("0123456789.e+-") != std::string::npos) return false;
  char* end = nullptr;
  *out = std::strtod(s.c_str(), &end);
  return end && *end == '\0';
}

std::string HtmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

// jinja2's do_title: words split at runs of '-', whitespace, '(', '{', '[', '<'.
std::string JinjaTitle(const std::string& s) {
  std::u32string u = DecodeUtf8(s);
  auto sep = [](char32_t c) {
    return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || PyIsSpace(c);
  };
  std::string out;
  size_t i = 0;
  while (i < u.size()) {
    size_t j = i;
    const bool is_sep = sep(u[i]);
    while (j < u.size() && sep(u[j]) == is_sep) ++j;
    std::string seg = EncodeUtf8(std::u32string_view(u).substr(i, j - i));
    if (is_sep) {
      out += seg;
    } else {
      size_t k = 0;
      NextCodepoint(seg, k);
      out += PyUpper(seg.substr(0, k)) + PyLower(seg.substr(k));
    }
    i = j;
  }
  return out;
}

std::string Indent(std::string s, const Value& width, bool first, bool blank) {
  if (width.IsIntLike()) CheckAlloc(size_t(std::max<int64_t>(0, width.GetInt())));
  std::string ind = width.IsString()
                        ? width.GetString()
                        : std::string(size_t(std::max<int64_t>(0, width.GetInt())), ' ');
  s += "\n";
  auto lines = SplitLines(s, false);
  std::string rv;
  CheckAlloc(s.size() + lines.size() * ind.size());
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) rv += (i ? "\n" + ind : "") + lines[i];
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) rv += "\n" + (lines[i].empty() ? "" : ind) + lines[i];
  }
  if (first) rv = ind + rv;
  return rv;
}

Value ToJsonFilter(Interpreter&, const Value& v, CallArgs& args) {
  // transformers' override: json.dumps(x, ensure_ascii=False, indent=None,
  // separators=None, sort_keys=False).
  auto a = Bind("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonOptions o;
  o.ensure_ascii = a[0] && Truthy(*a[0]);
  if (a[1] && !a[1]->IsNone()) {
    o.has_indent = true;
    if (a[1]->IsString())
      o.indent = a[1]->GetString();
    else if (a[1]->IsIntLike()) {
      CheckAlloc(size_t(std::max<int64_t>(0, a[1]->GetInt())));
      o.indent = std::string(size_t(std::max<int64_t>(0, a[1]->GetInt())), ' ');
    } else
      throw OpError("TypeError: tojson indent must be an int or a string");
    o.item_separator = ",";
  }
  if (a[2] && !a[2]->IsNone()) {
    if (!a[2]->IsList() || a[2]->list().items.size() != 2 || !a[2]->list().items[0].IsString() ||
        !a[2]->list().items[1].IsString())
      throw OpError("ValueError: tojson separators must be a pair of strings");
    o.item_separator = a[2]->list().items[0].GetString();
    o.key_separator = a[2]->list().items[1].GetString();
  }
  o.sort_keys = a[3] && Truthy(*a[3]);
  return Value::String(ToJson(v, o));
}

// Words as jinja2 counts them: runs of letters, digits and underscores.
Value WordCountFilter(Interpreter&, const Value& v, CallArgs& args) {
  Bind("wordcount", args, {});
  std::string s = ToStr(v);
  int64_t n = 0;
  bool in_word = false;
  for (size_t i = 0; i < s.size();) {
    std::string one;
    AppendUtf8(NextCodepoint(s, i), one);
    const bool w = one == "_" || PyIsAlnum(one);
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value::Int(n);
}

}  // namespace

void AddStringFilters(FilterTable& filters) {
  filters.insert({
      {"abs",
       [](Interpreter&, const Value& v, CallArgs& args) {
         Bind("abs", args, {});
         if (v.IsIntLike()) return Value::Int(std::abs(v.GetInt()));
         if (v.IsFloat()) return Value::Float(std::fabs(v.GetFloat()));
         throw OpError("TypeError: bad operand type for abs(): '" + TypeName(v) + "'");
       }},
      {"capitalize",
       [](Interpreter&, const Value& v, CallArgs& args) {
         Bind("capitalize", args, {});
         return Value::String(PyCapitalize(ToStr(v)));
       }},
      {"center",
       [](Interpreter&, const Value& v, CallArgs& args) {
         auto a = Bind("center", args, {"width"});
         CallArgs pa;
         pa.positional.push_back(Or(a[0], Value::Int(80)));
         return Pad(ToStr(v), pa, "center", 0);
       }},
      {"escape",
       [](Interpreter&, const Value& v, CallArgs& args) {
         Bind("escape", args, {});
         return Value::String(HtmlEscape(ToStr(v)));
       }},
      {"float",
       [](Interpreter&, const Value& v, CallArgs& args) {
         auto a = Bind("float", args, {"default"});
         double d;
         if (v.IsNumber()) return Value::Float(v.GetFloat());
         if (v.IsString() && ParsePyFloat(v.GetString(), &d)) return Value::Float(d);
         return Or(a[0], Value::Float(0.0));
       }},
      {"indent",
       [](Interpreter&, const Value& v, CallArgs& args) {
         auto a = Bind("indent", args, {"width", "first", "blank"});
         Value width = Or(a[0], Value::Int(4));
         if (!width.IsString() && !width.IsIntLike())
           throw OpError("TypeError: indent width must be int or str");
         return Value::String(
             Indent(ToStr(v), width, a[1] && Truthy(*a[1]), a[2] && Truthy(*a[2])));
       }},
      {"int",
       [](Interpreter&, const Value& v, CallArgs& args) {
         auto a = Bind("int", args, {"default", "base"});
         const int64_t base = ArgInt(a[1], 10, "base");
         int64_t i;
         double d;
         if (v.IsIntLike()) return Value::Int(v.GetInt());
         if (v.IsFloat() && std::isfinite(v.GetFloat()))
           return Value::Int(int64_t(std::trunc(v.GetFloat())));
         if (v.IsString()) {
           if (ParsePyInt(v.GetString(), int(base), &i)) return Value::Int(i);
           if (ParsePyFloat(v.GetString(), &d) && std::isfinite(d))
             return Value::Int(int64_t(std::trunc(d)));
         }
         return Or(a[0], Value::Int(0));
       }},
      {"lower",
       [](Interpreter&, const Value& v, CallArgs& args) {
         Bind("lower", args, {});
         return Value::String(PyLower(ToStr(v)));
       }},
      {"replace",
       [](Interpreter&, const Value& v, CallArgs& args) {
         auto a = Bind("replace", args, {"old", "new", "count"});
         if (!a[0] || !a[1]) throw OpError("TypeError: replace() needs old and new");
         return Value::String(
             PyReplace(ToStr(v), ToStr(*a[0]), ToStr(*a[1]), ArgInt(a[2], -1, "count")));
       }},
      {"round",
       [](Interpreter&, const Value& v, CallArgs& args) {
         auto a = Bind("round", args, {"precision", "method"});
         return Round(v, ArgInt(a[0], 0, "precision"), a[1] ? ArgStr(a[1], "method") : "common");
       }},
      {"safe",
       [](Interpreter&, const Value& v, CallArgs& args) {
         Bind("safe", args, {});
         return Value::String(ToStr(v));
       }},
      {"string",
       [](Interpreter&, const Value& v, CallArgs& args) {
         Bind("string", args, {});
         return Value::String(ToStr(v));
       }},
      {"title",
       [](Interpreter&, const Value& v, CallArgs& args) {
         Bind("title", args, {});
         return Value::String(JinjaTitle(ToStr(v)));
       }},
      {"tojson", ToJsonFilter},
      {"trim",
       [](Interpreter&, const Value& v, CallArgs& args) {
         auto a = Bind("trim", args, {"chars"});
         return Value::String(PyStrip(ToStr(v), ArgOptStr(a[0], "chars"), true, true));
       }},
      {"upper",
       [](Interpreter&, const Value& v, CallArgs& args) {
         Bind("upper", args, {});
         return Value::String(PyUpper(ToStr(v)));
       }},
      {"wordcount", WordCountFilter},
  });
}

}  // namespace es::jinja::builtin
