// One model of JSON Schema (a draft 2020-12 / 07 subset) shared by the validator (the server
// config, tests) and the grammar compiler (response_format json_schema, tool parameters).
//
// SchemaModel::Parse checks a schema once and turns it into typed nodes; local $ref
// ("#/$defs/x", "#/definitions/x", "#") resolve to node indices, so recursive schemas are
// graphs, not infinite trees. Keywords: type (one or a list), properties, required,
// additionalProperties (bool or schema), items, enum, const, minimum, maximum,
// exclusiveMinimum, exclusiveMaximum, minLength, maxLength, minItems, maxItems, uniqueItems,
// pattern, anyOf, oneOf, $ref, and annotations (title, description, default, examples, $schema,
// $id, $comment, $defs, definitions). Any other keyword is refused, so nothing is silently
// unchecked. Errors name the schema location ("#/properties/a/minimum").
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace es::grammar {

struct SchemaNode {
  std::string where;               // "#/properties/a"
  std::optional<bool> constant;    // a boolean schema: true (anything) or false (nothing)
  std::vector<std::string> types;  // empty: any type
  std::vector<std::pair<std::string, int>> properties;  // in schema order, name → node
  std::vector<std::string> required;
  std::optional<bool> additional_allowed;  // additionalProperties true/false
  int additional = -1;                     // additionalProperties as a schema
  int items = -1;
  std::optional<uint64_t> min_items, max_items, min_length, max_length;
  std::optional<nlohmann::json> minimum, maximum, exclusive_minimum, exclusive_maximum;  // numbers
  std::optional<nlohmann::json> enum_values;                                             // array
  std::optional<nlohmann::json> const_value;
  std::vector<int> any_of, one_of;
  int ref = -1;
  bool unique_items = false;
  std::optional<std::string> pattern;
  // Keywords present, for consumers that support less than the model (the grammar compiler).
  std::vector<std::string> keywords;
};

struct SchemaLimits {
  size_t max_nodes = 4096;
  int max_depth = 32;
};

class SchemaModel {
 public:
  // Throws es::Error on an unsupported keyword, a malformed value or a dangling $ref.
  // The ordered form keeps the schema's key order, which the grammar emits properties in (a
  // model writes "reasoning" before "answer" when the schema says so); nlohmann::json sorts keys.
  static SchemaModel Parse(const nlohmann::ordered_json& schema, const SchemaLimits& lim = {});
  static SchemaModel Parse(const nlohmann::json& schema, const SchemaLimits& lim = {});
  const SchemaNode& node(int i) const { return nodes_[size_t(i)]; }
  size_t size() const { return nodes_.size(); }
  int root() const { return 0; }

  // Errors as "/models/0/slots: 0 is less than the minimum 1"; empty when valid.
  std::vector<std::string> Validate(const nlohmann::json& doc) const;
  // The same against node `n` (a subschema), paths relative to `path`.
  void Check(int n, const nlohmann::json& v, const std::string& path,
             std::vector<std::string>* errors, int depth = 0) const;

 private:
  friend class SchemaParser;
  std::vector<SchemaNode> nodes_;
};

// The grammar (GBNF, root rule "root") of the JSON texts valid against `schema`; whitespace
// between tokens is bounded (at most one newline and a few spaces), numbers have bounded
// digits. Throws es::Error naming the keyword the compiler cannot enforce (pattern,
// uniqueItems, minimum on non-integers...) or a schema no value satisfies.
// `prefix` names the rules (the start rule is <prefix>root), so that several schemas can share
// one grammar (tool calls); the shared JSON rules (ws, string, value...) come with_basics, once.
std::string SchemaToGbnf(const SchemaModel& schema, const std::string& prefix = "",
                         bool with_basics = true);
// The shared rules alone: ws, hex, char, string, int, number, value, object, array.
std::string JsonBasicsGbnf();
// The grammar of any JSON object (response_format json_object).
std::string JsonObjectGbnf();

}  // namespace es::grammar
