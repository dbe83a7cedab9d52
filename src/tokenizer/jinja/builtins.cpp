// Built-in filters, tests, methods and globals (see builtins.h). Each follows the jinja2 3.1 /
// Python 3 function it stands for; the comment on each names any deliberate difference.
#include "jinja/builtins.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <functional>
#include <optional>
#include <unordered_map>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/tokenizer/jinja.h"
#include "jinja/budget.h"
#include "jinja/interpreter.h"
#include "jinja/pystr.h"

namespace es::jinja {
namespace {

// ---- argument binding
// ------------------------------------------------------------------------------
using Bound = std::vector<std::optional<Value>>;

// Binds positional then keyword arguments to `params` like a Python signature.
Bound Bind(std::string_view fname, const CallArgs& args,
           std::initializer_list<std::string_view> params) {
  Bound out(params.size());
  if (args.positional.size() > params.size())
    throw OpError("TypeError: " + std::string(fname) + "() takes at most " +
                  std::to_string(params.size()) + " argument(s) (" +
                  std::to_string(args.positional.size()) + " given)");
  for (size_t i = 0; i < args.positional.size(); ++i) out[i] = args.positional[i];
  for (const auto& [k, v] : args.keyword) {
    size_t i = 0;
    for (auto p : params) {
      if (p == k) break;
      ++i;
    }
    if (i == params.size())
      throw OpError("TypeError: " + std::string(fname) + "() got an unexpected keyword argument '" +
                    k + "'");
    if (out[i])
      throw OpError("TypeError: " + std::string(fname) + "() got multiple values for argument '" +
                    k + "'");
    out[i] = v;
  }
  return out;
}

Value Or(const std::optional<Value>& v, Value def) { return v ? *v : def; }

const std::string& ArgStr(const std::optional<Value>& v, std::string_view what) {
  if (!v || !v->IsString()) throw OpError("TypeError: " + std::string(what) + " must be a string");
  return v->GetString();
}
int64_t ArgInt(const std::optional<Value>& v, int64_t def, std::string_view what) {
  if (!v || v->IsNone()) return def;
  if (!v->IsIntLike()) throw OpError("TypeError: " + std::string(what) + " must be an integer");
  return v->GetInt();
}
std::optional<std::string> ArgOptStr(const std::optional<Value>& v, std::string_view what) {
  if (!v || v->IsNone()) return std::nullopt;
  return ArgStr(v, what);
}

class Builtin : public Callable {
 public:
  using Fn = std::function<Value(Interpreter&, CallArgs&)>;
  Builtin(std::string name, Fn fn) : name_(std::move(name)), fn_(std::move(fn)) {}
  std::string Name() const override { return name_; }
  Value Call(Interpreter& in, CallArgs& args) override { return fn_(in, args); }

 private:
  std::string name_;
  Fn fn_;
};

Value MakeFn(std::string name, Builtin::Fn fn) {
  return Value::FromCallable(std::make_shared<Builtin>(std::move(name), std::move(fn)));
}

Value Unsafe(const std::string& type, std::string_view name) {
  std::string n(name);
  return MakeFn(type + "." + n, [type, n](Interpreter&, CallArgs&) -> Value {
    throw OpError("SecurityError: access to attribute '" + n + "' of '" + type +
                  "' object is unsafe (templates cannot modify their inputs)");
  });
}

Value UndefinedAttr(const Value& obj, std::string_view name) {
  return Value::Undefined("'" + ObjectTypeRepr(obj) + "' has no attribute '" + std::string(name) +
                          "'");
}

// ---- namespace ---------------------------------------------------------------------------------
class NamespaceObject : public Object {
 public:
  std::string TypeName() const override { return "Namespace"; }
  Value GetAttr(std::string_view name) const override {
    for (const auto& [k, v] : attrs_)
      if (k == name) return v;
    return Value::Undefined("'jinja2.utils.Namespace object' has no attribute '" +
                            std::string(name) + "'");
  }
  // Grows with every assignment of a value that nests (a namespace assigned into itself counts
  // once more each time: conservative, and such templates stop at kMaxValueNesting).
  int Nesting() const override { return nest_; }
  void BreakCycles() override { attrs_.clear(); }
  bool SetAttr(const std::string& name, Value value) override {
    nest_ = std::max(nest_, NestAround(jinja::Nesting(value)));
    for (auto& [k, v] : attrs_)
      if (k == name) {
        v = std::move(value);
        return true;
      }
    attrs_.emplace_back(name, std::move(value));
    return true;
  }
  std::string Repr() const override {
    std::string out = "<Namespace {";
    for (size_t i = 0; i < attrs_.size(); ++i) {
      if (i) out += ", ";
      out += PyStrRepr(attrs_[i].first) + ": " + jinja::Repr(attrs_[i].second);
    }
    return out + "}>";
  }

