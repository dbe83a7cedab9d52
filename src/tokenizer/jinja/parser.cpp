// Jinja parser (see parser.h). The structure follows jinja2's Parser method by method so that
// precedence and the odd corners (tests taking one bare argument, `not` binding looser than
// `is`, filters binding tighter than `+`) come out the same.
#include "jinja/parser.h"

#include <algorithm>

#include "edgeseek/internal/core/error.h"
#include "jinja/builtins.h"

namespace es::jinja {
namespace {

const char* const kUnsupportedTags[] = {"block",      "extends", "include", "import",    "from",
                                        "autoescape", "do",      "trans",   "pluralize", "debug"};

class Parser {
 public:
  Parser(const std::vector<Token>& toks, std::string name) : toks_(toks), name_(std::move(name)) {}

  Body ParseTemplate() {
    Body body = ParseBody({}, nullptr);
    if (Cur().type != Tok::kEof) Fail(Cur(), "unexpected '" + Cur().text + "'");
    return body;
  }

 private:
  // ---- token helpers ---------------------------------------------------------------------------
  const Token& Cur() const { return toks_[i_]; }
  const Token& Peek(size_t k = 1) const { return toks_[std::min(i_ + k, toks_.size() - 1)]; }
  const Token& Next() { return toks_[i_ < toks_.size() - 1 ? i_++ : i_]; }
  bool IsOp(const Token& t, const char* op) const { return t.type == Tok::kOp && t.text == op; }
  bool IsOp(const char* op) const { return IsOp(Cur(), op); }
  bool IsName(const Token& t, const char* n) const { return t.type == Tok::kName && t.text == n; }
  bool IsName(const char* n) const { return IsName(Cur(), n); }

  [[noreturn]] void Fail(const Token& t, const std::string& msg) const {
    es::Fail(Where(name_, t.line, t.col), ": ", msg);
  }
  static std::string Describe(const Token& t) {
    switch (t.type) {
      case Tok::kEof:
        return "end of template";
      case Tok::kBlockEnd:
        return "end of statement block";
      case Tok::kVarEnd:
        return "end of print statement";
      case Tok::kData:
        return "template data";
      case Tok::kString:
        return "string";
      default:
        return "'" + t.text + "'";
    }
  }
  void ExpectOp(const char* op) {
    if (!IsOp(op)) Fail(Cur(), std::string("expected '") + op + "', got " + Describe(Cur()));
    Next();
  }
  std::string ExpectName() {
    if (Cur().type != Tok::kName) Fail(Cur(), "expected a name, got " + Describe(Cur()));
    return Next().text;
  }
  void ExpectBlockEnd() {
    if (Cur().type != Tok::kBlockEnd)
      Fail(Cur(), "expected end of statement block '%}', got " + Describe(Cur()));
    Next();
  }

  ExprPtr Make(ExprKind kind, const Token& at) const {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = at.line;
    e->col = at.col;
    return e;
  }
  StmtPtr MakeStmt(StmtKind kind, const Token& at) const {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->line = at.line;
    s->col = at.col;
    return s;
  }

  // Records the height of `e` from its children's and fails past kMaxExprDepth. Operator chains
  // (`1 + 1 + ...`, `a.b.c...`, `x|f|f...`) are parsed by loops, not recursion, so the parser's
  // own DepthGuard does not see how deep the tree they build is; evaluating (and destroying) a
  // tree recurses over its height, so 20,000 terms would overflow the stack there instead.
  ExprPtr Seal(ExprPtr e) const {
    int h = 0;
    auto see = [&](const ExprPtr& c) {
      if (c) h = std::max(h, c->depth);
    };
    see(e->a);
    see(e->b);
    see(e->c);
    see(e->dyn_args);
    see(e->dyn_kwargs);
    for (const auto& x : e->args) see(x);
    for (const auto& kv : e->kwargs) see(kv.second);
    for (const auto& kv : e->dict_items) {
      see(kv.first);
      see(kv.second);
    }
    e->depth = h + 1;
    if (e->depth > kMaxExprDepth)
      es::Fail(Where(name_, e->line, e->col), ": expression nested too deep (over ", kMaxExprDepth,
               " levels of operators, calls, filters or attributes)");
    return e;
  }
  static constexpr int kMaxExprDepth = 256;

