// Tests (`x is defined`, `x is divisibleby(3)`, ...) and the globals of the environment: range,
// dict, namespace, and transformers' raise_exception and strftime_now (builtins_common.h). Each
// follows the jinja2 3.1 / Python 3 function it stands for; the comment on each names any
// deliberate difference.
#include <algorithm>
#include <ctime>
#include <memory>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/tokenizer/jinja.h"
#include "jinja/budget.h"
#include "jinja/builtins.h"
#include "jinja/builtins_common.h"
#include "jinja/interpreter.h"
#include "jinja/pystr.h"

namespace es::jinja {
namespace builtin {

// ---- tests -------------------------------------------------------------------------------------
namespace {

TestFn Compare1(const char* op) {
  return [op](Interpreter&, const Value& v, CallArgs& args) {
    auto a = Bind(op, args, {"other"});
    if (!a[0]) throw OpError(std::string("TypeError: test '") + op + "' needs an argument");
    const std::string o = op;
    if (o == "==") return Equals(v, *a[0]);
    if (o == "!=") return !Equals(v, *a[0]);
    const int c = Compare(v, *a[0], op);
    if (o == "<") return c < 0;
    if (o == "<=") return c <= 0;
    if (o == ">") return c > 0;
    return c >= 0;
  };
}

TestFn NoArg(const char* name, std::function<bool(const Value&)> f) {
  return [name, f = std::move(f)](Interpreter&, const Value& v, CallArgs& args) {
    Bind(name, args, {});
    return f(v);
  };
}

}  // namespace

const TestTable& Tests() {
  static const auto* tests = new TestTable{
      {"defined", NoArg("defined", [](const Value& v) { return !v.IsUndefined(); })},
      {"undefined", NoArg("undefined", [](const Value& v) { return v.IsUndefined(); })},
      {"none", NoArg("none", [](const Value& v) { return v.IsNone(); })},
      {"boolean", NoArg("boolean", [](const Value& v) { return v.IsBool(); })},
      {"true", NoArg("true", [](const Value& v) { return v.IsBool() && v.GetBool(); })},
      {"false", NoArg("false", [](const Value& v) { return v.IsBool() && !v.GetBool(); })},
      {"integer", NoArg("integer", [](const Value& v) { return v.IsInt(); })},
      {"float", NoArg("float", [](const Value& v) { return v.IsFloat(); })},
      {"number", NoArg("number", [](const Value& v) { return v.IsNumber(); })},
      {"string", NoArg("string", [](const Value& v) { return v.IsString(); })},
      {"mapping", NoArg("mapping", [](const Value& v) { return v.IsDict(); })},
      {"sequence", NoArg("sequence",
                         [](const Value& v) {
                           return v.IsUndefined() || v.IsString() || v.IsDict() ||
                                  (v.IsList() && !v.list().is_generator);
                         })},
      {"iterable", NoArg("iterable",
                         [](const Value& v) {
                           return v.IsUndefined() || v.IsString() || v.IsDict() || v.IsList();
                         })},
      {"callable",
       NoArg("callable", [](const Value& v) { return v.IsCallable() || v.IsUndefined(); })},
      {"escaped", NoArg("escaped", [](const Value&) { return false; })},
      {"lower", NoArg("lower", [](const Value& v) { return PyIsLower(ToStr(v)); })},
      {"upper", NoArg("upper", [](const Value& v) { return PyIsUpper(ToStr(v)); })},
      {"odd", NoArg("odd",
                    [](const Value& v) {
                      return Equals(BinaryOp("%", v, Value::Int(2)), Value::Int(1));
                    })},
      {"even", NoArg("even",
                     [](const Value& v) {
                       return Equals(BinaryOp("%", v, Value::Int(2)), Value::Int(0));
                     })},
      {"divisibleby",
       [](Interpreter&, const Value& v, CallArgs& args) {
         auto a = Bind("divisibleby", args, {"num"});
         if (!a[0]) throw OpError("TypeError: divisibleby needs an argument");
         return Equals(BinaryOp("%", v, *a[0]), Value::Int(0));
       }},
      {"sameas",
       [](Interpreter&, const Value& v, CallArgs& args) {
         auto a = Bind("sameas", args, {"other"});
         if (!a[0]) throw OpError("TypeError: sameas needs an argument");
         const Value& o = *a[0];
         if (v.type() != o.type()) return false;
         if (v.identity() || o.identity())
           return v.identity() == o.identity() || (v.IsString() && Equals(v, o));
         return Equals(v, o);
       }},
      {"in",
       [](Interpreter&, const Value& v, CallArgs& args) {
         auto a = Bind("in", args, {"seq"});
         if (!a[0]) throw OpError("TypeError: test 'in' needs an argument");
         return Contains(*a[0], v);
       }},
      {"filter",
       NoArg("filter",
             [](const Value& v) { return v.IsString() && IsKnownFilter(v.GetString()); })},
      {"test",
       NoArg("test", [](const Value& v) { return v.IsString() && IsKnownTest(v.GetString()); })},
      {"==", Compare1("==")},
      {"eq", Compare1("==")},
      {"equalto", Compare1("==")},
      {"!=", Compare1("!=")},
      {"ne", Compare1("!=")},
      {">", Compare1(">")},
      {"gt", Compare1(">")},
      {"greaterthan", Compare1(">")},
      {">=", Compare1(">=")},
      {"ge", Compare1(">=")},
      {"<", Compare1("<")},
      {"lt", Compare1("<")},
      {"lessthan", Compare1("<")},
      {"<=", Compare1("<=")},
      {"le", Compare1("<=")},
  };
  return *tests;
}

}  // namespace builtin

// ---- globals -----------------------------------------------------------------------------------
namespace {

// namespace(): jinja2's Namespace, the one object a template may assign attributes to.
class NamespaceObject : public Object {
 public:
  std::string TypeName() const override { return "Namespace"; }
  Value GetAttr(std::string_view name) const override {
    for (const auto& [k, v] : attrs_)
      if (k == name) return v;
    return Value::Undefined("'jinja2.utils.Namespace object' has no attribute '" +
                            std::string(name) + "'");
  }
  // Grows with every assignment of a value that nests (a namespace assigned into itself counts
  // once more each time: conservative, and such templates stop at kMaxValueNesting).
  int Nesting() const override { return nest_; }
  void BreakCycles() override { attrs_.clear(); }
  bool SetAttr(const std::string& name, Value value) override {
    nest_ = std::max(nest_, NestAround(jinja::Nesting(value)));
    for (auto& [k, v] : attrs_)
      if (k == name) {
        v = std::move(value);
        return true;
      }
    attrs_.emplace_back(name, std::move(value));
    return true;
  }
  std::string Repr() const override {
    std::string out = "<Namespace {";
    for (size_t i = 0; i < attrs_.size(); ++i) {
      if (i) out += ", ";
      out += PyStrRepr(attrs_[i].first) + ": " + jinja::Repr(attrs_[i].second);
    }
    return out + "}>";
  }

