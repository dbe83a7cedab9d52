// Quantization policies: JSON parsing, built-in presets and ChooseType.
#include "edgeseek/internal/formats/quant_policy.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/core/json_field.h"
#include "edgeseek/internal/formats/gguf.h"
#include "edgeseek/internal/quant/blocks.h"

namespace es {
namespace {

// The presets. configs/quant/<name>.json hold the same text (a test keeps them equal).
// Sensitive tensors: token embeddings and the output head (errors there hit every token),
// the attention value path (attn_v; MLA's attn_kv_b and its split attn_k_b/attn_v_b, whose
// errors are multiplied into every head), and the MoE router (ffn_gate_inp: a small error flips
// expert choices) stay at higher precision; norms are 1-D and stay F32 by the fixed rule.
constexpr std::string_view kPresetQ8_0 = R"({
  "name": "q8_0",
  "description": "Q8_0 everywhere except the MoE router (F32); norms and biases stay F32.",
  "default": "q8_0",
  "file_type": 7,
  "rules": [
    {"match": "blk.*.ffn_gate_inp.weight", "type": "f32"}
  ]
}
)";
constexpr std::string_view kPresetQ4_0 = R"({
  "name": "q4_0",
  "description": "Q4_0 bulk; embeddings, output head and the attention value path in Q8_0; router F32.",
  "default": "q4_0",
  "file_type": 2,
  "rules": [
    {"match": "token_embd.weight", "type": "q8_0"},
    {"match": "output.weight", "type": "q8_0"},
    {"regex": "blk\\.[0-9]+\\.attn_(v|kv_b|k_b|v_b)\\.weight", "type": "q8_0"},
    {"match": "blk.*.ffn_gate_inp.weight", "type": "f32"}
  ]
}
)";
constexpr std::string_view kPresetQ4_K_M = R"({
  "name": "q4_k_m",
  "description": "Q4_K bulk (like llama.cpp's Q4_K_M); embeddings, output head and the attention value path in Q6_K, FFN down projections in Q5_K; router F32.",
  "default": "q4_k",
  "file_type": 15,
  "rules": [
    {"match": "token_embd.weight", "type": "q6_k"},
    {"match": "output.weight", "type": "q6_k"},
    {"regex": "blk\\.[0-9]+\\.attn_(v|kv_b|k_b|v_b)\\.weight", "type": "q6_k"},
    {"regex": "blk\\.[0-9]+\\.ffn_down(_exps|_shexp)?\\.weight", "type": "q5_k"},
    {"match": "blk.*.ffn_gate_inp.weight", "type": "f32"}
  ]
}
)";
constexpr std::string_view kPresetI4G = R"({
  "name": "i4g",
  "description": "edgeseek INT4 group-wise (128 weights, f16 scale) bulk; embeddings, output head and the attention value path in Q8_0; router F32. Not loadable by llama.cpp.",
  "default": "i4g",
  "rules": [
    {"match": "token_embd.weight", "type": "q8_0"},
    {"match": "output.weight", "type": "q8_0"},
    {"regex": "blk\\.[0-9]+\\.attn_(v|kv_b|k_b|v_b)\\.weight", "type": "q8_0"},
    {"match": "blk.*.ffn_gate_inp.weight", "type": "f32"}
  ]
}
)";

struct Preset {
  std::string_view name, json;
};
constexpr Preset kPresets[] = {
    {"q8_0", kPresetQ8_0}, {"q4_0", kPresetQ4_0}, {"q4_k_m", kPresetQ4_K_M}, {"i4g", kPresetI4G}};