 private:
  std::vector<std::pair<std::string, Value>> attrs_;
  int nest_ = 1;
};

// ---- str methods
// -----------------------------------------------------------------------------------
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

Value StrMethod(const std::string& s, const std::string& m, CallArgs& args) {
  ChargeBytes(s.size());  // every method reads the string at least once
  auto none = [&](const char* name) { Bind(name, args, {}); };
  if (m == "startswith") return Value::Bool(StartsOrEnds(s, args, false));
  if (m == "endswith") return Value::Bool(StartsOrEnds(s, args, true));
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
  throw OpError("str method '" + m + "' is not supported");
}

// ---- dict and list methods ---------------------------------------------------------------------
Value DictItems(const Value& d) {
  std::vector<Value> items;
  for (const auto& [k, v] : d.dict().items) items.push_back(Value::Tuple({k, v}));
  return Value::List(std::move(items));
}

Value DictMethod(const Value& d, const std::string& m, CallArgs& args) {
  if (m == "get") {
    auto a = Bind("get", args, {"key", "default"});
    if (!a[0]) throw OpError("TypeError: get expected at least 1 argument, got 0");
    const Value* v = d.dict().Find(*a[0]);
    return v ? *v : Or(a[1], Value::None());
  }
  Bind(m, args, {});
  if (m == "items") return DictItems(d);
  std::vector<Value> out;
  for (const auto& [k, v] : d.dict().items) out.push_back(m == "keys" ? k : v);
  if (m == "keys" || m == "values") return Value::List(std::move(out));
  Value copy = Value::Dict();
  copy.dict().CopyFrom(d.dict());
  return copy;  // copy
}

bool IsDictSafeMethod(std::string_view n) {
  return n == "get" || n == "items" || n == "keys" || n == "values" || n == "copy";
}
bool IsDictUnsafeMethod(std::string_view n) {
  return n == "clear" || n == "pop" || n == "popitem" || n == "setdefault" || n == "update" ||
         n == "fromkeys";
}
bool IsListUnsafeMethod(std::string_view n) {
  return n == "append" || n == "clear" || n == "pop" || n == "reverse" || n == "insert" ||
         n == "sort" || n == "extend" || n == "remove";
}

// Attribute of a Python builtin type only (no item fallback): what `|attr` and getattr() see.
std::optional<Value> PyAttr(const Value& obj, std::string_view name) {
  if (obj.IsString()) {
    for (const char* m : kStrMethods)
      if (name == m) {
        std::string method(name);
        return MakeFn("str." + method, [obj, method](Interpreter&, CallArgs& args) {
          return StrMethod(obj.GetString(), method, args);
        });
      }
    return std::nullopt;
  }
  if (obj.IsDict()) {
    if (IsDictSafeMethod(name)) {
      std::string method(name);
      return MakeFn("dict." + method, [obj, method](Interpreter&, CallArgs& args) {
        return DictMethod(obj, method, args);
      });
    }
    if (IsDictUnsafeMethod(name)) return Unsafe("dict", name);
    return std::nullopt;
  }
  if (obj.IsList() && !obj.list().is_generator) {
    if (IsListUnsafeMethod(name) && !obj.list().is_tuple) return Unsafe("list", name);
    if (name == "count" || name == "index") {
      std::string method(name);
      return MakeFn("list." + method, [obj, method](Interpreter&, CallArgs& args) -> Value {
        auto a = Bind(method, args, {"value"});
        if (!a[0]) throw OpError("TypeError: " + method + "() takes exactly one argument");
        const auto& items = obj.list().items;
        int64_t n = 0;
        for (size_t i = 0; i < items.size(); ++i)
          if (Equals(items[i], *a[0])) {
            if (method == "index") return Value::Int(int64_t(i));
            ++n;
          }
        if (method == "index") throw OpError("ValueError: " + Repr(*a[0]) + " is not in list");
        return Value::Int(n);
      });
    }
    return std::nullopt;
  }
  if (obj.IsObject()) {
    Value v = obj.object().GetAttr(name);
    if (!v.IsUndefined()) return v;
  }
  return std::nullopt;
}

// ---- filter helpers
// ------------------------------------------------------------------------------
int64_t Len(const Value& v) {
  switch (v.type()) {
    case Value::Type::kUndefined:
      return 0;
    case Value::Type::kString:
      return int64_t(CodepointCount(v.GetString()));
    case Value::Type::kList:
      if (!v.list().is_generator) return int64_t(v.list().items.size());
      break;
    case Value::Type::kDict:
      return int64_t(v.dict().items.size());
    default:
      break;
  }
  throw OpError("TypeError: object of type '" + TypeName(v) + "' has no len()");
}

Value LowerIfString(const Value& v) {
  return v.IsString() ? Value::String(PyLower(v.GetString())) : v;
}

// make_attrgetter: "a.b.0" looks up a, then b, then item 0 (environment.getitem each step).
std::function<Value(const Value&)> AttrGetter(const std::optional<Value>& attribute,
                                              bool ignore_case,
                                              std::optional<Value> def = std::nullopt) {
  std::vector<Value> parts;
  if (attribute && !attribute->IsNone()) {
    if (attribute->IsString()) {
      for (auto& p : PySplit(attribute->GetString(), std::string("."), -1, false)) {
        if (PyIsDigit(p))
          parts.push_back(Value::Int(std::stoll(p)));
        else
          parts.push_back(Value::String(p));
      }
    } else {
      parts.push_back(*attribute);
    }
  }
  return [parts, ignore_case, def](const Value& item) {
    Value v = item;
    for (const auto& p : parts) {
      v = GetItem(v, p);
      if (def && !def->IsNone() && v.IsUndefined()) v = *def;
    }
    return ignore_case ? LowerIfString(v) : v;
  };
}

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
  if (base == 16 && s.compare(i, 2, "0x") == 0)
    i += 2;
  else if (base == 8 && s.compare(i, 2, "0o") == 0)
    i += 2;
  else if (base == 2 && s.compare(i, 2, "0b") == 0)
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

using FilterFn = std::function<Value(Interpreter&, const Value&, CallArgs&)>;

Value SelectOrReject(Interpreter& in, const Value& seq, CallArgs& args, bool select, bool attr) {
  if (!Truthy(seq)) return Value::Generator({});
  size_t off = 0;
  std::function<Value(const Value&)> get = [](const Value& v) { return v; };
  if (attr) {
    if (args.positional.empty())
      throw OpError("FilterArgumentError: missing parameter for attribute name");
    get = AttrGetter(args.positional[0], false);
    off = 1;
  }
  std::optional<std::string> test;
  CallArgs test_args;
  if (args.positional.size() > off) {
    if (!args.positional[off].IsString()) throw OpError("TypeError: test name must be a string");
    test = args.positional[off].GetString();
    if (!IsKnownTest(*test)) throw OpError("no test named '" + *test + "'");
    test_args.positional.assign(args.positional.begin() + long(off) + 1, args.positional.end());
    test_args.keyword = args.keyword;
  }
  std::vector<Value> out;
  for (const auto& item : Iterate(seq)) {
    Value v = get(item);
    CallArgs a = test_args;
    const bool ok = test ? ApplyTest(in, *test, v, a) : Truthy(v);
    if (ok == select) out.push_back(item);
  }
  return Value::Generator(std::move(out));
}

Value MinMax(const Value& seq, CallArgs& args, bool is_max) {
  auto a = Bind(is_max ? "max" : "min", args, {"case_sensitive", "attribute"});
  auto items = Iterate(seq);
  if (items.empty()) return Value::Undefined("No aggregated item, sequence was empty.");
  auto key = AttrGetter(a[1], !(a[0] && Truthy(*a[0])));
  size_t best = 0;
  Value best_key = key(items[0]);
  for (size_t i = 1; i < items.size(); ++i) {
    Value k = key(items[i]);
    const int c = Compare(k, best_key, is_max ? ">" : "<");
    if (is_max ? c > 0 : c < 0) {
      best = i;
      best_key = k;
    }
  }
  return items[best];
}

Value SortValues(std::vector<Value> items, std::function<Value(const Value&)> key, bool reverse) {
  std::vector<std::pair<Value, size_t>> keyed;
  ChargeSteps(items.size() * 20);  // ~n log n comparisons
  for (size_t i = 0; i < items.size(); ++i) keyed.emplace_back(key(items[i]), i);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    return reverse ? Compare(y.first, x.first, "<") < 0 : Compare(x.first, y.first, "<") < 0;
  });
  std::vector<Value> out;
  for (const auto& [k, i] : keyed) out.push_back(items[i]);
  return Value::List(std::move(out));
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

const std::unordered_map<std::string, FilterFn>& Filters() {
  static const auto* filters = new std::unordered_map<std::string, FilterFn>{
      {"abs", [](Interpreter&, const Value& v, CallArgs& args) {
         Bind("abs", args, {});
         if (v.IsIntLike()) return Value::Int(std::abs(v.GetInt()));
         if (v.IsFloat()) return Value::Float(std::fabs(v.GetFloat()));
         throw OpError("TypeError: bad operand type for abs(): '" + TypeName(v) + "'");
       }},
      {"attr", [](Interpreter&, const Value& v, CallArgs& args) {
         auto a = Bind("attr", args, {"name"});
         const std::string& n = ArgStr(a[0], "attribute name");
         if (v.IsUndefined()) FailUndefined(v);
         auto r = PyAttr(v, n);
         return r ? *r : UndefinedAttr(v, n);
       }},
      {"capitalize", [](Interpreter&, const Value& v, CallArgs& args) {
         Bind("capitalize", args, {});
         return Value::String(PyCapitalize(ToStr(v)));
       }},
      {"center", [](Interpreter&, const Value& v, CallArgs& args) {
         auto a = Bind("center", args, {"width"});
         CallArgs pa;
         pa.positional.push_back(Or(a[0], Value::Int(80)));
         return Pad(ToStr(v), pa, "center", 0);
       }},
      {"count", [](Interpreter&, const Value& v, CallArgs& args) {
         Bind("count", args, {});
         return Value::Int(Len(v));
       }},
      {"default", [](Interpreter&, const Value& v, CallArgs& args) {
         auto a = Bind("default", args, {"default_value", "boolean"});
         if (v.IsUndefined() || (a[1] && Truthy(*a[1]) && !Truthy(v)))
           return Or(a[0], Value::String(""));
         return v;
       }},
      {"dictsort", [](Interpreter&, const Value& v, CallArgs& args) {
         auto a = Bind("dictsort", args, {"case_sensitive", "by", "reverse"});
         if (!v.IsDict()) throw OpError("TypeError: dictsort expects a mapping");
         const std::string by = a[1] ? ArgStr(a[1], "by") : "key";
         if (by != "key" && by != "value")
           throw OpError("FilterArgumentError: You can only sort by either \"key\" or \"value\"");
         const bool cs = a[0] && Truthy(*a[0]);
         const size_t pos = by == "key" ? 0 : 1;
         return SortValues(DictItems(v).list().items,
                           [cs, pos](const Value& item) {
                             const Value& x = item.list().items[pos];
                             return cs ? x : LowerIfString(x);
                           },
                           a[2] && Truthy(*a[2]));
       }},
      {"escape", [](Interpreter&, const Value& v, CallArgs& args) {
         Bind("escape", args, {});
         return Value::String(HtmlEscape(ToStr(v)));
       }},
      {"first", [](Interpreter&, const Value& v, CallArgs& args) {
         Bind("first", args, {});
         auto items = Iterate(v);
         return items.empty() ? Value::Undefined("No first item, sequence was empty.") : items[0];
       }},
      {"float", [](Interpreter&, const Value& v, CallArgs& args) {
         auto a = Bind("float", args, {"default"});
         double d;
         if (v.IsNumber()) return Value::Float(v.GetFloat());
         if (v.IsString() && ParsePyFloat(v.GetString(), &d)) return Value::Float(d);
         return Or(a[0], Value::Float(0.0));
       }},
      {"indent", [](Interpreter&, const Value& v, CallArgs& args) {
         auto a = Bind("indent", args, {"width", "first", "blank"});
         Value width = Or(a[0], Value::Int(4));
         if (!width.IsString() && !width.IsIntLike()) throw OpError("TypeError: indent width must be int or str");
         return Value::String(Indent(ToStr(v), width, a[1] && Truthy(*a[1]), a[2] && Truthy(*a[2])));
       }},
      {"int", [](Interpreter&, const Value& v, CallArgs& args) {
         auto a = Bind("int", args, {"default", "base"});
         const int64_t base = ArgInt(a[1], 10, "base");
         int64_t i;
         double d;
         if (v.IsIntLike()) return Value::Int(v.GetInt());
         if (v.IsFloat() && std::isfinite(v.GetFloat())) return Value::Int(int64_t(std::trunc(v.GetFloat())));
         if (v.IsString()) {
           if (ParsePyInt(v.GetString(), int(base), &i)) return Value::Int(i);
           if (ParsePyFloat(v.GetString(), &d) && std::isfinite(d)) return Value::Int(int64_t(std::trunc(d)));
         }
         return Or(a[0], Value::Int(0));
       }},
      {"items", [](Interpreter&, const Value& v, CallArgs& args) {
         Bind("items", args, {});
         if (v.IsUndefined()) return Value::List();
         if (!v.IsDict()) throw OpError("TypeError: Can only get item pairs from a mapping.");
         return DictItems(v);
       }},
      {"join", [](Interpreter&, const Value& v, CallArgs& args) {
         auto a = Bind("join", args, {"d", "attribute"});
         const std::string d = a[0] ? ToStr(*a[0]) : "";
         auto get = AttrGetter(a[1], false);
         std::string out;
         bool first = true;
         for (const auto& x : Iterate(v)) {
           if (!first) out += d;
           first = false;
           out += ToStr(a[1] ? get(x) : x);
           CheckAlloc(out.size() + d.size());
         }
         return Value::String(out);
       }},
      {"last", [](Interpreter&, const Value& v, CallArgs& args) {
         Bind("last", args, {});
         if (v.IsList() && v.list().is_generator) throw OpError("TypeError: 'generator' object is not reversible");
         auto items = Iterate(v);
         return items.empty() ? Value::Undefined("No last item, sequence was empty.") : items.back();
       }},
      {"length", [](Interpreter&, const Value& v, CallArgs& args) {
         Bind("length", args, {});
         return Value::Int(Len(v));
       }},
      {"list", [](Interpreter&, const Value& v, CallArgs& args) {
         Bind("list", args, {});
         return Value::List(Iterate(v));
       }},
      {"lower", [](Interpreter&, const Value& v, CallArgs& args) {
         Bind("lower", args, {});
         return Value::String(PyLower(ToStr(v)));
       }},
      {"map", [](Interpreter& in, const Value& v, CallArgs& args) {
         if (!Truthy(v)) return Value::Generator({});
         std::vector<Value> out;
         if (args.positional.empty()) {
           auto a = Bind("map", args, {"attribute", "default"});
           if (!a[0]) throw OpError("FilterArgumentError: map requires a filter argument");
           auto get = AttrGetter(a[0], false, a[1]);
           for (const auto& x : Iterate(v)) out.push_back(get(x));
         } else {
           if (!args.positional[0].IsString()) throw OpError("TypeError: filter name must be a string");
           const std::string name = args.positional[0].GetString();
           if (!IsKnownFilter(name)) throw OpError("no filter named '" + name + "'");
           CallArgs rest;
           rest.positional.assign(args.positional.begin() + 1, args.positional.end());
           rest.keyword = args.keyword;
           for (const auto& x : Iterate(v)) {
             CallArgs a = rest;
             out.push_back(ApplyFilter(in, name, x, a));
           }
         }
         return Value::Generator(std::move(out));
       }},
      {"max", [](Interpreter&, const Value& v, CallArgs& args) { return MinMax(v, args, true); }},
      {"min", [](Interpreter&, const Value& v, CallArgs& args) { return MinMax(v, args, false); }},
      {"reject", [](Interpreter& in, const Value& v, CallArgs& args) { return SelectOrReject(in, v, args, false, false); }},
      {"rejectattr", [](Interpreter& in, const Value& v, CallArgs& args) { return SelectOrReject(in, v, args, false, true); }},
      {"select", [](Interpreter& in, const Value& v, CallArgs& args) { return SelectOrReject(in, v, args, true, false); }},
      {"selectattr", [](Interpreter& in, const Value& v, CallArgs& args) { return SelectOrReject(in, v, args, true, true); }},
      {"replace", [](Interpreter&, const Value& v, CallArgs& args) {
         auto a = Bind("replace", args, {"old", "new", "count"});
         if (!a[0] || !a[1]) throw OpError("TypeError: replace() needs old and new");
         return Value::String(PyReplace(ToStr(v), ToStr(*a[0]), ToStr(*a[1]), ArgInt(a[2], -1, "count")));
       }},
      {"reverse", [](Interpreter&, const Value& v, CallArgs& args) {
         Bind("reverse", args, {});
         if (v.IsString()) {
           std::u32string u = DecodeUtf8(v.GetString());
           std::reverse(u.begin(), u.end());
           return Value::String(EncodeUtf8(u));
         }
         auto items = Iterate(v);
         std::reverse(items.begin(), items.end());
         return Value::Generator(std::move(items));
       }},
      {"round", [](Interpreter&, const Value& v, CallArgs& args) {
         auto a = Bind("round", args, {"precision", "method"});
         return Round(v, ArgInt(a[0], 0, "precision"), a[1] ? ArgStr(a[1], "method") : "common");
       }},
      {"safe", [](Interpreter&, const Value& v, CallArgs& args) {
         Bind("safe", args, {});
         return Value::String(ToStr(v));
       }},
      {"sort", [](Interpreter&, const Value& v, CallArgs& args) {
         auto a = Bind("sort", args, {"reverse", "case_sensitive", "attribute"});
         auto getters = std::vector<std::function<Value(const Value&)>>();
         const bool ignore_case = !(a[1] && Truthy(*a[1]));
         if (a[2] && a[2]->IsString()) {
           for (auto& part : PySplit(a[2]->GetString(), std::string(","), -1, false))
             getters.push_back(AttrGetter(Value::String(part), ignore_case));
         } else {
           getters.push_back(AttrGetter(a[2], ignore_case));
         }
         auto key = [getters](const Value& x) {
           if (getters.size() == 1) return getters[0](x);
           std::vector<Value> k;
           for (const auto& g : getters) k.push_back(g(x));
           return Value::List(std::move(k));
         };
         return SortValues(Iterate(v), key, a[0] && Truthy(*a[0]));
       }},
      {"string", [](Interpreter&, const Value& v, CallArgs& args) {
         Bind("string", args, {});
         return Value::String(ToStr(v));
       }},
      {"sum", [](Interpreter&, const Value& v, CallArgs& args) {
         auto a = Bind("sum", args, {"attribute", "start"});
         auto get = AttrGetter(a[0], false);
         Value acc = Or(a[1], Value::Int(0));
         for (const auto& x : Iterate(v)) acc = BinaryOp("+", acc, get(x));
         return acc;
       }},
      {"title", [](Interpreter&, const Value& v, CallArgs& args) {
         Bind("title", args, {});
         return Value::String(JinjaTitle(ToStr(v)));
       }},
      {"tojson", [](Interpreter&, const Value& v, CallArgs& args) {
         // transformers' override: json.dumps(x, ensure_ascii=False, indent=None,
         // separators=None, sort_keys=False).
         auto a = Bind("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"});
         JsonOptions o;
         o.ensure_ascii = a[0] && Truthy(*a[0]);
         if (a[1] && !a[1]->IsNone()) {
           o.has_indent = true;
           if (a[1]->IsString()) o.indent = a[1]->GetString();
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
       }},
      {"trim", [](Interpreter&, const Value& v, CallArgs& args) {
         auto a = Bind("trim", args, {"chars"});
         return Value::String(PyStrip(ToStr(v), ArgOptStr(a[0], "chars"), true, true));
       }},
      {"unique", [](Interpreter&, const Value& v, CallArgs& args) {
         auto a = Bind("unique", args, {"case_sensitive", "attribute"});
         auto get = AttrGetter(a[1], !(a[0] && Truthy(*a[0])));
         std::vector<Value> seen, out;
         for (const auto& x : Iterate(v)) {
           Value k = get(x);
           ChargeSteps(seen.size());  // quadratic in the distinct items
           if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return Equals(s, k); })) {
             seen.push_back(k);
             out.push_back(x);
           }
         }
         return Value::Generator(std::move(out));
       }},
      {"upper", [](Interpreter&, const Value& v, CallArgs& args) {
         Bind("upper", args, {});
         return Value::String(PyUpper(ToStr(v)));
       }},
      {"wordcount", [](Interpreter&, const Value& v, CallArgs& args) {
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
       }},
  };
  return *filters;
}

