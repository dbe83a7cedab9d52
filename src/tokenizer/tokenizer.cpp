// Tokenizer: loading tokenizer.json / tokenizer_config.json (or GGUF-style vocab arrays) into a
// Pipeline, and the public encode/decode entry points.
#include "edgeseek/internal/tokenizer/tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "byte_level.h"
#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/core/json_field.h"
#include "pipeline.h"
#include "utf8.h"

namespace es {

using nlohmann::json;

namespace {

json ReadJsonFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) Fail(path, ": cannot open");
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  json_field::CheckDepth(text, path);
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    Fail(path, ": malformed JSON at byte ", e.byte, ": ", e.what());
  } catch (const json::exception& e) {  // a number out of range (found by fuzzing, issue 21)
    Fail(path, ": malformed JSON: ", e.what());
  }
}

std::vector<std::pair<std::string, std::string>> ParseMerges(const json& m) {
  if (!m.is_array()) Fail("tokenizer.json model.merges: expected an array");
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(m.size());
  for (size_t r = 0; r < m.size(); ++r) {
    const json& e = m[r];
    if (e.is_string()) {
      const std::string& s = e.get_ref<const std::string&>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        Fail("tokenizer.json model.merges[", r, "]: expected \"a b\", got '", s, "'");
      merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      merges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
    } else {
      Fail("tokenizer.json model.merges[", r, "]: expected \"a b\" or [\"a\", \"b\"]");
    }
  }
  return merges;
}

using json_field::As;
using json_field::Opt;

std::string OptString(const json& j, const char* key, std::string_view where) {
  return Opt<std::string>(j, key, "", where);
}

// bos_token / eos_token in tokenizer_config.json: a string, {"content": ...}, or null.
std::string ConfigToken(const json& cfg, const char* key) {
  auto it = cfg.find(key);
  if (it == cfg.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    return (*it)["content"].get<std::string>();
  Fail("tokenizer_config.json: '", key, "' must be a string or an object with 'content'");
}

}  // namespace

Tokenizer::Tokenizer()
    : pipeline_(std::make_unique<tok::Pipeline>()), config_(std::make_unique<json>()) {}
Tokenizer::~Tokenizer() = default;

std::unique_ptr<Tokenizer> Tokenizer::Load(const std::string& path) {
  namespace fs = std::filesystem;
  fs::path tok_path = path, cfg_path;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    tok_path = fs::path(path) / "tokenizer.json";
    if (!fs::exists(tok_path, ec)) Fail(path, ": no tokenizer.json in this folder");
  } else if (!fs::exists(path, ec)) {
    Fail(path, ": no such file or folder");
  }
  cfg_path = tok_path.parent_path() / "tokenizer_config.json";
  const json tok = ReadJsonFile(tok_path.string());
  json cfg;
  const bool has_cfg = fs::exists(cfg_path, ec);
  if (has_cfg) cfg = ReadJsonFile(cfg_path.string());
  try {
    return FromJson(tok, has_cfg ? &cfg : nullptr);
  } catch (const Error& e) {
    Fail(tok_path.string(), ": ", e.what());
  }
}

