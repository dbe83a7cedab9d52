// JSON schema → GBNF (json_schema.h). One rule per schema node ("n<index>"), generated from a
// worklist so recursive $refs become recursive rules. Objects emit their properties in schema
// order, required ones always and optional ones possibly; without additionalProperties: true
// and no properties, no other keys appear (a subset of what the schema allows is still valid).
// Whether the root can be satisfied at all is decided on the grammar (Grammar::Finish).
#include <algorithm>
#include <cmath>
#include <optional>
#include <set>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/grammar/grammar.h"
#include "edgeseek/internal/grammar/json_schema.h"

namespace es::grammar {

using json = nlohmann::json;

namespace {

// Bounded whitespace between tokens: nothing, one space, or one newline and an indent.
// Digits are bounded too, so that no value lets a model go on forever without closing it, and
// every number parses as a finite double (at most 16 + 16 digits, exponent of 2 digits).
const char* kBasics = R"(ws ::= ( " " | "\n" [ \t]{0,16} )?
hex ::= [0-9a-fA-F]
char ::= [^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" ( [0-9a-cA-CefEF] hex{3} | [dD] [0-7] hex{2} ) )
string ::= "\"" char* "\""
int ::= "-"? ( "0" | [1-9] [0-9]{0,15} )
number ::= int ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,2} )?
value ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ws ( string ws ":" ws value ws ( "," ws string ws ":" ws value ws )* )? "}"
array ::= "[" ws ( value ws ( "," ws value ws )* )? "]"
)";

constexpr int64_t kMaxInt = 9999999999999999;  // 16 digits, the int rule's bound
constexpr uint64_t kMaxRepeat = 4096;          // GrammarLimits::max_repeat

// Digit strings of one width from lo to hi (leading zeros allowed), as a GBNF expression.
std::string FixedWidth(const std::string& lo, const std::string& hi) {
  if (lo.empty()) return "";
  if (lo.find_first_not_of('0') == std::string::npos &&
      hi.find_first_not_of('9') == std::string::npos)
    return "[0-9]{" + std::to_string(lo.size()) + "}";
  if (lo[0] == hi[0])
    return "\"" + std::string(1, lo[0]) + "\" " + FixedWidth(lo.substr(1), hi.substr(1));
  const size_t w = lo.size() - 1;
  std::string alts =
      "( \"" + std::string(1, lo[0]) + "\" " + FixedWidth(lo.substr(1), std::string(w, '9'));
  if (lo[0] + 1 <= hi[0] - 1)
    alts += " | [" + std::string(1, char(lo[0] + 1)) + "-" + std::string(1, char(hi[0] - 1)) + "]" +
            (w ? " [0-9]{" + std::to_string(w) + "}" : "");
  alts += " | \"" + std::string(1, hi[0]) + "\" " + FixedWidth(std::string(w, '0'), hi.substr(1)) +
          " )";
  return alts;
}

// Decimal numbers without leading zeros in [a, b], 0 <= a <= b.
std::string Unsigned(int64_t a, int64_t b) {
  std::vector<std::string> alts;
  int64_t lo = a;
  for (int64_t width_top = 9; lo <= b; width_top = width_top * 10 + 9) {
    if (lo > width_top) continue;
    const int64_t hi = std::min(b, width_top);
    const std::string l = std::to_string(lo), h = std::to_string(hi);
    alts.push_back(FixedWidth(l, std::string(l.size() - h.size(), '0') + h));
    lo = hi + 1;
    if (width_top == kMaxInt) break;
  }
  std::string out = "( ";
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
  return out + " )";
}

class Compiler {
 public:
  Compiler(const SchemaModel& m, std::string prefix) : m_(m), prefix_(std::move(prefix)) {}

  std::string Run(bool with_basics) {
    std::string out = prefix_ + "root ::= " + Name(0) + "\n" + (with_basics ? kBasics : "");
    while (!work_.empty()) {
      const int id = work_.back();
      work_.pop_back();
      out += Rule(id);
    }
    return out;
  }

 private:
  std::string Name(int id) {
    if (queued_.insert(id).second) work_.push_back(id);
    return prefix_ + "n" + std::to_string(id);
  }
  [[noreturn]] void Unsupported(const SchemaNode& n, const std::string& what) {
    Fail("JSON schema ", n.where, ": ", what, " is not supported for constrained decoding");
  }
  std::string Rule(int id) {
    const SchemaNode& n = m_.node(id);
    const std::string name = prefix_ + "n" + std::to_string(id);
    if (n.constant) return name + " ::= " + (*n.constant ? "value" : "[]") + "\n";
    if (n.pattern) Unsupported(n, "keyword 'pattern'");
    if (n.unique_items) Unsupported(n, "keyword 'uniqueItems'");
    std::string extra;
    std::string body = Body(id, &extra);
    return name + " ::= " + body + "\n" + extra;
  }

