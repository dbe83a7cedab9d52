// Render budget (see budget.h). Errors are OpErrors so that the interpreter adds the position
// of the expression being evaluated; the message names the limit (a RenderLimits field).
#include "jinja/budget.h"

#include <string>

#include "jinja/value.h"

namespace es::jinja {
namespace {
thread_local Budget* g_active = nullptr;
}  // namespace

void Budget::CheckAlloc(size_t bytes) const {
  if (bytes > limits_.max_value_bytes)
    throw OpError("render budget exceeded: a value of " + std::to_string(bytes) +
                  " bytes is larger than max_value_bytes (" +
                  std::to_string(limits_.max_value_bytes) + ")");
  if (bytes > limits_.max_alloc_bytes - std::min(allocated_, limits_.max_alloc_bytes))
    throw OpError("render budget exceeded: the template allocated more than max_alloc_bytes (" +
                  std::to_string(limits_.max_alloc_bytes) + " bytes)");
}

void Budget::CheckOutput(size_t bytes) const {
  if (bytes > limits_.max_output_bytes)
    throw OpError("render budget exceeded: output larger than max_output_bytes (" +
                  std::to_string(limits_.max_output_bytes) + " bytes)");
}

void Budget::FailSteps() const {
  throw OpError("render budget exceeded: more than max_steps (" +
                std::to_string(limits_.max_steps) + ") evaluation steps");
}

void Budget::FailDepth() {
  --depth_;  // the guard that called Enter throws before it can Leave
  throw OpError(
      "render budget exceeded: nesting of statements, expressions and calls deeper than "
      "max_depth (" +
      std::to_string(limits_.max_depth) + ")");
}

BudgetScope::BudgetScope(Budget& budget) : saved_(g_active) { g_active = &budget; }
BudgetScope::~BudgetScope() { g_active = saved_; }

Budget* ActiveBudget() { return g_active; }

}  // namespace es::jinja
