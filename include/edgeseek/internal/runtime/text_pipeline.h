// The one text pipeline between token ids and a user, shared by the CLI (`run`, `chat`), the
// server and the C API (include/edgeseek/edgeseek.h):
//
//   ChatText      — a model's text side: tokenizer, chat template (tokenizer_config.json's, with
//                   its bos/eos tokens), EOS ids (generation_config.json's plus the tokenizer's),
//                   whether the model knows reasoning tags (</think>);
//   TemplateOpensReasoning — the one rule for "the template already opened <think>" (R1's
//                   template ends its generation prompt with "<think>\n"): the answer then
//                   starts inside the reasoning block and only the closing tag comes;
//   TextFilter    — per request, on detokenized text: stop strings, then the reasoning split;
//   TokenText     — per request, on token ids: StreamDecoder (UTF-8 complete, specials skipped)
//                   feeding a TextFilter.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "edgeseek/internal/runtime/text_stream.h"
#include "edgeseek/internal/tokenizer/chat_template.h"
#include "edgeseek/internal/tokenizer/tokenizer.h"

namespace es {

// Whether a rendered chat prompt ends (trailing whitespace aside) with "<think>".
bool TemplateOpensReasoning(std::string_view prompt);

class ChatText {
 public:
  // `model_eos_ids`: the model's generation_config EOS ids (the tokenizer's EOS is added). `name`
  // names the model in errors. Throws es::Error when the chat template does not parse.
  ChatText(std::shared_ptr<const Tokenizer> tokenizer, std::vector<int32_t> model_eos_ids,
           const std::string& name);

  const Tokenizer& tokenizer() const { return *tok_; }
  std::vector<int32_t> Encode(std::string_view text, bool add_special) const {
    return tok_->Encode(text, add_special);
  }
  bool has_template() const { return template_ != nullptr; }
  const std::string& template_source() const { return source_; }
  // Renders `messages` ([{role, content, ...}]) with the generation prompt; tools and kwargs
  // may be null. Throws es::Error without a template or when the template fails.
  std::string RenderChat(const nlohmann::ordered_json& messages,
                         const nlohmann::ordered_json& tools, const nlohmann::ordered_json& kwargs,
                         bool add_generation_prompt = true) const;
  const std::vector<int32_t>& eos_ids() const { return eos_ids_; }
  bool IsEos(int32_t id) const;
  bool has_reasoning_tags() const { return reasoning_; }

 private:
  std::shared_ptr<const Tokenizer> tok_;
  std::unique_ptr<ChatTemplate> template_;
  std::string source_, bos_, eos_;
  std::vector<int32_t> eos_ids_;
  bool reasoning_ = false;
};

class TextFilter {
 public:
  // `reasoning`: split <think>…</think> off (else everything is content); `start_in_reasoning`:
  // the template opened the block (TemplateOpensReasoning).
  TextFilter(std::vector<std::string> stops, bool reasoning, bool start_in_reasoning);
  // Appends what can no longer be part of a marker. Returns true once a stop string matched:
  // the text before it was emitted, the rest is dropped; call Finish then.
  bool Feed(std::string_view text, std::string* reasoning, std::string* content);
  // End of stream: what was held back (no stop string matched) is emitted.
  void Finish(std::string* reasoning, std::string* content);
  bool stopped() const { return stop_.stopped(); }

 private:
  StopMatcher stop_;
  ReasoningSplitter split_;
};

class TokenText {
 public:
  TokenText(const Tokenizer& tokenizer, std::vector<std::string> stops, bool reasoning,
            bool start_in_reasoning);
  // One generated id (EOS ids are the caller's to drop). Returns true once a stop string matched.
  bool Push(int32_t id, std::string* reasoning, std::string* content);
  // End of stream (EOS, length or stop): emits the held-back tail.
  void Finish(std::string* reasoning, std::string* content);
  bool stopped() const { return filter_.stopped(); }

 private:
  StreamDecoder dec_;
  TextFilter filter_;
};

}  // namespace es
