// OpenAI protocol types: parsing and validating /v1/chat/completions and /v1/completions bodies
// into plain structs, and the error object. Nothing here touches a model: field checks only,
// each failure an ApiError naming the field (`param`) as OpenAI does.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "edgeseek/internal/grammar/grammar.h"
#include "edgeseek/internal/runtime/sampler.h"
#include "tool_calls.h"

namespace es::server {

using json = nlohmann::json;

// An error answered to the client: {"error":{"message","type","param","code"}} with `status`.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;              // empty: null
  std::string code;               // empty: null
  double retry_after_s = 0;       // 429/503: Retry-After header when > 0
  bool close_connection = false;  // refusals under load: "Connection: close"
};
json ErrorBody(const ApiError& e);
ApiError BadRequest(const std::string& message, const std::string& param = {},
                    const std::string& code = {});

struct ProtocolLimits {
  int max_tokens = 4096;  // largest max_tokens accepted
  int max_stop = 16;      // stop strings
  size_t max_stop_len = 256;
  size_t max_messages = 4096;  // entries of 'messages'
  size_t max_tools = 128;      // entries of 'tools' (OpenAI's documented maximum)
};

// Deepest nesting of arrays and objects a request body may have (the root object is level 1);
// deeper bodies are refused before they are parsed.
inline constexpr size_t kMaxJsonDepth = 64;
// Nesting depth of JSON text, counted without parsing (brackets inside strings do not count).
size_t JsonDepth(const std::string& text);

// Most alternatives per token 'top_logprobs' (chat) or 'logprobs' (completions) may ask for
// (OpenAI's limit for chat; completions take the same here).
inline constexpr int kMaxTopLogprobs = 20;

// Generation fields shared by both endpoints.
struct GenParams {
  std::optional<int> max_tokens;  // max_tokens or max_completion_tokens
  SamplingParams sampling;        // temperature 1 unless given (OpenAI default)
  bool seed_given = false;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;
  std::optional<json> priority;  // string or integer, mapped by the server config
  bool ignore_eos = false;       // extension (vLLM's)
  // Constrained decoding: the grammar the output must follow (response_format json_object /
  // json_schema, or GBNF in 'grammar' as llama.cpp's server takes it); null when free. Its
  // schema (json_schema) is kept for the tests and the docs' examples.
  std::shared_ptr<const grammar::Grammar> grammar;
  // Log-probabilities of the output tokens with this many top alternatives (chat: logprobs +
  // top_logprobs; completions: logprobs as an integer); -1: none.
  int logprobs = -1;
  // 'metadata': string keys and values (OpenAI's limits: 16 pairs, keys of 64 characters, values
  // of 512), for plugins' constraints and policies (docs/server.md "Plugins").
  std::vector<std::pair<std::string, std::string>> metadata;
};

enum class ToolChoice { kAuto, kNone, kRequired, kNamed };

struct ChatRequest {
  std::string model;                 // empty: the server's only model
  json messages;                     // validated array of {role, content (string), ...}
  json tools;                        // null or array
  std::vector<ToolSpec> tool_specs;  // the tools, validated (names, compilable parameter schemas)
  ToolChoice tool_choice = ToolChoice::kAuto;
  std::string tool_name;  // kNamed
  json template_kwargs;   // chat_template_kwargs (object) or null
  GenParams gen;
};

struct CompletionRequest {
  std::string model;
  std::string prompt_text;
  std::vector<int32_t> prompt_ids;
  bool prompt_is_ids = false;
  GenParams gen;
};

// OpenAI's logprobs objects. `bytes_of(id)` gives a token's bytes ("" for special tokens,
// which are left out); a -inf log-probability is written as -9999 (OpenAI's floor), since JSON
// has no infinity. Chat: {"content":[{token, logprob, bytes, top_logprobs:[...]}]}.
// Completions: {tokens, token_logprobs, top_logprobs:[{token: logprob}], text_offset}, offsets
// counted from `offset0`.
json ChatLogprobs(const std::vector<std::pair<int32_t, const TokenLogprobs*>>& tokens,
                  const std::function<std::string(int32_t)>& bytes_of);
json CompletionLogprobs(const std::vector<std::pair<int32_t, const TokenLogprobs*>>& tokens,
                        const std::function<std::string(int32_t)>& bytes_of, size_t offset0);

// Throw ApiError (by value) on the first bad field.
// `body_text`: the body as received, read again only for a json_schema's key order.
ChatRequest ParseChatRequest(const json& body, const ProtocolLimits& lim,
                             const std::string& body_text = {});
CompletionRequest ParseCompletionRequest(const json& body, const ProtocolLimits& lim,
                                         const std::string& body_text = {});
// Parses a request body; ApiError 400 on malformed JSON or invalid UTF-8, a non-object, or
// nesting deeper than kMaxJsonDepth.
json ParseBody(const std::string& body);

}  // namespace es::server
