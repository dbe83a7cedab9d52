// Tokenizer test helpers (see tok_test_util.h).
#include "tok_test_util.h"

#include <filesystem>
#include <map>
#include <mutex>

#include "edgeseek/internal/core/error.h"
#include "test_util.h"
#include "tokenizer/byte_level.h"

namespace es::test {

std::string RealTokenizerDir(const std::string& name) {
  return SourceDir() + "/.cache/tokenizers/" + name;
}

const Tokenizer& RealTokenizer(const std::string& name) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = cache[name];
  if (!slot) {
    const std::string dir = RealTokenizerDir(name);
    if (!std::filesystem::exists(dir + "/tokenizer.json"))
      Fail(dir, "/tokenizer.json is missing: run scripts/fetch_test_data.sh");
    slot = Tokenizer::Load(dir);
  }
  return *slot;
}

std::string Base64Decode(const std::string& s) {
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  int buf = 0, bits = 0;
  for (const char c : s) {
    const int v = val(c);
    if (v < 0) continue;
    buf = (buf << 6) | v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((buf >> bits) & 0xFF));
    }
  }
  return out;
}

std::vector<nlohmann::json> ReadJsonl(const std::string& path) {
  const std::string text = ReadFile(path);
  if (text.empty()) Fail(path, ": missing or empty");
  std::vector<nlohmann::json> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    if (nl > pos) out.push_back(nlohmann::json::parse(text.substr(pos, nl - pos)));
    pos = nl + 1;
  }
  return out;
}

nlohmann::json ByteLevelJson(const std::vector<std::string>& merges, const nlohmann::json& extra) {
  nlohmann::json vocab = nlohmann::json::object();
  int id = 0;
  for (int b = 0; b < 256; ++b) vocab[tok::BytesToUnicode(std::string(1, char(b)))] = id++;
  for (const auto& m : merges) {
    const size_t sp = m.find(' ');
    const std::string merged = m.substr(0, sp) + m.substr(sp + 1);
    if (!vocab.contains(merged)) vocab[merged] = id++;
  }
  nlohmann::json j = {
      {"version", "1.0"},
      {"added_tokens", nlohmann::json::array()},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
  for (auto it = extra.begin(); it != extra.end(); ++it) j[it.key()] = it.value();
  return j;
}

std::unique_ptr<Tokenizer> FromJsonText(const std::string& tokenizer_json,
                                        const std::string& config_json) {
  const auto t = nlohmann::json::parse(tokenizer_json);
  if (config_json.empty()) return Tokenizer::FromJson(t, nullptr);
  const auto c = nlohmann::json::parse(config_json);
  return Tokenizer::FromJson(t, &c);
}

}  // namespace es::test