  // ---- statements
  // -------------------------------------------------------------------------------- Parses until a
  // block tag whose name is in `end`; leaves that name token current (after the
  // `{%`) and stores it in *which. With an empty `end`, parses to the end of the template.
  Body ParseBody(const std::vector<std::string>& end, std::string* which,
                 const Token* opener = nullptr, const char* opener_name = nullptr) {
    Body body;
    while (true) {
      const Token& t = Cur();
      if (t.type == Tok::kEof) {
        if (end.empty()) return body;
        std::string expect;
        for (const auto& e : end) expect += (expect.empty() ? "'" : " or '") + e + "'";
        Fail(opener ? *opener : t, std::string("unclosed '") + (opener_name ? opener_name : "") +
                                       "' block: reached the end of the template looking for " +
                                       expect);
      }
      if (t.type == Tok::kData) {
        auto s = MakeStmt(StmtKind::kData, t);
        s->text = t.text;
        body.push_back(std::move(s));
        Next();
      } else if (t.type == Tok::kVarBegin) {
        Next();
        auto s = MakeStmt(StmtKind::kOutput, t);
        s->expr = ParseTuple(true, false, {});
        if (Cur().type != Tok::kVarEnd)
          Fail(Cur(), "expected end of print statement '}}', got " + Describe(Cur()));
        Next();
        body.push_back(std::move(s));
      } else if (t.type == Tok::kBlockBegin) {
        const Token& tag = Peek();
        if (tag.type == Tok::kName && std::find(end.begin(), end.end(), tag.text) != end.end()) {
          Next();
          if (which) *which = tag.text;
          return body;
        }
        Next();
        body.push_back(ParseStatement());
      } else {
        Fail(t, "unexpected " + Describe(t));
      }
    }
  }

  // Bounds recursion so that a pathological template fails cleanly instead of overflowing the
  // stack.
  struct DepthGuard {
    DepthGuard(Parser& p, const Token& at) : p_(p) {
      if (++p_.depth_ > kMaxNesting)
        p_.Fail(at, "template nesting too deep (over " + std::to_string(kMaxNesting) + " levels)");
    }
    ~DepthGuard() { --p_.depth_; }
    Parser& p_;
  };
  static constexpr int kMaxNesting = 200;

  StmtPtr ParseStatement() {
    const Token& tag = Cur();
    DepthGuard guard(*this, tag);
    if (tag.type != Tok::kName) Fail(tag, "expected a tag name after '{%', got " + Describe(tag));
    const std::string& n = tag.text;
    if (n == "for") return ParseFor();
    if (n == "if") return ParseIf();
    if (n == "set") return ParseSet();
    if (n == "macro") return ParseMacro();
    if (n == "call") return ParseCallBlock();
    if (n == "filter") return ParseFilterBlock();
    if (n == "with") return ParseWith();
    if (n == "print") {
      Next();
      auto s = MakeStmt(StmtKind::kOutput, tag);
      s->expr = ParseTuple(true, false, {});
      ExpectBlockEnd();
      return s;
    }
    if (n == "break" || n == "continue") {
      if (loop_depth_ == 0) Fail(tag, "'" + n + "' outside of a for loop");
      Next();
      ExpectBlockEnd();
      return MakeStmt(n == "break" ? StmtKind::kBreak : StmtKind::kContinue, tag);
    }
    if (n == "generation") {
      Next();
      ExpectBlockEnd();
      auto s = MakeStmt(StmtKind::kScope, tag);
      std::string which;
      s->body = ParseBody({"endgeneration"}, &which, &tag, "generation");
      Next();
      ExpectBlockEnd();
      return s;
    }
    for (const char* u : kUnsupportedTags)
      if (n == u) Fail(tag, "unsupported template construct '{% " + n + " %}'");
    if (n.rfind("end", 0) == 0 || n == "else" || n == "elif")
      Fail(tag, "unexpected '" + n + "' tag (no open block it could close)");
    Fail(tag, "unknown tag '" + n + "'");
  }

