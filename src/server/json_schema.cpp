// JSON Schema subset validator (json_schema.h).
#include "json_schema.h"

#include <regex>
#include <set>

#include "edgeseek/core/error.h"

namespace es::server {

using json = nlohmann::json;

namespace {
const std::set<std::string> kKnown = {
    "$schema", "$id", "$comment", "title", "description", "default", "examples", "$defs",
    "definitions", "type", "properties", "required", "additionalProperties", "items", "enum",
    "const", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength",
    "maxLength", "minItems", "maxItems", "uniqueItems", "pattern", "anyOf", "$ref"};

bool IsType(const json& v, const std::string& t) {
  if (t == "object") return v.is_object();
  if (t == "array") return v.is_array();
  if (t == "string") return v.is_string();
  if (t == "integer") return v.is_number_integer() || (v.is_number_float() && v.get<double>() == double(int64_t(v.get<double>())));
  if (t == "number") return v.is_number();
  if (t == "boolean") return v.is_boolean();
  if (t == "null") return v.is_null();
  return false;
}

std::string Ptr(const std::string& path) { return path.empty() ? "/" : path; }

std::string EscapePtr(const std::string& key) {
  std::string o;
  for (char c : key) {
    if (c == '~') o += "~0";
    else if (c == '/') o += "~1";
    else o += c;
  }
  return o;
}

size_t Utf8Length(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}
}  // namespace

JsonSchema::JsonSchema(json schema) : root_(std::move(schema)) { CheckSchema(root_, "#"); }

void JsonSchema::CheckSchema(const json& s, const std::string& where) const {
  if (s.is_boolean()) return;
  ES_CHECK(s.is_object(), "JSON schema ", where, ": a schema must be an object or a boolean");
  for (auto& [k, v] : s.items()) {
    ES_CHECK(kKnown.count(k), "JSON schema ", where, ": keyword '", k, "' is not supported by this validator");
    if (k == "properties" || k == "$defs" || k == "definitions") {
      ES_CHECK(v.is_object(), "JSON schema ", where, "/", k, ": must be an object");
      for (auto& [pk, pv] : v.items()) CheckSchema(pv, where + "/" + k + "/" + pk);
    } else if (k == "items" || (k == "additionalProperties" && v.is_object())) {
      CheckSchema(v, where + "/" + k);
    } else if (k == "anyOf") {
      ES_CHECK(v.is_array() && !v.empty(), "JSON schema ", where, "/anyOf: must be a non-empty array");
      for (size_t i = 0; i < v.size(); ++i) CheckSchema(v[i], where + "/anyOf/" + std::to_string(i));
    } else if (k == "$ref") {
      ES_CHECK(v.is_string(), "JSON schema ", where, "/$ref: must be a string");
      Resolve(v.get<std::string>());
    } else if (k == "pattern") {
      ES_CHECK(v.is_string(), "JSON schema ", where, "/pattern: must be a string");
      try {
        std::regex re(v.get<std::string>(), std::regex::ECMAScript);
      } catch (const std::regex_error&) {
        Fail("JSON schema ", where, "/pattern: invalid regular expression");
      }
    }
  }
}

const json& JsonSchema::Resolve(const std::string& ref) const {
  ES_CHECK(ref.rfind("#/", 0) == 0 || ref == "#", "JSON schema: only local $ref are supported, got '", ref, "'");
  try {
    return root_.at(json::json_pointer(ref.substr(1)));
  } catch (const json::exception&) {
    Fail("JSON schema: $ref '", ref, "' points nowhere");
  }
}

std::vector<std::string> JsonSchema::Validate(const json& doc) const {
  std::vector<std::string> errors;
  Check(root_, doc, "", &errors, 0);
  return errors;
}

void JsonSchema::Check(const json& s, const json& v, const std::string& path,
                       std::vector<std::string>* errors, int depth) const {
  if (depth > 64) {
    errors->push_back(Ptr(path) + ": schema nesting too deep");
    return;
  }
  if (s.is_boolean()) {
    if (!s.get<bool>()) errors->push_back(Ptr(path) + ": no value is allowed here");
    return;
  }
  auto err = [&](const std::string& m) { errors->push_back(Ptr(path) + ": " + m); };
  if (s.contains("$ref")) Check(Resolve(s.at("$ref").get<std::string>()), v, path, errors, depth + 1);
  if (s.contains("type")) {
    const json& t = s.at("type");
    bool ok = false;
    std::string names;
    for (auto& one : t.is_array() ? t : json::array({t})) {
      ok = ok || IsType(v, one.get<std::string>());
      names += (names.empty() ? "" : " or ") + one.get<std::string>();
    }
    if (!ok) {
      err("expected " + names + ", got " + std::string(v.type_name()) + " " + v.dump());
      return;  // further keywords would only repeat the complaint
    }
  }
  if (s.contains("enum")) {
    bool ok = false;
    for (auto& e : s.at("enum")) ok = ok || e == v;
    if (!ok) err(v.dump() + " is not one of " + s.at("enum").dump());
  }
  if (s.contains("const") && s.at("const") != v) err(v.dump() + " must be " + s.at("const").dump());
  if (s.contains("anyOf")) {
    bool ok = false;
    for (auto& sub : s.at("anyOf")) {
      std::vector<std::string> e;
      Check(sub, v, path, &e, depth + 1);
      ok = ok || e.empty();
    }
    if (!ok) err(v.dump() + " matches none of the allowed forms");
  }
  if (v.is_number()) {
    double x = v.get<double>();
    if (s.contains("minimum") && x < s.at("minimum").get<double>())
      err(v.dump() + " is less than the minimum " + s.at("minimum").dump());
    if (s.contains("maximum") && x > s.at("maximum").get<double>())
      err(v.dump() + " is greater than the maximum " + s.at("maximum").dump());
    if (s.contains("exclusiveMinimum") && x <= s.at("exclusiveMinimum").get<double>())
      err(v.dump() + " must be greater than " + s.at("exclusiveMinimum").dump());
    if (s.contains("exclusiveMaximum") && x >= s.at("exclusiveMaximum").get<double>())
      err(v.dump() + " must be less than " + s.at("exclusiveMaximum").dump());
  }
  if (v.is_string()) {
    const std::string& str = v.get_ref<const std::string&>();
    size_t n = Utf8Length(str);
    if (s.contains("minLength") && n < s.at("minLength").get<size_t>())
      err("string is shorter than " + s.at("minLength").dump() + " characters");
    if (s.contains("maxLength") && n > s.at("maxLength").get<size_t>())
      err("string is longer than " + s.at("maxLength").dump() + " characters");
    if (s.contains("pattern") &&
        !std::regex_search(str, std::regex(s.at("pattern").get<std::string>(), std::regex::ECMAScript)))
      err(v.dump() + " does not match the pattern " + s.at("pattern").dump());
  }
  if (v.is_array()) {
    if (s.contains("minItems") && v.size() < s.at("minItems").get<size_t>())
      err("array has fewer than " + s.at("minItems").dump() + " items");
    if (s.contains("maxItems") && v.size() > s.at("maxItems").get<size_t>())
      err("array has more than " + s.at("maxItems").dump() + " items");
    if (s.contains("uniqueItems") && s.at("uniqueItems").get<bool>())
      for (size_t i = 0; i < v.size(); ++i)
        for (size_t j = i + 1; j < v.size(); ++j)
          if (v[i] == v[j]) err("items " + std::to_string(i) + " and " + std::to_string(j) + " are equal");
    if (s.contains("items"))
      for (size_t i = 0; i < v.size(); ++i)
        Check(s.at("items"), v[i], path + "/" + std::to_string(i), errors, depth + 1);
  }
  if (v.is_object()) {
    if (s.contains("required"))
      for (auto& r : s.at("required"))
        if (!v.contains(r.get<std::string>()))
          err("required property '" + r.get<std::string>() + "' is missing");
    const json* props = s.contains("properties") ? &s.at("properties") : nullptr;
    for (auto& [k, sub] : v.items()) {
      std::string p = path + "/" + EscapePtr(k);
      if (props && props->contains(k)) {
        Check(props->at(k), sub, p, errors, depth + 1);
      } else if (s.contains("additionalProperties")) {
        const json& ap = s.at("additionalProperties");
        if (ap.is_boolean() && !ap.get<bool>())
          errors->push_back(Ptr(p) + ": unknown property '" + k + "'");
        else if (ap.is_object())
          Check(ap, sub, p, errors, depth + 1);
      }
    }
  }
}

}  // namespace es::server
