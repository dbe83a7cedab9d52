// Bad input through the CLI: each case exits non-zero with one clear line naming what is wrong.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <tuple>

#include "test_util.h"

namespace es {
namespace {

namespace fs = std::filesystem;

std::string Golden(const std::string& v) {
  return test::SourceDir() + "/tests/golden/data/models/" + v;
}

std::string CopyModel(const std::string& variant) {
  const std::string dst = test::TempDir() + "/" + variant;
  fs::copy(Golden(variant), dst, fs::copy_options::recursive);
  return dst;
}

// Writes a safetensors file: the header's 8-byte little-endian length, the header, then `data`.
void WriteRawSafetensors(const std::string& path, const std::string& header,
                         const std::string& data = "") {
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[size_t(i)] = char((header.size() >> (8 * i)) & 0xFF);
  test::WriteFile(path, file + header + data);
}

// Runs the CLI; expects failure with exactly one stderr line containing every `needles`.
void ExpectOneLineError(const std::string& args, const std::vector<std::string>& needles) {
  std::string out, err;
  const int rc = test::RunCommand(test::CliPath() + " " + args, &out, &err);
  EXPECT_NE(rc, 0) << args;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_EQ(err.rfind("edgeseek: error: ", 0), 0u) << err;
  for (const auto& n : needles)
    EXPECT_NE(err.find(n), std::string::npos) << "missing '" << n << "' in: " << err;
}

// --kv-type: an unknown type, and a block type the model's rows do not split into (the golden
// dsv2_lite's rope part is 16 wide); one line naming the type (and the model).
TEST(BadInput, KvTypes) {
  ExpectOneLineError("logits -m " + Golden("llama3") + " --ids 1,2 --out /dev/null --kv-type q9",
                     {"unknown KV cache type 'q9'", "q8_0"});
  ExpectOneLineError("inspect -m " + Golden("llama3") + " --kv-type int8",
                     {"unknown KV cache type 'int8'"});
  ExpectOneLineError(
      "logits -m " + Golden("dsv2_lite") + " --ids 1,2 --out /dev/null --kv-type q8_0",
      {"dsv2_lite", "q8_0", "multiple of 32", "qk_rope_head_dim"});
  ExpectOneLineError("inspect -m " + Golden("dsv2_lite") + " --kv-type q4_0",
                     {"dsv2_lite", "q4_0", "multiple of 32"});
}

TEST(BadInput, TruncatedSafetensors) {
  const std::string d = CopyModel("llama3");
  const std::string f = d + "/model.safetensors";
  fs::resize_file(f, fs::file_size(f) / 2);
  ExpectOneLineError("logits -m " + d + " --ids 1,2 --out /dev/null",
                     {"model.safetensors", "truncated"});
}

TEST(BadInput, TruncatedHeader) {
  const std::string d = CopyModel("llama3");
  fs::resize_file(d + "/model.safetensors", 5);
  ExpectOneLineError("logits -m " + d + " --ids 1 --out /dev/null",
                     {"model.safetensors", "truncated"});
}

TEST(BadInput, CorruptHeader) {
  const std::string d = CopyModel("llama3");
  std::string s = test::ReadFile(d + "/model.safetensors");
  s[8] = 'x';  // the header's opening brace: no longer JSON
  test::WriteFile(d + "/model.safetensors", s);
  ExpectOneLineError("logits -m " + d + " --ids 1 --out /dev/null",
                     {"model.safetensors", "corrupt"});
}

// A shape whose element count wraps around 2^64 matched an empty data range and loaded.
TEST(BadInput, ShapeLargerThanTheFile) {
  const std::string d = CopyModel("llama3");
  const std::string header =
      R"({"x": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 0]}})";
  WriteRawSafetensors(d + "/model.safetensors", header);
  ExpectOneLineError(
      "logits -m " + d + " --ids 1 --out /dev/null",
      {"model.safetensors: tensor 'x'", "holds more elements than the file has bytes"});
}

// Numbers in a safetensors header the fuzzer found (undefined behaviour, not an error): an empty
// tensor whose other dimensions multiply past 2^63, and dimensions or offsets written as floats
// out of an integer's range (nlohmann casts them).
TEST(BadInput, SafetensorsHeaderNumbers) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"([4611686018427387904, 4611686018427387904, 0], "data_offsets": [0, 0])",
       "product passes 2^63"},
      {R"([1e30], "data_offsets": [0, 0])", "field 'shape' is 1e+30"},
      {R"([1], "data_offsets": [-1e30, 4])", "field 'data_offsets' is -1e+30"},
      {R"([0], "data_offsets": [1e300, 0])", "field 'data_offsets' is 1e+300"},
      {R"({"a": 1}, "data_offsets": [0, 0])", "shape must be an array"},
      {R"([1], "data_offsets": [0])", "data_offsets must be an array [begin, end]"},
  };
  for (const auto& [rest, message] : cases) {
    SCOPED_TRACE(rest);
    const std::string d = CopyModel("llama3");
    const std::string header = R"({"x": {"dtype": "F32", "shape": )" + rest + "}}";
    WriteRawSafetensors(d + "/model.safetensors", header, "abcd");
    ExpectOneLineError("logits -m " + d + " --ids 1 --out /dev/null",
                       {"model.safetensors: tensor 'x'", message});
  }
}

