// The tokenizer a GGUF file carries: tokenizer.ggml.model "gpt2" (byte-level BPE: tokens,
// token_type, merges, bos/eos ids, add_bos/add_eos, tokenizer.ggml.pre, tokenizer.chat_template).
//
// The vocabulary is turned into the tokenizer.json structure it came from and handed to
// Tokenizer::FromJson, so a GGUF file tokenizes exactly as the Hugging Face folder would:
//  - tokenizer.ggml.pre names the pre-tokenizer: a *sequence* of Isolated regex splits (the
//    DeepSeek tokenizers have three or five, which Tokenizer::FromBpeVocab's single regex cannot
//    express), then the byte-level map;
//  - Qwen2-family vocabularies ("qwen2", "deepseek-r1-qwen") carry an NFC normalizer in
//    tokenizer.json; llama-bpe has ignore_merges (a word found whole in the vocabulary is one
//    token);
//  - token_type CONTROL -> special added token, USER_DEFINED -> non-special added token.
// The regexes are those of the published tokenizer.json files (also in llama.cpp's
// llama-vocab.cpp). Code points that Unicode normalization would rewrite (U+1F7D, U+1FBE, U+1FD3,
// U+1FDB, U+2126, U+212A) are written as \x{...} escapes so that no editor or tool can silently
// change them.
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "edgeseek/internal/core/error.h"
#include "gguf_model.h"

