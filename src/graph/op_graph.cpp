// OpGraph: indexes, constant access and dead-node removal (edgeseek/internal/graph/op_graph.h).
#include "edgeseek/internal/graph/op_graph.h"

#include <cstring>
#include <set>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/core/half.h"

namespace es {

int64_t OpNode::Int(const std::string& key, int64_t def) const {
  auto it = attrs.find(key);
  if (it == attrs.end()) return def;
  if (auto* v = std::get_if<int64_t>(&it->second)) return *v;
  Fail(Where(), ": attribute '", key, "' is not an integer");
}

float OpNode::Float(const std::string& key, float def) const {
  auto it = attrs.find(key);
  if (it == attrs.end()) return def;
  if (auto* v = std::get_if<float>(&it->second)) return *v;
  if (auto* v = std::get_if<int64_t>(&it->second)) return float(*v);
  Fail(Where(), ": attribute '", key, "' is not a float");
}

std::vector<int64_t> OpNode::Ints(const std::string& key) const {
  auto it = attrs.find(key);
  if (it == attrs.end()) return {};
  if (auto* v = std::get_if<std::vector<int64_t>>(&it->second)) return *v;
  if (auto* v = std::get_if<int64_t>(&it->second)) return {*v};
  Fail(Where(), ": attribute '", key, "' is not a list of integers");
}

std::string OpNode::Str(const std::string& key, const std::string& def) const {
  auto it = attrs.find(key);
  if (it == attrs.end()) return def;
  if (auto* v = std::get_if<std::string>(&it->second)) return *v;
  Fail(Where(), ": attribute '", key, "' is not a string");
}

std::string OpNode::Where() const {
  return "node '" + name + "' (op type '" + op + "', domain '" +
         (domain.empty() ? "ai.onnx" : domain) + "')";
}

void OpGraph::Reindex() {
  producer_.clear();
  consumers_.clear();
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (const std::string& o : nodes[i].outputs)
      if (!o.empty()) producer_[o] = int(i);
    for (const std::string& in : nodes[i].inputs)
      if (!in.empty()) consumers_[in].push_back(int(i));
  }
}

int OpGraph::Producer(const std::string& v) const {
  auto it = producer_.find(v);
  return it == producer_.end() ? -1 : it->second;
}

const OpNode* OpGraph::ProducerNode(const std::string& v) const {
  const int p = Producer(v);
  return p < 0 ? nullptr : &nodes[size_t(p)];
}

const std::vector<int>& OpGraph::Consumers(const std::string& v) const {
  static const std::vector<int> kNone;
  auto it = consumers_.find(v);
  return it == consumers_.end() ? kNone : it->second;
}

bool OpGraph::IsConstant(const std::string& v) const {
  return constants.count(v) != 0 || int_constants.count(v) != 0;
}

const Tensor* OpGraph::Constant(const std::string& v) const {
  auto it = constants.find(v);
  return it == constants.end() ? nullptr : &it->second;
}

std::optional<double> OpGraph::Scalar(const std::string& v) const {
  const Tensor* t = Constant(v);
  if (!t || t->numel() != 1) return std::nullopt;
  switch (t->dtype) {
    case DType::kF32:
      return double(t->as<float>()[0]);
    case DType::kF16:
      return double(F16ToF32(t->as<uint16_t>()[0]));
    case DType::kBF16:
      return double(BF16ToF32(t->as<uint16_t>()[0]));
    case DType::kI32:
      return double(t->as<int32_t>()[0]);
    default:
      break;
  }
  if (auto ints = IntValues(v); ints && ints->size() == 1) return double((*ints)[0]);
  return std::nullopt;
}

std::optional<std::vector<int64_t>> OpGraph::IntValues(const std::string& v) const {
  if (auto it = int_constants.find(v); it != int_constants.end()) return it->second;
  const Tensor* t = Constant(v);
  if (!t) return std::nullopt;
  std::vector<int64_t> out(size_t(t->numel()));
  if (t->dtype == DType::kI32) {
    for (size_t i = 0; i < out.size(); ++i) out[i] = t->as<int32_t>()[i];
    return out;
  }
  return std::nullopt;
}

bool OpGraph::IsGraphInput(const std::string& v) const {
  for (const OpValueInfo& i : inputs)
    if (i.name == v) return true;
  return false;
}

bool OpGraph::IsGraphOutput(const std::string& v) const {
  for (const OpValueInfo& o : outputs)
    if (o.name == v) return true;
  return false;
}

int OpGraph::RemoveDead() {
  int removed = 0;
  for (bool changed = true; changed;) {
    changed = false;
    Reindex();
    std::vector<OpNode> keep;
    keep.reserve(nodes.size());
    for (OpNode& n : nodes) {
      bool used = false;
      for (const std::string& o : n.outputs)
        if (!o.empty() && (IsGraphOutput(o) || !Consumers(o).empty())) used = true;
      if (used) {
        keep.push_back(std::move(n));
      } else {
        ++removed;
        changed = true;
      }
    }
    nodes = std::move(keep);
  }
  Reindex();
  return removed;
}

}  // namespace es
