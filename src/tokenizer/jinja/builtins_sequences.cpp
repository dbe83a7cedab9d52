// Filters on sequences and mappings (attr ... unique: select/map/sort/join and their kin) and
// the dict and list methods (builtins_common.h). Each follows the jinja2 3.1 / Python 3 function
// it stands for; the comment on each names any deliberate difference.
#include <algorithm>
#include <functional>
#include <optional>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/tokenizer/jinja.h"
#include "jinja/budget.h"
#include "jinja/builtins.h"
#include "jinja/builtins_common.h"
#include "jinja/interpreter.h"
#include "jinja/pystr.h"

namespace es::jinja::builtin {
namespace {

Value DictItems(const Value& d) {
  std::vector<Value> items;
  for (const auto& [k, v] : d.dict().items) items.push_back(Value::Tuple({k, v}));
  return Value::List(std::move(items));
}

}  // namespace

// ---- dict and list methods ---------------------------------------------------------------------
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

Value ListMethod(const Value& list, const std::string& m, CallArgs& args) {
  auto a = Bind(m, args, {"value"});
  if (!a[0]) throw OpError("TypeError: " + m + "() takes exactly one argument");
  const auto& items = list.list().items;
  int64_t n = 0;
  for (size_t i = 0; i < items.size(); ++i)
    if (Equals(items[i], *a[0])) {
      if (m == "index") return Value::Int(int64_t(i));
      ++n;
    }
  if (m == "index") throw OpError("ValueError: " + Repr(*a[0]) + " is not in list");
  return Value::Int(n);
}

// ---- helpers of the filters --------------------------------------------------------------------
namespace {

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
  return [parts = std::move(parts), ignore_case, def = std::move(def)](const Value& item) {
    Value v = item;
    for (const auto& p : parts) {
      v = GetItem(v, p);
      if (def && !def->IsNone() && v.IsUndefined()) v = *def;
    }
    return ignore_case ? LowerIfString(v) : v;
  };
}

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

Value SortValues(std::vector<Value> items, const std::function<Value(const Value&)>& key,
                 bool reverse) {
  std::vector<std::pair<Value, size_t>> keyed;
  ChargeSteps(items.size() * 20);  // ~n log n comparisons
  for (size_t i = 0; i < items.size(); ++i) keyed.emplace_back(key(items[i]), i);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    return reverse ? Compare(y.first, x.first, "<") < 0 : Compare(x.first, y.first, "<") < 0;
  });
  std::vector<Value> out;
  out.reserve(keyed.size());
  for (const auto& [k, i] : keyed) out.push_back(items[i]);
  return Value::List(std::move(out));
}

Value DictSortFilter(Interpreter&, const Value& v, CallArgs& args) {
  auto a = Bind("dictsort", args, {"case_sensitive", "by", "reverse"});
  if (!v.IsDict()) throw OpError("TypeError: dictsort expects a mapping");
  const std::string by = a[1] ? ArgStr(a[1], "by") : "key";
  if (by != "key" && by != "value")
    throw OpError("FilterArgumentError: You can only sort by either \"key\" or \"value\"");
  const bool cs = a[0] && Truthy(*a[0]);
  const size_t pos = by == "key" ? 0 : 1;
  return SortValues(
      DictItems(v).list().items,
      [cs, pos](const Value& item) {
        const Value& x = item.list().items[pos];
        return cs ? x : LowerIfString(x);
      },
      a[2] && Truthy(*a[2]));
}

// map(attribute=..., default=...) or map(filter_name, args...).
Value MapFilter(Interpreter& in, const Value& v, CallArgs& args) {
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
}

// sort(reverse, case_sensitive, attribute): attribute may list several, comma-separated.
Value SortFilter(Interpreter&, const Value& v, CallArgs& args) {
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
    k.reserve(getters.size());
    for (const auto& g : getters) k.push_back(g(x));
    return Value::List(std::move(k));
  };
  return SortValues(Iterate(v), key, a[0] && Truthy(*a[0]));
}

