// Fuzz target: a chat template (as a model file carries it) parsed and rendered with a short
// conversation and a tool, under the render budget. Every failure must be one es::Error.
#include "edgeseek/internal/tokenizer/chat_template.h"

#include <cstddef>
#include <cstdint>

#include "edgeseek/internal/core/error.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    es::ChatTemplate t(es::fuzz::Expand(data, size));
    es::ChatTemplateInputs in;
    in.messages = nlohmann::ordered_json::parse(
        R"([{"role":"system","content":"be brief"},{"role":"user","content":"hi"},)"
        R"({"role":"assistant","content":"hello","tool_calls":[{"type":"function",)"
        R"("function":{"name":"f","arguments":{"x":[1,2]}}}]},{"role":"tool","content":"3"}])");
    in.tools = nlohmann::ordered_json::parse(
        R"([{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}])");
    in.add_generation_prompt = true;
    in.bos_token = "<s>";
    in.eos_token = "</s>";
    t.Render(in);
  } catch (const es::Error&) {
  }
  return 0;
}
