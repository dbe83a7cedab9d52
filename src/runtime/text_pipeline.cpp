// The text pipeline of a model and of one request (edgeseek/internal/runtime/text_pipeline.h).
#include "edgeseek/internal/runtime/text_pipeline.h"

#include <algorithm>

#include "edgeseek/internal/core/error.h"

namespace es {

bool TemplateOpensReasoning(std::string_view prompt) {
  constexpr std::string_view kOpen = "<think>";
  const size_t end = prompt.find_last_not_of(" \n\r\t");
  if (end == std::string_view::npos || end + 1 < kOpen.size()) return false;
  return prompt.substr(end + 1 - kOpen.size(), kOpen.size()) == kOpen;
}

// ---- ChatText ---------------------------------------------------------------------------------
ChatText::ChatText(std::shared_ptr<const Tokenizer> tokenizer, std::vector<int32_t> model_eos_ids,
                   const std::string& name)
    : tok_(std::move(tokenizer)), eos_ids_(std::move(model_eos_ids)) {
  ES_CHECK(tok_, "model '", name, "' has no tokenizer");
  // tokenizer_config.json's template and special tokens first (as transformers), else what the
  // tokenizer itself carries (a GGUF's tokenizer.chat_template).
  const nlohmann::json& cfg = tok_->config();
  TemplateConfig tc;
  if (!cfg.is_null()) tc = ReadTemplateConfig(cfg);
  source_ = !tc.chat_template.empty() ? tc.chat_template : tok_->chat_template();
  bos_ = !tc.bos_token.empty() ? tc.bos_token : tok_->bos_token();
  eos_ = !tc.eos_token.empty() ? tc.eos_token : tok_->eos_token();
  if (!source_.empty()) {
    try {
      template_ = std::make_unique<ChatTemplate>(source_);
    } catch (const Error& e) {
      Fail("model '", name, "': ", e.what());
    }
  }
  reasoning_ = source_.find("</think>") != std::string::npos || tok_->TokenId("</think>") >= 0;
  if (tok_->eos_id() >= 0 && !IsEos(tok_->eos_id())) eos_ids_.push_back(tok_->eos_id());
}

std::string ChatText::RenderChat(const nlohmann::ordered_json& messages,
                                 const nlohmann::ordered_json& tools,
                                 const nlohmann::ordered_json& kwargs,
                                 bool add_generation_prompt) const {
  ES_CHECK(template_, "this model has no chat template");
  ChatTemplateInputs in;
  in.messages = messages;
  in.add_generation_prompt = add_generation_prompt;
  in.tools = tools;
  in.extra = kwargs;
  in.bos_token = bos_;
  in.eos_token = eos_;
  return template_->Render(in);
}

bool ChatText::IsEos(int32_t id) const {
  return std::find(eos_ids_.begin(), eos_ids_.end(), id) != eos_ids_.end();
}

// ---- TextFilter -------------------------------------------------------------------------------
TextFilter::TextFilter(std::vector<std::string> stops, bool reasoning, bool start_in_reasoning)
    : stop_(std::move(stops)), split_(reasoning, start_in_reasoning) {}

bool TextFilter::Feed(std::string_view text, std::string* reasoning, std::string* content) {
  std::string out;
  const bool hit = stop_.Feed(text, &out);
  split_.Feed(out, reasoning, content);
  return hit;
}

void TextFilter::Finish(std::string* reasoning, std::string* content) {
  std::string rest;
  stop_.Flush(&rest);  // nothing after a stop string
  split_.Feed(rest, reasoning, content);
  split_.Flush(reasoning, content);
}

// ---- TokenText --------------------------------------------------------------------------------
TokenText::TokenText(const Tokenizer& tokenizer, std::vector<std::string> stops, bool reasoning,
                     bool start_in_reasoning)
    : dec_(tokenizer, /*skip_special=*/true),
      filter_(std::move(stops), reasoning, start_in_reasoning) {}

bool TokenText::Push(int32_t id, std::string* reasoning, std::string* content) {
  if (filter_.stopped()) return true;
  return filter_.Feed(dec_.Push(id), reasoning, content);
}

void TokenText::Finish(std::string* reasoning, std::string* content) {
  if (!filter_.stopped()) filter_.Feed(dec_.Flush(), reasoning, content);
  filter_.Finish(reasoning, content);
}

}  // namespace es
