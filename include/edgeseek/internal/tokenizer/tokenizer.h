// Tokenizer: text <-> token ids exactly as the Hugging Face `tokenizers` library does for a
// tokenizer.json (added tokens, normalizer, pre-tokenizer, BPE model, post-processor, decoder),
// plus the tokenizer_config.json facts that transformers adds on top (bos/eos, add_bos_token,
// add_eos_token, chat_template). StreamDecoder turns a stream of ids into text that only ever
// ends on whole UTF-8 characters.
//
// Thread safety: a Tokenizer is immutable after construction except for an internal word cache
// guarded by a mutex; Encode/Decode may be called from several threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace es {

namespace tok {
struct Pipeline;  // src/tokenizer/pipeline.h: the parsed tokenizer.json components
}  // namespace tok

// Token kinds, as GGUF's tokenizer.ggml.token_type stores them (1 normal, 2 unknown, 3 control,
// 4 user-defined, 5 unused, 6 byte).
enum class TokenType : int32_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6
};

// What GGUF's tokenizer.ggml.* metadata holds for a byte-level BPE ("gpt2") vocabulary; enough to
// build the same Tokenizer a tokenizer.json would give. `pre_split_regex` is the Split pattern
// (Isolated) applied before byte-level mapping; empty means GPT-2's regex.
struct BpeVocabSpec {
  std::vector<std::string> tokens;     // [n_vocab] token strings, index = id
  std::vector<TokenType> token_types;  // [n_vocab] or empty (all normal)
  std::vector<std::string> merges;     // "a b" in rank order
  std::string pre_split_regex;
  int32_t bos_id = -1, eos_id = -1;
  bool add_bos = false, add_eos = false;
  std::string chat_template;
};

class Tokenizer {
 public:
  // path: a folder (tokenizer.json [+ tokenizer_config.json]) or a tokenizer.json file (a
  // tokenizer_config.json next to it is read too). Throws es::Error naming the file at fault.
  static std::unique_ptr<Tokenizer> Load(const std::string& path);
  // From already-parsed JSON (tokenizer.json and optional tokenizer_config.json objects).
  static std::unique_ptr<Tokenizer> FromJson(const nlohmann::json& tokenizer,
                                             const nlohmann::json* config);
  // From GGUF-style vocabulary arrays (byte-level BPE); control tokens become special added
  // tokens, user-defined ones non-special added tokens.
  // A text at several ids (GGUF vocabularies may hold one: issue 23) is kept at its first id
  // for encoding; the later ids decode to it like tokens of their own type.
  static std::unique_ptr<Tokenizer> FromBpeVocab(const BpeVocabSpec& spec);
  ~Tokenizer();
  // Adds `id`, whose `text` an earlier id already has: Encode never gives it (TokenId(text) stays
  // the earlier id); it decodes to `text` as a token of `type` (control and user-defined as added
  // tokens, control ones special; any other type through the model's vocabulary). Throws
  // es::Error when `id` is taken. For loaders of vocabularies that repeat texts (GGUF).
  void AddDuplicateId(int32_t id, const std::string& text, TokenType type);
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Invalid UTF-8 in `text` is replaced like Rust's String::from_utf8_lossy. add_special runs
  // the post-processor's template, then puts BOS first where tokenizer_config.json says
  // add_bos_token and BOS is not already first (transformers 4.x), and EOS last likewise.
  std::vector<int32_t> Encode(std::string_view text, bool add_special = false) const;
  // Ids out of range are skipped (as `tokenizers` does); use IsValid to check first.
  std::string Decode(const std::vector<int32_t>& ids, bool skip_special = false) const;

  int vocab_size() const;                     // highest id + 1, added tokens included
  bool IsValid(int32_t id) const;             // id names a token (model vocab or added)
  int32_t bos_id() const { return bos_id_; }  // -1 when absent
  int32_t eos_id() const { return eos_id_; }
  const std::string& bos_token() const { return bos_token_; }
  const std::string& eos_token() const { return eos_token_; }
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  bool IsSpecial(int32_t id) const;
  std::string TokenText(int32_t id) const;  // raw vocab string, "" if absent
  // The bytes token `id` contributes to decoded text, exact even when they are part of a UTF-8
  // character (byte-level vocabularies); an added token's content; "" if absent. For grammar
  // masks (src/grammar), which walk the vocabulary byte by byte.
  std::string TokenBytes(int32_t id) const;
  int32_t TokenId(std::string_view token) const;                       // -1 if absent
  const std::string& chat_template() const { return chat_template_; }  // "" if none
  const nlohmann::json& config() const;  // tokenizer_config.json (null json if none)

  // The parsed tokenizer.json components (src/tokenizer/pipeline.h), for tests and tools.
  const tok::Pipeline& pipeline() const { return *pipeline_; }

 private:
  Tokenizer();
  void ApplyConfig(const nlohmann::json* config);

  std::unique_ptr<tok::Pipeline> pipeline_;
  std::unique_ptr<nlohmann::json> config_;
  int32_t bos_id_ = -1, eos_id_ = -1;
  std::string bos_token_, eos_token_;
  bool add_bos_ = false, add_eos_ = false;
  std::string chat_template_;
};

// Streaming detokenizer: Push(id) returns the text that became complete (only whole UTF-8
// characters; byte tokens / byte_fallback pieces never split a character); Flush() returns the
// rest (an unfinished character becomes U+FFFD, as Decode would give). Works like
// `tokenizers`' DecodeStream: it decodes a window of recent ids with one id of left context, so
// decoders that treat the first token specially (Metaspace) give the same text as Decode.
class StreamDecoder {
 public:
  StreamDecoder(const Tokenizer& tokenizer, bool skip_special);
  std::string Push(int32_t id);
  std::string Flush();
  void Reset();

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_;
  std::vector<int32_t> ids_;  // context ids [0, prefix_index_) and pending ids after
  std::string prefix_;        // Decode(ids_) at the last emission
  size_t prefix_index_ = 0;
};

}  // namespace es