std::unique_ptr<Tokenizer> Tokenizer::FromJson(const json& j, const json* config) {
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  tok::Pipeline& p = *t->pipeline_;
  try {
    if (!j.is_object()) Fail("tokenizer.json: expected a JSON object");
    if (!j.contains("model") || !j["model"].is_object()) Fail("tokenizer.json: missing 'model'");
    const json& m = j["model"];
    const std::string type = OptString(m, "type", "tokenizer.json model");
    if (!type.empty() && type != "BPE")
      Fail("tokenizer.json model: unsupported model type '", type, "'");
    if (type.empty() && !m.contains("merges"))
      Fail("tokenizer.json model: no 'type' and no 'merges' (only BPE models are supported)");
    if (!m.contains("vocab") || !m["vocab"].is_object())
      Fail("tokenizer.json model: missing 'vocab'");
    // Tables indexed by id are as long as the highest id, so ids are bounded by the number of
    // tokens the file holds (real vocabularies are dense: 0..n-1, added tokens right after);
    // an id of 2^40 was truncated, one of 2^31-1 would have allocated 64 GB.
    const size_t n_added =
        j.contains("added_tokens") && j["added_tokens"].is_array() ? j["added_tokens"].size() : 0;
    const int64_t id_limit =
        std::min<int64_t>(2 * int64_t(m["vocab"].size() + n_added) + 1024, INT32_MAX);
    auto check_id = [&](const json& v, const std::string& what) {
      if (!v.is_number_integer()) Fail("tokenizer.json ", what, ": id must be an integer");
      const bool neg = v.is_number_integer() && !v.is_number_unsigned() && v.get<int64_t>() < 0;
      if (neg) Fail("tokenizer.json ", what, ": negative id ", v.get<int64_t>());
      const uint64_t id = v.get<uint64_t>();
      if (id >= uint64_t(id_limit))
        Fail("tokenizer.json ", what, ": id ", id, " is out of range (the file holds ",
             m["vocab"].size(), " vocabulary entries and ", n_added,
             " added tokens; ids must be below ", id_limit, ")");
      return int32_t(id);
    };
    tok::Vocab vocab;
    vocab.reserve(m["vocab"].size());
    for (auto it = m["vocab"].begin(); it != m["vocab"].end(); ++it)
      vocab.emplace(it.key(), check_id(it.value(), "model.vocab['" + it.key() + "']"));
    tok::BpeOptions opt;
    const std::string_view wm = "tokenizer.json model";
    opt.unk_token = OptString(m, "unk_token", wm);
    opt.continuing_subword_prefix = OptString(m, "continuing_subword_prefix", wm);
    opt.end_of_word_suffix = OptString(m, "end_of_word_suffix", wm);
    opt.fuse_unk = Opt<bool>(m, "fuse_unk", false, wm);
    opt.byte_fallback = Opt<bool>(m, "byte_fallback", false, wm);
    opt.ignore_merges = Opt<bool>(m, "ignore_merges", false, wm);
    if (Opt<double>(m, "dropout", 0.0, wm) > 0)
      Fail("tokenizer.json model.dropout: BPE dropout is not supported for inference");
    const json empty_merges = json::array();
    p.model = std::make_unique<tok::BpeModel>(
        std::move(vocab), ParseMerges(m.contains("merges") ? m["merges"] : empty_merges), opt,
        "tokenizer.json model");

    const json null_json;
    auto field = [&](const char* k) -> const json& { return j.contains(k) ? j[k] : null_json; };
    // The components read their fields through json_field with their path ("tokenizer.json
    // pre_tokenizer.pretokenizers[1]: field 'invert' must be true or false (got string)"); a
    // nlohmann exception escaping one anyway still names its section.
    auto make = [&](auto make_fn, const char* k) {
      const std::string where = std::string("tokenizer.json ") + k;
      try {
        return make_fn(field(k), where);
      } catch (const json::exception& e) {
        Fail(where, ": a field has the wrong type or is missing (", e.what(), ")");
      }
    };
    p.normalizer = make(tok::MakeNormalizer, "normalizer");
    p.pre_tokenizer = make(tok::MakePreTokenizer, "pre_tokenizer");
    p.post_processor = make(tok::MakePostProcessor, "post_processor");
    p.decoder = make(tok::MakeDecoder, "decoder");

    std::vector<tok::AddedToken> added;
    int32_t max_id = p.model->max_id();
    if (j.contains("added_tokens") && !j["added_tokens"].is_null()) {
      const json& a = j["added_tokens"];
      if (!a.is_array()) Fail("tokenizer.json added_tokens: expected an array");
      for (size_t i = 0; i < a.size(); ++i) {
        const json& e = a[i];
        if (!e.is_object() || !e.contains("content") || !e["content"].is_string())
          Fail("tokenizer.json added_tokens[", i, "]: missing 'content'");
        const std::string wa = "tokenizer.json added_tokens[" + std::to_string(i) + "]";
        tok::AddedToken at;
        at.content = e["content"].get<std::string>();
        at.special = Opt<bool>(e, "special", false, wa);
        at.id = e.contains("id") ? check_id(e["id"], "added_tokens[" + std::to_string(i) + "]")
                                 : p.model->TokenToId(at.content);
        if (at.id < 0) at.id = ++max_id;
        at.lstrip = Opt<bool>(e, "lstrip", false, wa);
        at.rstrip = Opt<bool>(e, "rstrip", false, wa);
        at.single_word = Opt<bool>(e, "single_word", false, wa);
        at.normalized = Opt<bool>(e, "normalized", !at.special, wa);
        max_id = std::max(max_id, at.id);
        added.push_back(std::move(at));
      }
    }
    p.added.Build(std::move(added), p.normalizer.get());
    p.vocab_size = max_id + 1;
  } catch (const json::exception& e) {
    Fail("tokenizer.json: unexpected JSON structure: ", e.what());
  }
  t->ApplyConfig(config);
  return t;
}

