// Jinja interpreter (see interpreter.h): statements, expressions, Python operators, loop
// context, macros and call blocks.
#include "jinja/interpreter.h"

#include <cmath>

#include "edgeseek/internal/core/error.h"
#include "jinja/builtins.h"
#include "jinja/lexer.h"
#include "jinja/pystr.h"

namespace es::jinja {

const Value* Scope::Lookup(const std::string& name) const {
  for (const Scope* s = this; s; s = s->parent.get()) {
    auto it = s->vars.find(name);
    if (it != s->vars.end()) return &it->second;
  }
  return nullptr;
}

namespace {

constexpr int kMaxDepth = 200;

// ---- loop context -----------------------------------------------------------------------------
class LoopObject : public Object, public std::enable_shared_from_this<LoopObject> {
 public:
  explicit LoopObject(std::vector<Value> items) : items_(std::move(items)) {
    int inner = 0;
    for (const Value& x : items_) inner = std::max(inner, jinja::Nesting(x));
    nest_ = NestAround(inner);
  }
  int Nesting() const override { return nest_; }
  const std::vector<Value>& items() const { return items_; }
  std::string TypeName() const override { return "LoopContext"; }
  std::string Repr() const override {
    return "<LoopContext " + std::to_string(index0_ + 1) + "/" + std::to_string(items_.size()) +
           ">";
  }
  Value GetAttr(std::string_view n) const override {
    const int64_t len = int64_t(items_.size());
    if (n == "index") return Value::Int(index0_ + 1);
    if (n == "index0") return Value::Int(index0_);
    if (n == "revindex") return Value::Int(len - index0_);
    if (n == "revindex0") return Value::Int(len - index0_ - 1);
    if (n == "first") return Value::Bool(index0_ == 0);
    if (n == "last") return Value::Bool(index0_ == len - 1);
    if (n == "length") return Value::Int(len);
    if (n == "depth") return Value::Int(1);
    if (n == "depth0") return Value::Int(0);
    if (n == "previtem")
      return index0_ > 0 ? items_[index0_ - 1] : Value::Undefined("there is no previous item");
    if (n == "nextitem")
      return index0_ + 1 < len ? items_[index0_ + 1] : Value::Undefined("there is no next item");
    if (n == "cycle" || n == "changed") {
      struct Method : Callable {
        std::shared_ptr<LoopObject> loop;
        bool cycle;
        std::string Name() const override { return cycle ? "loop.cycle" : "loop.changed"; }
        Value Call(Interpreter&, CallArgs& args) override {
          if (cycle) {
            if (args.positional.empty()) throw OpError("TypeError: no items for cycling given");
            return args.positional[size_t(loop->index0_) % args.positional.size()];
          }
          Value now = Value::List(args.positional);
          if (loop->has_last_changed_ && Equals(now, loop->last_changed_))
            return Value::Bool(false);
          loop->last_changed_ = now;
          loop->has_last_changed_ = true;
          return Value::Bool(true);
        }
      };
      auto m = std::make_shared<Method>();
      m->loop = std::const_pointer_cast<LoopObject>(shared_from_this());
      m->cycle = n == "cycle";
      return Value::FromCallable(std::move(m));
    }
    return Value::Undefined("'LoopContext object' has no attribute '" + std::string(n) + "'");
  }
  int64_t index0_ = 0;

