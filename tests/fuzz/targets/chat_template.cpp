// Fuzz target: a chat template (as a model file carries it) parsed and rendered with a short
// conversation and a tool, under a render budget 1/100 of the default's (steps, output, values,
// allocation; the same depth). Every failure must be one es::Error. At the default budget an
// input that loops (most mutants of the loop seeds) ran 20,000,000 steps, 0.7-3.8 s under
// ASan, and the target ~24 executions a second; every limit's check is the same code at any size,
// and the defaults are tested against hostile templates in tests/unit/jinja/render_budget_test.cpp.
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
    const es::jinja::RenderLimits defaults;
    in.limits.max_steps = defaults.max_steps / 100;
    in.limits.max_output_bytes = defaults.max_output_bytes / 100;
    in.limits.max_value_bytes = defaults.max_value_bytes / 100;
    in.limits.max_alloc_bytes = defaults.max_alloc_bytes / 100;
    t.Render(in);
  } catch (const es::Error&) {
  }
  return 0;
}