  // The alternatives of node id; helper rules go to `extra`.
  std::string Body(int id, std::string* extra) {
    const SchemaNode& n = m_.node(id);
    const bool combined = n.ref >= 0 || !n.any_of.empty() || !n.one_of.empty();
    if (n.enum_values || n.const_value) {
      // Every listed value that the rest of the node allows, as a literal.
      std::vector<json> values =
          n.enum_values ? n.enum_values->get<std::vector<json>>() : std::vector<json>{};
      if (n.const_value) values = {*n.const_value};
      std::string alts;
      for (const json& v : values) {
        std::vector<std::string> errors;
        m_.Check(id, v, "", &errors);
        if (errors.empty()) alts += (alts.empty() ? "" : " | ") + GbnfLiteral(v.dump());
      }
      return alts.empty() ? "[]" : alts;
    }
    if (combined) {
      for (const auto& k : n.keywords)
        if (k != "$ref" && k != "anyOf" && k != "oneOf" && k != "title" && k != "description" &&
            k != "default" && k != "examples" && k != "$schema" && k != "$id" && k != "$comment" &&
            k != "$defs" && k != "definitions")
          Unsupported(n, "keyword '" + k + "' beside $ref/anyOf/oneOf");
      if (int(n.ref >= 0) + int(!n.any_of.empty()) + int(!n.one_of.empty()) > 1)
        Unsupported(n, "combining $ref, anyOf and oneOf in one schema");
      if (n.ref >= 0) return Name(n.ref);
      if (!n.one_of.empty()) CheckOneOfExclusive(n);
      std::string alts;
      for (int sub : n.any_of.empty() ? n.one_of : n.any_of)
        alts += (alts.empty() ? "" : " | ") + Name(sub);
      return alts;
    }
    std::vector<std::string> types = n.types;
    if (types.empty()) {  // inferred from the keywords, else any value
      if (!n.properties.empty() || !n.required.empty() || n.additional_allowed || n.additional >= 0)
        types.push_back("object");
      if (n.items >= 0 || n.min_items || n.max_items) types.push_back("array");
      if (n.min_length || n.max_length) types.push_back("string");
      if (n.minimum || n.maximum || n.exclusive_minimum || n.exclusive_maximum)
        types.push_back("number");
      if (types.empty()) return "value";
    }
    std::string alts;
    for (const auto& t : types) alts += (alts.empty() ? "" : " | ") + Typed(id, t, extra);
    return alts;
  }

  std::string Typed(int id, const std::string& t, std::string* extra) {
    const SchemaNode& n = m_.node(id);
    const std::string name = prefix_ + "n" + std::to_string(id);
    if (t == "null") return "\"null\"";
    if (t == "boolean") return "\"true\" | \"false\"";
    if (t == "number") {
      if (n.minimum || n.maximum || n.exclusive_minimum || n.exclusive_maximum)
        Unsupported(n, "a minimum or maximum on type 'number' (only on 'integer')");
      return "number";
    }
    if (t == "integer") return Integer(n);
    if (t == "string") {
      const uint64_t lo = n.min_length.value_or(0);
      if (n.max_length && *n.max_length < lo) return "[]";
      if (lo > kMaxRepeat || n.max_length.value_or(0) > kMaxRepeat)
        Unsupported(n, "a minLength or maxLength above " + std::to_string(kMaxRepeat));
      if (!n.min_length && !n.max_length) return "string";
      return "\"\\\"\" char{" + std::to_string(lo) + "," +
             (n.max_length ? std::to_string(*n.max_length) : "") + "} \"\\\"\"";
    }
    if (t == "array") {
      const uint64_t lo = n.min_items.value_or(0);
      if (n.max_items && *n.max_items < lo) return "[]";
      if (lo > kMaxRepeat || n.max_items.value_or(0) > kMaxRepeat)
        Unsupported(n, "a minItems or maxItems above " + std::to_string(kMaxRepeat));
      const std::string item = (n.items >= 0 ? Name(n.items) : std::string("value")) + " ws";
      if (n.max_items && *n.max_items == 0) return "\"[\" ws \"]\"";
      const std::string more = "( \",\" ws " + item + " ){" + std::to_string(lo > 0 ? lo - 1 : 0) +
                               "," + (n.max_items ? std::to_string(*n.max_items - 1) : "") + "}";
      const std::string inner = item + " " + more;
      return "\"[\" ws " + (lo > 0 ? inner : "( " + inner + " )?") + " \"]\"";
    }
    ES_ASSERT(t == "object");
    return Object(id, extra);
  }