  StmtPtr ParseFor() {
    const Token& tag = Next();
    auto s = MakeStmt(StmtKind::kFor, tag);
    s->target = ParseAssignTarget(false, {"in"});
    if (!IsName("in")) Fail(Cur(), "expected 'in' in for loop, got " + Describe(Cur()));
    Next();
    s->expr = ParseTuple(false, false, {"recursive"});
    if (IsName("if")) {
      Next();
      s->cond = ParseExpression(true);
    }
    if (IsName("recursive")) Fail(Cur(), "unsupported template construct: recursive for loops");
    ExpectBlockEnd();
    ++loop_depth_;
    std::string which;
    s->body = ParseBody({"endfor", "else"}, &which, &tag, "for");
    --loop_depth_;
    Next();
    ExpectBlockEnd();
    if (which == "else") {
      s->else_body = ParseBody({"endfor"}, &which, &tag, "for");
      Next();
      ExpectBlockEnd();
    }
    return s;
  }

  StmtPtr ParseIf() {
    const Token& tag = Next();
    auto s = MakeStmt(StmtKind::kIf, tag);
    s->expr = ParseTuple(false, false, {});
    ExpectBlockEnd();
    std::string which;
    s->body = ParseBody({"elif", "else", "endif"}, &which, &tag, "if");
    if (which == "elif") {
      // Continue as a nested if in the else branch; it consumes the shared endif. The guard
      // bounds elif chains, which nest as deep as they are long.
      DepthGuard guard(*this, Cur());
      s->else_body.push_back(ParseIf());
      return s;
    }
    Next();
    ExpectBlockEnd();
    if (which == "else") {
      s->else_body = ParseBody({"endif"}, &which, &tag, "if");
      Next();
      ExpectBlockEnd();
    }
    return s;
  }

  StmtPtr ParseSet() {
    const Token& tag = Next();
    ExprPtr target = ParseAssignTarget(true, {});
    if (IsOp("=")) {
      Next();
      auto s = MakeStmt(StmtKind::kSet, tag);
      s->target = std::move(target);
      s->expr = ParseTuple(true, false, {});
      ExpectBlockEnd();
      return s;
    }
    auto s = MakeStmt(StmtKind::kSetBlock, tag);
    s->target = std::move(target);
    if (IsOp("|")) s->filter = ParseFilter(nullptr, false);
    ExpectBlockEnd();
    std::string which;
    s->body = ParseBody({"endset"}, &which, &tag, "set");
    Next();
    ExpectBlockEnd();
    return s;
  }

  void ParseSignature(Stmt& s) {
    ExpectOp("(");
    while (!IsOp(")")) {
      if (!s.params.empty()) ExpectOp(",");
      if (IsOp(")")) break;
      s.params.push_back(ExpectName());
      if (IsOp("=")) {
        Next();
        s.defaults.push_back(ParseExpression(true));
      } else {
        if (!s.defaults.empty() && s.defaults.back())
          Fail(Cur(), "non-default argument follows default argument");
        s.defaults.push_back(nullptr);
      }
    }
    Next();
  }

  StmtPtr ParseMacro() {
    const Token& tag = Next();
    auto s = MakeStmt(StmtKind::kMacro, tag);
    s->text = ExpectName();
    ParseSignature(*s);
    ExpectBlockEnd();
    const int saved = loop_depth_;
    loop_depth_ = 0;
    std::string which;
    s->body = ParseBody({"endmacro"}, &which, &tag, "macro");
    loop_depth_ = saved;
    Next();
    ExpectBlockEnd();
    return s;
  }

  StmtPtr ParseCallBlock() {
    const Token& tag = Next();
    auto s = MakeStmt(StmtKind::kCallBlock, tag);
    if (IsOp("(")) ParseSignature(*s);
    s->expr = ParseExpression(true);
    if (s->expr->kind != ExprKind::kCall) Fail(tag, "expected a call expression after 'call'");
    ExpectBlockEnd();
    const int saved = loop_depth_;
    loop_depth_ = 0;
    std::string which;
    s->body = ParseBody({"endcall"}, &which, &tag, "call");
    loop_depth_ = saved;
    Next();
    ExpectBlockEnd();
    return s;
  }

