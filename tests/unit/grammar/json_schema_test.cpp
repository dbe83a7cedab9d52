// JSON schema → grammar (json_schema.h): random walks under the masks (an adversarial model)
// always give documents the shared validator accepts; refusals name the keyword.
#include "edgeseek/internal/grammar/json_schema.h"

#include <gtest/gtest.h>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/grammar/matcher.h"
#include "grammar_util.h"

namespace es::grammar {
namespace {

using json = nlohmann::json;

std::shared_ptr<Grammar> Compile(const std::string& schema) {
  return std::make_shared<Grammar>(
      Grammar::ParseGbnf(SchemaToGbnf(SchemaModel::Parse(json::parse(schema)))));
}

std::string ErrorOf(const std::string& schema) {
  try {
    Compile(schema);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

const char* kSchemas[] = {
    R"({"type":"object","properties":{"name":{"type":"string","minLength":1,"maxLength":8},
        "age":{"type":"integer","minimum":0,"maximum":150},"tags":{"type":"array","items":{"enum":["a","b",3]},
        "minItems":1,"maxItems":3},"nick":{"type":["string","null"]}},"required":["name","age"],
        "additionalProperties":false})",
    R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer","minimum":-20,"maximum":-3},
        "kids":{"type":"array","items":{"$ref":"#/$defs/node"},"maxItems":2}},"required":["v"]}},
        "$ref":"#/$defs/node"})",
    R"({"anyOf":[{"type":"boolean"},{"const":{"k":[1,2]}},{"type":"number"}]})",
    R"({"oneOf":[{"type":"string","maxLength":3},{"type":"integer","exclusiveMinimum":5,"exclusiveMaximum":9}]})",
    R"({"type":"array","items":{"type":"object","additionalProperties":{"type":"boolean"}},"maxItems":4})",
    R"({"type":"object","properties":{"a":{"type":"object","properties":{"b":{"type":"object",
        "properties":{"c":{"type":"string"}},"required":["c"]}},"required":["b"]}},"required":["a"]})",
    R"({"type":"object","properties":{"x":{},"y":true},"required":["y","z"]})",
    R"({"enum":["red","green",null,1.5]})",
    // oneOf with branches proved exclusive: a discriminator const, enums, types (null or a $ref),
    // a required property the other branch forbids.
    R"({"oneOf":[{"type":"object","properties":{"kind":{"const":"a"},"x":{"type":"integer"}},"required":["kind","x"]},
        {"type":"object","properties":{"kind":{"enum":["b","c"]},"y":{"type":"string","maxLength":4}},"required":["kind"]}]})",
    R"({"oneOf":[{"enum":[1,2,"x"]},{"enum":[3,"y",null]},{"type":"boolean"}]})",
    R"({"$defs":{"p":{"type":"object","properties":{"v":{"type":"integer"}}}},"oneOf":[{"type":"null"},{"$ref":"#/$defs/p"}]})",
    R"({"oneOf":[{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"],"additionalProperties":false},
        {"type":"object","properties":{"b":{"type":"integer"}},"required":["b"],"additionalProperties":false}]})",
};

TEST(JsonSchemaGrammar, RandomWalksAreAlwaysValid) {
  const auto vocab = test::SmallVocab();
  for (const char* text : kSchemas) {
    const SchemaModel model = SchemaModel::Parse(json::parse(text));
    auto g = std::make_shared<Grammar>(Grammar::ParseGbnf(SchemaToGbnf(model)));
    int complete = 0;
    for (uint64_t seed = 0; seed < 60; ++seed) {
      bool done = false;
      const std::string out = test::RandomWalk(Matcher(g, vocab), *vocab, seed, 400, &done);
      if (!done) continue;  // cut by the token budget: "length", not a validity failure
      ++complete;
      json doc;
      ASSERT_NO_THROW(doc = json::parse(out)) << text << "\n" << out;
      const auto errors = model.Validate(doc);
      ASSERT_TRUE(errors.empty()) << text << "\n" << out << "\n" << errors.front();
    }
    EXPECT_GE(complete, 40) << text;  // bounded whitespace and digits: walks end
  }
}

TEST(JsonSchemaGrammar, JsonObjectWalksParse) {
  const auto vocab = test::SmallVocab();
  auto g = std::make_shared<Grammar>(Grammar::ParseGbnf(JsonObjectGbnf()));
  for (uint64_t seed = 0; seed < 40; ++seed) {
    bool done = false;
    const std::string out = test::RandomWalk(Matcher(g, vocab), *vocab, seed, 400, &done);
    if (!done) continue;
    json doc;
    ASSERT_NO_THROW(doc = json::parse(out)) << out;
    EXPECT_TRUE(doc.is_object());
  }
}