const char* const kFilterAliases[][2] = {
    {"d", "default"}, {"e", "escape"}, {"forceescape", "escape"}};

std::string_view CanonicalFilter(std::string_view name) {
  for (const auto& alias : kFilterAliases)
    if (name == alias[0]) return alias[1];
  return name;
}

// ---- tests
// -------------------------------------------------------------------------------------------
using TestFn = std::function<bool(Interpreter&, const Value&, CallArgs&)>;

TestFn Compare1(const char* op) {
  return [op](Interpreter&, const Value& v, CallArgs& args) {
    auto a = Bind(op, args, {"other"});
    if (!a[0]) throw OpError(std::string("TypeError: test '") + op + "' needs an argument");
    const std::string o = op;
    if (o == "==") return Equals(v, *a[0]);
    if (o == "!=") return !Equals(v, *a[0]);
    const int c = Compare(v, *a[0], op);
    if (o == "<") return c < 0;
    if (o == "<=") return c <= 0;
    if (o == ">") return c > 0;
    return c >= 0;
  };
}

TestFn NoArg(const char* name, std::function<bool(const Value&)> f) {
  return [name, f](Interpreter&, const Value& v, CallArgs& args) {
    Bind(name, args, {});
    return f(v);
  };
}

const std::unordered_map<std::string, TestFn>& Tests() {
  static const auto* tests = new std::unordered_map<std::string, TestFn>{
      {"defined", NoArg("defined", [](const Value& v) { return !v.IsUndefined(); })},
      {"undefined", NoArg("undefined", [](const Value& v) { return v.IsUndefined(); })},
      {"none", NoArg("none", [](const Value& v) { return v.IsNone(); })},
      {"boolean", NoArg("boolean", [](const Value& v) { return v.IsBool(); })},
      {"true", NoArg("true", [](const Value& v) { return v.IsBool() && v.GetBool(); })},
      {"false", NoArg("false", [](const Value& v) { return v.IsBool() && !v.GetBool(); })},
      {"integer", NoArg("integer", [](const Value& v) { return v.IsInt(); })},
      {"float", NoArg("float", [](const Value& v) { return v.IsFloat(); })},
      {"number", NoArg("number", [](const Value& v) { return v.IsNumber(); })},
      {"string", NoArg("string", [](const Value& v) { return v.IsString(); })},
      {"mapping", NoArg("mapping", [](const Value& v) { return v.IsDict(); })},
      {"sequence", NoArg("sequence", [](const Value& v) {
         return v.IsUndefined() || v.IsString() || v.IsDict() || (v.IsList() && !v.list().is_generator);
       })},
      {"iterable", NoArg("iterable", [](const Value& v) {
         return v.IsUndefined() || v.IsString() || v.IsDict() || v.IsList();
       })},
      {"callable", NoArg("callable", [](const Value& v) { return v.IsCallable() || v.IsUndefined(); })},
      {"escaped", NoArg("escaped", [](const Value&) { return false; })},
      {"lower", NoArg("lower", [](const Value& v) { return PyIsLower(ToStr(v)); })},
      {"upper", NoArg("upper", [](const Value& v) { return PyIsUpper(ToStr(v)); })},
      {"odd", NoArg("odd", [](const Value& v) { return Equals(BinaryOp("%", v, Value::Int(2)), Value::Int(1)); })},
      {"even", NoArg("even", [](const Value& v) { return Equals(BinaryOp("%", v, Value::Int(2)), Value::Int(0)); })},
      {"divisibleby", [](Interpreter&, const Value& v, CallArgs& args) {
         auto a = Bind("divisibleby", args, {"num"});
         if (!a[0]) throw OpError("TypeError: divisibleby needs an argument");
         return Equals(BinaryOp("%", v, *a[0]), Value::Int(0));
       }},
      {"sameas", [](Interpreter&, const Value& v, CallArgs& args) {
         auto a = Bind("sameas", args, {"other"});
         if (!a[0]) throw OpError("TypeError: sameas needs an argument");
         const Value& o = *a[0];
         if (v.type() != o.type()) return false;
         if (v.identity() || o.identity()) return v.identity() == o.identity() || (v.IsString() && Equals(v, o));
         return Equals(v, o);
       }},
      {"in", [](Interpreter&, const Value& v, CallArgs& args) {
         auto a = Bind("in", args, {"seq"});
         if (!a[0]) throw OpError("TypeError: test 'in' needs an argument");
         return Contains(*a[0], v);
       }},
      {"filter", NoArg("filter", [](const Value& v) { return v.IsString() && IsKnownFilter(v.GetString()); })},
      {"test", NoArg("test", [](const Value& v) { return v.IsString() && IsKnownTest(v.GetString()); })},
      {"==", Compare1("==")}, {"eq", Compare1("==")}, {"equalto", Compare1("==")},
      {"!=", Compare1("!=")}, {"ne", Compare1("!=")},
      {">", Compare1(">")}, {"gt", Compare1(">")}, {"greaterthan", Compare1(">")},
      {">=", Compare1(">=")}, {"ge", Compare1(">=")},
      {"<", Compare1("<")}, {"lt", Compare1("<")}, {"lessthan", Compare1("<")},
      {"<=", Compare1("<=")}, {"le", Compare1("<=")},
  };
  return *tests;
}

}  // namespace

