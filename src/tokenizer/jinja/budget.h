// Render budget: the limits that make rendering a hostile chat template end with one clear error
// instead of hanging, exhausting memory or overflowing the stack. Templates come from model files
// found on the internet and render once per chat request, so the budget is on by default.
//
// The interpreter opens a BudgetScope for the length of a render; the free functions below charge
// the active one (and do nothing outside a render). A thread-local pointer reaches it because the
// work to charge happens in value helpers and builtins that are called from many places without
// the interpreter at hand (Iterate, Contains, str methods, filters); a render runs on one thread.
#pragma once

#include <cstddef>
#include <cstdint>

#include "edgeseek/internal/tokenizer/jinja.h"

namespace es::jinja {

class Budget {
 public:
  explicit Budget(const RenderLimits& limits) : limits_(limits) {}

  // Work proportional to n (statements, expressions, loop iterations, elements visited).
  void Steps(uint64_t n) {
    steps_ += n;
    if (steps_ > limits_.max_steps) FailSteps();
  }
  // `bytes` newly allocated for a value (string bytes, container slots).
  void Alloc(size_t bytes) {
    CheckAlloc(bytes);
    allocated_ += bytes;
  }
  // Throws, before anything is allocated, when a value of `bytes` would exceed the size of one
  // value or what is left of the allocation budget.
  void CheckAlloc(size_t bytes) const;
  void CheckOutput(size_t bytes) const;
  // Nesting of statements, expressions and calls being evaluated (the stack in use).
  void Enter() {
    if (++depth_ > limits_.max_depth) FailDepth();
  }
  void Leave() { --depth_; }

 private:
  [[noreturn]] void FailSteps() const;
  [[noreturn]] void FailDepth();

  RenderLimits limits_;
  uint64_t steps_ = 0;
  size_t allocated_ = 0;
  int depth_ = 0;
};

// Makes `budget` the active one on this thread while alive.
class BudgetScope {
 public:
  explicit BudgetScope(Budget& budget);
  ~BudgetScope();
  BudgetScope(const BudgetScope&) = delete;
  BudgetScope& operator=(const BudgetScope&) = delete;

 private:
  Budget* saved_;
};

Budget* ActiveBudget();
inline void ChargeSteps(uint64_t n) {
  if (Budget* b = ActiveBudget()) b->Steps(n);
}
// Reading a string (search, comparison, case mapping, indexing by codepoint, a filter or str
// method) is charged one step per kBytesPerStep bytes: such an operation is one expression,
// and uncharged, `'b' in s` over an 8 MB s in a loop of 10^5 ran 9.5 s within max_steps
// (issue 23). The slowest of them (wordcount, startswith and find decode to codepoints) read
// ~20 ns a byte, so at 2 bytes a step max_steps still ends a render within ~a second; a real
// template reads each message a few times (a 100 KB chat: ~10^5 steps).
inline constexpr size_t kBytesPerStep = 2;
inline void ChargeBytes(size_t bytes) { ChargeSteps(bytes / kBytesPerStep); }
inline void ChargeAlloc(size_t bytes) {
  if (Budget* b = ActiveBudget()) b->Alloc(bytes);
}
inline void CheckAlloc(size_t bytes) {
  if (const Budget* b = ActiveBudget()) b->CheckAlloc(bytes);
}

// Enter/Leave of the active budget for one scope; nothing outside a render.
class DepthGuard {
 public:
  DepthGuard() : b_(ActiveBudget()) {
    if (b_) b_->Enter();
  }
  ~DepthGuard() {
    if (b_) b_->Leave();
  }
  DepthGuard(const DepthGuard&) = delete;
  DepthGuard& operator=(const DepthGuard&) = delete;

 private:
  Budget* b_;
};

}  // namespace es::jinja
