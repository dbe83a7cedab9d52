// The builtins' registry (builtins.h; builtins_common.h says which file holds what): argument
// binding, attribute and item lookup on builtin types, and the filter and test tables that the
// other three files fill. Each builtin follows the jinja2 3.1 / Python 3 function it stands for;
// the comment on each names any deliberate difference.
#include "jinja/builtins.h"

#include <memory>
#include <optional>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/tokenizer/jinja.h"
#include "jinja/budget.h"
#include "jinja/builtins_common.h"
#include "jinja/pystr.h"

namespace es::jinja {
namespace builtin {
namespace {

class Builtin : public Callable {
 public:
  using Fn = BuiltinFn;
  Builtin(std::string name, Fn fn) : name_(std::move(name)), fn_(std::move(fn)) {}
  std::string Name() const override { return name_; }
  Value Call(Interpreter& in, CallArgs& args) override { return fn_(in, args); }

 private:
  std::string name_;
  Fn fn_;
};

}  // namespace

// ---- argument binding --------------------------------------------------------------------------
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

Value Or(const std::optional<Value>& v, const Value& def) { return v ? *v : def; }

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

Value MakeFn(std::string name, BuiltinFn fn) {
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

// ---- attributes of builtin types ---------------------------------------------------------------
std::optional<Value> PyAttr(const Value& obj, std::string_view name) {
  if (obj.IsString()) {
    if (!IsStrMethod(name)) return std::nullopt;
    std::string method(name);
    return MakeFn("str." + method, [obj, method](Interpreter&, CallArgs& args) {
      return StrMethod(obj.GetString(), method, args);
    });
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
      return MakeFn("list." + method, [obj, method](Interpreter&, CallArgs& args) {
        return ListMethod(obj, method, args);
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

}  // namespace builtin

// ---- the filter and test tables ----------------------------------------------------------------
namespace {

using builtin::FilterTable;
using builtin::Tests;

const FilterTable& Filters() {
  static const FilterTable* filters = [] {
    auto* table = new FilterTable;
    builtin::AddStringFilters(*table);
    builtin::AddSequenceFilters(*table);
    return table;
  }();
  return *filters;
}

const char* const kFilterAliases[][2] = {
    {"d", "default"}, {"e", "escape"}, {"forceescape", "escape"}};

std::string_view CanonicalFilter(std::string_view name) {
  for (const auto& alias : kFilterAliases)
    if (name == alias[0]) return alias[1];
  return name;
}

}  // namespace

// ---- public entry points -----------------------------------------------------------------------
using builtin::PyAttr;
using builtin::UndefinedAttr;

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

}  // namespace es::jinja