  std::string Integer(const SchemaNode& n) {
    if (!n.minimum && !n.maximum && !n.exclusive_minimum && !n.exclusive_maximum) return "int";
    double lo = -double(kMaxInt), hi = double(kMaxInt);
    if (n.minimum) lo = std::max(lo, std::ceil(n.minimum->get<double>()));
    if (n.exclusive_minimum) lo = std::max(lo, std::floor(n.exclusive_minimum->get<double>()) + 1);
    if (n.maximum) hi = std::min(hi, std::floor(n.maximum->get<double>()));
    if (n.exclusive_maximum) hi = std::min(hi, std::ceil(n.exclusive_maximum->get<double>()) - 1);
    if (lo > double(kMaxInt) || hi < -double(kMaxInt))
      Unsupported(n, "an integer bound beyond 16 digits");
    if (lo > hi) return "[]";
    const int64_t a = int64_t(lo), b = int64_t(hi);
    if (a >= 0) return Unsigned(a, b);
    if (b < 0) return "\"-\" " + Unsigned(-b, -a);
    return "\"-\" " + Unsigned(1, -a) + " | " + Unsigned(0, b);
  }

  // "{" ws then the properties in order: rule <name>-<i>f is "from property i on, none written
  // yet", <name>-<i>a "from i on, some written" (so commas go only between properties).
  std::string Object(int id, std::string* extra) {
    const SchemaNode& n = m_.node(id);
    const std::string name = prefix_ + "n" + std::to_string(id);
    std::vector<std::pair<std::string, int>> props = n.properties;
    for (const auto& r : n.required) {
      bool listed = false;
      for (const auto& [k, sub] : props) listed = listed || k == r;
      if (listed) continue;
      if (n.additional_allowed && !*n.additional_allowed) return "[]";  // required yet forbidden
      props.emplace_back(r, n.additional);                              // -1: any value
    }
    if (props.empty()) {
      if (n.additional_allowed && !*n.additional_allowed) return "\"{\" ws \"}\"";
      if (n.additional < 0) return "object";
      const std::string kv = "string ws \":\" ws " + Name(n.additional) + " ws";
      return "\"{\" ws ( " + kv + " ( \",\" ws " + kv + " )* )? \"}\"";
    }
    auto required = [&](const std::string& k) {
      return std::find(n.required.begin(), n.required.end(), k) != n.required.end();
    };
    auto rest = [&](size_t i, char mode) {
      return i == props.size() ? std::string() : name + "-" + std::to_string(i) + mode;
    };
    for (size_t i = props.size(); i-- > 0;) {
      const auto& [k, sub] = props[i];
      const std::string kv =
          GbnfLiteral(json(k).dump()) + " ws \":\" ws " + (sub >= 0 ? Name(sub) : "value") + " ws";
      const bool req = required(k);
      *extra +=
          rest(i, 'f') + " ::= " + kv + " " + rest(i + 1, 'a') +
          (req ? "" : " | " + (i + 1 == props.size() ? std::string("\"\"") : rest(i + 1, 'f'))) +
          "\n";
      *extra +=
          rest(i, 'a') + " ::= \",\" ws " + kv + " " + rest(i + 1, 'a') +
          (req ? "" : " | " + (i + 1 == props.size() ? std::string("\"\"") : rest(i + 1, 'a'))) +
          "\n";
    }
    return "\"{\" ws " + rest(0, 'f') + " \"}\"";
  }