  StmtPtr ParseFilterBlock() {
    const Token& tag = Next();
    auto s = MakeStmt(StmtKind::kFilterBlock, tag);
    s->filter = ParseFilter(nullptr, true);
    ExpectBlockEnd();
    std::string which;
    s->body = ParseBody({"endfilter"}, &which, &tag, "filter");
    Next();
    ExpectBlockEnd();
    return s;
  }

  StmtPtr ParseWith() {
    const Token& tag = Next();
    auto s = MakeStmt(StmtKind::kWith, tag);
    while (Cur().type != Tok::kBlockEnd) {
      if (!s->assigns.empty()) ExpectOp(",");
      ExprPtr target = ParseAssignTarget(false, {});
      ExpectOp("=");
      s->assigns.emplace_back(std::move(target), ParseExpression(true));
    }
    Next();
    std::string which;
    s->body = ParseBody({"endwith"}, &which, &tag, "with");
    Next();
    ExpectBlockEnd();
    return s;
  }

  // A name, `ns.attr` (with_namespace) or a tuple of names.
  ExprPtr ParseAssignTarget(bool with_namespace, const std::vector<std::string>& extra_end) {
    const Token& t = Cur();
    if (with_namespace && t.type == Tok::kName && IsOp(Peek(), ".")) {
      auto obj = Make(ExprKind::kName, t);
      obj->name = Next().text;
      Next();
      auto e = Make(ExprKind::kGetattr, t);
      e->a = std::move(obj);
      e->name = ExpectName();
      return e;
    }
    ExprPtr target = ParseTuple(true, true, extra_end);
    CheckTarget(*target);
    return target;
  }
  void CheckTarget(const Expr& e) const {
    if (e.kind == ExprKind::kTuple) {
      for (const auto& x : e.args) CheckTarget(*x);
      return;
    }
    if (e.kind != ExprKind::kName)
      es::Fail(Where(name_, e.line, e.col), ": can't assign to this expression");
  }

  // ---- expressions
  // -------------------------------------------------------------------------------
  bool IsTupleEnd(const std::vector<std::string>& extra_end) const {
    const Token& t = Cur();
    if (t.type == Tok::kVarEnd || t.type == Tok::kBlockEnd || IsOp(t, ")")) return true;
    for (const auto& e : extra_end)
      if (IsName(t, e.c_str())) return true;
    return false;
  }

  ExprPtr ParseTuple(bool with_condexpr, bool simplified, const std::vector<std::string>& extra_end,
                     bool explicit_parens = false) {
    const Token& start = Cur();
    std::vector<ExprPtr> args;
    bool is_tuple = false;
    while (true) {
      if (!args.empty()) ExpectOp(",");
      if (IsTupleEnd(extra_end)) break;
      if (simplified)
        args.push_back(ParsePrimary());
      else
        args.push_back(ParseExpression(with_condexpr));
      if (IsOp(","))
        is_tuple = true;
      else
        break;
    }
    if (!is_tuple) {
      if (!args.empty()) return std::move(args[0]);
      if (!explicit_parens) Fail(Cur(), "expected an expression, got " + Describe(Cur()));
    }
    auto e = Make(ExprKind::kTuple, start);
    e->args = std::move(args);
    return Seal(std::move(e));
  }

  ExprPtr ParseExpression(bool with_condexpr) {
    return with_condexpr ? ParseCondExpr() : ParseOr();
  }

  ExprPtr ParseCondExpr() {
    ExprPtr expr = ParseOr();
    while (IsName("if")) {
      const Token& t = Next();
      auto e = Make(ExprKind::kCondExpr, t);
      e->a = ParseOr();
      e->b = std::move(expr);
      if (IsName("else")) {
        Next();
        e->c = ParseCondExpr();
      }
      expr = Seal(std::move(e));
    }
    return expr;
  }

