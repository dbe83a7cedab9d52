// Fuzz target: a request body through the server's parser and validators (src/server/protocol),
// as POST /v1/chat/completions and /v1/completions take it. Bad input must end in an ApiError
// (a 4xx for the client); anything else escaping, or a crash, is a finding.
#include <cstddef>
#include <cstdint>

#include "edgeseek/internal/core/error.h"
#include "fuzz_util.h"
#include "protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body = es::fuzz::Expand(data, size);
  es::server::ProtocolLimits lim;
  try {
    const es::server::json j = es::server::ParseBody(body);
    try {
      es::server::ParseChatRequest(j, lim, body);
    } catch (const es::server::ApiError&) {
    }
    es::server::ParseCompletionRequest(j, lim, body);
  } catch (const es::server::ApiError&) {
  }
  return 0;
}
