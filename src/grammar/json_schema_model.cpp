// JSON Schema model: parsing into nodes and validating documents (json_schema.h).
#include <cmath>
#include <map>
#include <regex>
#include <set>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/grammar/json_schema.h"

namespace es::grammar {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;  // schemas keep their key order: properties are emitted in it

namespace {

json ToJson(const ojson& v) { return json::parse(v.dump()); }

const std::set<std::string> kKnown = {"$schema",
                                      "$id",
                                      "$comment",
                                      "title",
                                      "description",
                                      "default",
                                      "examples",
                                      "$defs",
                                      "definitions",
                                      "type",
                                      "properties",
                                      "required",
                                      "additionalProperties",
                                      "items",
                                      "enum",
                                      "const",
                                      "minimum",
                                      "maximum",
                                      "exclusiveMinimum",
                                      "exclusiveMaximum",
                                      "minLength",
                                      "maxLength",
                                      "minItems",
                                      "maxItems",
                                      "uniqueItems",
                                      "pattern",
                                      "anyOf",
                                      "oneOf",
                                      "$ref"};
const std::set<std::string> kTypes = {"object", "array",   "string", "integer",
                                      "number", "boolean", "null"};

bool IsType(const json& v, const std::string& t) {
  if (t == "object") return v.is_object();
  if (t == "array") return v.is_array();
  if (t == "string") return v.is_string();
  if (t == "integer")
    return v.is_number_integer() || (v.is_number_float() && std::isfinite(v.get<double>()) &&
                                     v.get<double>() == std::floor(v.get<double>()));
  if (t == "number") return v.is_number();
  if (t == "boolean") return v.is_boolean();
  if (t == "null") return v.is_null();
  return false;
}

std::string Ptr(const std::string& path) { return path.empty() ? "/" : path; }

std::string EscapePtr(const std::string& key) {
  std::string o;
  for (char c : key) {
    if (c == '~')
      o += "~0";
    else if (c == '/')
      o += "~1";
    else
      o += c;
  }
  return o;
}

size_t Utf8Length(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

}  // namespace

class SchemaParser {
 public:
  SchemaParser(const ojson& root, const SchemaLimits& lim) : root_(root), lim_(lim) {}

  SchemaModel Run() {
    Node(root_, "#", 0);
    // $ref targets are parsed after the tree (they may point back into it).
    while (!pending_.empty()) {
      auto [node, ref] = pending_.back();
      pending_.pop_back();
      m_.nodes_[size_t(node)].ref = Resolve(ref, m_.nodes_[size_t(node)].where);
    }
    return std::move(m_);
  }