Value UniqueFilter(Interpreter&, const Value& v, CallArgs& args) {
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
}

}  // namespace

void AddSequenceFilters(FilterTable& filters) {
  filters.insert({
      {"attr",
       [](Interpreter&, const Value& v, CallArgs& args) {
         auto a = Bind("attr", args, {"name"});
         const std::string& n = ArgStr(a[0], "attribute name");
         if (v.IsUndefined()) FailUndefined(v);
         auto r = PyAttr(v, n);
         return r ? *r : UndefinedAttr(v, n);
       }},
      {"count",
       [](Interpreter&, const Value& v, CallArgs& args) {
         Bind("count", args, {});
         return Value::Int(Len(v));
       }},
      {"default",
       [](Interpreter&, const Value& v, CallArgs& args) {
         auto a = Bind("default", args, {"default_value", "boolean"});
         if (v.IsUndefined() || (a[1] && Truthy(*a[1]) && !Truthy(v)))
           return Or(a[0], Value::String(""));
         return v;
       }},
      {"dictsort", DictSortFilter},
      {"first",
       [](Interpreter&, const Value& v, CallArgs& args) {
         Bind("first", args, {});
         auto items = Iterate(v);
         return items.empty() ? Value::Undefined("No first item, sequence was empty.") : items[0];
       }},
      {"items",
       [](Interpreter&, const Value& v, CallArgs& args) {
         Bind("items", args, {});
         if (v.IsUndefined()) return Value::List();
         if (!v.IsDict()) throw OpError("TypeError: Can only get item pairs from a mapping.");
         return DictItems(v);
       }},
      {"join",
       [](Interpreter&, const Value& v, CallArgs& args) {
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
      {"last",
       [](Interpreter&, const Value& v, CallArgs& args) {
         Bind("last", args, {});
         if (v.IsList() && v.list().is_generator)
           throw OpError("TypeError: 'generator' object is not reversible");
         auto items = Iterate(v);
         return items.empty() ? Value::Undefined("No last item, sequence was empty.")
                              : items.back();
       }},
      {"length",
       [](Interpreter&, const Value& v, CallArgs& args) {
         Bind("length", args, {});
         return Value::Int(Len(v));
       }},
      {"list",
       [](Interpreter&, const Value& v, CallArgs& args) {
         Bind("list", args, {});
         return Value::List(Iterate(v));
       }},
      {"map", MapFilter},
      {"max", [](Interpreter&, const Value& v, CallArgs& args) { return MinMax(v, args, true); }},
      {"min", [](Interpreter&, const Value& v, CallArgs& args) { return MinMax(v, args, false); }},
      {"reject", [](Interpreter& in, const Value& v,
                    CallArgs& args) { return SelectOrReject(in, v, args, false, false); }},
      {"rejectattr", [](Interpreter& in, const Value& v,
                        CallArgs& args) { return SelectOrReject(in, v, args, false, true); }},
      {"select", [](Interpreter& in, const Value& v,
                    CallArgs& args) { return SelectOrReject(in, v, args, true, false); }},
      {"selectattr", [](Interpreter& in, const Value& v,
                        CallArgs& args) { return SelectOrReject(in, v, args, true, true); }},
      {"reverse",
       [](Interpreter&, const Value& v, CallArgs& args) {
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
      {"sort", SortFilter},
      {"sum",
       [](Interpreter&, const Value& v, CallArgs& args) {
         auto a = Bind("sum", args, {"attribute", "start"});
         auto get = AttrGetter(a[0], false);
         Value acc = Or(a[1], Value::Int(0));
         for (const auto& x : Iterate(v)) acc = BinaryOp("+", acc, get(x));
         return acc;
       }},
      {"unique", UniqueFilter},
  });
}

}  // namespace es::jinja::builtin
