// Jinja interpreter: walks the statement tree and renders text. Scoping follows jinja2: each
// for-loop iteration, macro call and with-block gets a fresh scope whose parent is the
// enclosing one, `{% set %}` writes to the innermost scope (so assignments in a loop body do not
// survive the loop — hence namespace()), `if` blocks share their parent's scope.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "jinja/ast.h"
#include "jinja/budget.h"
#include "jinja/value.h"

namespace es::jinja {

struct Scope {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Scope> parent;
  const Value* Lookup(const std::string& name) const;
};
using ScopePtr = std::shared_ptr<Scope>;

// Python binary operators + - * / // % ** with Python's typing rules (OpError otherwise).
Value BinaryOp(const std::string& op, const Value& a, const Value& b);

class Interpreter {
 public:
  Interpreter(std::string name, const RenderLimits& limits)
      : name_(std::move(name)), budget_(limits) {}

  // Renders `body` with `globals` beneath `context` (context names shadow globals).
  std::string Render(const Body& body, const DictData& context, const DictData& globals);

  Value Eval(const Expr& e, const ScopePtr& scope);
  // Calls a callable value (macro, method, global); errors for anything else.
  Value Call(const Value& f, CallArgs& args);
  // Renders a statement list into a new string (macro bodies, caller(), set blocks).
  std::string RenderBody(const Body& body, const ScopePtr& scope);
  // Registers an object or macro made during this render; when the render ends (normally or
  // not) each that is still alive drops what it holds. A macro defined in a loop body is stored
  // in the scope it closes over, and a namespace can hold itself: such cycles were never freed
  // (a loop defining a macro 2*10^6 times leaked 1.2 GB, on every request).
  void Track(const std::shared_ptr<Object>& o) { objects_.push_back(o); }
  void Track(const std::shared_ptr<Callable>& c) { callables_.push_back(c); }
  // Charged for each scope, macro and namespace made (their memory is not in any value's size).
  static constexpr size_t kScopeBytes = 1024;  // a Scope, its map nodes, a Macro: measured ~700 B
  Budget& budget() { return budget_; }
  // Macro recursion guard.
  void Enter();
  void Leave() { --depth_; }
  [[noreturn]] void Fail(int line, int col, const std::string& msg) const;

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  Flow Exec(const Body& body, const ScopePtr& scope, std::string& out);
  Flow ExecOne(const Stmt& s, const ScopePtr& scope, std::string& out);
  Flow ExecFor(const Stmt& s, const ScopePtr& scope, std::string& out);
  void Assign(const Expr& target, const Value& v, const ScopePtr& scope);
  Value EvalInner(const Expr& e, const ScopePtr& scope);
  Value EvalFilter(const Expr& e, const ScopePtr& scope, const Value* input);
  void EvalArgs(const Expr& e, const ScopePtr& scope, CallArgs& args);

  std::string name_;
  Budget budget_;  // charged through ActiveBudget() while Render runs
  std::vector<std::weak_ptr<Object>> objects_;
  std::vector<std::weak_ptr<Callable>> callables_;
  int depth_ = 0;
};

}  // namespace es::jinja