// ---- public entry points
// ---------------------------------------------------------------------------
bool IsKnownFilter(std::string_view name) {
  return Filters().count(std::string(CanonicalFilter(name))) > 0;
}
bool IsKnownTest(std::string_view name) { return Tests().count(std::string(name)) > 0; }

Value ApplyFilter(Interpreter& interp, std::string_view name, const Value& input, CallArgs& args) {
  auto it = Filters().find(std::string(CanonicalFilter(name)));
  if (it == Filters().end()) throw OpError("no filter named '" + std::string(name) + "'");
  if (input.IsString()) ChargeBytes(input.GetString().size());
  return it->second(interp, input, args);
}

bool ApplyTest(Interpreter& interp, std::string_view name, const Value& input, CallArgs& args) {
  auto it = Tests().find(std::string(name));
  if (it == Tests().end()) throw OpError("no test named '" + std::string(name) + "'");
  if (input.IsString()) ChargeBytes(input.GetString().size());
  return it->second(interp, input, args);
}

Value GetAttr(const Value& obj, std::string_view name) {
  if (obj.IsUndefined()) FailUndefined(obj);
  if (auto v = PyAttr(obj, name)) return *v;
  if (obj.IsDict())
    if (const Value* v = obj.dict().Find(name)) return *v;
  if (obj.IsObject()) return obj.object().GetAttr(name);  // carries its own hint
  return UndefinedAttr(obj, name);
}

