// Checked reads of values from JSON files a model folder brings (config.json,
// generation_config.json, tokenizer.json, tokenizer_config.json): a missing or wrongly typed
// value is one es::Error naming the file and the key, instead of nlohmann's type_error or
// out_of_range escaping without either (issue 23). Integers must be whole numbers within the
// target type's range: nlohmann converts with a plain cast, so 2^40 became 0 in an int and 1e300
// was undefined behaviour (found by tests/fuzz/targets/model_config.cpp under UBSan).
// Files are parsed with their nesting bounded first (Parse, ReadFile, CheckDepth): copying,
// comparing and dumping a nlohmann value recurse once per level, so a tokenizer_config.json
// with a million nested '[' parsed fine and then overflowed the stack when it was copied.
// Header-only; a library that includes it links nlohmann_json.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>

#include "edgeseek/internal/core/error.h"

namespace es::json_field {

// v (the value of `key` in `where`) as a T: bool, std::string, an integer or a floating type
// (or any other type nlohmann converts to, with its errors caught).
template <class T>
T As(const nlohmann::json& v, std::string_view key, std::string_view where) {
  using json = nlohmann::json;
  if constexpr (std::is_same_v<T, bool>) {
    if (!v.is_boolean())
      Fail(where, ": field '", key, "' must be true or false (got ", v.type_name(), ")");
    return v.get<bool>();
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!v.is_string())
      Fail(where, ": field '", key, "' must be a string (got ", v.type_name(), ")");
    return v.get<std::string>();
  } else if constexpr (std::is_integral_v<T>) {
    if (v.is_number_unsigned()) {
      const uint64_t u = v.get<uint64_t>();
      ES_CHECK(u <= uint64_t(std::numeric_limits<T>::max()), where, ": field '", key, "' is ", u,
               ", out of range");
      return T(u);
    }
    if (v.is_number_integer()) {
      const int64_t x = v.get<int64_t>();
      ES_CHECK(x >= int64_t(std::numeric_limits<T>::min()) &&
                   (x < 0 || uint64_t(x) <= uint64_t(std::numeric_limits<T>::max())),
               where, ": field '", key, "' is ", x, ", out of range");
      return T(x);
    }
    if (v.is_number_float()) {
      const double d = v.get<double>();
      const double top = std::ldexp(1.0, std::numeric_limits<T>::digits);  // max + 1, exact
      ES_CHECK(std::isfinite(d) && d == std::trunc(d) && d < top &&
                   d >= double(std::numeric_limits<T>::min()),
               where, ": field '", key, "' is ", d, " (must be a whole number in range)");
      return T(d);
    }
    Fail(where, ": field '", key, "' must be an integer (got ", v.type_name(), ")");
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!v.is_number())
      Fail(where, ": field '", key, "' must be a number (got ", v.type_name(), ")");
    return v.get<T>();
  } else {
    try {
      return v.get<T>();
    } catch (const json::exception&) {
      Fail(where, ": field '", key, "' has the wrong type (", v.type_name(), ")");
    }
  }
}

// Field `key` of the object j; missing or null is an error.
template <class T>
T Get(const nlohmann::json& j, std::string_view key, std::string_view where) {
  if (!j.is_object())
    Fail(where, ": expected an object holding '", key, "' (got ", j.type_name(), ")");
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) Fail(where, ": missing field '", key, "'");
  return As<T>(*it, key, where);
}

// Field `key` of j, or `fallback` when j has no such field (or it is null, as transformers
// writes unset values); a value of the wrong type is an error, not the fallback.
template <class T>
T Opt(const nlohmann::json& j, std::string_view key, T fallback, std::string_view where) {
  if (!j.is_object()) return fallback;
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  return As<T>(*it, key, where);
}

// The deepest nesting of arrays and objects in a JSON text (brackets inside strings do not
// count), found in one pass before anything builds or walks a tree.
inline size_t Depth(std::string_view text) {
  size_t depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;  // the escaped character cannot end the string
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

// Nesting allowed in the JSON files of a model folder and in configs: real ones stay below 10
// (a tokenizer.json Sequence of Splits is 5); each level costs a few hundred bytes of stack
// wherever a value is copied.
inline constexpr size_t kMaxFileDepth = 128;

inline void CheckDepth(std::string_view text, std::string_view where,
                       size_t max_depth = kMaxFileDepth) {
  const size_t d = Depth(text);
  if (d > max_depth)
    Fail(where, ": JSON nested ", d, " levels deep (at most ", max_depth, " are allowed)");
}

// text parsed as J (nlohmann::json or ordered_json) after CheckDepth; a syntax error or a number
// out of range (out_of_range, not parse_error) is one error naming `where`.
template <class J = nlohmann::json>
J Parse(std::string_view text, std::string_view where) {
  CheckDepth(text, where);
  try {
    return J::parse(text);
  } catch (const nlohmann::json::exception& e) {
    Fail(where, ": invalid JSON: ", e.what());
  }
}

// The whole file at `path`, parsed by Parse (errors name the path).
template <class J = nlohmann::json>
J ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f.good()) Fail("cannot read '", path, "'");
  std::stringstream ss;
  ss << f.rdbuf();
  return Parse<J>(ss.str(), path);
}

// The file at `path`, read as a `what` (errors "WHAT PATH: cannot open" and "WHAT PATH: not
// valid JSON: ..."), nesting bounded first: the server config, device profiles, their schemas.
template <class J = nlohmann::json>
J ReadNamedFile(const std::string& path, const char* what) {
  std::ifstream f(path, std::ios::binary);
  if (!f) Fail(what, " ", path, ": cannot open");
  std::stringstream ss;
  ss << f.rdbuf();
  CheckDepth(ss.str(), std::string(what) + " " + path);
  try {
    return J::parse(ss.str());
  } catch (const nlohmann::json::exception& e) {
    Fail(what, " ", path, ": not valid JSON: ", e.what());
  }
}

}  // namespace es::json_field