  ExprPtr ParseOr() {
    ExprPtr left = ParseAnd();
    while (IsName("or")) {
      const Token& t = Next();
      auto e = Make(ExprKind::kOr, t);
      e->a = std::move(left);
      e->b = ParseAnd();
      left = Seal(std::move(e));
    }
    return left;
  }

  ExprPtr ParseAnd() {
    ExprPtr left = ParseNot();
    while (IsName("and")) {
      const Token& t = Next();
      auto e = Make(ExprKind::kAnd, t);
      e->a = std::move(left);
      e->b = ParseNot();
      left = Seal(std::move(e));
    }
    return left;
  }

  ExprPtr ParseNot() {
    DepthGuard guard(*this, Cur());
    if (IsName("not")) {
      const Token& t = Next();
      auto e = Make(ExprKind::kNot, t);
      e->a = ParseNot();
      return Seal(std::move(e));
    }
    return ParseCompare();
  }

  ExprPtr ParseCompare() {
    const Token& start = Cur();
    ExprPtr expr = ParseMath1();
    std::vector<std::string> ops;
    std::vector<ExprPtr> operands;
    while (true) {
      const Token& t = Cur();
      if (t.type == Tok::kOp && (t.text == "==" || t.text == "!=" || t.text == "<" ||
                                 t.text == "<=" || t.text == ">" || t.text == ">=")) {
        ops.push_back(Next().text);
      } else if (IsName("in")) {
        Next();
        ops.push_back("in");
      } else if (IsName("not") && IsName(Peek(), "in")) {
        Next();
        Next();
        ops.push_back("notin");
      } else {
        break;
      }
      operands.push_back(ParseMath1());
    }
    if (ops.empty()) return expr;
    auto e = Make(ExprKind::kCompare, start);
    e->a = std::move(expr);
    e->ops = std::move(ops);
    e->args = std::move(operands);
    return Seal(std::move(e));
  }

  ExprPtr Binary(const Token& t, ExprPtr l, ExprPtr r) {
    auto e = Make(ExprKind::kBinary, t);
    e->name = t.text;
    e->a = std::move(l);
    e->b = std::move(r);
    return Seal(std::move(e));
  }

  ExprPtr ParseMath1() {
    ExprPtr left = ParseConcat();
    while (IsOp("+") || IsOp("-")) {
      const Token& t = Next();
      left = Binary(t, std::move(left), ParseConcat());
    }
    return left;
  }

  ExprPtr ParseConcat() {
    const Token& start = Cur();
    ExprPtr first = ParseMath2();
    if (!IsOp("~")) return first;
    auto e = Make(ExprKind::kConcat, start);
    e->args.push_back(std::move(first));
    while (IsOp("~")) {
      Next();
      e->args.push_back(ParseMath2());
    }
    return Seal(std::move(e));
  }

  ExprPtr ParseMath2() {
    ExprPtr left = ParsePow();
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      const Token& t = Next();
      left = Binary(t, std::move(left), ParsePow());
    }
    return left;
  }

  ExprPtr ParsePow() {
    ExprPtr left = ParseUnary(true);
    while (IsOp("**")) {
      const Token& t = Next();
      left = Binary(t, std::move(left), ParseUnary(true));
    }
    return left;
  }

  ExprPtr ParseUnary(bool with_filter) {
    DepthGuard guard(*this, Cur());
    ExprPtr node;
    if (IsOp("-") || IsOp("+")) {
      const Token& t = Next();
      node = Make(t.text == "-" ? ExprKind::kNeg : ExprKind::kPos, t);
      node->a = ParseUnary(false);
      node = Seal(std::move(node));
    } else {
      node = ParsePrimary();
    }
    node = ParsePostfix(std::move(node));
    if (with_filter) node = ParseFilterExpr(std::move(node));
    return node;
  }