 private:
  int Node(const ojson& s, const std::string& where, int depth) {
    ES_CHECK(depth <= lim_.max_depth, "JSON schema ", where, ": nested deeper than ",
             lim_.max_depth);
    ES_CHECK(m_.nodes_.size() < lim_.max_nodes, "JSON schema: more than ", lim_.max_nodes,
             " subschemas");
    const int id = int(m_.nodes_.size());
    m_.nodes_.emplace_back();
    m_.nodes_.back().where = where;
    if (s.is_boolean()) {
      m_.nodes_.back().constant = s.get<bool>();
      return id;
    }
    ES_CHECK(s.is_object(), "JSON schema ", where, ": a schema must be an object or a boolean");
    SchemaNode n;
    n.where = where;
    auto count = [&](const std::string& k, const ojson& v) -> uint64_t {
      ES_CHECK(v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0),
               "JSON schema ", where, "/", k, ": must be a non-negative integer");
      return v.get<uint64_t>();
    };
    auto number = [&](const std::string& k, const ojson& v) -> json {
      ES_CHECK(v.is_number(), "JSON schema ", where, "/", k, ": must be a number");
      return ToJson(v);
    };
    auto list = [&](const std::string& k, const ojson& v, std::vector<int>* out) {
      ES_CHECK(v.is_array() && !v.empty(), "JSON schema ", where, "/", k,
               ": must be a non-empty array");
      for (size_t i = 0; i < v.size(); ++i)
        out->push_back(Node(v[i], where + "/" + k + "/" + std::to_string(i), depth + 1));
    };
    for (auto& [k, v] : s.items()) {
      ES_CHECK(kKnown.count(k), "JSON schema ", where, ": keyword '", k, "' is not supported");
      n.keywords.push_back(k);
      if (k == "type") {
        for (const ojson& t : v.is_array() ? v : ojson::array({v})) {
          ES_CHECK(t.is_string() && kTypes.count(t.get<std::string>()), "JSON schema ", where,
                   "/type: ", t.dump(), " is not a JSON type");
          n.types.push_back(t.get<std::string>());
        }
        ES_CHECK(!n.types.empty(), "JSON schema ", where, "/type: must name at least one type");
      } else if (k == "properties") {
        ES_CHECK(v.is_object(), "JSON schema ", where, "/properties: must be an object");
        for (auto& [pk, pv] : v.items())
          n.properties.emplace_back(pk,
                                    Node(pv, where + "/properties/" + EscapePtr(pk), depth + 1));
      } else if (k == "$defs" || k == "definitions") {
        ES_CHECK(v.is_object(), "JSON schema ", where, "/", k, ": must be an object");
        for (auto& [dk, dv] : v.items()) (void)dk, (void)dv;  // parsed when referenced
      } else if (k == "required") {
        ES_CHECK(v.is_array(), "JSON schema ", where, "/required: must be an array of names");
        for (const ojson& r : v) {
          ES_CHECK(r.is_string(), "JSON schema ", where, "/required: must be an array of names");
          n.required.push_back(r.get<std::string>());
        }
      } else if (k == "additionalProperties") {
        if (v.is_boolean())
          n.additional_allowed = v.get<bool>();
        else
          n.additional = Node(v, where + "/additionalProperties", depth + 1);
      } else if (k == "items") {
        n.items = Node(v, where + "/items", depth + 1);
      } else if (k == "enum") {
        ES_CHECK(v.is_array(), "JSON schema ", where, "/enum: must be an array");
        n.enum_values = ToJson(v);
      } else if (k == "const") {
        n.const_value = ToJson(v);
      } else if (k == "minimum") {
        n.minimum = number(k, v);
      } else if (k == "maximum") {
        n.maximum = number(k, v);
      } else if (k == "exclusiveMinimum") {
        n.exclusive_minimum = number(k, v);
      } else if (k == "exclusiveMaximum") {
        n.exclusive_maximum = number(k, v);
      } else if (k == "minLength") {
        n.min_length = count(k, v);
      } else if (k == "maxLength") {
        n.max_length = count(k, v);
      } else if (k == "minItems") {
        n.min_items = count(k, v);
      } else if (k == "maxItems") {
        n.max_items = count(k, v);
      } else if (k == "uniqueItems") {
        ES_CHECK(v.is_boolean(), "JSON schema ", where, "/uniqueItems: must be a boolean");
        n.unique_items = v.get<bool>();
      } else if (k == "pattern") {
        ES_CHECK(v.is_string(), "JSON schema ", where, "/pattern: must be a string");
        try {
          std::regex re(v.get<std::string>(), std::regex::ECMAScript);
        } catch (const std::regex_error&) {
          Fail("JSON schema ", where, "/pattern: invalid regular expression");
        }
        n.pattern = v.get<std::string>();
      } else if (k == "anyOf") {
        list(k, v, &n.any_of);
      } else if (k == "oneOf") {
        list(k, v, &n.one_of);
      } else if (k == "$ref") {
        ES_CHECK(v.is_string(), "JSON schema ", where, "/$ref: must be a string");
        pending_.emplace_back(id, v.get<std::string>());
      }
    }
    n.ref = -1;
    m_.nodes_[size_t(id)] = std::move(n);
    return id;
  }

  int Resolve(const std::string& ref, const std::string& where) {
    ES_CHECK(ref == "#" || ref.rfind("#/", 0) == 0, "JSON schema ", where,
             ": only local $ref are supported, got '", ref, "'");
    if (ref == "#") return 0;
    auto it = refs_.find(ref);
    if (it != refs_.end()) return it->second;
    const ojson* target = nullptr;
    try {
      target = &root_.at(ojson::json_pointer(ref.substr(1)));
    } catch (const ojson::exception&) {
      Fail("JSON schema ", where, ": $ref '", ref, "' points nowhere");
    }
    refs_[ref] = -1;  // placeholder while parsing; a ref to a ref chain ends at the limits
    const int id = Node(*target, ref, 0);
    refs_[ref] = id;
    return id;
  }

