// A small JSON Schema validator for the subset the server config uses (draft 2020-12 / 07
// keywords): type (one or a list), properties, required, additionalProperties (bool or
// schema), items, enum, const, minimum, maximum, exclusiveMinimum, exclusiveMaximum,
// minLength, maxLength, minItems, maxItems, uniqueItems, pattern, anyOf, and local $ref
// ("#/$defs/x", "#/definitions/x"). A schema using any other keyword is refused when loaded,
// so nothing is silently not checked. Errors name the JSON pointer of the bad value.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace es::server {

class JsonSchema {
 public:
  // Throws es::Error on an unsupported keyword or a malformed schema.
  explicit JsonSchema(nlohmann::json schema);
  // Errors as "/models/0/instances/1/slots: 0 is less than the minimum 1"; empty when valid.
  std::vector<std::string> Validate(const nlohmann::json& doc) const;

 private:
  void CheckSchema(const nlohmann::json& s, const std::string& where) const;
  void Check(const nlohmann::json& s, const nlohmann::json& v, const std::string& path,
             std::vector<std::string>* errors, int depth) const;
  const nlohmann::json& Resolve(const std::string& ref) const;
  nlohmann::json root_;
};

}  // namespace es::server