TEST(BadInput, MissingShard) {
  const std::string d = CopyModel("qwen2_sharded");
  std::string shard;
  for (auto& e : fs::directory_iterator(d))
    if (e.path().filename().string().find("-of-") != std::string::npos) shard = e.path().string();
  ASSERT_FALSE(shard.empty());
  fs::remove(shard);
  ExpectOneLineError("logits -m " + d + " --ids 1 --out /dev/null",
                     {fs::path(shard).filename().string(), "missing"});
}

// The shard index (issue 23): a wrongly typed entry names the file and the key (it was
// nlohmann's bare "type must be string"), and a shard outside the model folder is refused
// before it is opened (it read "../../../etc/hostname" as weights).
TEST(BadInput, ShardIndexEntries) {
  const std::string d = CopyModel("qwen2_sharded");
  const std::string index = d + "/model.safetensors.index.json";
  const nlohmann::json good = nlohmann::json::parse(test::ReadFile(index));
  const std::string name = good["weight_map"].begin().key();
  const std::vector<std::pair<nlohmann::json, std::vector<std::string>>> cases = {
      {5,
       {"model.safetensors.index.json",
        "field 'weight_map['" + name + "']' must be a string (got number)"}},
      {"../../../etc/hostname",
       {"model.safetensors.index.json", "names '../../../etc/hostname'",
        "not a file of the model folder"}},
      {"/etc/hostname", {"names '/etc/hostname'", "not a file of the model folder"}},
      {"", {"names ''", "not a file of the model folder"}},
  };
  for (const auto& [value, needles] : cases) {
    nlohmann::json j = good;
    j["weight_map"][name] = value;
    test::WriteFile(index, j.dump());
    ExpectOneLineError("logits -m " + d + " --ids 1 --out /dev/null", needles);
  }
}

TEST(BadInput, ShapeDisagreesWithConfig) {
  const std::string d = CopyModel("qwen2_tied");
  auto j = nlohmann::json::parse(test::ReadFile(d + "/config.json"));
  j["intermediate_size"] = j["intermediate_size"].get<int>() + 8;
  test::WriteFile(d + "/config.json", j.dump());
  ExpectOneLineError("logits -m " + d + " --ids 1 --out /dev/null",
                     {"mlp.gate_proj.weight", "shape"});
}

// Garbage hyperparameters that used to load (issue 23): 0 or negative epsilon / rope base gave
// NaN logits; num_hidden_layers = 10^7 built tens of millions of tensor names before failing,
// and is now bounded by the layers the checkpoint holds (not a fixed cap of 4,096: 3,000 passed
// it and built names for 3,000 layers). Each is one line naming the field, quickly.
TEST(BadInput, NonPositiveOrHugeHyperparameters) {
  const std::string d = CopyModel("qwen2_tied");
  const auto base = nlohmann::json::parse(test::ReadFile(d + "/config.json"));
  const std::vector<std::tuple<const char*, nlohmann::json, const char*>> cases = {
      {"/rms_norm_eps", 0, "field 'rms_norm_eps' must be a positive finite number (got 0)"},
      {"/rope_parameters/rope_theta", -10000.0,
       "field 'rope_theta' must be a positive finite number (got -10000)"},
      {"/num_hidden_layers", 10000000,
       "field 'num_hidden_layers' is 10000000 but the checkpoint holds tensors for 2 layers "
       "(model.layers.0 to model.layers.1)"},
      {"/num_hidden_layers", 3000, "field 'num_hidden_layers' is 3000 but the checkpoint holds"},
      {"/rope_parameters/rope_theta", 1e-30,
       "field 'rope_theta' is 1e-30 (a rope base must be at least 1)"},
      // Integer fields out of their type's range: 1e300 was undefined behaviour, 2^40 became 0
      // in an int (issue 21, tests/fuzz/targets/model_config.cpp under UBSan).
      {"/intermediate_size", 1e300,
       "field 'intermediate_size' is 1e+300 (must be a whole number in range)"},
      {"/num_attention_heads", int64_t(1) << 40,
       "field 'num_attention_heads' is 1099511627776, out of range"},
      {"/hidden_size", 128.5, "field 'hidden_size' is 128.5 (must be a whole number in range)"},
  };
  for (const auto& [field, value, expect] : cases) {
    auto j = base;
    j[nlohmann::json::json_pointer(field)] = value;
    test::WriteFile(d + "/config.json", j.dump());
    const auto t0 = std::chrono::steady_clock::now();
    ExpectOneLineError("inspect -m " + d, {"config.json", expect});
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0)
        << field;
  }
}

