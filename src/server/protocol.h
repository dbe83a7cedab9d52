// OpenAI protocol types: parsing and validating /v1/chat/completions and /v1/completions bodies
// into plain structs, and the error object. Nothing here touches a model: field checks only,
// each failure an ApiError naming the field (`param`) as OpenAI does.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "edgeseek/runtime/sampler.h"

namespace es::server {

using json = nlohmann::json;

// An error answered to the client: {"error":{"message","type","param","code"}} with `status`.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;       // empty: null
  std::string code;        // empty: null
  double retry_after_s = 0;  // 429/503: Retry-After header when > 0
  bool close_connection = false;  // refusals under load: "Connection: close"
};
json ErrorBody(const ApiError& e);
ApiError BadRequest(const std::string& message, const std::string& param = {},
                    const std::string& code = {});

struct ProtocolLimits {
  int max_tokens = 4096;        // largest max_tokens accepted
  int max_stop = 16;            // stop strings
  size_t max_stop_len = 256;
  size_t max_messages = 4096;   // entries of 'messages'
  size_t max_tools = 128;       // entries of 'tools' (OpenAI's documented maximum)
};

// Deepest nesting of arrays and objects a request body may have (the root object is level 1);
// deeper bodies are refused before they are parsed.
inline constexpr size_t kMaxJsonDepth = 64;
// Nesting depth of JSON text, counted without parsing (brackets inside strings do not count).
size_t JsonDepth(const std::string& text);

// Generation fields shared by both endpoints.
struct GenParams {
  std::optional<int> max_tokens;   // max_tokens or max_completion_tokens
  SamplingParams sampling;         // temperature 1 unless given (OpenAI default)
  bool seed_given = false;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;
  std::optional<json> priority;    // string or integer, mapped by the server config
  bool ignore_eos = false;         // extension (vLLM's)
};

struct ChatRequest {
  std::string model;          // empty: the server's only model
  json messages;              // validated array of {role, content (string), ...}
  json tools;                 // null or array
  json template_kwargs;       // chat_template_kwargs (object) or null
  GenParams gen;
};

struct CompletionRequest {
  std::string model;
  std::string prompt_text;
  std::vector<int32_t> prompt_ids;
  bool prompt_is_ids = false;
  GenParams gen;
};

// Throw ApiError (by value) on the first bad field.
ChatRequest ParseChatRequest(const json& body, const ProtocolLimits& lim);
CompletionRequest ParseCompletionRequest(const json& body, const ProtocolLimits& lim);
// Parses a request body; ApiError 400 on malformed JSON or invalid UTF-8, a non-object, or
// nesting deeper than kMaxJsonDepth.
json ParseBody(const std::string& body);

}  // namespace es::server