Value GetItem(const Value& obj, const Value& key) {
  if (obj.IsUndefined()) FailUndefined(obj);
  if (obj.IsDict()) {
    if (const Value* v = obj.dict().Find(key)) return *v;
  } else if (key.IsIntLike() && obj.IsList() && !obj.list().is_generator) {
    const auto& items = obj.list().items;
    int64_t i = key.GetInt();
    if (i < 0) i += int64_t(items.size());
    if (i >= 0 && i < int64_t(items.size())) return items[size_t(i)];
    return Value::Undefined(ObjectTypeRepr(obj) + " has no element " + Repr(key));
  } else if (key.IsIntLike() && obj.IsString()) {
    ChargeBytes(obj.GetString().size());
    std::u32string u = DecodeUtf8(obj.GetString());
    int64_t i = key.GetInt();
    if (i < 0) i += int64_t(u.size());
    if (i >= 0 && i < int64_t(u.size())) return Value::String(EncodeUtf8(u.substr(size_t(i), 1)));
    return Value::Undefined(ObjectTypeRepr(obj) + " has no element " + Repr(key));
  }
  if (key.IsString()) {
    if (auto v = PyAttr(obj, key.GetString())) return *v;
    if (obj.IsObject()) return obj.object().GetAttr(key.GetString());
    return UndefinedAttr(obj, key.GetString());
  }
  return Value::Undefined(ObjectTypeRepr(obj) + " has no element " + Repr(key));
}

