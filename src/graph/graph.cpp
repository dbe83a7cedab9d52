// Graph IR: node list, batch tables, liveness.
#include "edgeseek/internal/graph/graph.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <type_traits>
#include <utility>

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

void Node::WrongParams(const char* wanted) const {
  Fail("graph node '", name, "' (", OpName(op), ") carries no ", wanted, " parameters");
}

uint64_t HashMix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h;
}

namespace {
uint64_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Whether record P is op's (monostate is no op's).
template <class P>
constexpr bool Carries(Op op) {
  if constexpr (std::is_same_v<P, std::monostate>) {
    return false;
  } else {
    return P::kOp == op;
  }
}
// Whether some alternative of OpParams is op's record.
template <size_t... I>
constexpr bool TakesParams(Op op, std::index_sequence<I...>) {
  return (Carries<std::variant_alternative_t<I, OpParams>>(op) || ...);
}

// Whether `p` is the record op `op` carries (monostate for ops without parameters).
bool ParamsFitOp(const OpParams& p, Op op) {
  return std::visit(
      [op](const auto& v) {
        using P = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<P, std::monostate>) {
          return !TakesParams(op, std::make_index_sequence<std::variant_size_v<OpParams>>{});
        } else {
          return P::kOp == op;
        }
      },
      p);
}

uint64_t NextGraphVersion() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}
}  // namespace

Graph::Graph() : version_(NextGraphVersion()) {}

uint64_t ParamsHash(const Node& n) {
  uint64_t h = n.params.index();
  std::visit(
      [&h](const auto& v) {
        using P = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<P, RmsNormParams>) {
          h = HashMix(h, Bits(v.eps));
        } else if constexpr (std::is_same_v<P, SliceParams>) {
          h = HashMix(HashMix(h, uint64_t(v.col0)), uint64_t(v.width));
        } else if constexpr (std::is_same_v<P, RopeParams>) {
          for (int64_t x : {v.heads, v.head_dim, v.offset}) h = HashMix(h, uint64_t(x));
          h = HashMix(h, reinterpret_cast<uintptr_t>(v.table.get()));
        } else if constexpr (std::is_same_v<P, KvStoreParams>) {
          h = HashMix(h, uint64_t(v.part));
        } else if constexpr (std::is_same_v<P, AttentionParams>) {
          for (int64_t x : {v.q_heads, v.kv_heads, v.dk, v.dv}) h = HashMix(h, uint64_t(x));
          h = HashMix(h, Bits(v.scale));
        } else if constexpr (std::is_same_v<P, MlaParams>) {
          for (int64_t x : {v.heads, v.dn, v.dr, v.dv, v.rank}) h = HashMix(h, uint64_t(x));
          h = HashMix(h, Bits(v.scale));
        } else if constexpr (std::is_same_v<P, MoeOpParams>) {
          const MoeParams& m = v.moe;
          for (int64_t x : {int64_t(m.n_experts), int64_t(m.top_k), int64_t(m.n_group),
                            int64_t(m.topk_group), int64_t(m.scoring), int64_t(m.topk_method),
                            int64_t(m.norm_topk_prob), int64_t(m.ffn_dim), v.expert0, v.n_local})
            h = HashMix(h, uint64_t(x));
          h = HashMix(h, Bits(m.routed_scaling_factor));
        }
      },
      n.params);
  return h;
}

int Graph::Add(Node n) {
  for (int s : n.src) ES_ASSERT(s < int(nodes_.size()));
  ES_CHECK(ParamsFitOp(n.params, n.op), "graph node '", n.name, "' (", OpName(n.op),
           ") carries the parameters of another op");
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