  ExprPtr ParsePrimary() {
    const Token& t = Cur();
    if (t.type == Tok::kName) {
      Next();
      auto e = Make(ExprKind::kConst, t);
      if (t.text == "true" || t.text == "True")
        e->constant = Value::Bool(true);
      else if (t.text == "false" || t.text == "False")
        e->constant = Value::Bool(false);
      else if (t.text == "none" || t.text == "None")
        e->constant = Value::None();
      else {
        e->kind = ExprKind::kName;
        e->name = t.text;
      }
      return e;
    }
    if (t.type == Tok::kString) {
      auto e = Make(ExprKind::kConst, t);
      std::string s;
      while (Cur().type == Tok::kString) s += Next().text;  // adjacent literals concatenate
      e->constant = Value::String(std::move(s));
      return e;
    }
    if (t.type == Tok::kInt || t.type == Tok::kFloat) {
      Next();
      auto e = Make(ExprKind::kConst, t);
      e->constant = t.type == Tok::kInt ? Value::Int(t.int_value) : Value::Float(t.float_value);
      return e;
    }
    if (IsOp("(")) {
      Next();
      ExprPtr e = ParseTuple(true, false, {}, true);
      ExpectOp(")");
      return e;
    }
    if (IsOp("[")) {
      Next();
      auto e = Make(ExprKind::kList, t);
      while (!IsOp("]")) {
        if (!e->args.empty()) ExpectOp(",");
        if (IsOp("]")) break;
        e->args.push_back(ParseExpression(true));
      }
      Next();
      return Seal(std::move(e));
    }
    if (IsOp("{")) {
      Next();
      auto e = Make(ExprKind::kDict, t);
      while (!IsOp("}")) {
        if (!e->dict_items.empty()) ExpectOp(",");
        if (IsOp("}")) break;
        ExprPtr key = ParseExpression(true);
        ExpectOp(":");
        e->dict_items.emplace_back(std::move(key), ParseExpression(true));
      }
      Next();
      return Seal(std::move(e));
    }
    Fail(t, "unexpected " + Describe(t));
  }

  ExprPtr ParsePostfix(ExprPtr node) {
    while (true) {
      if (IsOp(".") || IsOp("["))
        node = ParseSubscript(std::move(node));
      else if (IsOp("("))
        node = ParseCall(std::move(node));
      else
        return node;
    }
  }

  ExprPtr ParseFilterExpr(ExprPtr node) {
    while (true) {
      if (IsOp("|"))
        node = ParseFilter(std::move(node), false);
      else if (IsName("is"))
        node = ParseTest(std::move(node));
      else if (IsOp("("))
        node = ParseCall(std::move(node));
      else
        return node;
    }
  }

  ExprPtr ParseSubscript(ExprPtr node) {
    const Token& t = Next();
    if (t.text == ".") {
      const Token& attr = Next();
      if (attr.type == Tok::kName) {
        auto e = Make(ExprKind::kGetattr, t);
        e->a = std::move(node);
        e->name = attr.text;
        return Seal(std::move(e));
      }
      if (attr.type != Tok::kInt) Fail(attr, "expected a name or number after '.'");
      auto e = Make(ExprKind::kGetitem, t);
      e->a = std::move(node);
      e->b = Make(ExprKind::kConst, attr);
      e->b->constant = Value::Int(attr.int_value);
      return Seal(std::move(e));
    }
    std::vector<ExprPtr> args;
    while (!IsOp("]")) {
      if (!args.empty()) ExpectOp(",");
      args.push_back(ParseSubscribed());
    }
    Next();
    auto e = Make(ExprKind::kGetitem, t);
    e->a = std::move(node);
    if (args.size() == 1) {
      e->b = std::move(args[0]);
    } else {
      e->b = Make(ExprKind::kTuple, t);
      e->b->args = std::move(args);
      e->b = Seal(std::move(e->b));
    }
    return Seal(std::move(e));
  }

  ExprPtr ParseSubscribed() {
    const Token& start = Cur();
    std::vector<ExprPtr> parts;
    if (IsOp(":")) {
      Next();
      parts.push_back(nullptr);
    } else {
      ExprPtr node = ParseExpression(true);
      if (!IsOp(":")) return node;
      Next();
      parts.push_back(std::move(node));
    }
    if (IsOp(":"))
      parts.push_back(nullptr);
    else if (!IsOp("]") && !IsOp(","))
      parts.push_back(ParseExpression(true));
    else
      parts.push_back(nullptr);
    if (IsOp(":")) {
      Next();
      if (!IsOp("]") && !IsOp(","))
        parts.push_back(ParseExpression(true));
      else
        parts.push_back(nullptr);
    } else {
      parts.push_back(nullptr);
    }
    auto e = Make(ExprKind::kSlice, start);
    e->a = std::move(parts[0]);
    e->b = std::move(parts[1]);
    e->c = std::move(parts[2]);
    return Seal(std::move(e));
  }