std::unique_ptr<Tokenizer> Tokenizer::FromBpeVocab(const BpeVocabSpec& spec) {
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  tok::Pipeline& p = *t->pipeline_;
  tok::Vocab vocab;
  std::vector<tok::AddedToken> added;
  std::vector<size_t> duplicates;  // ids whose text an earlier id has
  for (size_t i = 0; i < spec.tokens.size(); ++i) {
    if (!vocab.emplace(spec.tokens[i], int32_t(i)).second) {
      duplicates.push_back(i);
      continue;
    }
    const TokenType ty = i < spec.token_types.size() ? spec.token_types[i] : TokenType::kNormal;
    if (ty == TokenType::kControl || ty == TokenType::kUserDefined) {
      tok::AddedToken at;
      at.content = spec.tokens[i];
      at.id = int32_t(i);
      at.special = ty == TokenType::kControl;
      added.push_back(std::move(at));
    }
  }
  std::vector<std::pair<std::string, std::string>> merges;
  for (size_t r = 0; r < spec.merges.size(); ++r) {
    const size_t sp = spec.merges[r].find(' ');
    if (sp == std::string::npos) Fail("tokenizer.ggml.merges[", r, "]: expected \"a b\"");
    merges.emplace_back(spec.merges[r].substr(0, sp), spec.merges[r].substr(sp + 1));
  }
  p.model = std::make_unique<tok::BpeModel>(std::move(vocab), merges, tok::BpeOptions{},
                                            "tokenizer.ggml");
  p.pre_tokenizer = tok::MakeByteLevelSplit(spec.pre_split_regex);
  p.decoder = tok::MakeByteLevelDecoder();
  p.added.Build(std::move(added), nullptr);
  p.vocab_size = int32_t(spec.tokens.size());
  for (size_t i : duplicates)
    t->AddDuplicateId(int32_t(i), spec.tokens[i],
                      i < spec.token_types.size() ? spec.token_types[i] : TokenType::kNormal);
  t->bos_id_ = spec.bos_id;
  t->eos_id_ = spec.eos_id;
  if (spec.bos_id >= 0) t->bos_token_ = t->TokenText(spec.bos_id);
  if (spec.eos_id >= 0) t->eos_token_ = t->TokenText(spec.eos_id);
  t->add_bos_ = spec.add_bos && spec.bos_id >= 0;
  t->add_eos_ = spec.add_eos && spec.eos_id >= 0;
  t->chat_template_ = spec.chat_template;
  return t;
}

void Tokenizer::AddDuplicateId(int32_t id, const std::string& text, TokenType type) {
  tok::Pipeline& p = *pipeline_;
  if (p.added.ById(id) || p.model->IdToToken(id))
    Fail("vocabulary: id ", id, " ('", text, "') is already taken by '", TokenText(id), "'");
  if (type == TokenType::kControl || type == TokenType::kUserDefined) {
    tok::AddedToken at;
    at.content = text;
    at.id = id;
    at.special = type == TokenType::kControl;
    p.added.AddDecodeOnly(std::move(at));
  } else {
    p.model->AddAlias(id, text);
  }
  p.vocab_size = std::max(p.vocab_size, id + 1);
}

