// Jinja syntax tree: expression and statement nodes as the parser builds them and the
// interpreter walks them. Nodes are "fat" structs (one kind tag, a few generic slots) to keep
// the tree small to write; each kind documents which slots it uses. Every node carries the
// line:column of its first token for error messages.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "jinja/value.h"

namespace es::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class ExprKind {
  kConst,    // constant
  kName,     // name
  kGetattr,  // a.name
  kGetitem,  // a[b]
  kSlice,    // a:b:c inside [] (any of them may be null)
  kCall,     // a(args, kwargs, *dyn_args, **dyn_kwargs)
  kFilter,   // a|name(args...) — a is null inside {% filter %} blocks
  kTest,     // a is name(args...)
  kNeg,
  kPos,
  kNot,  // a
  kAnd,
  kOr,        // a, b
  kBinary,    // a op b: name holds + - * / // % **
  kConcat,    // args joined with ~
  kCompare,   // a, then ops[i] applied to args[i]: == != < <= > >= in notin
  kCondExpr,  // b if a else c (c may be null)
  kList,
  kTuple,  // args
  kDict,   // kwargs-like pairs in dict_items
};

struct Expr {
  ExprKind kind;
  int line = 0, col = 0;
  int depth = 1;  // height of the tree under this node (the parser bounds it)
  Value constant;
  std::string name;
  ExprPtr a, b, c;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  ExprPtr dyn_args, dyn_kwargs;
  std::vector<std::string> ops;
  std::vector<std::pair<ExprPtr, ExprPtr>> dict_items;
};

enum class StmtKind {
  kData,         // text
  kOutput,       // {{ expr }}
  kIf,           // expr, body, else_body (elif chains nest in else_body)
  kFor,          // target, expr (iterable), cond (loop filter, may be null), body, else_body
  kSet,          // target = expr
  kSetBlock,     // target, filter (may be null), body
  kMacro,        // name, params (+ defaults, null where none), body
  kCallBlock,    // expr (the call), params (caller's), body
  kFilterBlock,  // filter (chain with a null innermost input), body
  kWith,         // targets/values in assigns, body
  kBreak,
  kContinue,
  kScope,  // body rendered as is ({% generation %})
};

struct Stmt {
  StmtKind kind;
  int line = 0, col = 0;
  std::string text;  // data text / macro name
  ExprPtr expr, target, cond, filter;
  Body body, else_body;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;
  std::vector<std::pair<ExprPtr, ExprPtr>> assigns;
};

}  // namespace es::jinja
