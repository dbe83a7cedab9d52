// Built-in filters, tests, methods and globals of the chat-template environment: jinja2's
// default filters and tests that chat templates use, transformers' overrides and additions
// (tojson = json.dumps(ensure_ascii=False, ...), raise_exception, strftime_now), Python str and
// dict methods, and the globals range/dict/namespace.
#pragma once

#include <string>
#include <string_view>

#include "jinja/value.h"

namespace es::jinja {

bool IsKnownFilter(std::string_view name);
bool IsKnownTest(std::string_view name);

Value ApplyFilter(Interpreter& interp, std::string_view name, const Value& input, CallArgs& args);
bool ApplyTest(Interpreter& interp, std::string_view name, const Value& input, CallArgs& args);

// value.name as jinja2's sandboxed getattr resolves it for builtin types (str methods, dict
// methods, dict keys); Undefined when absent. Raises for Undefined receivers.
Value GetAttr(const Value& obj, std::string_view name);
// value[key] as jinja2's getitem resolves it (negative indices, slices, attribute fallback).
Value GetItem(const Value& obj, const Value& key);
// Items of an iterable (list/tuple items, dict keys, str characters; Undefined is empty).
std::vector<Value> Iterate(const Value& v);
// Python `item in container`.
bool Contains(const Value& container, const Value& item);

// The global names of the environment: range, dict, namespace, raise_exception, strftime_now.
void AddGlobals(DictData& globals);

}  // namespace es::jinja