TEST(JsonSchemaGrammar, IntegerRangesAreExact) {
  const auto vocab = test::SmallVocab();
  for (auto [lo, hi] :
       std::vector<std::pair<int, int>>{{0, 150}, {-20, -3}, {-7, 12}, {95, 1003}, {5, 5}}) {
    auto g = Compile(R"({"type":"integer","minimum":)" + std::to_string(lo) + R"(,"maximum":)" +
                     std::to_string(hi) + "}");
    for (int v = -1200; v <= 1200; ++v) {
      Matcher m(g, vocab);
      const bool ok = m.AcceptText(std::to_string(v)) && m.accepting();
      ASSERT_EQ(ok, v >= lo && v <= hi) << lo << ".." << hi << ": " << v;
    }
    Matcher m(g, vocab);
    EXPECT_FALSE(m.AcceptText("-0") && m.accepting());
    Matcher m2(g, vocab);
    EXPECT_FALSE(m2.AcceptText("007") && m2.accepting());
  }
}

TEST(JsonSchemaGrammar, RefusesWhatItCannotEnforceAndWhatNothingSatisfies) {
  EXPECT_NE(
      ErrorOf(R"({"type":"string","pattern":"^a"})").find("keyword 'pattern' is not supported"),
      std::string::npos);
  EXPECT_NE(
      ErrorOf(R"({"type":"string","format":"date"})").find("keyword 'format' is not supported"),
      std::string::npos);
  EXPECT_NE(ErrorOf(R"({"allOf":[]})").find("'allOf'"), std::string::npos);
  EXPECT_NE(ErrorOf(R"({"type":"number","minimum":0})").find("type 'number'"), std::string::npos);
  EXPECT_NE(
      ErrorOf(R"({"properties":{"a":{"type":"array","uniqueItems":true}}})").find("#/properties/a"),
      std::string::npos);
  // Never satisfiable: an error, not a hang.
  for (
      const char* s :
      {R"({"type":"string","minLength":5,"maxLength":2})",
       R"({"type":"integer","minimum":3,"maximum":1})",
       R"({"type":"object","properties":{"a":false},"required":["a"]})", R"(false)",
       R"({"enum":[1,2],"type":"string"})", R"({"$ref":"#"})",
       R"({"type":"object","required":["q"],"additionalProperties":false})",
       R"({"$defs":{"a":{"type":"object","properties":{"n":{"$ref":"#/$defs/a"}},"required":["n"]}},"$ref":"#/$defs/a"})"})
    EXPECT_NE(ErrorOf(s).find("can never be satisfied"), std::string::npos)
        << s << ": " << ErrorOf(s);
  EXPECT_NE(ErrorOf(R"({"$ref":"http://x/y"})").find("only local $ref"), std::string::npos);
  std::string deep = "true";
  for (int i = 0; i < 40; ++i) deep = R"({"items":)" + deep + "}";
  EXPECT_NE(ErrorOf(deep).find("nested deeper"), std::string::npos);
}

// oneOf is exact (compiled like anyOf) only for branches no value can match two of; otherwise
// the schema is refused, naming oneOf, rather than a value written that matches both.
TEST(JsonSchemaGrammar, OneOfWithOverlappingBranchesIsRefused) {
  for (const char* s :
       {R"({"oneOf":[{"type":"integer"},{"type":"number"}]})",
        R"({"oneOf":[{"type":"string"},{"maxLength":3}]})",
        R"({"oneOf":[{"type":"object","properties":{"a":{"type":"integer"}}},{"type":"object"}]})",
        R"({"oneOf":[{"enum":[1,2]},{"type":"integer"}]})",
        R"({"oneOf":[{"type":"boolean"},{"anyOf":[{"type":"string"},{"type":"boolean"}]}]})",
        R"({"oneOf":[{"type":"object","properties":{"k":{"const":1}},"required":["k"]},
                                     {"type":"object","properties":{"k":{"enum":[1,2]}},"required":["k"]}]})",
        R"({"properties":{"v":{"oneOf":[{"type":"string"},{"type":"string","maxLength":2}]}}})"}) {
    const std::string e = ErrorOf(s);
    EXPECT_NE(e.find("keyword 'oneOf' with branches"), std::string::npos) << s << ": " << e;
  }
  EXPECT_NE(
      ErrorOf(
          R"({"properties":{"v":{"oneOf":[{"type":"string"},{"type":"string","maxLength":2}]}}})")
          .find("#/properties/v"),
      std::string::npos);
  EXPECT_EQ(ErrorOf(R"({"oneOf":[{"type":"integer"},{"type":"string"}]})"), "");
}

TEST(JsonSchemaValidator, OneOfMeansExactlyOne) {
  const SchemaModel m =
      SchemaModel::Parse(json::parse(R"({"oneOf":[{"type":"integer"},{"minimum":0}]})"));
  EXPECT_TRUE(m.Validate(json(-1)).empty());
  EXPECT_FALSE(m.Validate(json(1)).empty());  // both
}

}  // namespace
}  // namespace es::grammar
