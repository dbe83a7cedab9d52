// Quantization policy: which element type each tensor gets when a model is converted or
// requantized. A policy is a default type plus an ordered list of rules (tensor-name pattern ->
// type, first match wins), loaded from a small JSON file (configs/quant/*.json, format in
// docs/gguf.md) or taken from the built-in presets (q8_0, q4_0, q4_k_m, i4g, and any single
// type name such as "q6_k" or "f16" as a uniform policy).
//
// Fixed rules applied by ChooseType around the policy's own rules, in this order:
//  1. integer tensors (I8, I32) are never converted;
//  2. tensors with fewer than 2 dims (norm weights, biases, exp_probs_b, rope_freqs) are F32;
//  3. the first matching rule, else the default, gives the type ("source" keeps the input type);
//  4. a row length (innermost dim) that is not a multiple of the type's block falls back to a
//     higher-precision type with a smaller block (FallbackType), repeatedly, ending at F16.
// ChooseType is a pure function of its arguments: quantizing is deterministic.
#pragma once

#include <memory>
#include <regex>
#include <string>
#include <string_view>
#include <vector>

#include "edgeseek/internal/core/dtype.h"
#include "edgeseek/internal/core/tensor.h"

namespace es {

struct QuantRule {
  std::string pattern;       // glob ('*' any run of characters, '?' one) or ECMAScript regex
  bool is_regex = false;     // whole-name match either way
  bool keep_source = false;  // "type": "source": leave the tensor as it is
  DType type = DType::kF32;  // when !keep_source
  std::shared_ptr<const std::regex> re;  // compiled when is_regex

  bool Matches(const std::string& name) const;
};

struct QuantPolicy {
  std::string name;
  std::string description;
  DType default_type = DType::kQ8_0;
  std::vector<QuantRule> rules;
  int file_type = -1;  // general.file_type to write; -1: FileTypeFor(default_type)

  // Same content (name, default, file_type, rules); for tests of presets against files.
  bool SameAs(const QuantPolicy& o) const;
};

// Parses a policy from JSON text; `origin` (a path) names the source in errors, which say which
// field is wrong ("policy FILE: rules[2].type: unknown tensor type 'q9'").
QuantPolicy ParseQuantPolicy(const std::string& json_text, const std::string& origin);
QuantPolicy LoadQuantPolicy(const std::string& path);
// Built-in presets by name ("q8_0", "q4_0", "q4_k_m", "i4g"), or a uniform policy for any type
// Quantize can produce ("q5_k", "f16", ...). Throws es::Error listing the choices otherwise.
QuantPolicy BuiltinQuantPolicy(std::string_view name);
std::vector<std::string> BuiltinQuantPolicyNames();  // the presets (not the uniform ones)
// The JSON text of a preset (what configs/quant/<name>.json holds).
std::string_view BuiltinQuantPolicyJson(std::string_view name);

// The next type tried when a row length does not fit `t`'s block: Q4_K -> Q5_0, Q5_K -> Q5_1,
// Q6_K -> Q8_0, I4G -> Q5_0, 32-element types -> F16; dense types return themselves.
DType FallbackType(DType t);

// The type tensor `tensor_name` of shape `shape` (outermost-first) and type `source` gets.
DType ChooseType(const QuantPolicy& policy, const std::string& tensor_name, const Shape& shape,
                 DType source);

}  // namespace es
