// Hostile tokenizer.json files (issue 23): ids out of range or given twice, and added tokens too
// long to match in linear time, are one es::Error naming the entry — at load, in time and memory
// bounded by the file's size, not by numbers written inside it. Small cases are also in
// tests/fuzz/corpus/tokenizer_json/.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "edgeseek/core/error.h"
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
  j["pre_tokenizer"]["add_prefix_space"] = "x";
  ExpectError(j, {"tokenizer.json pre_tokenizer: a field has the wrong type"});

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