  const ojson& root_;
  SchemaLimits lim_;
  SchemaModel m_;
  std::vector<std::pair<int, std::string>> pending_;
  std::map<std::string, int> refs_;
};

SchemaModel SchemaModel::Parse(const ojson& schema, const SchemaLimits& lim) {
  return SchemaParser(schema, lim).Run();
}

SchemaModel SchemaModel::Parse(const json& schema, const SchemaLimits& lim) {
  return Parse(ojson::parse(schema.dump()), lim);  // key order: sorted, as nlohmann::json holds it
}

// ---- validation ---------------------------------------------------------------------------

std::vector<std::string> SchemaModel::Validate(const json& doc) const {
  std::vector<std::string> errors;
  Check(0, doc, "", &errors, 0);
  return errors;
}

void SchemaModel::Check(int id, const json& v, const std::string& path,
                        std::vector<std::string>* errors, int depth) const {
  if (depth > 64) {
    errors->push_back(Ptr(path) + ": schema nesting too deep");
    return;
  }
  const SchemaNode& s = nodes_[size_t(id)];
  if (s.constant) {
    if (!*s.constant) errors->push_back(Ptr(path) + ": no value is allowed here");
    return;
  }
  auto err = [&](const std::string& m) { errors->push_back(Ptr(path) + ": " + m); };
  if (s.ref >= 0) Check(s.ref, v, path, errors, depth + 1);
  if (!s.types.empty()) {
    bool ok = false;
    std::string names;
    for (const auto& t : s.types) {
      ok = ok || IsType(v, t);
      names += (names.empty() ? "" : " or ") + t;
    }
    if (!ok) {
      err("expected " + names + ", got " + std::string(v.type_name()) + " " + v.dump());
      return;  // further keywords would only repeat the complaint
    }
  }
  if (s.enum_values) {
    bool ok = false;
    for (auto& e : *s.enum_values) ok = ok || e == v;
    if (!ok) err(v.dump() + " is not one of " + s.enum_values->dump());
  }
  if (s.const_value && *s.const_value != v) err(v.dump() + " must be " + s.const_value->dump());
  auto matches = [&](int sub) {
    std::vector<std::string> e;
    Check(sub, v, path, &e, depth + 1);
    return e.empty();
  };
  if (!s.any_of.empty()) {
    bool ok = false;
    for (int sub : s.any_of) ok = ok || matches(sub);
    if (!ok) err(v.dump() + " matches none of the allowed forms");
  }
  if (!s.one_of.empty()) {
    int n = 0;
    for (int sub : s.one_of) n += matches(sub);
    if (n != 1)
      err(v.dump() + " matches " + std::to_string(n) + " of the oneOf forms, not exactly one");
  }
  if (v.is_number()) {
    const double x = v.get<double>();
    if (s.minimum && x < s.minimum->get<double>())
      err(v.dump() + " is less than the minimum " + s.minimum->dump());
    if (s.maximum && x > s.maximum->get<double>())
      err(v.dump() + " is greater than the maximum " + s.maximum->dump());
    if (s.exclusive_minimum && x <= s.exclusive_minimum->get<double>())
      err(v.dump() + " must be greater than " + s.exclusive_minimum->dump());
    if (s.exclusive_maximum && x >= s.exclusive_maximum->get<double>())
      err(v.dump() + " must be less than " + s.exclusive_maximum->dump());
  }
  if (v.is_string()) {
    const std::string& str = v.get_ref<const std::string&>();
    const size_t n = Utf8Length(str);
    if (s.min_length && n < *s.min_length)
      err("string is shorter than " + std::to_string(*s.min_length) + " characters");
    if (s.max_length && n > *s.max_length)
      err("string is longer than " + std::to_string(*s.max_length) + " characters");
    if (s.pattern && !std::regex_search(str, std::regex(*s.pattern, std::regex::ECMAScript)))
      err(v.dump() + " does not match the pattern " + json(*s.pattern).dump());
  }
  if (v.is_array()) {
    if (s.min_items && v.size() < *s.min_items)
      err("array has fewer than " + std::to_string(*s.min_items) + " items");
    if (s.max_items && v.size() > *s.max_items)
      err("array has more than " + std::to_string(*s.max_items) + " items");
    if (s.unique_items)
      for (size_t i = 0; i < v.size(); ++i)
        for (size_t j = i + 1; j < v.size(); ++j)
          if (v[i] == v[j])
            err("items " + std::to_string(i) + " and " + std::to_string(j) + " are equal");
    if (s.items >= 0)
      for (size_t i = 0; i < v.size(); ++i)
        Check(s.items, v[i], path + "/" + std::to_string(i), errors, depth + 1);
  }
  if (v.is_object()) {
    for (const auto& r : s.required)
      if (!v.contains(r)) err("required property '" + r + "' is missing");
    for (auto& [k, sub] : v.items()) {
      const std::string p = path + "/" + EscapePtr(k);
      int prop = -1;
      for (const auto& [name, node] : s.properties)
        if (name == k) prop = node;
      if (prop >= 0)
        Check(prop, sub, p, errors, depth + 1);
      else if (s.additional_allowed && !*s.additional_allowed)
        errors->push_back(Ptr(p) + ": unknown property '" + k + "'");
      else if (s.additional >= 0)
        Check(s.additional, sub, p, errors, depth + 1);
    }
  }
}

}  // namespace es::grammar