std::vector<Value> Iterate(const Value& v) {
  switch (v.type()) {
    case Value::Type::kUndefined:
      return {};
    case Value::Type::kList:
      ChargeSteps(v.list().items.size());
      ChargeAlloc(v.list().items.size() * sizeof(Value));
      return v.list().items;
    case Value::Type::kDict: {
      ChargeSteps(v.dict().items.size());
      ChargeAlloc(v.dict().items.size() * sizeof(Value));
      std::vector<Value> keys;
      for (const auto& [k, x] : v.dict().items) keys.push_back(k);
      return keys;
    }
    case Value::Type::kString: {
      std::vector<Value> chars;
      const std::string& s = v.GetString();
      // One value per character is ~20x the string's bytes: checked before it is built.
      ChargeSteps(s.size());
      ChargeAlloc(s.size() * (sizeof(Value) + sizeof(std::string)));
      for (size_t i = 0; i < s.size();) {
        const size_t start = i;
        NextCodepoint(s, i);
        chars.push_back(Value::String(s.substr(start, i - start)));
      }
      return chars;
    }
    default:
      break;
  }
  throw OpError("TypeError: '" + TypeName(v) + "' object is not iterable");
}

bool Contains(const Value& container, const Value& item) {
  switch (container.type()) {
    case Value::Type::kUndefined:
      return false;
    case Value::Type::kString:
      if (!item.IsString())
        throw OpError("TypeError: 'in <string>' requires string as left operand, not " +
                      TypeName(item));
      ChargeBytes(container.GetString().size());
      return container.GetString().find(item.GetString()) != std::string::npos;
    case Value::Type::kList:
      ChargeSteps(container.list().items.size());
      for (const auto& x : container.list().items)
        if (Equals(x, item)) return true;
      return false;
    case Value::Type::kDict:
      return container.dict().Find(item) != nullptr;
    default:
      break;
  }
  throw OpError("TypeError: argument of type '" + TypeName(container) + "' is not iterable");
}