void Tokenizer::ApplyConfig(const json* config) {
  if (!config) return;
  if (!config->is_object()) Fail("tokenizer_config.json: expected a JSON object");
  *config_ = *config;
  bos_token_ = ConfigToken(*config, "bos_token");
  eos_token_ = ConfigToken(*config, "eos_token");
  bos_id_ = bos_token_.empty() ? -1 : TokenId(bos_token_);
  eos_id_ = eos_token_.empty() ? -1 : TokenId(eos_token_);
  auto flag = [&](const char* k) { return Opt<bool>(*config, k, false, "tokenizer_config.json"); };
  add_bos_ = flag("add_bos_token") && bos_id_ >= 0;
  add_eos_ = flag("add_eos_token") && eos_id_ >= 0;
  auto ct = config->find("chat_template");
  if (ct != config->end()) {
    if (ct->is_string()) {
      chat_template_ = ct->get<std::string>();
    } else if (ct->is_array()) {  // [{"name": "default", "template": ...}, ...]
      std::vector<std::pair<std::string, std::string>> named;
      for (size_t i = 0; i < ct->size(); ++i) {
        const std::string w = "tokenizer_config.json chat_template[" + std::to_string(i) + "]";
        named.emplace_back(json_field::Get<std::string>((*ct)[i], "name", w),
                           json_field::Get<std::string>((*ct)[i], "template", w));
      }
      for (const auto& [name, text] : named)
        if (name == "default") chat_template_ = text;
      if (chat_template_.empty() && !named.empty()) chat_template_ = named[0].second;
    } else if (!ct->is_null()) {
      Fail(
          "tokenizer_config.json: field 'chat_template' must be a string or a list of "
          "{\"name\", \"template\"} (got ",
          ct->type_name(), ")");
    }
  }
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, bool add_special) const {
  std::vector<int32_t> ids;
  if (tok::IsValidUtf8(text)) {
    ids = pipeline_->EncodeNoSpecial(text);
  } else {
    ids = pipeline_->EncodeNoSpecial(tok::ToValidUtf8(text));
  }
  if (!add_special) return ids;
  if (pipeline_->post_processor) pipeline_->post_processor->Process(&ids);
  // transformers 4.x on top of the post-processor (the rule tests/golden/tokenizer/meta.json
  // states): BOS first if add_bos_token and it is not already first, EOS likewise at the end.
  if (add_bos_ && (ids.empty() || ids.front() != bos_id_)) ids.insert(ids.begin(), bos_id_);
  if (add_eos_ && (ids.empty() || ids.back() != eos_id_)) ids.push_back(eos_id_);
  return ids;
}

std::string Tokenizer::Decode(const std::vector<int32_t>& ids, bool skip_special) const {
  return pipeline_->Decode(ids, skip_special);
}

int Tokenizer::vocab_size() const { return pipeline_->vocab_size; }

bool Tokenizer::IsValid(int32_t id) const { return pipeline_->TokenString(id) != nullptr; }

bool Tokenizer::IsSpecial(int32_t id) const {
  const tok::AddedToken* t = pipeline_->added.ById(id);
  return t && t->special;
}

std::string Tokenizer::TokenText(int32_t id) const {
  const std::string* s = pipeline_->TokenString(id);
  return s ? *s : std::string();
}

std::string Tokenizer::TokenBytes(int32_t id) const {
  if (const tok::AddedToken* t = pipeline_->added.ById(id)) return t->content;
  const std::string* s = pipeline_->model->IdToToken(id);
  if (!s) return "";
  if (!pipeline_->decoder || !pipeline_->decoder->byte_level()) return Decode({id});
  std::string bytes;
  for (size_t i = 0; i < s->size();) {
    const int b = tok::UnicodeToByte(tok::NextCodePoint(*s, &i));
    if (b < 0) return *s;  // a character outside the byte map: the token's own bytes
    bytes.push_back(static_cast<char>(b));
  }
  return bytes;
}

int32_t Tokenizer::TokenId(std::string_view token) const {
  const int32_t a = pipeline_->added.IdOf(token);
  return a >= 0 ? a : pipeline_->model->TokenToId(token);
}

const json& Tokenizer::config() const { return *config_; }

// ---- StreamDecoder ------------------------------------------------------------------------

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(tokenizer), skip_special_(skip_special) {}

void StreamDecoder::Reset() {
  ids_.clear();
  prefix_.clear();
  prefix_index_ = 0;
}

// Text ends inside a character: the lossy decode gave U+FFFD at the end.
static bool EndsIncomplete(const std::string& s) {
  return s.size() >= 3 && s.compare(s.size() - 3, 3, "\xEF\xBF\xBD") == 0;
}

std::string StreamDecoder::Push(int32_t id) {
  ids_.push_back(id);
  const std::string text = tokenizer_.Decode(ids_, skip_special_);
  if (text.size() <= prefix_.size() || EndsIncomplete(text)) return "";
  std::string fresh =
      text.compare(0, prefix_.size(), prefix_) == 0 ? text.substr(prefix_.size()) : text;
  // Keep the ids from the last emission on as left context for the next window.
  const size_t new_prefix_index = ids_.size() - prefix_index_;
  ids_.erase(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(prefix_index_));
  prefix_ = tokenizer_.Decode(ids_, skip_special_);
  prefix_index_ = new_prefix_index;
  return fresh;
}

std::string StreamDecoder::Flush() {
  const std::string text = tokenizer_.Decode(ids_, skip_special_);
  std::string rest;
  if (text.size() > prefix_.size() && text.compare(0, prefix_.size(), prefix_) == 0)
    rest = text.substr(prefix_.size());
  else if (text.compare(0, prefix_.size(), prefix_) != 0)
    rest = text;
  Reset();
  return rest;
}

}  // namespace es