 private:
  std::vector<std::pair<std::string, Value>> attrs_;
  int nest_ = 1;
};

}  // namespace

using builtin::ArgInt;
using builtin::ArgStr;
using builtin::Bind;
using builtin::MakeFn;

void AddGlobals(DictData& globals) {
  globals.Set(Value::String("range"), MakeFn("range", [](Interpreter&, CallArgs& args) {
                auto a = Bind("range", args, {"start", "stop", "step"});
                if (!a[0]) throw OpError("TypeError: range expected at least 1 argument, got 0");
                int64_t start = 0, stop, step = ArgInt(a[2], 1, "range step");
                if (a[1]) {
                  start = ArgInt(a[0], 0, "range start");
                  stop = ArgInt(a[1], 0, "range stop");
                } else {
                  stop = ArgInt(a[0], 0, "range stop");
                }
                if (step == 0) throw OpError("ValueError: range() arg 3 must not be zero");
                std::vector<Value> out;
                for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
                  if (out.size() >= 100000)
                    throw OpError(
                        "OverflowError: Range too big. The sandbox blocks ranges larger than "
                        "MAX_RANGE (100000).");
                  out.push_back(Value::Int(i));
                }
                return Value::List(std::move(out));
              }));
  globals.Set(
      Value::String("dict"), MakeFn("dict", [](Interpreter&, CallArgs& args) {
        Value d = Value::Dict();
        if (args.positional.size() > 1)
          throw OpError("TypeError: dict expected at most 1 argument");
        if (!args.positional.empty()) {
          const Value& src = args.positional[0];
          if (src.IsDict()) {
            d.dict().CopyFrom(src.dict());
          } else {
            for (const auto& pair : Iterate(src)) {
              auto kv = Iterate(pair);
              if (kv.size() != 2)
                throw OpError("ValueError: dictionary update sequence element has wrong length");
              d.dict().Set(kv[0], kv[1]);
            }
          }
        }
        for (const auto& [k, v] : args.keyword) d.dict().Set(Value::String(k), v);
        return d;
      }));
  globals.Set(Value::String("namespace"), MakeFn("namespace", [](Interpreter& in, CallArgs& args) {
                in.budget().Alloc(Interpreter::kScopeBytes);
                auto ns = std::make_shared<NamespaceObject>();
                in.Track(std::shared_ptr<Object>(ns));
                if (args.positional.size() > 1)
                  throw OpError("TypeError: namespace expected at most 1 argument");
                if (!args.positional.empty()) {
                  if (!args.positional[0].IsDict())
                    throw OpError("TypeError: namespace() argument must be a mapping");
                  for (const auto& [k, v] : args.positional[0].dict().items)
                    ns->SetAttr(ToStr(k), v);
                }
                for (const auto& [k, v] : args.keyword) ns->SetAttr(k, v);
                return Value::FromObject(std::move(ns));
              }));
  globals.Set(Value::String("raise_exception"),
              MakeFn("raise_exception", [](Interpreter&, CallArgs& args) -> Value {
                auto a = Bind("raise_exception", args, {"message"});
                throw RaisedError(a[0] ? ToStr(*a[0]) : "");
              }));
  globals.Set(Value::String("strftime_now"),
              MakeFn("strftime_now", [](Interpreter&, CallArgs& args) {
                auto a = Bind("strftime_now", args, {"format"});
                const std::string& fmt = ArgStr(a[0], "format");
                std::time_t now = std::time(nullptr);
                std::tm tm{};
                localtime_r(&now, &tm);
                char buf[512];
                size_t n = std::strftime(buf, sizeof buf, fmt.c_str(), &tm);
                return Value::String(std::string(buf, n));
              }));
}

}  // namespace es::jinja
