// FuseDecodeAttention (passes/fusions.h). Attention over the raw projections:
// attention(rope(q), store(rope(k)), store(v)), with k's rope folded into its store
// (FoldRopeStores), where the backend's attention can take raw rows, gets the raw q, k and v and
// rotates and stores them itself: the q rope and both stores are skipped (three dispatches and one
// barrier step fewer per layer on the GPU). MLA attention(rope(q), ...) rotates q's rope dims
// while loading them where the backend can: the q rope is skipped.
#include <algorithm>

#include "edgeseek/internal/graph/passes/fusions.h"

namespace es {

namespace {
void FuseAttention(const Graph& g, const FusionCaps& caps, FusionPlan& f, int j) {
  const auto& nodes = g.nodes();
  const Node& n = nodes[size_t(j)];
  if (n.src.size() != 3) return;
  const int qr = n.src[0], sk = n.src[1], sv = n.src[2];
  if (qr < 0 || sk < 0 || sv < 0) return;
  const Node &q = nodes[size_t(qr)], &k = nodes[size_t(sk)], &v = nodes[size_t(sv)];
  if (q.op != Op::kRope || f.uses[size_t(qr)] != 1 || k.op != Op::kKvStore ||
      f.uses[size_t(sk)] != 1 || f.rope_of[size_t(sk)] < 0 || v.op != Op::kKvStore ||
      f.uses[size_t(sv)] != 1 || nodes[size_t(v.src[0])].op == Op::kRope)
    return;
  const Node& kr = nodes[size_t(f.rope_of[size_t(sk)])];
  const AttentionParams& a = n.Params<AttentionParams>();
  const RopeParams &qp = q.Params<RopeParams>(), &kp = kr.Params<RopeParams>();
  if (qp.table.get() != kp.table.get() || qp.head_dim != a.dk || kp.head_dim != a.dk ||
      qp.offset != kp.offset || !caps.AttentionTakesRawRows(g, n))
    return;
  f.attn_rope[size_t(j)] = qr;
  f.attn_k[size_t(j)] = kr.src[0];
  f.attn_v[size_t(j)] = v.src[0];
  f.skip[size_t(qr)] = f.skip[size_t(sk)] = f.skip[size_t(sv)] = 1;
  for (int x : {q.src[0], kr.src[0], v.src[0]})
    f.live_until[size_t(x)] = std::max(f.live_until[size_t(x)], j);
}

void FuseMlaQRope(const Graph& g, const FusionCaps& caps, FusionPlan& f, int j) {
  const Node& n = g.node(j);
  const int qr = n.src[0];
  const Node& q = g.node(qr);
  if (q.op != Op::kRope || f.uses[size_t(qr)] != 1) return;
  const MlaParams& m = n.Params<MlaParams>();
  const RopeParams& qp = q.Params<RopeParams>();
  if (qp.heads != m.heads || qp.head_dim != m.dn + m.dr || qp.offset != m.dn ||
      qp.table->dim != m.dr || !caps.MlaFoldsQRope(g, n))
    return;
  f.attn_rope[size_t(j)] = qr;
  f.skip[size_t(qr)] = 1;
  f.live_until[size_t(q.src[0])] = std::max(f.live_until[size_t(q.src[0])], j);
}
}  // namespace

void FuseDecodeAttention(const Graph& g, const FusionCaps& caps, FusionPlan& f) {
  for (int j = 0; j < int(g.nodes().size()); ++j) {
    const Op op = g.node(j).op;
    if (op == Op::kAttention) FuseAttention(g, caps, f, j);
    if (op == Op::kMlaAttention) FuseMlaQRope(g, caps, f, j);
  }
}

}  // namespace es
