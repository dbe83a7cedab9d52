// Hostile tokenizer.json files (issue 23): ids out of range or given twice, and added tokens too
// long to match in linear time, are one es::Error naming the entry — at load, in time and memory
// bounded by the file's size, not by numbers written inside it. Small cases are also in
// tests/fuzz/corpus/tokenizer_json/.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>

#include "edgeseek/internal/core/error.h"
#include "test_util.h"
#include "tok_test_util.h"

namespace es {
namespace {

using nlohmann::json;

json Tiny() {
  return json::parse(
      test::ReadFile(test::SourceDir() + "/tests/data/tiny_tokenizer/tokenizer.json"));
}

std::string LoadError(const json& j) {
  try {
    Tokenizer::FromJson(j, nullptr);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void ExpectError(const json& j, const std::vector<std::string>& parts) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string err = LoadError(j);
  for (const auto& p : parts)
    EXPECT_NE(err.find(p), std::string::npos) << "'" << p << "' not in: '" << err << "'";
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2.0);
}

TEST(BadTokenizer, IdsOutOfRange) {
  json j = Tiny();
  j["model"]["vocab"]["a"] = int64_t(1) << 40;  // was truncated to an int32 silently
  ExpectError(j, {"model.vocab['a']", "id 1099511627776 is out of range"});
  j = Tiny();
  j["model"]["vocab"]["a"] = 2147483647;  // would size the id table at 2^31 entries (64 GB)
  ExpectError(j, {"model.vocab['a']", "id 2147483647 is out of range", "ids must be below"});
  j = Tiny();
  j["added_tokens"][0]["id"] = int64_t(1) << 40;
  ExpectError(j, {"added_tokens[0]", "out of range"});
  j = Tiny();
  j["added_tokens"][0]["id"] = -3;
  ExpectError(j, {"added_tokens[0]", "negative id -3"});
}

TEST(BadTokenizer, DuplicatedIds) {
  json j = Tiny();
  const int id_of_b = j["model"]["vocab"]["b"].get<int>();
  j["model"]["vocab"]["a"] = id_of_b;
  ExpectError(j, {"model.vocab: id " + std::to_string(id_of_b) + " is given to both"});
  j = Tiny();
  j["added_tokens"][1]["id"] = j["added_tokens"][0]["id"];
  ExpectError(j, {"added tokens '<|endoftext|>' and '<|im_start|>' have the same id 376"});
  // The same token listed twice with its id is harmless (tokenizers accepts it).
  j = Tiny();
  j["added_tokens"].push_back(j["added_tokens"][0]);
  EXPECT_EQ(LoadError(j), "");
}

TEST(BadTokenizer, HugeAddedTokenIsRefusedQuickly) {
  // 10 MB took 5 s and 828 MB to load, and matching it against a long run of its bytes never
  // finished.
  json j = Tiny();
  json tok = j["added_tokens"][0];
  tok["content"] = std::string(10 << 20, 'a');
  tok["id"] = 379;
  j["added_tokens"].push_back(tok);
  ExpectError(j, {"added token 379 is 10485760 bytes long (at most 256 supported)"});
  // At the limit it loads, and matching a text full of near-matches stays fast.
  json ok = Tiny();
  tok["content"] = std::string(255, 'a') + "b";
  ok["added_tokens"].push_back(tok);
  const auto t = Tokenizer::FromJson(ok, nullptr);
  const auto t0 = std::chrono::steady_clock::now();
  const auto ids = t->Encode(std::string(64 << 10, 'a') + std::string(255, 'a') + "b");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 3.0);
  EXPECT_EQ(ids.back(), 379);
}

// Wrongly typed fields of tokenizer.json and tokenizer_config.json are one es::Error naming the
// file, the entry and the key (issue 23); before, nlohmann's type_error escaped ApplyConfig
// without naming either, and tokenizer.json's were one message naming no key.
// A wrong type anywhere inside the normalizer, pre-tokenizer, post-processor or decoder is one
// error naming the JSON path down to the key (issue 23); before, the components read their
// fields with nlohmann directly and the message named only the section ("tokenizer.json
// pre_tokenizer: a field has the wrong type or is missing ([json.exception.type_error.302]
// ...)"), never which of its fields, nor which entry of a Sequence.
TEST(BadTokenizer, ComponentFieldsNameTheirPath) {
  const json seq_split = {
      {"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "Isolated"}};
  const json tp_single = json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                                      {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}});
  const std::vector<std::tuple<const char*, json, std::string>> cases = {
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers",
         {{{"type", "NFC"}},
          {{"type", "Replace"}, {"pattern", {{"Regex", 5}}}, {"content", "x"}}}}},
       "tokenizer.json normalizer.normalizers[1].pattern: field 'Regex' must be a string (got "
       "number)"},
      {"normalizer",
       {{"type", "Replace"}, {"pattern", "x"}, {"content", "x"}},
       "tokenizer.json normalizer: field 'pattern' must be an object"},
      {"normalizer",
       {{"type", "Replace"}, {"pattern", {{"String", "a"}}}, {"content", 3}},
       "tokenizer.json normalizer: field 'content' must be a string (got number)"},
      {"normalizer",
       {{"type", "Strip"}, {"strip_left", "no"}},
       "tokenizer.json normalizer: field 'strip_left' must be true or false (got string)"},
      {"normalizer",
       {{"type", "Prepend"}, {"prepend", {1}}},
       "tokenizer.json normalizer: field 'prepend' must be a string (got array)"},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers", {seq_split, {{"type", "Digits"}, {"individual_digits", 1}}}}},
       "tokenizer.json pre_tokenizer.pretokenizers[1]: field 'individual_digits' must be true or "
       "false "
       "(got number)"},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"},
           {"pattern", {{"String", " "}}},
           {"behavior", "Isolated"},
           {"invert", "no"}}}}},
       "tokenizer.json pre_tokenizer.pretokenizers[0]: field 'invert' must be true or false (got "
       "string)"},
      {"pre_tokenizer",
       {{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", 3}},
       "tokenizer.json pre_tokenizer: field 'behavior' must be a string (got number)"},
      {"pre_tokenizer",
       {{"type", "Split"}, {"pattern", {{"String", " "}}}},
       "tokenizer.json pre_tokenizer: missing field 'behavior'"},
      {"pre_tokenizer",
       {{"type", "Split"}, {"pattern", {{"String", false}}}, {"behavior", "Isolated"}},
       "tokenizer.json pre_tokenizer.pattern: field 'String' must be a string (got boolean)"},
      {"pre_tokenizer",
       {{"type", "Metaspace"}, {"replacement", 5}},
       "tokenizer.json pre_tokenizer: field 'replacement' must be a string (got number)"},
      {"pre_tokenizer",
       {{"type", "Metaspace"}, {"prepend_scheme", true}},
       "tokenizer.json pre_tokenizer: field 'prepend_scheme' must be a string (got boolean)"},
      {"pre_tokenizer",
       {{"type", "ByteLevel"}, {"use_regex", "x"}},
       "tokenizer.json pre_tokenizer: field 'use_regex' must be true or false (got string)"},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", tp_single},
        {"special_tokens", {{"<s>", {{"ids", {"a"}}}}}}},
       "tokenizer.json post_processor.special_tokens['<s>']: field 'ids[0]' must be an integer "
       "(got string)"},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", json::array({{{"SpecialToken", {{"id", 5}}}}})},
        {"special_tokens", json::object()}},
       "tokenizer.json post_processor.single[0].SpecialToken: field 'id' must be a string (got "
       "number)"},
      {"post_processor",
       {{"type", "TemplateProcessing"}, {"single", tp_single}, {"special_tokens", 5}},
       "tokenizer.json post_processor: field 'special_tokens' must be an object (got number)"},
      {"post_processor",
       {{"type", "RobertaProcessing"}, {"cls", {"<s>", "x"}}, {"sep", {"</s>", 2}}},
       "tokenizer.json post_processor: field 'cls[1]' must be an integer (got string)"},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders", {{{"type", "Strip"}, {"content", " "}, {"start", "1"}, {"stop", 0}}}}},
       "tokenizer.json decoder.decoders[0]: field 'start' must be an integer (got string)"},
      {"decoder",
       {{"type", "Replace"}, {"pattern", {{"String", json::array()}}}, {"content", " "}},
       "tokenizer.json decoder.pattern: field 'String' must be a string (got array)"},
      {"decoder",
       {{"type", "Metaspace"}, {"add_prefix_space", "x"}},
       "tokenizer.json decoder: field 'add_prefix_space' must be true or false (got string)"},
      {"decoder",
       {{"type", "BPEDecoder"}, {"suffix", 1}},
       "tokenizer.json decoder: field 'suffix' must be a string (got number)"},
  };
  for (const auto& [section, value, expect] : cases) {
    json j = Tiny();
    j[section] = value;
    const std::string err = LoadError(j);
    EXPECT_NE(err.find(expect), std::string::npos) << "'" << expect << "' not in: '" << err << "'";
    EXPECT_EQ(err.find("json.exception"), std::string::npos) << err;  // ours, not nlohmann's
  }
  // The same components, rightly typed, load.
  json ok = Tiny();
  ok["normalizer"] = {{"type", "Sequence"},
                      {"normalizers",
                       {{{"type", "Strip"}, {"strip_left", false}},
                        {{"type", "Replace"}, {"pattern", {{"Regex", "a+"}}}, {"content", "a"}}}}};
  ok["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", tp_single},
      {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}};
  ok["decoder"] = {{"type", "Sequence"},
                   {"decoders",
                    {{{"type", "ByteLevel"}},
                     {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  EXPECT_EQ(LoadError(ok), "");
}

TEST(BadTokenizer, WronglyTypedFields) {
  json j = Tiny();
  j["added_tokens"][1]["special"] = "yes";
  ExpectError(
      j, {"tokenizer.json added_tokens[1]: field 'special' must be true or false (got string)"});
  j = Tiny();
  j["model"]["fuse_unk"] = 1;
  ExpectError(j, {"tokenizer.json model: field 'fuse_unk' must be true or false (got number)"});
  j = Tiny();
  j["model"]["unk_token"] = 7;
  ExpectError(j, {"tokenizer.json model: field 'unk_token' must be a string (got number)"});
  j = Tiny();
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", "x"}};
  ExpectError(j, {"tokenizer.json pre_tokenizer: field 'add_prefix_space' must be true or false "
                  "(got string)"});

  auto config_error = [](const json& cfg) {
    try {
      Tokenizer::FromJson(Tiny(), &cfg);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const json base = json::parse(
      test::ReadFile(test::SourceDir() + "/tests/data/tiny_tokenizer/tokenizer_config.json"));
  const std::vector<std::pair<json, std::string>> cases = {
      {{{"add_bos_token", "yes"}},
       "tokenizer_config.json: field 'add_bos_token' must be true or false (got string)"},
      {{{"chat_template", 5}},
       "tokenizer_config.json: field 'chat_template' must be a string or a list"},
      {{{"chat_template", {{{"name", "default"}, {"template", 5}}}}},
       "tokenizer_config.json chat_template[0]: field 'template' must be a string (got number)"},
      {{{"chat_template", {{{"template", "x"}}}}},
       "tokenizer_config.json chat_template[0]: missing field 'name'"},
      {{{"chat_template", {"x"}}}, "tokenizer_config.json chat_template[0]: expected an object"},
      {{{"eos_token", 3}}, "tokenizer_config.json: 'eos_token' must be a string"},
  };
  for (const auto& [patch, expect] : cases) {
    json cfg = base;
    cfg.merge_patch(patch);
    const std::string err = config_error(cfg);
    EXPECT_NE(err.find(expect), std::string::npos) << "'" << expect << "' not in: '" << err << "'";
  }
  EXPECT_EQ(config_error(base), "");
  // Through Tokenizer::Load the message also names the file's path.
  const std::string dir = test::TempDir() + "/typed_cfg";
  std::filesystem::create_directories(dir);
  test::WriteFile(dir + "/tokenizer.json", Tiny().dump());
  json cfg = base;
  cfg["add_eos_token"] = 1;
  test::WriteFile(dir + "/tokenizer_config.json", cfg.dump());
  try {
    Tokenizer::Load(dir);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(dir + "/tokenizer.json: tokenizer_config.json: field "
                                               "'add_eos_token' must be true or false"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace es