  // ---- oneOf ----
  // A value must match exactly one oneOf branch. The grammar writes a value of one branch (a
  // subset of what that branch accepts), so oneOf is compiled like anyOf when no value written
  // for one branch can be accepted by another; that is proved pairwise from what the schemas
  // say (disjoint types, a finite set of values the other rejects, a required property whose
  // values the other rejects or that it forbids). When it cannot be proved, the schema is
  // refused (400) rather than a value produced that matches two branches.
  static constexpr unsigned kObj = 1, kArr = 2, kStr = 4, kInt = 8, kNum = 16, kBool = 32,
                            kNull = 64, kAny = 127;
  static unsigned TypeBits(const std::vector<std::string>& types) {
    unsigned b = 0;
    for (const auto& t : types)
      b |= t == "object"    ? kObj
           : t == "array"   ? kArr
           : t == "string"  ? kStr
           : t == "integer" ? kInt
           : t == "number"  ? kNum
           : t == "boolean" ? kBool
                            : kNull;
    return b;
  }
  // integer and number overlap (1.0 is an integer, 1 a number).
  static bool TypesMeet(unsigned a, unsigned b) {
    auto widen = [](unsigned x) { return x & (kInt | kNum) ? x | kInt | kNum : x; };
    return (widen(a) & widen(b)) != 0;
  }
  const SchemaNode& Deref(int id) const {
    for (int hops = 0; m_.node(id).ref >= 0 && hops < 64; ++hops) id = m_.node(id).ref;
    return m_.node(id);
  }
  // The JSON types of the values the grammar writes for node id (kAny when unknown).
  unsigned WrittenTypes(int id, int depth = 0) const {
    const SchemaNode& n = Deref(id);
    if (depth > 16) return kAny;
    if (n.constant) return *n.constant ? kAny : 0;
    if (!n.any_of.empty() || !n.one_of.empty()) {
      unsigned b = 0;
      for (int sub : n.any_of.empty() ? n.one_of : n.any_of) b |= WrittenTypes(sub, depth + 1);
      return b;
    }
    if (!n.types.empty()) return TypeBits(n.types);
    unsigned b = 0;  // inferred from the keywords, as Body() does
    if (!n.properties.empty() || !n.required.empty() || n.additional_allowed || n.additional >= 0)
      b |= kObj;
    if (n.items >= 0 || n.min_items || n.max_items) b |= kArr;
    if (n.min_length || n.max_length) b |= kStr;
    if (n.minimum || n.maximum || n.exclusive_minimum || n.exclusive_maximum) b |= kNum;
    return b ? b : kAny;
  }
  // The types node id accepts, from its own type keyword (kAny when it has none).
  unsigned AcceptedTypes(int id) const {
    const SchemaNode& n = Deref(id);
    if (n.constant) return *n.constant ? kAny : 0;
    return n.types.empty() || !n.any_of.empty() || !n.one_of.empty() ? kAny : TypeBits(n.types);
  }
  // The finite set of values the grammar may write for node id, when it has one (enum, const).
  std::optional<std::vector<json>> FiniteValues(int id) const {
    const SchemaNode& n = Deref(id);
    if (n.const_value) return std::vector<json>{*n.const_value};
    if (n.enum_values) return n.enum_values->get<std::vector<json>>();
    return std::nullopt;
  }
  bool Rejects(int id, const json& v) const {
    std::vector<std::string> errors;
    m_.Check(id, v, "", &errors);
    return !errors.empty();
  }
  // No value the grammar writes for branch a is accepted by branch b.
  bool WrittenNeverAccepted(int a, int b) const {
    if (auto values = FiniteValues(a)) {
      for (const json& v : *values)
        if (!Rejects(a, v) && !Rejects(b, v)) return false;
      return true;
    }
    if (auto values = FiniteValues(b)) {  // b accepts only these: a never writes one it rejects
      bool all_rejected = true;
      for (const json& v : *values) all_rejected = all_rejected && (Rejects(b, v) || Rejects(a, v));
      if (all_rejected) return true;
    }
    const unsigned written = WrittenTypes(a);
    if (!TypesMeet(written, AcceptedTypes(b))) return true;
    if (written != kObj) return false;
    const SchemaNode& na = Deref(a);
    const SchemaNode& nb = Deref(b);
    if (!nb.any_of.empty() || !nb.one_of.empty() || nb.constant) return false;
    auto prop_of = [](const SchemaNode& n, const std::string& k) {
      for (const auto& [name, sub] : n.properties)
        if (name == k) return sub;
      return -2;  // not listed
    };
    for (const auto& k : na.required) {  // written always
      const int pb = prop_of(nb, k);
      if (pb == -2 && nb.additional_allowed && !*nb.additional_allowed)
        return true;  // b forbids it
      const int pa = prop_of(na, k);
      if (pb < 0 || pa < 0) continue;
      if (auto values = FiniteValues(pa)) {
        bool all_rejected = true;
        for (const json& v : *values)
          all_rejected = all_rejected && (Rejects(pa, v) || Rejects(pb, v));
        if (all_rejected) return true;
      }
    }
    return false;
  }
  void CheckOneOfExclusive(const SchemaNode& n) {
    for (size_t i = 0; i < n.one_of.size(); ++i)
      for (size_t j = i + 1; j < n.one_of.size(); ++j) {
        const int a = n.one_of[i], b = n.one_of[j];
        if (!WrittenNeverAccepted(a, b) || !WrittenNeverAccepted(b, a))
          Unsupported(
              n,
              "keyword 'oneOf' with branches " + std::to_string(i) + " and " + std::to_string(j) +
                  " that a value may match both of (exactly one is enforced only for branches of "
                  "different types, distinct const/enum values, or a required property with "
                  "distinct "
                  "const/enum values or forbidden by the other; use anyOf to allow both)");
      }
  }

  const SchemaModel& m_;
  std::string prefix_;
  std::vector<int> work_;
  std::set<int> queued_;
};

}  // namespace

std::string SchemaToGbnf(const SchemaModel& schema, const std::string& prefix, bool with_basics) {
  return Compiler(schema, prefix).Run(with_basics);
}

std::string JsonBasicsGbnf() { return kBasics; }

std::string JsonObjectGbnf() { return std::string("root ::= object\n") + kBasics; }

}  // namespace es::grammar