 private:
  std::vector<Value> items_;
  int nest_ = 1;
  Value last_changed_;
  bool has_last_changed_ = false;
};

// ---- macros -------------------------------------------------------------------------------------
// A macro, or the body of a {% call %} block (called as caller()).
class Macro : public Callable {
 public:
  Macro(const Stmt* def, ScopePtr closure, std::string name)
      : def_(def), closure_(std::move(closure)), name_(std::move(name)) {}
  std::string Name() const override { return name_; }
  void BreakCycles() override { closure_.reset(); }
  Value Call(Interpreter& in, CallArgs& args) override {
    in.budget().Alloc(Interpreter::kScopeBytes);
    auto scope = std::make_shared<Scope>();
    scope->parent = closure_;
    const auto& params = def_->params;
    std::vector<bool> bound(params.size(), false);
    std::vector<Value> extra;
    for (size_t i = 0; i < args.positional.size(); ++i) {
      if (i < params.size()) {
        scope->vars[params[i]] = args.positional[i];
        bound[i] = true;
      } else {
        extra.push_back(args.positional[i]);
      }
    }
    Value kwargs = Value::Dict();
    for (auto& [k, v] : args.keyword) {
      bool found = false;
      for (size_t i = 0; i < params.size(); ++i)
        if (params[i] == k) {
          if (bound[i])
            throw OpError("TypeError: macro '" + name_ + "' got multiple values for argument '" +
                          k + "'");
          scope->vars[k] = v;
          bound[i] = found = true;
        }
      if (!found) {
        if (k == "caller")
          scope->vars["caller"] = v;
        else
          kwargs.dict().Set(Value::String(k), v);
      }
    }
    for (size_t i = 0; i < params.size(); ++i) {
      if (bound[i]) continue;
      scope->vars[params[i]] =
          def_->defaults[i] ? in.Eval(*def_->defaults[i], scope)
                            : Value::Undefined("parameter '" + params[i] + "' was not provided");
    }
    scope->vars["varargs"] = Value::Tuple(std::move(extra));
    scope->vars["kwargs"] = kwargs;
    in.Enter();
    std::string out = in.RenderBody(def_->body, scope);
    in.Leave();
    return Value::String(std::move(out));
  }

