// What the four builtin files share (builtins.h is their public face): argument binding like a
// Python signature, builtin callables, and the hooks each file fills in.
//     builtins.cpp            the registry: binding, attribute lookup, filter/test dispatch
//     builtins_strings.cpp    filters on strings and numbers; Python's str methods
//     builtins_sequences.cpp  filters on sequences and mappings; dict and list methods
//     builtins_tests.cpp      tests (`is ...`) and the globals (range, dict, namespace, ...)
#pragma once

#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "jinja/value.h"

namespace es::jinja::builtin {

// ---- argument binding (builtins.cpp) -----------------------------------------------------------
using Bound = std::vector<std::optional<Value>>;

// Binds positional then keyword arguments to `params` like a Python signature.
Bound Bind(std::string_view fname, const CallArgs& args,
           std::initializer_list<std::string_view> params);
Value Or(const std::optional<Value>& v, const Value& def);
const std::string& ArgStr(const std::optional<Value>& v, std::string_view what);
int64_t ArgInt(const std::optional<Value>& v, int64_t def, std::string_view what);
std::optional<std::string> ArgOptStr(const std::optional<Value>& v, std::string_view what);

// A builtin callable named `name` (a global, or a method bound to its receiver).
using BuiltinFn = std::function<Value(Interpreter&, CallArgs&)>;
Value MakeFn(std::string name, BuiltinFn fn);
// A method that would modify its receiver: calling it raises jinja2's SecurityError.
Value Unsafe(const std::string& type, std::string_view name);
// The Undefined that `obj.name` gives when obj has no such attribute.
Value UndefinedAttr(const Value& obj, std::string_view name);

// ---- the tables each file fills ----------------------------------------------------------------
using FilterFn = std::function<Value(Interpreter&, const Value&, CallArgs&)>;
using FilterTable = std::unordered_map<std::string, FilterFn>;
using TestFn = std::function<bool(Interpreter&, const Value&, CallArgs&)>;
using TestTable = std::unordered_map<std::string, TestFn>;

void AddStringFilters(FilterTable& filters);    // builtins_strings.cpp
void AddSequenceFilters(FilterTable& filters);  // builtins_sequences.cpp
const TestTable& Tests();                       // builtins_tests.cpp

// ---- methods of builtin types ------------------------------------------------------------------
// Attribute of a Python builtin type only (no item fallback): what `|attr` and getattr() see
// (builtins.cpp).
std::optional<Value> PyAttr(const Value& obj, std::string_view name);
// str methods (builtins_strings.cpp).
bool IsStrMethod(std::string_view name);
Value StrMethod(const std::string& s, const std::string& m, CallArgs& args);
// dict and list methods (builtins_sequences.cpp).
bool IsDictSafeMethod(std::string_view n);
bool IsDictUnsafeMethod(std::string_view n);
bool IsListUnsafeMethod(std::string_view n);
Value DictMethod(const Value& d, const std::string& m, CallArgs& args);
// list.count / list.index (tuples too).
Value ListMethod(const Value& list, const std::string& m, CallArgs& args);

}  // namespace es::jinja::builtin
