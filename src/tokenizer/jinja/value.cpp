// Jinja values with Python semantics (see value.h).
#include "jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "jinja/budget.h"
#include "jinja/pystr.h"

namespace es::jinja {

// ---- construction -------------------------------------------------------------------------------
Value Value::Undefined(std::string hint) {
  Value v;
  if (!hint.empty()) v.ptr_ = std::make_shared<std::string>(std::move(hint));
  return v;
}
Value Value::None() {
  Value v;
  v.type_ = Type::kNone;
  return v;
}
Value Value::Bool(bool b) {
  Value v;
  v.type_ = Type::kBool;
  v.b_ = b;
  return v;
}
Value Value::Int(int64_t i) {
  Value v;
  v.type_ = Type::kInt;
  v.i_ = i;
  return v;
}
Value Value::Float(double f) {
  Value v;
  v.type_ = Type::kFloat;
  v.f_ = f;
  return v;
}
Value Value::String(std::string s) {
  Value v;
  v.type_ = Type::kString;
  v.ptr_ = std::make_shared<std::string>(std::move(s));
  return v;
}
Value Value::List(std::vector<Value> items) {
  Value v;
  v.type_ = Type::kList;
  auto d = std::make_shared<ListData>();
  int inner = 0;
  for (const Value& x : items) inner = std::max(inner, Nesting(x));
  d->nest = NestAround(inner);
  d->items = std::move(items);
  v.ptr_ = std::move(d);
  return v;
}
Value Value::Tuple(std::vector<Value> items) {
  Value v = List(std::move(items));
  v.list().is_tuple = true;
  return v;
}
Value Value::Generator(std::vector<Value> items) {
  Value v = List(std::move(items));
  v.list().is_generator = true;
  return v;
}
Value Value::Dict() {
  Value v;
  v.type_ = Type::kDict;
  v.ptr_ = std::make_shared<DictData>();
  return v;
}
Value Value::FromObject(std::shared_ptr<Object> o) {
  Value v;
  v.type_ = Type::kObject;
  v.ptr_ = std::move(o);
  return v;
}
Value Value::FromCallable(std::shared_ptr<Callable> c) {
  Value v;
  v.type_ = Type::kCallable;
  v.ptr_ = std::move(c);
  return v;
}

const std::string& Value::GetString() const { return *static_cast<std::string*>(ptr_.get()); }

const std::string& Value::UndefinedHint() const {
  static const std::string kEmpty;
  return ptr_ ? *static_cast<std::string*>(ptr_.get()) : kEmpty;
}

void DictData::CopyFrom(const DictData& other) {
  items = other.items;
  nest = other.nest;
}

const Value* DictData::Find(const Value& key) const {
  ChargeSteps(items.size());  // a linear scan: lookups in a loop over a big dict are quadratic
  for (const auto& [k, v] : items)
    if (Equals(k, key)) return &v;
  return nullptr;
}
const Value* DictData::Find(std::string_view key) const {
  ChargeSteps(items.size());
  for (const auto& [k, v] : items)
    if (k.IsString() && k.GetString() == key) return &v;
  return nullptr;
}
void DictData::Set(Value key, Value value) {
  ChargeSteps(items.size());
  for (auto& [k, v] : items)
    if (Equals(k, key)) {
      v = std::move(value);
      return;
    }
  nest = std::max(nest, NestAround(std::max(Nesting(key), Nesting(value))));
  items.emplace_back(std::move(key), std::move(value));
}

int Nesting(const Value& v) {
  switch (v.type()) {
    case Value::Type::kList:
      return v.list().nest;
    case Value::Type::kDict:
      return v.dict().nest;
    case Value::Type::kObject:
      return v.object().Nesting();
    default:
      return 0;
  }
}

int NestAround(int inner) {
  if (inner + 1 > kMaxValueNesting)
    throw OpError("render budget exceeded: containers nested deeper than " +
                  std::to_string(kMaxValueNesting) + " levels");
  return inner + 1;
}

Value Object::GetAttr(std::string_view) const { return Value(); }
bool Object::SetAttr(const std::string&, Value) { return false; }
std::string Object::Repr() const { return "<" + TypeName() + " object>"; }

[[noreturn]] void FailUndefined(const Value& v) {
  const std::string& hint = v.UndefinedHint();
  throw OpError(hint.empty() ? "value is undefined" : hint);
}

// ---- Python semantics
// ----------------------------------------------------------------------------
bool Truthy(const Value& v) {
  switch (v.type()) {
    case Value::Type::kUndefined:
    case Value::Type::kNone:
      return false;
    case Value::Type::kBool:
      return v.GetBool();
    case Value::Type::kInt:
      return v.GetInt() != 0;
    case Value::Type::kFloat:
      return v.GetFloat() != 0.0;
    case Value::Type::kString:
      return !v.GetString().empty();
    case Value::Type::kList:
      return v.list().is_generator || !v.list().items.empty();
    case Value::Type::kDict:
      return !v.dict().items.empty();
    case Value::Type::kObject:
    case Value::Type::kCallable:
      return true;
  }
  return false;
}

std::string PyFloatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  const size_t epos = sci.find('e');
  std::string digits = sci.substr(0, epos);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exp = std::stoi(sci.substr(epos + 1));
  std::string out;
  if (exp >= -4 && exp < 16) {
    if (exp >= 0) {
      std::string int_part = digits.substr(0, std::min<size_t>(digits.size(), exp + 1));
      while (int(int_part.size()) < exp + 1) int_part.push_back('0');
      std::string frac = digits.size() > size_t(exp + 1) ? digits.substr(exp + 1) : "0";
      out = int_part + "." + frac;
    } else {
      out = "0." + std::string(-exp - 1, '0') + digits;
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    std::snprintf(buf, sizeof buf, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += buf;
  }
  return sign + out;
}

std::string TypeName(const Value& v) {
  switch (v.type()) {
    case Value::Type::kUndefined:
      return "Undefined";
    case Value::Type::kNone:
      return "NoneType";
    case Value::Type::kBool:
      return "bool";
    case Value::Type::kInt:
      return "int";
    case Value::Type::kFloat:
      return "float";
    case Value::Type::kString:
      return "str";
    case Value::Type::kList:
      return v.list().is_generator ? "generator" : v.list().is_tuple ? "tuple" : "list";
    case Value::Type::kDict:
      return "dict";
    case Value::Type::kObject:
      return v.object().TypeName();
    case Value::Type::kCallable:
      return "function";
  }
  return "object";
}

std::string ObjectTypeRepr(const Value& v) {
  if (v.IsNone()) return "None";
  return TypeName(v) + " object";
}

// Printing, comparing and serializing containers recurse into them and can grow a text many
// times the size of what is shared inside (a list holding one long string 10^5 times), so each
// element visited counts against the render budget, and so do the text's size and the depth
// (a namespace holding itself would otherwise recurse until the stack overflows).
static std::string SeqToStr(const Value& v) {
  const ListData& l = v.list();
  if (l.is_generator) return "<generator object>";
  DepthGuard depth;
  std::string out = l.is_tuple ? "(" : "[";
  for (size_t i = 0; i < l.items.size(); ++i) {
    if (i) out += ", ";
    out += Repr(l.items[i]);
    ChargeSteps(1);
    CheckAlloc(out.size());
  }
  if (l.is_tuple && l.items.size() == 1) out += ",";
  out += l.is_tuple ? ")" : "]";
  return out;
}

std::string ToStr(const Value& v) {
  switch (v.type()) {
    case Value::Type::kUndefined:
      return "";
    case Value::Type::kNone:
      return "None";
    case Value::Type::kBool:
      return v.GetBool() ? "True" : "False";
    case Value::Type::kInt:
      return std::to_string(v.GetInt());
    case Value::Type::kFloat:
      return PyFloatRepr(v.GetFloat());
    case Value::Type::kString:
      return v.GetString();
    case Value::Type::kList:
      return SeqToStr(v);
    case Value::Type::kDict: {
      DepthGuard depth;
      std::string out = "{";
      bool first = true;
      for (const auto& [k, x] : v.dict().items) {
        if (!first) out += ", ";
        first = false;
        out += Repr(k) + ": " + Repr(x);
        ChargeSteps(1);
        CheckAlloc(out.size());
      }
      return out + "}";
    }
    case Value::Type::kObject: {
      DepthGuard depth;
      return v.object().Repr();
    }
    case Value::Type::kCallable:
      return "<function " + v.callable().Name() + ">";
  }
  return "";
}

std::string Repr(const Value& v) {
  if (v.IsString()) return PyStrRepr(v.GetString());
  if (v.IsUndefined()) return "Undefined";
  return ToStr(v);
}

bool Equals(const Value& a, const Value& b) {
  using T = Value::Type;
  if (a.IsNumber() && b.IsNumber()) {
    if (a.IsFloat() || b.IsFloat()) return a.GetFloat() == b.GetFloat();
    return a.GetInt() == b.GetInt();
  }
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case T::kUndefined:
    case T::kNone:
      return true;
    case T::kString:
      if (a.GetString().size() != b.GetString().size()) return false;
      ChargeBytes(a.GetString().size());
      return a.GetString() == b.GetString();
    case T::kList: {
      const ListData &x = a.list(), &y = b.list();
      if (x.is_generator || y.is_generator) return a.identity() == b.identity();
      if (x.is_tuple != y.is_tuple || x.items.size() != y.items.size()) return false;
      DepthGuard depth;
      ChargeSteps(x.items.size());
      for (size_t i = 0; i < x.items.size(); ++i)
        if (!Equals(x.items[i], y.items[i])) return false;
      return true;
    }
    case T::kDict: {
      const DictData &x = a.dict(), &y = b.dict();
      if (x.items.size() != y.items.size()) return false;
      DepthGuard depth;
      for (const auto& [k, v] : x.items) {
        const Value* o = y.Find(k);
        if (!o || !Equals(v, *o)) return false;
      }
      return true;
    }
    default:
      return a.identity() == b.identity();
  }
}

int Compare(const Value& a, const Value& b, const char* op) {
  if (a.IsUndefined()) FailUndefined(a);
  if (b.IsUndefined()) FailUndefined(b);
  if (a.IsNumber() && b.IsNumber()) {
    if (a.IsFloat() || b.IsFloat()) {
      double x = a.GetFloat(), y = b.GetFloat();
      return x < y ? -1 : x > y ? 1 : 0;
    }
    int64_t x = a.GetInt(), y = b.GetInt();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.IsString() && b.IsString()) {
    ChargeBytes(std::min(a.GetString().size(), b.GetString().size()));
    int c = a.GetString().compare(b.GetString());
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.IsList() && b.IsList() && !a.list().is_generator && !b.list().is_generator &&
      a.list().is_tuple == b.list().is_tuple) {
    const auto &x = a.list().items, &y = b.list().items;
    DepthGuard depth;
    ChargeSteps(std::min(x.size(), y.size()));
    for (size_t i = 0; i < x.size() && i < y.size(); ++i)
      if (!Equals(x[i], y[i])) return Compare(x[i], y[i], op);
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  throw OpError(std::string("TypeError: '") + op + "' not supported between instances of '" +
                TypeName(a) + "' and '" + TypeName(b) + "'");
}

// ---- JSON
// ----------------------------------------------------------------------------------------
Value FromJson(const nlohmann::ordered_json& j, int depth) {
  using J = nlohmann::ordered_json::value_t;
  if ((j.is_array() || j.is_object()) && depth >= kMaxContextDepth)
    throw OpError("render context: JSON nested deeper than " + std::to_string(kMaxContextDepth) +
                  " levels");
  switch (j.type()) {
    case J::null:
    case J::discarded:
      return Value::None();
    case J::boolean:
      return Value::Bool(j.get<bool>());
    case J::number_integer:
      return Value::Int(j.get<int64_t>());
    case J::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      return u <= uint64_t(INT64_MAX) ? Value::Int(int64_t(u)) : Value::Float(double(u));
    }
    case J::number_float:
      return Value::Float(j.get<double>());
    case J::string:
      return Value::String(j.get<std::string>());
    case J::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& x : j) items.push_back(FromJson(x, depth + 1));
      return Value::List(std::move(items));
    }
    case J::object: {
      Value d = Value::Dict();
      for (auto it = j.begin(); it != j.end(); ++it)
        d.dict().items.emplace_back(Value::String(it.key()), FromJson(it.value(), depth + 1));
      for (const auto& kv : d.dict().items)
        d.dict().nest = std::max(d.dict().nest, Nesting(kv.second) + 1);
      return d;
    }
    case J::binary:
      break;
  }
  throw OpError("unsupported JSON value");
}