 private:
  const Stmt* def_;
  ScopePtr closure_;
  std::string name_;
};

// ---- operators
// ------------------------------------------------------------------------------------
[[noreturn]] void BadOperands(const std::string& op, const Value& a, const Value& b) {
  throw OpError("TypeError: unsupported operand type(s) for " + op + ": '" + TypeName(a) +
                "' and '" + TypeName(b) + "'");
}

Value IntResult(__int128 r) {
  if (r > INT64_MAX || r < INT64_MIN) throw OpError("OverflowError: integer result out of range");
  return Value::Int(int64_t(r));
}

Value Repeat(const Value& seq, int64_t n) {
  const size_t unit = seq.IsString() ? seq.GetString().size() : seq.list().items.size();
  // An empty sequence repeats to empty at once: looping n (up to 2^63) times would hang.
  if (n <= 0 || unit == 0)
    return seq.IsString()        ? Value::String("")
           : seq.list().is_tuple ? Value::Tuple({})
                                 : Value::List({});
  const size_t slot = seq.IsString() ? 1 : sizeof(Value);
  // Checked before allocating: 'a' * 10**8 must fail here, not after taking the memory.
  if (uint64_t(n) > (uint64_t(1) << 40) / (unit * slot))
    throw OpError("MemoryError: repetition result would be too large");
  CheckAlloc(size_t(n) * unit * slot);
  ChargeSteps(uint64_t(n));
  if (seq.IsString()) {
    std::string out;
    out.reserve(size_t(n) * unit);
    for (int64_t i = 0; i < n; ++i) out += seq.GetString();
    return Value::String(std::move(out));
  }
  std::vector<Value> items;
  items.reserve(size_t(n) * unit);
  for (int64_t i = 0; i < n; ++i)
    items.insert(items.end(), seq.list().items.begin(), seq.list().items.end());
  return seq.list().is_tuple ? Value::Tuple(std::move(items)) : Value::List(std::move(items));
}

}  // namespace

Value BinaryOp(const std::string& op, const Value& a, const Value& b) {
  if (a.IsUndefined()) FailUndefined(a);
  if (b.IsUndefined()) FailUndefined(b);
  const bool ints = a.IsIntLike() && b.IsIntLike();
  const bool nums = a.IsNumber() && b.IsNumber();
  if (op == "+") {
    if (ints) return IntResult(__int128(a.GetInt()) + b.GetInt());
    if (nums) return Value::Float(a.GetFloat() + b.GetFloat());
    if (a.IsString() && b.IsString()) {
      CheckAlloc(a.GetString().size() + b.GetString().size());
      return Value::String(a.GetString() + b.GetString());
    }
    if (a.IsList() && b.IsList() && !a.list().is_generator && !b.list().is_generator &&
        a.list().is_tuple == b.list().is_tuple) {
      CheckAlloc((a.list().items.size() + b.list().items.size()) * sizeof(Value));
      std::vector<Value> items = a.list().items;
      items.insert(items.end(), b.list().items.begin(), b.list().items.end());
      return a.list().is_tuple ? Value::Tuple(std::move(items)) : Value::List(std::move(items));
    }
    if (a.IsString())
      throw OpError("TypeError: can only concatenate str (not \"" + TypeName(b) + "\") to str");
    if (a.IsList() && !a.list().is_tuple && !a.list().is_generator)
      throw OpError("TypeError: can only concatenate list (not \"" + TypeName(b) + "\") to list");
    BadOperands(op, a, b);
  }
  if (op == "-") {
    if (ints) return IntResult(__int128(a.GetInt()) - b.GetInt());
    if (nums) return Value::Float(a.GetFloat() - b.GetFloat());
    BadOperands(op, a, b);
  }
  if (op == "*") {
    if (ints) return IntResult(__int128(a.GetInt()) * b.GetInt());
    if (nums) return Value::Float(a.GetFloat() * b.GetFloat());
    auto seq = [](const Value& v) {
      return v.IsString() || (v.IsList() && !v.list().is_generator);
    };
    if (seq(a) && b.IsIntLike()) return Repeat(a, b.GetInt());
    if (a.IsIntLike() && seq(b)) return Repeat(b, a.GetInt());
    BadOperands(op, a, b);
  }
  if (!nums) {
    if (op == "%" && a.IsString())
      throw OpError("printf-style string formatting ('%' on a string) is not supported");
    BadOperands(op, a, b);
  }
  if (op == "/") {
    if (b.GetFloat() == 0) throw OpError("ZeroDivisionError: division by zero");
    return Value::Float(a.GetFloat() / b.GetFloat());
  }
  if (op == "//" || op == "%") {
    if (b.GetFloat() == 0)
      throw OpError(op == "%" ? "ZeroDivisionError: modulo by zero"
                              : "ZeroDivisionError: integer division or modulo by zero");
    if (ints) {
      const int64_t x = a.GetInt(), y = b.GetInt();
      int64_t q = x / y, r = x % y;
      if (r != 0 && ((r < 0) != (y < 0))) {
        --q;
        r += y;
      }
      return Value::Int(op == "//" ? q : r);
    }
    const double x = a.GetFloat(), y = b.GetFloat();
    double r = std::fmod(x, y);
    if (r != 0 && ((r < 0) != (y < 0))) r += y;
    if (op == "%") return Value::Float(r);
    return Value::Float(std::floor((x - r) / y + 0.5));
  }
  if (op == "**") {
    if (ints && b.GetInt() >= 0) {
      // Square-and-multiply; every intermediate fits in int64 or the result would not.
      __int128 result = 1, base = a.GetInt();
      const __int128 kLimit = INT64_MAX;
      for (int64_t e = b.GetInt(); e > 0; e >>= 1) {
        if (e & 1) {
          result *= base;
          if (result > kLimit || result < -kLimit - 1)
            throw OpError("OverflowError: integer result out of range");
        }
        if (e > 1) {
          base *= base;
          if (base > kLimit) {
            if (result != 0) throw OpError("OverflowError: integer result out of range");
            break;
          }
        }
      }
      return Value::Int(int64_t(result));
    }
    return Value::Float(std::pow(a.GetFloat(), b.GetFloat()));
  }
  BadOperands(op, a, b);
}

namespace {

bool CompareOp(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return Equals(a, b);
  if (op == "!=") return !Equals(a, b);
  if (op == "in") return Contains(b, a);
  if (op == "notin") return !Contains(b, a);
  const int c = Compare(a, b, op.c_str());
  if (op == "<") return c < 0;
  if (op == "<=") return c <= 0;
  if (op == ">") return c > 0;
  return c >= 0;
}

std::optional<int64_t> SliceIndex(const Value& v) {
  if (v.IsNone()) return std::nullopt;
  if (!v.IsIntLike()) throw OpError("TypeError: slice indices must be integers or None");
  return v.GetInt();
}

}  // namespace

// ---- interpreter --------------------------------------------------------------------------------
void Interpreter::Fail(int line, int col, const std::string& msg) const {
  es::Fail(Where(name_, line, col), ": ", msg);
}

void Interpreter::Enter() {
  if (++depth_ > kMaxDepth) {
    --depth_;
    throw OpError("maximum macro recursion depth (" + std::to_string(kMaxDepth) + ") exceeded");
  }
}

std::string Interpreter::Render(const Body& body, const DictData& context,
                                const DictData& globals) {
  BudgetScope active(budget_);
  struct Release {  // on every exit, exceptions included
    Interpreter& in;
    ~Release() {
      for (auto& w : in.objects_)
        if (auto o = w.lock()) o->BreakCycles();
      for (auto& w : in.callables_)
        if (auto c = w.lock()) c->BreakCycles();
    }
  } release{*this};
  auto global_scope = std::make_shared<Scope>();
  for (const auto& [k, v] : globals.items) global_scope->vars[k.GetString()] = v;
  auto root = std::make_shared<Scope>();
  root->parent = global_scope;
  for (const auto& [k, v] : context.items) root->vars[k.GetString()] = v;
  std::string out;
  Exec(body, root, out);
  return out;
}

std::string Interpreter::RenderBody(const Body& body, const ScopePtr& scope) {
  std::string out;
  Exec(body, scope, out);
  return out;
}

Value Interpreter::Call(const Value& f, CallArgs& args) {
  if (f.IsUndefined()) FailUndefined(f);
  if (!f.IsCallable()) throw OpError("TypeError: '" + TypeName(f) + "' object is not callable");
  return f.callable().Call(*this, args);
}

Interpreter::Flow Interpreter::Exec(const Body& body, const ScopePtr& scope, std::string& out) {
  DepthGuard depth;
  for (const auto& sp : body) {
    const Stmt& s = *sp;
    budget_.Steps(1);
    Flow flow = ExecOne(s, scope, out);
    budget_.CheckOutput(out.size());
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::ExecOne(const Stmt& s, const ScopePtr& scope, std::string& out) {
  {
    switch (s.kind) {
      case StmtKind::kData:
        out += s.text;
        break;
      case StmtKind::kOutput:
        out += ToStr(Eval(*s.expr, scope));
        break;
      case StmtKind::kIf: {
        Flow f = Exec(Truthy(Eval(*s.expr, scope)) ? s.body : s.else_body, scope, out);
        if (f != Flow::kNormal) return f;
        break;
      }
      case StmtKind::kFor: {
        Flow f = ExecFor(s, scope, out);
        if (f != Flow::kNormal) return f;
        break;
      }
      case StmtKind::kSet:
        Assign(*s.target, Eval(*s.expr, scope), scope);
        break;
      case StmtKind::kSetBlock: {
        Value v = Value::String(RenderBody(s.body, scope));
        if (s.filter) v = EvalFilter(*s.filter, scope, &v);
        Assign(*s.target, v, scope);
        break;
      }
      case StmtKind::kMacro: {
        budget_.Alloc(kScopeBytes);
        auto m = std::make_shared<Macro>(&s, scope, s.text);
        Track(std::shared_ptr<Callable>(m));
        scope->vars[s.text] = Value::FromCallable(std::move(m));
        break;
      }
      case StmtKind::kCallBlock: {
        const Expr& call = *s.expr;
        try {
          Value callee = Eval(*call.a, scope);
          CallArgs args;
          EvalArgs(call, scope, args);
          auto caller = std::make_shared<Macro>(&s, scope, "caller");
          Track(std::shared_ptr<Callable>(caller));
          args.keyword.emplace_back("caller", Value::FromCallable(std::move(caller)));
          out += ToStr(Call(callee, args));
        } catch (const OpError& e) {
          Fail(s.line, s.col, e.what());
        }
        break;
      }
      case StmtKind::kFilterBlock: {
        Value v = Value::String(RenderBody(s.body, scope));
        out += ToStr(EvalFilter(*s.filter, scope, &v));
        break;
      }
      case StmtKind::kWith: {
        auto inner = std::make_shared<Scope>();
        inner->parent = scope;
        for (const auto& [target, value] : s.assigns) Assign(*target, Eval(*value, scope), inner);
        Flow f = Exec(s.body, inner, out);
        if (f != Flow::kNormal) return f;
        break;
      }
      case StmtKind::kScope: {
        Flow f = Exec(s.body, scope, out);
        if (f != Flow::kNormal) return f;
        break;
      }
      case StmtKind::kBreak:
        return Flow::kBreak;
      case StmtKind::kContinue:
        return Flow::kContinue;
    }
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::ExecFor(const Stmt& s, const ScopePtr& scope, std::string& out) {
  Value iterable = Eval(*s.expr, scope);
  std::vector<Value> items;
  try {
    items = Iterate(iterable);
  } catch (const OpError& e) {
    Fail(s.expr->line, s.expr->col, e.what());
  }
  if (s.cond) {
    std::vector<Value> kept;
    for (auto& item : items) {
      auto tmp = std::make_shared<Scope>();
      tmp->parent = scope;
      Assign(*s.target, item, tmp);
      if (Truthy(Eval(*s.cond, tmp))) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    auto inner = std::make_shared<Scope>();
    inner->parent = scope;
    Exec(s.else_body, inner, out);
    return Flow::kNormal;
  }
  auto loop = std::make_shared<LoopObject>(std::move(items));
  const Value loop_value = Value::FromObject(loop);
  const std::vector<Value>& loop_items = loop->items();
  for (size_t i = 0; i < loop_items.size(); ++i) {
    budget_.Steps(1);  // an empty body still costs its iterations
    budget_.Alloc(kScopeBytes);
    loop->index0_ = int64_t(i);
    auto inner = std::make_shared<Scope>();
    inner->parent = scope;
    inner->vars["loop"] = loop_value;
    Assign(*s.target, loop_items[i], inner);
    if (Exec(s.body, inner, out) == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

void Interpreter::Assign(const Expr& target, const Value& v, const ScopePtr& scope) {
  if (target.kind == ExprKind::kName) {
    scope->vars[target.name] = v;
    return;
  }
  if (target.kind == ExprKind::kGetattr) {
    const Value* obj = scope->Lookup(target.a->name);
    if (!obj || !obj->IsObject() || !obj->object().SetAttr(target.name, v))
      Fail(target.line, target.col,
           "cannot assign attribute on non-namespace object '" + target.a->name + "'");
    return;
  }
  // Tuple unpacking.
  std::vector<Value> items;
  try {
    items = Iterate(v);
  } catch (const OpError& e) {
    Fail(target.line, target.col, std::string("cannot unpack: ") + e.what());
  }
  if (items.size() != target.args.size())
    Fail(target.line, target.col,
         items.size() > target.args.size() ? "ValueError: too many values to unpack (expected " +
                                                 std::to_string(target.args.size()) + ")"
                                           : "ValueError: not enough values to unpack (expected " +
                                                 std::to_string(target.args.size()) + ", got " +
                                                 std::to_string(items.size()) + ")");
  for (size_t i = 0; i < items.size(); ++i) Assign(*target.args[i], items[i], scope);
}

namespace {

// Bytes a freshly built value holds (its string, or its container's slots).
size_t OwnBytes(const Value& v) {
  if (v.IsString()) return v.GetString().size();
  if (v.IsList()) return v.list().items.size() * sizeof(Value);
  if (v.IsDict()) return v.dict().items.size() * 2 * sizeof(Value);
  return 0;
}

// Kinds whose result is a value that already existed (a constant, a variable, an attribute or
// element of one, an operand passed through); the others build a new one.
bool PassesThrough(const Expr& e) {
  switch (e.kind) {
    case ExprKind::kConst:
    case ExprKind::kName:
    case ExprKind::kGetattr:
    case ExprKind::kAnd:
    case ExprKind::kOr:
    case ExprKind::kCondExpr:
      return true;
    case ExprKind::kGetitem:
      return e.b->kind != ExprKind::kSlice;
    default:
      return false;
  }
}

}  // namespace

Value Interpreter::Eval(const Expr& e, const ScopePtr& scope) {
  try {
    DepthGuard depth;
    budget_.Steps(1);
    Value v = EvalInner(e, scope);
    if (!PassesThrough(e)) budget_.Alloc(OwnBytes(v));
    return v;
  } catch (const OpError& err) {
    Fail(e.line, e.col, err.what());
  }
}

void Interpreter::EvalArgs(const Expr& e, const ScopePtr& scope, CallArgs& args) {
  for (const auto& a : e.args) args.positional.push_back(Eval(*a, scope));
  if (e.dyn_args)
    for (auto& v : Iterate(Eval(*e.dyn_args, scope))) args.positional.push_back(std::move(v));
  for (const auto& [k, a] : e.kwargs) args.keyword.emplace_back(k, Eval(*a, scope));
  if (e.dyn_kwargs) {
    Value d = Eval(*e.dyn_kwargs, scope);
    if (!d.IsDict()) throw OpError("TypeError: argument after ** must be a mapping");
    for (const auto& [k, v] : d.dict().items) args.keyword.emplace_back(ToStr(k), v);
  }
}

Value Interpreter::EvalFilter(const Expr& e, const ScopePtr& scope, const Value* input) {
  try {
    Value in =
        e.a ? (e.a->kind == ExprKind::kFilter ? EvalFilter(*e.a, scope, input) : Eval(*e.a, scope))
            : *input;
    CallArgs args;
    EvalArgs(e, scope, args);
    return ApplyFilter(*this, e.name, in, args);
  } catch (const OpError& err) {
    Fail(e.line, e.col, err.what());
  }
}

Value Interpreter::EvalInner(const Expr& e, const ScopePtr& scope) {
  switch (e.kind) {
    case ExprKind::kConst:
      return e.constant;
    case ExprKind::kName: {
      const Value* v = scope->Lookup(e.name);
      return v ? *v : Value::Undefined("'" + e.name + "' is undefined");
    }
    case ExprKind::kGetattr:
      return GetAttr(Eval(*e.a, scope), e.name);
    case ExprKind::kGetitem: {
      Value obj = Eval(*e.a, scope);
      if (e.b->kind != ExprKind::kSlice) return GetItem(obj, Eval(*e.b, scope));
      const Expr& sl = *e.b;
      auto part = [&](const ExprPtr& p) -> std::optional<int64_t> {
        return p ? SliceIndex(Eval(*p, scope)) : std::nullopt;
      };
      auto start = part(sl.a), stop = part(sl.b), step = part(sl.c);
      if (obj.IsUndefined()) FailUndefined(obj);
      if (obj.IsString()) {
        ChargeBytes(obj.GetString().size());
        std::u32string u = DecodeUtf8(obj.GetString());
        std::u32string r;
        for (int64_t i : PySliceIndices(int64_t(u.size()), start, stop, step))
          r.push_back(u[size_t(i)]);
        return Value::String(EncodeUtf8(r));
      }
      if (obj.IsList() && !obj.list().is_generator) {
        const auto& items = obj.list().items;
        std::vector<Value> r;
        for (int64_t i : PySliceIndices(int64_t(items.size()), start, stop, step))
          r.push_back(items[size_t(i)]);
        return obj.list().is_tuple ? Value::Tuple(std::move(r)) : Value::List(std::move(r));
      }
      return Value::Undefined(ObjectTypeRepr(obj) + " has no element slice");
    }
    case ExprKind::kSlice:
      throw OpError("slice outside of a subscript");
    case ExprKind::kCall: {
      Value f = Eval(*e.a, scope);
      CallArgs args;
      EvalArgs(e, scope, args);
      return Call(f, args);
    }
    case ExprKind::kFilter:
      return EvalFilter(e, scope, nullptr);
    case ExprKind::kTest: {
      Value in = Eval(*e.a, scope);
      CallArgs args;
      EvalArgs(e, scope, args);
      return Value::Bool(ApplyTest(*this, e.name, in, args));
    }
    case ExprKind::kNeg:
    case ExprKind::kPos: {
      Value v = Eval(*e.a, scope);
      if (v.IsUndefined()) FailUndefined(v);
      if (!v.IsNumber())
        throw OpError(std::string("TypeError: bad operand type for unary ") +
                      (e.kind == ExprKind::kNeg ? "-" : "+") + ": '" + TypeName(v) + "'");
      if (e.kind == ExprKind::kPos) return v.IsBool() ? Value::Int(v.GetInt()) : v;
      return v.IsFloat() ? Value::Float(-v.GetFloat()) : IntResult(-__int128(v.GetInt()));
    }
    case ExprKind::kNot:
      return Value::Bool(!Truthy(Eval(*e.a, scope)));
    case ExprKind::kAnd: {
      Value l = Eval(*e.a, scope);
      return Truthy(l) ? Eval(*e.b, scope) : l;
    }
    case ExprKind::kOr: {
      Value l = Eval(*e.a, scope);
      return Truthy(l) ? l : Eval(*e.b, scope);
    }
    case ExprKind::kBinary: {
      Value l = Eval(*e.a, scope);
      Value r = Eval(*e.b, scope);
      return BinaryOp(e.name, l, r);
    }
    case ExprKind::kConcat: {
      std::string s;
      for (const auto& a : e.args) {
        std::string part = ToStr(Eval(*a, scope));
        CheckAlloc(s.size() + part.size());
        s += part;
      }
      return Value::String(std::move(s));
    }
    case ExprKind::kCompare: {
      Value left = Eval(*e.a, scope);
      for (size_t i = 0; i < e.ops.size(); ++i) {
        Value right = Eval(*e.args[i], scope);
        if (!CompareOp(e.ops[i], left, right)) return Value::Bool(false);
        left = std::move(right);
      }
      return Value::Bool(true);
    }
    case ExprKind::kCondExpr:
      if (Truthy(Eval(*e.a, scope))) return Eval(*e.b, scope);
      if (e.c) return Eval(*e.c, scope);
      return Value::Undefined("the inline if-expression on line " + std::to_string(e.line) +
                              " evaluated to false and no else section was defined.");
    case ExprKind::kList:
    case ExprKind::kTuple: {
      std::vector<Value> items;
      for (const auto& a : e.args) items.push_back(Eval(*a, scope));
      return e.kind == ExprKind::kList ? Value::List(std::move(items))
                                       : Value::Tuple(std::move(items));
    }
    case ExprKind::kDict: {
      Value d = Value::Dict();
      for (const auto& [k, v] : e.dict_items) {
        Value key = Eval(*k, scope);
        if (key.IsDict() || (key.IsList() && !key.list().is_tuple) || key.IsUndefined())
          throw OpError("TypeError: unhashable type: '" + TypeName(key) + "'");
        d.dict().Set(std::move(key), Eval(*v, scope));
      }
      return d;
    }
  }
  throw OpError("internal error: unknown expression kind");
}

}  // namespace es::jinja