// A NaN or infinite weight value loads (weights are not scanned) but must not give NaN logits
// with exit 0: greedy `generate` then emitted token 0 (tests/fuzz/corrupt_model_probe.py).
TEST(BadInput, NonFiniteWeightFailsAtTheFirstStep) {
  const std::string d = CopyModel("qwen2_tied");
  std::string s = test::ReadFile(d + "/model.safetensors");
  uint64_t header = 0;
  for (int i = 0; i < 8; ++i) header |= uint64_t(uint8_t(s[size_t(i)])) << (8 * i);
  const auto h = nlohmann::json::parse(s.substr(8, header));
  const size_t at =
      8 + header + h["model.layers.0.mlp.gate_proj.weight"]["data_offsets"][0].get<size_t>();
  const float nan = std::nanf("");
  std::memcpy(&s[at + 40], &nan, 4);
  test::WriteFile(d + "/model.safetensors", s);
  for (const char* verb :
       {"generate -m %s --ids 1,2 -n 2", "logits -m %s --ids 1,2 --out /dev/null"}) {
    std::string args = verb;
    args.replace(args.find("%s"), 2, d);
    ExpectOneLineError(args, {"the model computed a non-finite logit (nan", "corrupt"});
  }
}

// Synthetic weights have no checkpoint to count layers in: a fixed cap, as before.
TEST(BadInput, SyntheticLayerCap) {
  auto j = nlohmann::json::parse(test::ReadFile(Golden("qwen2_tied") + "/config.json"));
  j["num_hidden_layers"] = 10000000;
  const std::string cfg = test::TempDir() + "/huge_layers.json";
  test::WriteFile(cfg, j.dump());
  ExpectOneLineError(
      "inspect --synthetic " + cfg,
      {"field 'num_hidden_layers' is 10000000 (at most 4096 supported for synthetic"});
}

TEST(BadInput, DtypeDisagreesWithHeader) {
  // A header that claims more bytes than its dtype and shape hold.
  const std::string d = CopyModel("llama3");
  std::string s = test::ReadFile(d + "/model.safetensors");
  const size_t p = s.find("\"BF16\"");
  ASSERT_NE(p, std::string::npos);
  s.replace(p, 6, "\"F32\" ");
  test::WriteFile(d + "/model.safetensors", s);
  ExpectOneLineError("logits -m " + d + " --ids 1 --out /dev/null", {"needs"});
}

TEST(BadInput, UnknownArchitecture) {
  const std::string d = CopyModel("llama3");
  auto j = nlohmann::json::parse(test::ReadFile(d + "/config.json"));
  j["architectures"] = {"MambaForCausalLM"};
  test::WriteFile(d + "/config.json", j.dump());
  ExpectOneLineError("inspect -m " + d, {"unknown architecture", "MambaForCausalLM"});
}

TEST(BadInput, IdOutsideVocabulary) {
  ExpectOneLineError("logits -m " + Golden("llama3") + " --ids 1,999999 --out /dev/null",
                     {"999999", "vocabulary"});
  ExpectOneLineError("generate -m " + Golden("llama3") + " --ids 1,x -n 2", {"'x'"});
}

TEST(BadInput, UnreadablePath) {
  ExpectOneLineError("logits -m /nonexistent/model --ids 1 --out /dev/null",
                     {"/nonexistent/model"});
  ExpectOneLineError("bench --synthetic no-such-preset", {"no-such-preset"});
}