static void JsonString(std::string_view s, bool ensure_ascii, std::string& out) {
  char buf[16];
  out.push_back('"');
  for (size_t i = 0; i < s.size();) {
    size_t start = i;
    char32_t c = NextCodepoint(s, i);
    switch (c) {
      case '"':
        out += "\\\"";
        continue;
      case '\\':
        out += "\\\\";
        continue;
      case '\n':
        out += "\\n";
        continue;
      case '\r':
        out += "\\r";
        continue;
      case '\t':
        out += "\\t";
        continue;
      case '\b':
        out += "\\b";
        continue;
      case '\f':
        out += "\\f";
        continue;
      default:
        break;
    }
    if (c < 0x20 || (ensure_ascii && c > 0x7E)) {
      if (c >= 0x10000) {
        char32_t v = c - 0x10000;
        std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", unsigned(0xD800 | (v >> 10)),
                      unsigned(0xDC00 | (v & 0x3FF)));
      } else {
        std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(c));
      }
      out += buf;
    } else {
      out.append(s.substr(start, i - start));
    }
  }
  out.push_back('"');
}

static std::string JsonFloat(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d < 0 ? "-Infinity" : "Infinity";
  return PyFloatRepr(d);
}

static void ToJsonRec(const Value& v, const JsonOptions& o, int level, std::string& out) {
  DepthGuard depth;
  ChargeSteps(1);
  CheckAlloc(out.size());
  auto newline = [&](int lvl) {
    CheckAlloc(out.size() + size_t(lvl) * o.indent.size());
    out.push_back('\n');
    for (int i = 0; i < lvl; ++i) out += o.indent;
  };
  switch (v.type()) {
    case Value::Type::kNone:
      out += "null";
      return;
    case Value::Type::kBool:
      out += v.GetBool() ? "true" : "false";
      return;
    case Value::Type::kInt:
      out += std::to_string(v.GetInt());
      return;
    case Value::Type::kFloat:
      out += JsonFloat(v.GetFloat());
      return;
    case Value::Type::kString:
      JsonString(v.GetString(), o.ensure_ascii, out);
      return;
    case Value::Type::kList: {
      if (v.list().is_generator) break;
      const auto& items = v.list().items;
      if (items.empty()) {
        out += "[]";
        return;
      }
      out.push_back('[');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += o.item_separator;
        if (o.has_indent) newline(level + 1);
        ToJsonRec(items[i], o, level + 1, out);
      }
      if (o.has_indent) newline(level);
      out.push_back(']');
      return;
    }
    case Value::Type::kDict: {
      if (v.dict().items.empty()) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<Value, Value>*> items;
      for (const auto& kv : v.dict().items) items.push_back(&kv);
      if (o.sort_keys)
        std::stable_sort(items.begin(), items.end(),
                         [](auto* a, auto* b) { return Compare(a->first, b->first, "<") < 0; });
      out.push_back('{');
      bool first = true;
      for (const auto* kv : items) {
        if (!first) out += o.item_separator;
        first = false;
        if (o.has_indent) newline(level + 1);
        const Value& k = kv->first;
        std::string key;
        if (k.IsString())
          key = k.GetString();
        else if (k.IsBool())
          key = k.GetBool() ? "true" : "false";
        else if (k.IsNone())
          key = "null";
        else if (k.IsInt())
          key = std::to_string(k.GetInt());
        else if (k.IsFloat())
          key = JsonFloat(k.GetFloat());
        else
          throw OpError("TypeError: keys must be str, int, float, bool or None, not " +
                        TypeName(k));
        JsonString(key, o.ensure_ascii, out);
        out += o.key_separator;
        ToJsonRec(kv->second, o, level + 1, out);
      }
      if (o.has_indent) newline(level);
      out.push_back('}');
      return;
    }
    default:
      break;
  }
  throw OpError("TypeError: Object of type " + TypeName(v) + " is not JSON serializable");
}

std::string ToJson(const Value& v, const JsonOptions& options) {
  std::string out;
  ToJsonRec(v, options, 0, out);
  return out;
}

}  // namespace es::jinja