bool GlobMatch(std::string_view p, std::string_view s) {
  // Iterative glob with single-star backtracking: linear in practice, no recursion.
  size_t pi = 0, si = 0, star = std::string_view::npos, mark = 0;
  while (si < s.size()) {
    if (pi < p.size() && (p[pi] == '?' || p[pi] == s[si])) {
      ++pi;
      ++si;
    } else if (pi < p.size() && p[pi] == '*') {
      star = pi++;
      mark = si;
    } else if (star != std::string_view::npos) {
      pi = star + 1;
      si = ++mark;
    } else {
      return false;
    }
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

DType ParseTargetType(const std::string& s, const std::string& where) {
  DType t;
  try {
    t = ParseDType(s);
  } catch (const Error& e) {
    Fail(where, ": ", e.what());
  }
  if (!CanQuantize(t) || t == DType::kQ8_K)
    Fail(where, ": type '", s,
         "' cannot be used for weights (choose f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, ",
         "q5_1, q4_k, q5_k, q6_k, i4g or i4f)");
  return t;
}

}  // namespace

bool QuantRule::Matches(const std::string& name) const {
  return is_regex ? std::regex_match(name, *re) : GlobMatch(pattern, name);
}

bool QuantPolicy::SameAs(const QuantPolicy& o) const {
  if (name != o.name || default_type != o.default_type || file_type != o.file_type ||
      rules.size() != o.rules.size())
    return false;
  for (size_t i = 0; i < rules.size(); ++i) {
    const QuantRule &a = rules[i], &b = o.rules[i];
    if (a.pattern != b.pattern || a.is_regex != b.is_regex || a.keep_source != b.keep_source ||
        (!a.keep_source && a.type != b.type))
      return false;
  }
  return true;
}

QuantPolicy ParseQuantPolicy(const std::string& text, const std::string& origin) {
  const std::string where = "policy " + origin;
  nlohmann::json j;
  json_field::CheckDepth(text, where);
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    Fail(where, ": invalid JSON: ", e.what());
  }
  ES_CHECK(j.is_object(), where, ": expected a JSON object at the top level");
  QuantPolicy p;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    if (k != "name" && k != "description" && k != "default" && k != "file_type" && k != "rules")
      Fail(where, ": unknown field '", k,
           "' (expected name, description, default, file_type, rules)");
  }
  auto str = [&](const nlohmann::json& v, const std::string& field) -> std::string {
    ES_CHECK(v.is_string(), where, ": ", field, " must be a string");
    return v.get<std::string>();
  };
  p.name = j.contains("name") ? str(j["name"], "name") : origin;
  if (j.contains("description")) p.description = str(j["description"], "description");
  ES_CHECK(j.contains("default"), where,
           ": missing field 'default' (the type of tensors no rule matches)");
  p.default_type = ParseTargetType(str(j["default"], "default"), where + ": default");
  if (j.contains("file_type")) {
    ES_CHECK(j["file_type"].is_number_integer() && j["file_type"].get<int64_t>() >= 0 &&
                 j["file_type"].get<int64_t>() < 1024,
             where, ": file_type must be an integer in 0..1023 (llama.cpp's llama_ftype)");
    p.file_type = j["file_type"].get<int>();
  }
  if (j.contains("rules")) {
    ES_CHECK(j["rules"].is_array(), where, ": rules must be an array");
    for (size_t i = 0; i < j["rules"].size(); ++i) {
      const auto& r = j["rules"][i];
      const std::string rw = where + ": rules[" + std::to_string(i) + "]";
      ES_CHECK(r.is_object(), rw, " must be an object");
      for (auto it = r.begin(); it != r.end(); ++it)
        if (it.key() != "match" && it.key() != "regex" && it.key() != "type")
          Fail(rw, ": unknown field '", it.key(), "' (expected match or regex, and type)");
      ES_CHECK(r.contains("match") != r.contains("regex"), rw,
               ": needs exactly one of 'match' (glob) or 'regex'");
      ES_CHECK(r.contains("type"), rw, ": missing 'type'");
      QuantRule q;
      q.is_regex = r.contains("regex");
      q.pattern = str(q.is_regex ? r["regex"] : r["match"], q.is_regex ? "regex" : "match");
      ES_CHECK(!q.pattern.empty(), rw, ": empty pattern");
      if (q.is_regex) {
        try {
          q.re = std::make_shared<const std::regex>(q.pattern, std::regex::ECMAScript);
        } catch (const std::regex_error& e) {
          Fail(rw, ": invalid regex '", q.pattern, "': ", e.what());
        }
      }
      const std::string ts = str(r["type"], "type");
      if (ts == "source") {
        q.keep_source = true;
      } else {
        q.type = ParseTargetType(ts, rw + ".type");
      }
      p.rules.push_back(std::move(q));
    }
  }
  return p;
}

QuantPolicy LoadQuantPolicy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  ES_CHECK(in.good(), "cannot open policy file '", path, "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ParseQuantPolicy(ss.str(), path);
}

std::vector<std::string> BuiltinQuantPolicyNames() {
  std::vector<std::string> v;
  for (const auto& p : kPresets) v.emplace_back(p.name);
  return v;
}

std::string_view BuiltinQuantPolicyJson(std::string_view name) {
  for (const auto& p : kPresets)
    if (p.name == name) return p.json;
  Fail("no built-in quantization preset '", name, "'");
}

QuantPolicy BuiltinQuantPolicy(std::string_view name) {
  for (const auto& p : kPresets)
    if (p.name == name)
      return ParseQuantPolicy(std::string(p.json), "builtin:" + std::string(name));
  DType t;
  try {
    t = ParseDType(name);
  } catch (const Error&) {
    Fail("unknown quantization type '", name,
         "' (presets: q8_0, q4_0, q4_k_m, i4g; or one type: f32, f16, bf16, q4_1, q5_0, q5_1, "
         "q4_k, q5_k, q6_k, i4f)");
  }
  QuantPolicy p;
  p.name = std::string(name);
  p.description = "uniform " + std::string(Name(t)) + "; router F32";
  p.default_type = ParseTargetType(std::string(name), "quantization type");
  QuantRule router;
  router.pattern = "blk.*.ffn_gate_inp.weight";
  router.type = DType::kF32;
  p.rules.push_back(router);
  return p;
}

DType FallbackType(DType t) {
  switch (t) {
    case DType::kQ4_K:
      return DType::kQ5_0;
    case DType::kQ5_K:
      return DType::kQ5_1;
    case DType::kQ6_K:
      return DType::kQ8_0;
    case DType::kQ8_K:
      return DType::kQ8_0;
    case DType::kI4G:
      return DType::kQ5_0;
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ5_0:
    case DType::kQ5_1:
    case DType::kQ8_0:
    case DType::kI4F:
      return DType::kF16;
    default:
      return t;
  }
}

DType ChooseType(const QuantPolicy& policy, const std::string& name, const Shape& shape,
                 DType source) {
  if (source == DType::kI8 || source == DType::kI32) return source;
  if (shape.size() < 2) return DType::kF32;
  DType t = policy.default_type;
  for (const auto& r : policy.rules) {
    if (r.Matches(name)) {
      if (r.keep_source) return source;
      t = r.type;
      break;
    }
  }
  const int64_t cols = shape.back();
  while (cols % BlockElems(t) != 0) t = FallbackType(t);
  return t;
}

}  // namespace es