// A wrongly typed or missing value in config.json or generation_config.json is one line naming
// the file and the key (issue 23): nlohmann's type_error escaped the loaders' catch before and
// named neither ("[json.exception.type_error.302] type must be string, but is number").
TEST(BadInput, WronglyTypedOrMissingJsonValues) {
  const std::string d = CopyModel("llama3");
  const auto config = nlohmann::json::parse(test::ReadFile(d + "/config.json"));
  const auto gen = nlohmann::json::parse(test::ReadFile(d + "/generation_config.json"));
  struct Case {
    const char* file;
    const char* pointer;  // the value replaced, or removed when `value` is null
    nlohmann::json value;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {"config.json", "/architectures/0", 5,
       "field 'architectures[0]' must be a string (got number)"},
      {"config.json", "/hidden_size", "128", "field 'hidden_size' must be an integer (got string)"},
      {"config.json", "/tie_word_embeddings", "no",
       "field 'tie_word_embeddings' must be true or false (got string)"},
      {"config.json",
       "/rope_parameters/rope_theta",
       {1},
       "field 'rope_theta' must be a number (got array)"},
      {"config.json", "/hidden_size", nullptr, "missing field 'hidden_size'"},
      {"config.json", "/num_attention_heads", nullptr, "missing field 'num_attention_heads'"},
      {"generation_config.json", "/eos_token_id/1", "x",
       "field 'eos_token_id[1]' must be an integer (got string)"},
      {"generation_config.json", "/eos_token_id", true,
       "field 'eos_token_id' must be an integer (got boolean)"},
      {"generation_config.json", "/temperature", "hot",
       "field 'temperature' must be a number (got string)"},
      {"generation_config.json", "/top_k", 2.5,
       "field 'top_k' is 2.5 (must be a whole number in range)"},
      {"generation_config.json", "", nlohmann::json::array(),
       "expected a JSON object at the top level"},
  };
  for (const Case& c : cases) {
    const bool is_config = std::string(c.file) == "config.json";
    auto j = is_config ? config : gen;
    const nlohmann::json::json_pointer ptr(c.pointer);
    if (!c.value.is_null())
      j[ptr] = c.value;
    else
      j[ptr.parent_pointer()].erase(ptr.back());
    test::WriteFile(d + "/config.json", (is_config ? j : config).dump());
    test::WriteFile(d + "/generation_config.json", (is_config ? gen : j).dump());
    ExpectOneLineError("logits -m " + d + " --ids 1 --out /dev/null",
                       {d + "/" + c.file + ": ", c.expect});
  }
}

// A million nested '[' in any JSON file of the folder: `run` copied tokenizer_config.json's
// value tree recursively and died of a stack overflow (SIGSEGV); now every file's nesting is
// bounded before it is parsed (edgeseek/internal/core/json_field.h) and this is one line naming it.
TEST(BadInput, DeeplyNestedJsonFiles) {
  const std::string deep = std::string(1000000, '[') + std::string(1000000, ']');
  const std::string tok = test::SourceDir() + "/tests/data/tiny_tokenizer";
  for (const char* file :
       {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"}) {
    const std::string d = test::TempDir() + "/deep_" + file;
    fs::create_directories(d);
    fs::copy(Golden("qwen2_tied"), d, fs::copy_options::recursive);
    fs::copy(tok + "/tokenizer.json", d + "/tokenizer.json");
    fs::copy(tok + "/tokenizer_config.json", d + "/tokenizer_config.json");
    std::string text = test::ReadFile(d + "/" + file);
    text.insert(text.find('{') + 1, "\"zz\": " + deep + ", ");
    test::WriteFile(d + "/" + file, text);
    ExpectOneLineError(
        "run -m " + d + " -p hi -n 1",
        {d + "/" + file, "JSON nested 1000001 levels deep (at most 128 are allowed)"});
  }
}

TEST(BadInput, MalformedConfigJson) {
  const std::string d = CopyModel("llama3");
  test::WriteFile(d + "/config.json", "{\"vocab_size\": 12,");
  ExpectOneLineError("logits -m " + d + " --ids 1 --out /dev/null",
                     {"config.json", "invalid JSON"});
}

#if !ES_ONNX_BUILT
// A build without the ONNX importer (-DES_ONNX=OFF: the aarch64 cross build) names the file and
// says how to get the importer, for every verb that reads a model.
TEST(BadInput, OnnxFileInABuildWithoutOnnx) {
  const std::string dir = test::TempDir(), f = dir + "/model.onnx";
  test::WriteFile(f, "not read");
  for (const std::string& args : {"inspect -m " + f, "logits -m " + f + " --ids 1 --out /dev/null",
                                  "convert " + f + " -o " + dir + "/m.gguf --type f16"})
    ExpectOneLineError(args, {f, "built without ONNX import (-DES_ONNX=OFF)"});
}
#endif

}  // namespace
}  // namespace es
