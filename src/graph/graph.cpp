// Graph IR: node list, batch tables, liveness.
#include "edgeseek/internal/graph/graph.h"

#include <algorithm>
#include <atomic>

#include "edgeseek/internal/core/error.h"

namespace es {

void Batch::Add(int slot, int64_t pos0, const std::vector<int32_t>& toks, bool all_logits) {
  ES_ASSERT(!toks.empty());
  BatchSeq s;
  s.slot = slot;
  s.pos0 = pos0;
  s.n_tokens = int(toks.size());
  s.row0 = int(tokens.size());
  for (size_t i = 0; i < toks.size(); ++i) {
    if (all_logits || i + 1 == toks.size()) out_rows.push_back(s.row0 + int(i));
  }
  tokens.insert(tokens.end(), toks.begin(), toks.end());
  seqs.push_back(s);
}

void Batch::Finalize() {
  positions.assign(tokens.size(), 0);
  row_seq.assign(tokens.size(), 0);
  int row = 0;
  for (size_t si = 0; si < seqs.size(); ++si) {
    BatchSeq& s = seqs[si];
    s.row0 = row;
    for (int i = 0; i < s.n_tokens; ++i, ++row) {
      positions[size_t(row)] = int32_t(s.pos0 + i);
      row_seq[size_t(row)] = int32_t(si);
    }
  }
  ES_ASSERT(row == int(tokens.size()));
  ES_ASSERT(std::is_sorted(out_rows.begin(), out_rows.end()));
}

const float* InputRows(const Batch& b, const Node& n) {
  ES_ASSERT(n.op == Op::kInput && n.shape.size() == 2);
  ES_CHECK(b.input, "graph input '", n.name,
           "' needs its rows: the batch carries no input (Batch::input)");
  ES_CHECK(b.input_cols == n.shape[1], "graph input '", n.name, "' takes rows of ", n.shape[1],
           " columns, the batch's input has ", b.input_cols);
  ES_CHECK(n.shape[0] == b.n_tokens(), "graph input '", n.name, "' has ", n.shape[0],
           " rows, the batch ", b.n_tokens(), " tokens");
  return b.input;
}

const char* OpName(Op op) {
  switch (op) {
    case Op::kWeight:
      return "weight";
    case Op::kEmbed:
      return "embed";
    case Op::kRmsNorm:
      return "rms_norm";
    case Op::kMatMul:
      return "matmul";
    case Op::kAdd:
      return "add";
    case Op::kSwiGLU:
      return "swiglu";
    case Op::kSlice:
      return "slice";
    case Op::kRope:
      return "rope";
    case Op::kKvStore:
      return "kv_store";
    case Op::kAttention:
      return "attention";
    case Op::kMlaAttention:
      return "mla_attention";
    case Op::kMoE:
      return "moe";
    case Op::kGetRows:
      return "get_rows";
    case Op::kInput:
      return "input";
    case Op::kCount:
      break;
  }
  return "?";
}

namespace {
uint64_t NextGraphVersion() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}
}  // namespace

Graph::Graph() : version_(NextGraphVersion()) {}

int Graph::Add(Node n) {
  for (int s : n.src) ES_ASSERT(s < int(nodes_.size()));
  nodes_.push_back(std::move(n));
  version_ = NextGraphVersion();
  return int(nodes_.size()) - 1;
}

int Graph::AddWeight(const Tensor& t) {
  for (auto& [p, id] : weight_ids_)
    if (p == &t) return id;
  Node n;
  n.op = Op::kWeight;
  n.name = t.name;
  n.shape = t.shape;
  n.dtype = t.dtype;
  n.weight = &t;
  const int id = Add(std::move(n));
  weight_ids_.emplace_back(&t, id);
  return id;
}

std::vector<int> Graph::LastUse() const {
  std::vector<int> last(nodes_.size());
  for (size_t i = 0; i < nodes_.size(); ++i) {
    last[i] = int(i);
    for (int s : nodes_[i].src)
      if (s >= 0) last[size_t(s)] = int(i);
  }
  return last;
}

}  // namespace es