namespace es {

using nlohmann::json;

namespace {

// GPT-2-style contractions, letters, digits one at a time (Qwen2).
constexpr const char* kQwen2Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// Llama 3: digits in runs of up to three.
constexpr const char* kLlama3Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

}  // namespace

std::vector<std::string> GgufPreTokenizerRegexes(const std::string& pre, const std::string& where) {
  if (pre == "default" || pre == "gpt2" || pre == "gpt-2") return {};
  if (pre == "qwen2" || pre == "deepseek-r1-qwen") return {kQwen2Regex};
  if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3") return {kLlama3Regex};
  if (pre == "deepseek-v3")
    return {"\\p{N}{1,3}", "[一-龥぀-ゟ゠-ヿ]+",
            "[!\"#$%&'()*+,\\-./"
            ":;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| "
            "?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"};
  // clang-format 14 measures these UTF-8 literals in bytes and splits them again on every run.
  // clang-format off
  if (pre == "deepseek-llm")
    return {"[\r\n]",
            "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-"
            "ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-"
            "ὗὙὛὝὟ-\\x{1F7D}ᾀ-ᾴᾶ-ᾼ\\x{1FBE}ῂ-ῄῆ-ῌῐ-\\x{1FD3}ῖ-\\x{1FDB}ῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤ\\x{2126}"
            "ℨ\\x{212A}-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-"
            "ﬆﬓ-"
            "ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
            "\\s?[!-/:-~！-／：-～‘-‟　-。]+",
            "\\s+$",
            "[一-龥ࠀ-一가-퟿]+",
            "\\p{N}+"};
  // clang-format on
  Fail(where, ": tokenizer.ggml.pre '", pre,
       "' is not supported (supported: default, gpt2, qwen2, deepseek-r1-qwen, llama-bpe, "
       "deepseek-v3, "
       "deepseek-llm)");
}

namespace {

// The ByteLevel pre-tokenizer (bytes to printable characters, no regex) and decoder.
json ByteLevelJson() {
  return {{"type", "ByteLevel"},
          {"add_prefix_space", false},
          {"trim_offsets", false},
          {"use_regex", false}};
}

// tokenizer.json's pre_tokenizer: GPT-2's ByteLevel split when the GGUF names no regexes, else
// each regex isolating its matches, then ByteLevel.
json PreTokenizerJson(const std::vector<std::string>& regexes) {
  const json byte_level = ByteLevelJson();
  json pre_tok;
  if (regexes.empty()) {
    pre_tok = {{"type", "ByteLevel"},
               {"add_prefix_space", false},
               {"trim_offsets", false},
               {"use_regex", true}};
  } else {
    json seq = json::array();
    for (const std::string& r : regexes)
      seq.push_back({{"type", "Split"},
                     {"pattern", {{"Regex", r}}},
                     {"behavior", "Isolated"},
                     {"invert", false}});
    seq.push_back(byte_level);
    pre_tok = {{"type", "Sequence"}, {"pretokenizers", seq}};
  }
  return pre_tok;
}

// tokenizer_config.json from the GGUF keys: special tokens by text, add_bos/add_eos, the chat
// template; a Llama 3 vocabulary's BOS goes into `tj` as a post-processor.
json TokenizerConfigJson(const GgufFile& f, const std::vector<std::string>& tokens,
                         const std::string& pre, json* tj) {
  json config = json::object();
  auto id_key = [&](std::string_view k) -> int64_t {
    if (!f.Has(k)) return -1;
    const int64_t id = int64_t(f.GetU32(k));
    ES_CHECK(id < int64_t(tokens.size()), f.path(), ": key ", k, " is ", id,
             " but the vocabulary has ", tokens.size(), " tokens");
    return id;
  };
  const int64_t bos = id_key(kKeyTokenizerBosId), eos = id_key(kKeyTokenizerEosId);
  id_key(kKeyTokenizerPadId);
  if (bos >= 0) config["bos_token"] = tokens[size_t(bos)];
  if (eos >= 0) config["eos_token"] = tokens[size_t(eos)];
  // llama.cpp adds BOS by default for llama-bpe vocabularies; elsewhere only when the key says so.
  // Llama 3's tokenizer.json adds it by a TemplateProcessing post-processor, i.e. always (also
  // before a BOS the text already holds, as llama.cpp does); tokenizer_config's add_bos_token
  // (DeepSeek) adds it only when the ids do not start with it.
  const bool llama3 = pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3";
  const bool add_bos = f.GetBoolOr(kKeyTokenizerAddBos, llama3) && bos >= 0;
  if (add_bos && llama3) {
    const std::string& b = tokens[size_t(bos)];
    const json bos_item = {{"SpecialToken", {{"id", b}, {"type_id", 0}}}};
    (*tj)["post_processor"] = {
        {"type", "TemplateProcessing"},
        {"single", {bos_item, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"pair",
         {bos_item,
          {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
          bos_item,
          {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}}},
        {"special_tokens", {{b, {{"id", b}, {"ids", {bos}}, {"tokens", {b}}}}}}};
    config["add_bos_token"] = false;
  } else {
    config["add_bos_token"] = add_bos;
  }
  config["add_eos_token"] = f.GetBoolOr(kKeyTokenizerAddEos, false);
  if (f.Has(kKeyTokenizerChatTemplate))
    config["chat_template"] = f.GetString(kKeyTokenizerChatTemplate);
  return config;
}

}  // namespace

std::unique_ptr<Tokenizer> GgufTokenizer(const GgufFile& f, std::string* why) {
  if (!f.Has(kKeyTokenizerModel)) {
    *why = f.path() + " has no tokenizer (no key " + std::string(kKeyTokenizerModel) + ")";
    return nullptr;
  }
  const std::string& model = f.GetString(kKeyTokenizerModel);
  if (model != "gpt2") {
    *why = f.path() + ": tokenizer model '" + model + "' (" + std::string(kKeyTokenizerModel) +
           ") is not supported (supported: gpt2, byte-level BPE); give --tokenizer";
    return nullptr;
  }
  const std::string pre = f.GetStringOr(kKeyTokenizerPre, "default");
  std::vector<std::string> regexes;
  try {
    regexes = GgufPreTokenizerRegexes(pre, f.path());
  } catch (const Error& e) {
    *why = e.what();
    return nullptr;
  }
  const std::vector<std::string>& tokens = f.GetStringArray(kKeyTokenizerTokens);
  std::vector<int64_t> types;
  if (f.Has(kKeyTokenizerTokenType)) {
    types = f.GetIntArray(kKeyTokenizerTokenType);
    ES_CHECK(types.size() == tokens.size(), f.path(), ": key ", kKeyTokenizerTokenType, " has ",
             types.size(), " entries but ", kKeyTokenizerTokens, " has ", tokens.size());
  }
  const std::vector<std::string>& merges = f.GetStringArray(kKeyTokenizerMerges);
  for (size_t r = 0; r < merges.size(); ++r)
    ES_CHECK(merges[r].find(' ') != std::string::npos, f.path(), ": ", kKeyTokenizerMerges, "[", r,
             "] '", merges[r], "' is not \"a b\"");

  // tokenizer.json: model, added tokens, normalizer, pre-tokenizer, decoder.
  json vocab = json::object();
  json added = json::array();
  // A text at several ids (converters pad vocabularies with repeats; llama.cpp's loader asserts
  // on them, transformers' GGUF converter keeps the last): the first id is the one encoding
  // gives, also over a later added token of that text; the later ids are added after the
  // tokenizer is built, decoding to their text (issue 23).
  std::vector<size_t> duplicates;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (vocab.contains(tokens[i])) {
      duplicates.push_back(i);
      continue;
    }
    vocab[tokens[i]] = int64_t(i);
    const int64_t ty = types.empty() ? int64_t(GgufTokenType::kNormal) : types[i];
    if (ty == int64_t(GgufTokenType::kControl) || ty == int64_t(GgufTokenType::kUserDefined)) {
      const bool special = ty == int64_t(GgufTokenType::kControl);
      added.push_back({{"id", int64_t(i)},
                       {"content", tokens[i]},
                       {"special", special},
                       {"normalized", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"single_word", false}});
    }
  }
  const json byte_level = ByteLevelJson();
  const json pre_tok = PreTokenizerJson(regexes);
  json tj = {{"version", "1.0"},
             {"added_tokens", added},
             {"normalizer",
              pre == "qwen2" || pre == "deepseek-r1-qwen" ? json{{"type", "NFC"}} : json(nullptr)},
             {"pre_tokenizer", pre_tok},
             {"post_processor", nullptr},
             {"decoder", byte_level},
             {"model",
              {{"type", "BPE"},
               {"vocab", std::move(vocab)},
               {"merges", merges},
               {"ignore_merges", regexes.size() == 1 && regexes[0] == kLlama3Regex}}}};

  // tokenizer_config.json: special tokens by text, add_bos/add_eos, chat template.
  json config = TokenizerConfigJson(f, tokens, pre, &tj);
  try {
    std::unique_ptr<Tokenizer> t = Tokenizer::FromJson(tj, &config);
    for (size_t i : duplicates)
      t->AddDuplicateId(int32_t(i), tokens[i],
                        types.empty() ? TokenType::kNormal : TokenType(types[i]));
    return t;
  } catch (const Error& e) {
    Fail(f.path(), ": tokenizer.ggml.*: ", e.what());
  }
}

}  // namespace es