  void ParseCallArgs(Expr& e) {
    const Token& open = Cur();
    ExpectOp("(");
    bool require_comma = false;
    auto ensure = [&](bool ok) {
      if (!ok) Fail(open, "invalid syntax for function call expression");
    };
    while (!IsOp(")")) {
      if (require_comma) {
        ExpectOp(",");
        if (IsOp(")")) break;
      }
      if (IsOp("*")) {
        ensure(!e.dyn_args && !e.dyn_kwargs);
        Next();
        e.dyn_args = ParseExpression(true);
      } else if (IsOp("**")) {
        ensure(!e.dyn_kwargs);
        Next();
        e.dyn_kwargs = ParseExpression(true);
      } else if (Cur().type == Tok::kName && IsOp(Peek(), "=")) {
        ensure(!e.dyn_kwargs);
        std::string key = Next().text;
        Next();
        e.kwargs.emplace_back(std::move(key), ParseExpression(true));
      } else {
        ensure(!e.dyn_args && !e.dyn_kwargs && e.kwargs.empty());
        e.args.push_back(ParseExpression(true));
      }
      require_comma = true;
    }
    Next();
  }

  ExprPtr ParseCall(ExprPtr node) {
    auto e = Make(ExprKind::kCall, Cur());
    e->a = std::move(node);
    ParseCallArgs(*e);
    return Seal(std::move(e));
  }

  // `|name(args)|name2...`; with start_inline the first `|` is absent ({% filter %}).
  ExprPtr ParseFilter(ExprPtr node, bool start_inline) {
    while (IsOp("|") || start_inline) {
      if (!start_inline) Next();
      start_inline = false;
      const Token& t = Cur();
      std::string name = ExpectName();
      while (IsOp(".")) {
        Next();
        name += "." + ExpectName();
      }
      if (!IsKnownFilter(name)) Fail(t, "unsupported filter '" + name + "'");
      auto e = Make(ExprKind::kFilter, t);
      e->name = name;
      e->a = std::move(node);
      if (IsOp("(")) ParseCallArgs(*e);
      node = Seal(std::move(e));
    }
    return node;
  }

  ExprPtr ParseTest(ExprPtr node) {
    const Token& is_tok = Next();
    bool negated = false;
    if (IsName("not")) {
      Next();
      negated = true;
    }
    const Token& t = Cur();
    std::string name = ExpectName();
    while (IsOp(".")) {
      Next();
      name += "." + ExpectName();
    }
    if (!IsKnownTest(name)) Fail(t, "unsupported test '" + name + "'");
    auto e = Make(ExprKind::kTest, t);
    e->name = name;
    e->a = std::move(node);
    const Token& c = Cur();
    if (IsOp("(")) {
      ParseCallArgs(*e);
    } else if ((c.type == Tok::kName || c.type == Tok::kString || c.type == Tok::kInt ||
                c.type == Tok::kFloat || IsOp("(") || IsOp("[") || IsOp("{")) &&
               !IsName("else") && !IsName("or") && !IsName("and")) {
      if (IsName("is")) Fail(c, "you cannot chain multiple tests with 'is'");
      e->args.push_back(ParsePostfix(ParsePrimary()));
    }
    e = Seal(std::move(e));
    if (!negated) return e;
    auto n = Make(ExprKind::kNot, is_tok);
    n->a = std::move(e);
    return Seal(std::move(n));
  }

  const std::vector<Token>& toks_;
  std::string name_;
  size_t i_ = 0;
  int loop_depth_ = 0;
  int depth_ = 0;
};

}  // namespace

Body Parse(const std::vector<Token>& tokens, const std::string& name) {
  return Parser(tokens, name).ParseTemplate();
}

}  // namespace es::jinja