void AddGlobals(DictData& globals) {
  globals.Set(Value::String("range"), MakeFn("range", [](Interpreter&, CallArgs& args) {
                auto a = Bind("range", args, {"start", "stop", "step"});
                if (!a[0]) throw OpError("TypeError: range expected at least 1 argument, got 0");
                int64_t start = 0, stop, step = ArgInt(a[2], 1, "range step");
                if (a[1]) {
                  start = ArgInt(a[0], 0, "range start");
                  stop = ArgInt(a[1], 0, "range stop");
                } else {
                  stop = ArgInt(a[0], 0, "range stop");
                }
                if (step == 0) throw OpError("ValueError: range() arg 3 must not be zero");
                std::vector<Value> out;
                for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
                  if (out.size() >= 100000)
                    throw OpError(
                        "OverflowError: Range too big. The sandbox blocks ranges larger than "
                        "MAX_RANGE (100000).");
                  out.push_back(Value::Int(i));
                }
                return Value::List(std::move(out));
              }));
  globals.Set(
      Value::String("dict"), MakeFn("dict", [](Interpreter&, CallArgs& args) {
        Value d = Value::Dict();
        if (args.positional.size() > 1)
          throw OpError("TypeError: dict expected at most 1 argument");
        if (!args.positional.empty()) {
          const Value& src = args.positional[0];
          if (src.IsDict()) {
            d.dict().CopyFrom(src.dict());
          } else {
            for (const auto& pair : Iterate(src)) {
              auto kv = Iterate(pair);
              if (kv.size() != 2)
                throw OpError("ValueError: dictionary update sequence element has wrong length");
              d.dict().Set(kv[0], kv[1]);
            }
          }
        }
        for (const auto& [k, v] : args.keyword) d.dict().Set(Value::String(k), v);
        return d;
      }));
  globals.Set(Value::String("namespace"), MakeFn("namespace", [](Interpreter& in, CallArgs& args) {
                in.budget().Alloc(Interpreter::kScopeBytes);
                auto ns = std::make_shared<NamespaceObject>();
                in.Track(std::shared_ptr<Object>(ns));
                if (args.positional.size() > 1)
                  throw OpError("TypeError: namespace expected at most 1 argument");
                if (!args.positional.empty()) {
                  if (!args.positional[0].IsDict())
                    throw OpError("TypeError: namespace() argument must be a mapping");
                  for (const auto& [k, v] : args.positional[0].dict().items)
                    ns->SetAttr(ToStr(k), v);
                }
                for (const auto& [k, v] : args.keyword) ns->SetAttr(k, v);
                return Value::FromObject(std::move(ns));
              }));
  globals.Set(Value::String("raise_exception"),
              MakeFn("raise_exception", [](Interpreter&, CallArgs& args) -> Value {
                auto a = Bind("raise_exception", args, {"message"});
                throw RaisedError(a[0] ? ToStr(*a[0]) : "");
              }));
  globals.Set(Value::String("strftime_now"),
              MakeFn("strftime_now", [](Interpreter&, CallArgs& args) {
                auto a = Bind("strftime_now", args, {"format"});
                const std::string& fmt = ArgStr(a[0], "format");
                std::time_t now = std::time(nullptr);
                std::tm tm{};
                localtime_r(&now, &tm);
                char buf[512];
                size_t n = std::strftime(buf, sizeof buf, fmt.c_str(), &tm);
                return Value::String(std::string(buf, n));
              }));
}

}  // namespace es::jinja
