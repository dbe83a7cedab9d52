// Jinja value: the dynamic type templates compute with, following Python's semantics because
// chat templates are written against jinja2 running on Python (str() of floats and lists,
// truthiness, == across int/float/bool, ordered dicts, reference semantics of lists and dicts).
// Kinds: Undefined (jinja2's default Undefined: renders "", falsy, iterates empty, fails on
// attribute access and arithmetic), None, bool, int (64-bit), float, str (UTF-8), list/tuple,
// dict (insertion-ordered), object (namespace, loop) and callable (macros, methods, globals).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "edgeseek/internal/tokenizer/jinja.h"

namespace es::jinja {

class Value;
class Interpreter;

// A failure of a Python-level operation (TypeError, ValueError...); the interpreter adds the
// template position and turns it into an es::Error.
class OpError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// How deep containers may nest inside one another. Destroying, printing or comparing a value
// recurses over its nesting, so a template building `[x]` around x in a loop must stop here
// rather than overflow the stack when the chain is freed. Above kMaxContextDepth, so any
// render context fits.
inline constexpr int kMaxValueNesting = 512;

struct ListData {
  std::vector<Value> items;
  int nest = 1;  // 1 + the deepest nesting among items
  bool is_tuple = false;
  bool is_generator = false;  // result of map/select/...: no len(), no indexing, always truthy
};

struct DictData {
  std::vector<std::pair<Value, Value>> items;  // insertion order, keys unique by Python ==
  int nest = 1;                                // as ListData::nest; kept by Set and CopyFrom
  // Out of line: Value is incomplete here (clang with libstdc++ refuses to copy the pairs).
  void CopyFrom(const DictData& other);
  const Value* Find(const Value& key) const;
  const Value* Find(std::string_view key) const;
  void Set(Value key, Value value);
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

// Objects with attributes (jinja2's Namespace, LoopContext).
class Object {
 public:
  virtual ~Object() = default;
  virtual std::string TypeName() const = 0;
  // Returns Undefined when there is no such attribute.
  virtual Value GetAttr(std::string_view name) const;
  // Returns false when the object does not allow assignment.
  virtual bool SetAttr(const std::string& name, Value value);
  virtual std::string Repr() const;
  // Nesting of the values the object holds, as ListData::nest.
  virtual int Nesting() const { return 1; }
  // Drops the values held, when the render ends (see Interpreter::Track).
  virtual void BreakCycles() {}
};

class Callable {
 public:
  virtual ~Callable() = default;
  virtual std::string Name() const = 0;
  virtual Value Call(Interpreter& interp, CallArgs& args) = 0;
  // Drops what the callable holds, when the render ends (see Interpreter::Track).
  virtual void BreakCycles() {}
};

class Value {
 public:
  enum class Type : uint8_t {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kDict,
    kObject,
    kCallable
  };

  Value() = default;  // Undefined without a hint
  static Value Undefined(std::string hint);
  static Value None();
  static Value Bool(bool b);
  static Value Int(int64_t i);
  static Value Float(double f);
  static Value String(std::string s);
  static Value List(std::vector<Value> items = {});
  static Value Tuple(std::vector<Value> items);
  static Value Generator(std::vector<Value> items);
  static Value Dict();
  static Value FromObject(std::shared_ptr<Object> o);
  static Value FromCallable(std::shared_ptr<Callable> c);

  Type type() const { return type_; }
  bool IsUndefined() const { return type_ == Type::kUndefined; }
  bool IsNone() const { return type_ == Type::kNone; }
  bool IsBool() const { return type_ == Type::kBool; }
  bool IsInt() const { return type_ == Type::kInt; }
  bool IsFloat() const { return type_ == Type::kFloat; }
  // Python's numbers.Number: bool counts as an int.
  bool IsIntLike() const { return type_ == Type::kInt || type_ == Type::kBool; }
  bool IsNumber() const { return IsIntLike() || IsFloat(); }
  bool IsString() const { return type_ == Type::kString; }
  bool IsList() const { return type_ == Type::kList; }  // list, tuple or generator
  bool IsDict() const { return type_ == Type::kDict; }
  bool IsObject() const { return type_ == Type::kObject; }
  bool IsCallable() const { return type_ == Type::kCallable; }

  bool GetBool() const { return b_; }
  int64_t GetInt() const { return type_ == Type::kBool ? int64_t(b_) : i_; }
  double GetFloat() const { return type_ == Type::kFloat ? f_ : double(GetInt()); }
  const std::string& GetString() const;
  const std::string& UndefinedHint() const;
  ListData& list() const { return *static_cast<ListData*>(ptr_.get()); }
  DictData& dict() const { return *static_cast<DictData*>(ptr_.get()); }
  Object& object() const { return *static_cast<Object*>(ptr_.get()); }
  const std::shared_ptr<Object> object_ptr() const {
    return std::static_pointer_cast<Object>(ptr_);
  }
  Callable& callable() const { return *static_cast<Callable*>(ptr_.get()); }
  // Identity of the referenced container (Python `is`), null for scalars.
  const void* identity() const { return ptr_.get(); }

 private:
  Type type_ = Type::kUndefined;
  bool b_ = false;
  int64_t i_ = 0;
  double f_ = 0;
  std::shared_ptr<void> ptr_;  // string, undefined hint, ListData, DictData, Object, Callable
};

// Nesting of containers in v (0 for scalars); OpError when `inner` (the deepest nesting of what a
// new container holds) would make it deeper than kMaxValueNesting.
int Nesting(const Value& v);
int NestAround(int inner);

// ---- Python semantics -------------------------------------------------------------------------
bool Truthy(const Value& v);
std::string ToStr(const Value& v);     // str(v)
std::string Repr(const Value& v);      // repr(v)
std::string TypeName(const Value& v);  // "str", "int", "list", "dict", "NoneType"...
// object_type_repr as jinja2 writes it in undefined messages: "dict object", "None".
std::string ObjectTypeRepr(const Value& v);
bool Equals(const Value& a, const Value& b);
// Ordering for <, <=, >, >=: negative, zero or positive; OpError when Python would raise.
int Compare(const Value& a, const Value& b, const char* op);
std::string PyFloatRepr(double d);
// Throws the error a jinja2 Undefined raises when used (its hint as the message).
[[noreturn]] void FailUndefined(const Value& v);

// ---- JSON ---------------------------------------------------------------------------------------
// Arrays and objects nested deeper than kMaxContextDepth (edgeseek/internal/tokenizer/jinja.h) are
// an OpError: the conversion recurses, and JSON from a request must not choose its depth.
Value FromJson(const nlohmann::ordered_json& j, int depth = 0);
struct JsonOptions {
  bool ensure_ascii = false;
  bool has_indent = false;
  std::string indent;  // used when has_indent
  std::string item_separator = ", ", key_separator = ": ";
  bool sort_keys = false;
};
// json.dumps(v, ...) as Python writes it.
std::string ToJson(const Value& v, const JsonOptions& options);

}  // namespace es::jinja
