// edgeseek/internal/core/json_field.h: checked reads of JSON values (type, range, presence) and the
// nesting bound applied to files before they are parsed (issue 23).
#include "edgeseek/internal/core/json_field.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "test_util.h"

namespace es {
namespace {

using nlohmann::json;

std::string ErrorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(JsonField, TypesRangesAndPresence) {
  const json j = json::parse(R"({"i": 7, "f": 4096.0, "big": 1099511627776, "neg": -1,
      "half": 2.5, "s": "x", "b": true, "n": null, "huge": 1e300})");
  EXPECT_EQ(json_field::Get<int>(j, "i", "w"), 7);
  EXPECT_EQ(json_field::Get<int>(j, "f", "w"), 4096);  // a whole float is an integer
  EXPECT_EQ(json_field::Get<int64_t>(j, "big", "w"), int64_t(1) << 40);
  EXPECT_EQ(json_field::Get<std::string>(j, "s", "w"), "x");
  EXPECT_TRUE(json_field::Get<bool>(j, "b", "w"));
  EXPECT_EQ(json_field::Get<double>(j, "i", "w"), 7.0);
  EXPECT_EQ(json_field::Opt<int>(j, "n", 5, "w"), 5);       // null: the fallback
  EXPECT_EQ(json_field::Opt<int>(j, "absent", 6, "w"), 6);  // absent: the fallback
  EXPECT_EQ(json_field::Opt<int>(json::array(), "i", 8, "w"), 8);
  const std::vector<std::pair<std::function<void()>, std::string>> bad = {
      {[&] { json_field::Get<int>(j, "big", "f.json"); },
       "f.json: field 'big' is 1099511627776, out of range"},
      {[&] { json_field::Get<uint32_t>(j, "neg", "f.json"); },
       "f.json: field 'neg' is -1, out of range"},
      {[&] { json_field::Get<int>(j, "half", "f.json"); },
       "field 'half' is 2.5 (must be a whole number in range)"},
      {[&] { json_field::Get<int64_t>(j, "huge", "f.json"); }, "field 'huge' is 1e+300"},
      {[&] { json_field::Get<int>(j, "s", "f.json"); },
       "f.json: field 's' must be an integer (got string)"},
      {[&] { json_field::Get<bool>(j, "i", "f.json"); },
       "field 'i' must be true or false (got number)"},
      {[&] { json_field::Get<std::string>(j, "b", "f.json"); },
       "field 'b' must be a string (got boolean)"},
      {[&] { json_field::Get<double>(j, "s", "f.json"); },
       "field 's' must be a number (got string)"},
      {[&] { json_field::Get<int>(j, "n", "f.json"); }, "f.json: missing field 'n'"},
      {[&] { json_field::Get<int>(j, "absent", "f.json"); }, "f.json: missing field 'absent'"},
      {[&] { json_field::Opt<int>(j, "s", 1, "f.json"); },
       "field 's' must be an integer (got string)"},
      {[&] { json_field::Get<int>(json(3), "i", "f.json"); },
       "f.json: expected an object holding 'i' (got number)"},
      {[&] { json_field::Get<std::vector<int>>(j, "s", "f.json"); },
       "field 's' has the wrong type (string)"},
  };
  for (const auto& [f, expect] : bad) {
    const std::string err = ErrorOf(f);
    EXPECT_NE(err.find(expect), std::string::npos) << "'" << expect << "' not in '" << err << "'";
  }
}

TEST(JsonField, DepthIsCountedOutsideStrings) {
  EXPECT_EQ(json_field::Depth(""), 0u);
  EXPECT_EQ(json_field::Depth("7"), 0u);
  EXPECT_EQ(json_field::Depth(R"({"a": [1, {"b": []}], "c": {}})"), 4u);
  EXPECT_EQ(json_field::Depth(R"(["[[[[", "\"[[[", "\\", [0]])"), 2u);
  EXPECT_EQ(json_field::Depth("]]]]}}[["), 2u);  // stray closers do not go below 0
}

TEST(JsonField, FilesAreParsedWithTheirNestingBounded) {
  const std::string dir = test::TempDir();
  const size_t n = 1000000;  // copied, this overflowed the stack (tokenizer_config.json, `run`)
  test::WriteFile(dir + "/deep.json", "{\"x\": " + std::string(n, '[') + std::string(n, ']') + "}");
  std::string err = ErrorOf([&] { json_field::ReadFile(dir + "/deep.json"); });
  EXPECT_NE(err.find(dir + "/deep.json: JSON nested 1000001 levels deep (at most 128 are allowed)"),
            std::string::npos)
      << err;
  const size_t ok = json_field::kMaxFileDepth - 1;  // the object adds one level
  test::WriteFile(dir + "/ok.json", "{\"x\": " + std::string(ok, '[') + std::string(ok, ']') + "}");
  EXPECT_TRUE(json_field::ReadFile(dir + "/ok.json").is_object());
  test::WriteFile(dir + "/bad.json", "{\"x\": 1e999}");
  err = ErrorOf([&] { json_field::ReadFile(dir + "/bad.json"); });
  EXPECT_NE(err.find(dir + "/bad.json: invalid JSON: "), std::string::npos) << err;
  err = ErrorOf([&] { json_field::ReadFile(dir + "/missing.json"); });
  EXPECT_NE(err.find("cannot read '" + dir + "/missing.json'"), std::string::npos) << err;
  EXPECT_TRUE(
      json_field::Parse<nlohmann::ordered_json>("{\"b\": 1, \"a\": 2}", "t").begin().key() == "b");
}

}  // namespace
}  // namespace es
