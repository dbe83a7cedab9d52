// OpGraph: a dataflow graph of named values, the form an imported graph (ONNX) arrives in before
// it is lifted into a model. Nodes are op types by name (ONNX's, com.microsoft's, and the fused
// ops of the passes in domain "es"), read values by name and write values by name; constants
// (initializers, Constant nodes) are Tensors that view the mapped file. The fusion passes
// (edgeseek/internal/graph/passes/passes.h) rewrite decomposed patterns in place into single "es"
// nodes.
//
// Fused ops (domain "es"), what each computes, last axis = features:
//   es.RmsNorm(x, w)        attrs epsilon        y = x * 1/sqrt(mean(x^2, -1) + eps) * w
//   es.Silu(x)                                   y = x * sigmoid(x)
//   es.SwiGLU(gate, up)                          y = silu(gate) * up
//   es.Rope(x, cos, sin)                         y = x * cos + rotate_half(x) * sin, halves
//                                                (Llama/Qwen2 layout: rotate_half(x) = [-x2, x1])
//   es.Attention(q, k, v[, mask])  attrs scale   y = softmax(q kᵀ scale + mask) v, q/k/v as 4-D
//                                                [batch, heads, seq, head_dim] (k, v repeated to
//                                                q's heads where the source repeats them)
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "edgeseek/internal/core/tensor.h"

namespace es {

using OpAttr = std::variant<int64_t, float, std::string, std::vector<int64_t>, std::vector<float>>;

struct OpNode {
  std::string name;                  // the source's node name (errors name it)
  std::string op;                    // op type: "MatMul", "GroupQueryAttention", "RmsNorm", ...
  std::string domain;                // "" (ai.onnx), "com.microsoft", "es" (fused by a pass)
  std::vector<std::string> inputs;   // value names; "" = an absent optional input
  std::vector<std::string> outputs;  // value names; "" = an unused optional output
  std::map<std::string, OpAttr> attrs;

  bool Is(std::string_view type, std::string_view dom = {}) const {
    return op == type && domain == dom;
  }
  int64_t Int(const std::string& key, int64_t def) const;
  float Float(const std::string& key, float def) const;
  std::vector<int64_t> Ints(const std::string& key) const;  // empty when absent
  std::string Str(const std::string& key, const std::string& def = "") const;
  std::string In(size_t i) const { return i < inputs.size() ? inputs[i] : std::string(); }
  // "node 'NAME' (op type 'OP', domain 'DOMAIN')": how errors name a node.
  std::string Where() const;
};

// One dimension of a graph input or output: a size, or a symbol (dynamic axis: "batch_size",
// "sequence_length", "past_sequence_length", ...).
struct OpDim {
  int64_t size = -1;  // -1: symbolic or unknown
  std::string symbol;
};

struct OpValueInfo {
  std::string name;
  DType dtype = DType::kF32;
  int elem_type = 0;  // the source's element type code (ONNX TensorProto.DataType)
  std::vector<OpDim> dims;
};

class OpGraph {
 public:
  std::vector<OpNode> nodes;                // topological order, as read
  std::map<std::string, Tensor> constants;  // value name -> data (initializers, Constant outputs)
  // Integer constants (int64/int32/bool/int8 shapes, axes, indices: small), by value name; there
  // is no 64-bit integer tensor type. Large uint8/int8 data (packed weights) are I8 `constants`.
  std::map<std::string, std::vector<int64_t>> int_constants;
  std::vector<OpValueInfo> inputs, outputs;
  std::map<std::string, int64_t> opsets;  // domain -> version ("" = ai.onnx)

  // Producer/consumer indexes; call after editing `nodes`.
  void Reindex();
  // Index of the node writing `v`, or -1 (graph input, constant, absent).
  int Producer(const std::string& v) const;
  const OpNode* ProducerNode(const std::string& v) const;
  // Nodes reading `v`.
  const std::vector<int>& Consumers(const std::string& v) const;
  const Tensor* Constant(const std::string& v) const;
  bool IsConstant(const std::string& v) const;  // in `constants` or `int_constants`
  // The value of a one-element numeric constant (any dtype of f32/f16/bf16/i32/i64), else none.
  std::optional<double> Scalar(const std::string& v) const;
  // The values of an integer constant (i64/i32), else none.
  std::optional<std::vector<int64_t>> IntValues(const std::string& v) const;
  bool IsGraphInput(const std::string& v) const;
  bool IsGraphOutput(const std::string& v) const;
  // Drops nodes none of whose outputs is read (graph outputs count as read); returns how many.
  int RemoveDead();

 private:
  std::map<std::string, int> producer_;
  std::map<std::string, std::vector<int>> consumers_;
};

}  // namespace es
