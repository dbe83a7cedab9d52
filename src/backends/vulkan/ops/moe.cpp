// kMoE: router GEMV/GEMM -> routing kernel (scores, group-limited / noaux_tc top-k, weights) ->
// expert kernels that read only the chosen experts' weights. Each projection's experts are one
// stack in device memory (weights.h ExpertStack); the stacks' buffers are bound as an array (at
// most kMoeMaxBlocks) and a small table maps each expert to (buffer, offset) of its gate, up and
// down matrices (offsets in elements, or in words for block-quantized experts, whose rows are
// repacked).
// Up to kMoeGemvMaxRows rows (decode), block-type experts (every GGUF block type; gate/up and down
// may differ, as in K-quant mixes) where the device has integer dot products (MoeGemvFor): the
// integer-dot GEMV's MOE variants (matmul_gemv.comp) — up: one workgroup row per (token, expert)
// pair, gate and up in one pass with SwiGLU, x quantized in the workgroup (a folded RMSNorm
// applied there), h written quantized too; down: one workgroup row per token, 4 outputs a
// workgroup (at least ES_VK_GEMV_MIN_GROUPS workgroups a token), its top_k choices weighted and
// added, plus a fused residual. Every other type
// with rows of whole 8-element groups, up to kGemvMaxRows rows: the same two GEMVs over f32 x
// (matmul_gemv.comp MOE without IDOT, "_fup" / "_fdown": the dense GEMV's float and block-type
// sums; gate/up and down may differ in type, as in q4_k_m files). Odd widths: the expert kernels
// (moe_expert.comp UP, DOWN), one workgroup row per pair. More rows (prefill, batches of other
// types; MoeGrouped): the pairs are grouped by expert (moe_compact.comp) and each expert's
// projections run as one GEMM over the rows routed to it (moe_gemm.glsl: matmul_gemm_cm.comp on
// tensor cores, else matmul_gemm.comp), so each expert's weights are read about once a step instead
// of once per token that chose it; gate and up into two [R*k, I] products, SwiGLU, down with the
// routing weight in its epilogue, and the tokens' k outputs added in choice order
// (moe_combine.comp). Scratch: logits [R, E], ids [R, k] (int32), weights [R, k], h [R*k, I];
// grouped also gate and up [R*k, I] each, the down outputs [R*k, D] and meta (counts, offsets,
// pairs).
#include <cstdint>
#include <cstring>

#include "ops/ops.h"

namespace es::vk {

// Buffers each expert kernel binds as one array (moe_expert.comp's NB): the UP kernel the gate
// and up stacks', the DOWN kernel the down stack's. A stack takes ceil(bytes / largest range)
// blocks: a V2-Lite f16 projection (369 MB) 3 where the range is 128 MiB (lavapipe), a V3 f16
// one (7.5 GB) 2 at 4 GiB (NVIDIA).
constexpr size_t kMoeMaxBlocks = 8;

namespace {
// The experts' types as the graph holds them (gate, up, down of expert 0; BuildMoe checks that
// every expert agrees and that the device copies keep them).
DType ExpertType(const Graph& g, const Node& n, int m) {
  return g.node(n.src[size_t(3) + size_t(m)]).weight->dtype;
}
}  // namespace

bool MoeTakesGemv(const Device& dev, const Graph& g, const Node& n, MoeGemv* spec) {
  const MoeParams& p = n.Params<MoeOpParams>().moe;
  const DType t = ExpertType(g, n, 0);
  MoeGemv unused;
  return n.shape[0] <= kMoeGemvMaxRows && ExpertType(g, n, 1) == t &&
         MoeGemvFor(dev, n.shape[0], n.shape[1], p.ffn_dim, p.top_k, t, ExpertType(g, n, 2),
                    spec ? spec : &unused);
}

// Whether a kMoE node's experts take the grouped GEMMs: past kMoeGemvMaxRows rows, or past
// kGemvMaxRows where they are not on the integer-dot GEMVs (the float expert kernels read an
// expert once per pair at the float GEMV's speed).
bool MoeGrouped(const Device& dev, const Graph& g, const Node& n) {
  return n.shape[0] > kMoeGemvMaxRows ||
         (n.shape[0] > kGemvMaxRows && !MoeTakesGemv(dev, g, n, nullptr));
}

std::vector<uint64_t> MoeScratch(const Device& dev, const Graph& g, const Node& n, int64_t T) {
  const MoeParams& p = n.Params<MoeOpParams>().moe;
  const uint64_t R = uint64_t(n.shape[0]), k = uint64_t(p.top_k), I = uint64_t(p.ffn_dim),
                 E = uint64_t(p.n_experts), D = uint64_t(n.shape[1]);
  std::vector<uint64_t> s{R * E * 4, R * k * 4, R * k * 4, R * k * I * 4};
  MoeGemv spec;
  if (MoeTakesGemv(dev, g, n, &spec) && spec.idot)  // h quantized for the down GEMV
    s.push_back(QuantXBytes(int64_t(R * k), int64_t(I), ExpertType(g, n, 0)));
  if (MoeGrouped(dev, g, n)) {
    s.push_back(R * k * I * 4);        // gate
    s.push_back(R * k * I * 4);        // up
    s.push_back(R * k * D * 4);        // down outputs, weighted
    s.push_back((2 * E + R * k) * 4);  // meta
  }
  return s;
}

void RecordGroupedGemm(OpContext& c, const GroupedGemm& g) {
  const bool cm = UseCoopmat(c.dev, g.K, g.dtype);
  const uint32_t bm = cm ? 64 : 128, bn = 128;  // the kernels' tiles
  const std::string t = TypeSuffix(g.dtype);
  const std::string name = cm ? "moe_gemm_cm_" + t + "_n" + std::to_string(c.dev.coopmat_n()) +
                                    (c.dev.shared_blocks() ? "_sb" : "") +
                                    (c.dev.coopmat_khr() ? "_khr" : "")
                              : "moe_gemm_" + t;
  ES_CHECK(g.w.size() <= kMoeMaxBlocks, "vulkan: '", c.n.name, "': grouped GEMM over ", g.w.size(),
           " buffers");
  std::vector<BufRange> w = g.w;
  while (w.size() < kMoeMaxBlocks) w.push_back(w[0]);
  Dispatch& d = c.Add(name, {uint32_t(kMoeMaxBlocks), 1, 1, 1, 1, 1});
  d.bindings = {w, {g.x}, {g.meta}, {g.y}, {g.table}, {g.wts}};
  d.writes = {3};
  ES_ASSERT(g.x_rs % 4 == 0);
  struct {
    uint32_t K, N, y_rs, E, xdiv, mat, use_wts, x_rs;
  } pc{g.K,    g.N,   g.y_rs ? g.y_rs : g.N, g.groups,
       g.xdiv, g.mat, g.use_wts ? 1u : 0u,   g.x_rs ? g.x_rs : g.K};
  d.Push(pc);
  d.groups[0] = (g.N + bn - 1) / bn;
  d.groups[1] = (g.max_rows + bm - 1) / bm;
  d.groups[2] = g.groups;
}

namespace {
// The grouped path (MoeGrouped): compaction, the gate/up/down GEMMs, SwiGLU, combine.
void RecordGroupedExperts(OpContext& c, const std::vector<BufRange> (&lists)[2],
                          const BufRange& tab, const DType (&dtype)[3]) {
  const MoeParams& p = c.n.Params<MoeOpParams>().moe;
  const int64_t R = c.n.shape[0], D = c.n.shape[1], I = p.ffn_dim,
                E = c.n.Params<MoeOpParams>().LocalExperts(), K = p.top_k;
  const BufRange ids = c.scratch[1], wts = c.scratch[2], h = c.scratch[3], gate = c.scratch[4],
                 up = c.scratch[5], yp = c.scratch[6], meta = c.scratch[7];
  {
    Dispatch& d = c.Add("moe_compact", {1, 1, 1});
    d.bindings = {{ids}, {meta}, {wts}};
    d.writes = {1};
    struct {
      uint32_t n, E;
    } pc{uint32_t(R * K), uint32_t(E)};
    d.Push(pc);
  }
  auto gemm = [&](int mat, const std::vector<BufRange>& w, BufRange x, BufRange y, int64_t N,
                  int64_t Kd, uint32_t xdiv, bool use_wts) {
    GroupedGemm gg{w,
                   x,
                   meta,
                   y,
                   tab,
                   wts,
                   dtype[mat],
                   uint32_t(N),
                   uint32_t(Kd),
                   uint32_t(E),
                   uint32_t(R),  // an expert's most pairs: one a row
                   xdiv,
                   uint32_t(mat),
                   use_wts};
    RecordGroupedGemm(c, gg);
  };
  gemm(0, lists[0], c.In(0), gate, I, D, uint32_t(K), false);
  gemm(1, lists[0], c.In(0), up, I, D, uint32_t(K), false);
  {
    Dispatch& d = c.Add("swiglu", {1, 1, 1});
    d.bindings = {{gate}, {up}, {h}};
    d.writes = {2};
    d.Push(uint32_t(R * K * I));
    Grid1D(d, uint64_t(R * K * I));
  }
  gemm(2, lists[1], h, yp, D, I, 1, true);
  {
    Dispatch& d = c.Add("moe_combine", {1, 1, 1});
    d.bindings = {{yp}, {c.Out()}, {wts}};
    d.writes = {1};
    struct {
      uint32_t R, D, top_k;
    } pc{uint32_t(R), uint32_t(D), uint32_t(K)};
    d.Push(pc);
    Grid1D(d, uint64_t(R * D));
  }
}
}  // namespace

namespace {
// matmul_gemv.comp's push constants (its MOE variants read top_k).
struct MoeGemvPush {
  uint32_t K, N, R, n0, x_rs, x_hs, x_off, y_rs, y_hs, y_off, has_bias, epi, norm;
  float eps;
  uint32_t top_k;
};

// The expert GEMVs' grid (matmul_gemv.comp MOE): the rows (pairs or tokens) in x, the output
// groups in y, so that every row's workgroup of one output group runs at once and the rows that
// chose the same expert read its weight rows from the cache.
void MoeGemvGrid(Dispatch& d, int64_t rows, int64_t output_groups) {
  d.groups[0] = uint32_t(rows);
  d.groups[1] = uint32_t(output_groups);
}

// The float / block-type path (MoeTakesGemv, !spec.idot): up (gate/up + SwiGLU over x, or x
// with the norm folded, h in f32) then down (the token's choices weighted and added in order, +
// the fused residual).
void RecordVecExperts(OpContext& c, const MoeGemv& spec, const std::vector<BufRange> (&lists)[2],
                      BufRange tab, const DType (&dtype)[3], BufRange x, const NormFold* norm) {
  const MoeParams& p = c.n.Params<MoeOpParams>().moe;
  const int64_t R = c.n.shape[0], D = c.n.shape[1], I = p.ffn_dim, K = p.top_k;
  const BufRange ids = c.scratch[1], wts = c.scratch[2], h = c.scratch[3];
  const std::vector<uint32_t> counts{uint32_t(kMoeMaxBlocks), 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  {
    Dispatch& d =
        c.Add(std::string("moe_gemv_") + TypeSuffix(dtype[0]) + "_fup", counts, spec.up_spec);
    d.bindings = {lists[0], {x}, {x},   {h},   {x},  {norm ? norm->weight : x},
                  {x},      {x}, {ids}, {wts}, {tab}};
    d.writes = {3};
    d.Push(MoeGemvPush{uint32_t(D), uint32_t(I), uint32_t(R * K), 0, uint32_t(D), 0, 0, uint32_t(I),
                       0, 0, 0, 0, norm ? 1u : 0u, norm ? norm->eps : 0.0f, uint32_t(K)});
    MoeGemvGrid(d, R * K, (I + spec.up_outputs - 1) / spec.up_outputs);
  }
  {
    const bool res = c.residual.size != 0;
    Dispatch& d =
        c.Add(std::string("moe_gemv_") + TypeSuffix(dtype[2]) + "_fdown", counts, spec.down_spec);
    d.bindings = {lists[1], {h},   {x},   {c.Out()}, {res ? c.residual : x}, {x}, {x},
                  {x},      {ids}, {wts}, {tab}};
    d.writes = {3};
    d.Push(MoeGemvPush{uint32_t(I), uint32_t(D), uint32_t(R), 0, uint32_t(I), 0, 0, uint32_t(D), 0,
                       0, 0, res ? 1u : 0u, 0, 0.0f, uint32_t(K)});
    MoeGemvGrid(d, R, (D + spec.down_outputs - 1) / spec.down_outputs);
  }
}

// The integer-dot path (MoeTakesGemv, spec.idot): up (gate/up + SwiGLU, h also quantized in the
// x format of both types) then down (the token's choices weighted and added, + the fused residual).
void RecordIdotExperts(OpContext& c, const MoeGemv& spec, const std::vector<BufRange> (&lists)[2],
                       BufRange tab, const DType (&dtype)[3], BufRange x, const NormFold* norm) {
  const MoeParams& p = c.n.Params<MoeOpParams>().moe;
  const int64_t R = c.n.shape[0], D = c.n.shape[1], I = p.ffn_dim, K = p.top_k;
  const BufRange ids = c.scratch[1], wts = c.scratch[2], h = c.scratch[3];
  const QuantX hq = QuantXRanges(c.scratch[4], R * K, I, dtype[0]);
  {
    Dispatch& d = c.Add(std::string("moe_gemv_") + TypeSuffix(dtype[0]) + "_up",
                        {uint32_t(kMoeMaxBlocks), 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, spec.up_spec);
    d.bindings = {lists[0], {x},     {x},   {h},   {x},  {norm ? norm->weight : x},
                  {hq.q},   {hq.ds}, {ids}, {wts}, {tab}};
    d.writes = {3, 6, 7};
    d.Push(MoeGemvPush{uint32_t(D), uint32_t(I), uint32_t(R * K), 0, uint32_t(D), 0, 0, uint32_t(I),
                       0, 0, 0, 0, norm ? 1u : 0u, norm ? norm->eps : 0.0f, uint32_t(K)});
    MoeGemvGrid(d, R * K, I / spec.up_outputs);  // I % 32 == 0 (MoeGemvFor)
  }
  {
    const bool res = c.residual.size != 0;
    // A Q8_0 down under another gate/up type reads h in int8 (MoeGemvFor).
    const bool down8 = dtype[2] == DType::kQ8_0 && dtype[0] != DType::kQ8_0;
    Dispatch& d =
        c.Add(std::string("moe_gemv_") + TypeSuffix(dtype[2]) + (down8 ? "_down8" : "_down"),
              {uint32_t(kMoeMaxBlocks), 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, spec.down_spec);
    d.bindings = {lists[1], {hq.q}, {x},   {c.Out()}, {res ? c.residual : x}, {hq.ds}, {x},
                  {x},      {ids},  {wts}, {tab}};
    d.writes = {3};
    d.Push(MoeGemvPush{uint32_t(I), uint32_t(D), uint32_t(R), 0, uint32_t(I), 0, 0, uint32_t(D), 0,
                       0, 0, res ? 1u : 0u, 0, 0.0f, uint32_t(K)});
    MoeGemvGrid(d, R, (D + spec.down_outputs - 1) / spec.down_outputs);
  }
}
}  // namespace

namespace {
// The routing parameters (moe_route_params.glsl) of experts [e0, e0 + EL) of the router's E.
RoutePush MakeRoutePush(const OpContext& c, int64_t e0, int64_t EL) {
  const MoeParams& p = c.n.Params<MoeOpParams>().moe;
  const int64_t E = p.n_experts;
  return RoutePush{uint32_t(E),
                   uint32_t(p.top_k),
                   uint32_t(p.n_group),
                   uint32_t(p.topk_group),
                   p.scoring == ScoringFunc::kSigmoid ? 1u : 0u,
                   uint32_t(p.topk_method),
                   p.norm_topk_prob ? 1u : 0u,
                   c.n.src[2] >= 0 ? 1u : 0u,
                   p.routed_scaling_factor,
                   uint32_t(e0),
                   EL == E ? 0u : uint32_t(EL)};
}
// The correction bias, or `other` where the node has none (bound, not read).
BufRange RouteBias(OpContext& c, BufRange other) {
  return c.n.src[2] >= 0 ? Range(c.weights.GetF32(c.W(2)).chunks[0].alloc) : other;
}

// moe_route.comp over the router's logits: ids and weights [R, top_k] (a range: local ids, weight
// 0 for the choices outside it).
void RecordRouting(OpContext& c, BufRange logits, BufRange ids, BufRange wts, int64_t e0,
                   int64_t EL) {
  const int64_t R = c.n.shape[0];
  Dispatch& d = c.Add("moe_route", {1, 1, 1, 1});
  d.bindings = {{logits}, {RouteBias(c, logits)}, {ids}, {wts}};
  d.writes = {2, 3};
  struct {
    uint32_t R;
    RoutePush rt;
  } pc{uint32_t(R), MakeRoutePush(c, e0, EL)};
  d.Push(pc);
  d.groups[0] = uint32_t(R);  // one workgroup per token
}

// Steps of up to this many rows route in the router GEMV's last workgroup (RouteInRouterGemv):
// it routes its rows one after another, where moe_route takes a workgroup a row side by side.
constexpr int64_t kRouteInGemvMaxRows = 4;

// Whether the router GEMV routes in its last workgroup (matmul_gemv.comp ROUTE) instead of a
// moe_route dispatch of its own: ES_VK_FUSE and ES_VK_MOE_ROUTE_FUSE, decode steps of up to
// kRouteInGemvMaxRows rows, a float router (f32, f16, bf16) of one chunk with rows of whole
// 8-element groups, at most 256 experts.
bool RouteInRouterGemv(const OpContext& c, const DeviceWeight& router) {
  const int64_t R = c.n.shape[0], K = router.cols;
  return c.dev.tuning().On(Knob::kFuse) && c.dev.tuning().On(Knob::kMoeRouteFuse) &&
         R <= kRouteInGemvMaxRows &&
         (router.dtype == DType::kF32 || router.dtype == DType::kF16 ||
          router.dtype == DType::kBF16) &&
         router.chunks.size() == 1 && K % 8 == 0 && router.rows <= 256;
}

// The router GEMV and the routing: logits, then ids and weights [R, top_k].
void RecordRouter(OpContext& c, BufRange x, const NormFold* norm, int64_t e0, int64_t EL) {
  const int64_t R = c.n.shape[0], D = c.n.shape[1];
  const BufRange logits = c.scratch[0], ids = c.scratch[1], wts = c.scratch[2];
  const DeviceWeight& router = c.weights.Get(c.W(1));
  if (!RouteInRouterGemv(c, router)) {
    RecordMatMul(c, x, R, D, router, nullptr, logits, router.rows, nullptr, norm);
    RecordRouting(c, logits, ids, wts, e0, EL);
    return;
  }
  // The GEMV's count of finished workgroups (one row group: R <= kGemvMaxRows), zero between
  // steps: its own memory, not the arena, which other nodes' data share.
  Allocation count = c.host_pool->Alloc(256, c.n.name + " routing count");
  std::memset(count.mapped, 0, 256);
  c.owned->push_back(count);
  const GemvRoute route{RouteBias(c, logits), ids, wts, Range(count), MakeRoutePush(c, e0, EL)};
  RecordRouterGemv(c, x, R, D, router, logits, norm, route);
}

// The EL experts' device stacks and the table the expert kernels read: per expert, (buffer index
// in its kernel's list, offset) of gate, up and down; the lists padded to kMoeMaxBlocks.
struct ExpertTable {
  std::vector<BufRange> lists[2];  // gate and up (the UP kernel), down (the DOWN kernel)
  std::vector<uint32_t> table;     // [6 * EL]
  DType dtype[3] = {DType::kF32, DType::kF32, DType::kF32};
};
ExpertTable MakeExpertTable(OpContext& c, int64_t EL) {
  const Node& n = c.n;
  const int64_t D = n.shape[1], I = n.Params<MoeOpParams>().moe.ffn_dim;
  ExpertTable t;
  t.table.resize(size_t(6 * EL));
  // Gate and up share one type (the UP kernel reads both), down may have another (llama.cpp's
  // q4_k_m files keep gate/up in Q4_K and some layers' down in Q6_K).
  for (int m = 0; m < 3; ++m) {
    std::vector<const Tensor*> members;
    for (int64_t e = 0; e < EL; ++e) members.push_back(&c.W(int(3 + 3 * e + m)));
    const ExpertStack& st = c.weights.GetExperts(members);
    const int64_t rows = m == 2 ? D : I, cols = m == 2 ? I : D;
    ES_CHECK(st.rows == rows && st.cols == cols, "vulkan: expert weight '", members[0]->name,
             "' should be [", rows, ", ", cols, "]");
    t.dtype[m] = st.dtype;
    ES_CHECK(m != 1 || t.dtype[1] == t.dtype[0], "vulkan: moe '", n.name, "': expert weight '",
             members[0]->name, "' has type ", Name(t.dtype[1]), " but the gate projections have ",
             Name(t.dtype[0]), " (gate and up share one type)");
    // Offsets in elements for dense types, in 32-bit words for repacked block types.
    const uint64_t unit = Repacked(st.dtype) ? 4 : RowBytes(st.dtype, 1);
    std::vector<BufRange>& blocks = t.lists[m == 2 ? 1 : 0];
    for (int64_t e = 0; e < EL; ++e) {
      const Allocation& a = st.block_of(e);
      size_t b = 0;
      while (b < blocks.size() && blocks[b].buffer != a.buffer) ++b;
      if (b == blocks.size()) {
        ES_CHECK(blocks.size() < kMoeMaxBlocks, "vulkan: moe '", n.name, "': the ",
                 m == 2 ? "down" : "gate and up", " experts span more than ", kMoeMaxBlocks,
                 " buffers of the device's largest range");
        blocks.push_back({a.buffer, 0, a.buffer_size});
      }
      const uint64_t off = st.offset(e);
      ES_CHECK(off % unit == 0 && off / unit <= UINT32_MAX, "vulkan: expert weight '",
               members[size_t(e)]->name, "' lies beyond a 32-bit offset of its buffer");
      t.table[size_t(6 * e + 2 * m)] = uint32_t(b);
      t.table[size_t(6 * e + 2 * m + 1)] = uint32_t(off / unit);
    }
  }
  for (auto& blocks : t.lists)
    while (blocks.size() < kMoeMaxBlocks) blocks.push_back(blocks[0]);
  return t;
}
}  // namespace

void BuildMoe(OpContext& c) {
  const MoeParams& p = c.n.Params<MoeOpParams>().moe;
  const auto& n = c.n;
  // E: the experts the router scores; EL of them held here, from e0 (all: EL = E, e0 = 0).
  const int64_t R = n.shape[0], D = n.shape[1], I = p.ffn_dim, E = p.n_experts, K = p.top_k,
                EL = n.Params<MoeOpParams>().LocalExperts(),
                e0 = n.Params<MoeOpParams>().FirstExpert();
  ES_CHECK(EL >= 1 && e0 >= 0 && e0 + EL <= E, "vulkan: moe '", n.name, "': experts [", e0, ", ",
           e0 + EL, ") are not a range of the router's ", E);
  ES_CHECK(int64_t(n.src.size()) == 3 + 3 * EL, "vulkan: moe '", n.name, "' has ", n.src.size(),
           " inputs, expected ", 3 + 3 * EL);
  ES_CHECK(K >= 1 && K <= E && (p.n_group <= 1 || E % p.n_group == 0) && p.topk_group <= p.n_group,
           "vulkan: moe '", n.name, "': inconsistent routing parameters");
  const BufRange ids = c.scratch[1], wts = c.scratch[2], h = c.scratch[3];
  // Fusions decided by the builder (MoeTakesGemv only): a folded RMSNorm (x is the norm's input;
  // the router GEMV and the up GEMV apply it) and a residual added by the down GEMV.
  MoeGemv spec;
  const bool gemv = MoeTakesGemv(c.dev, c.g, n, &spec);
  ES_ASSERT(gemv || (!c.norm_node && !c.residual.size));
  NormFold nf;
  const BufRange x = FoldedNormInput(c, &nf);
  RecordRouter(c, x, c.norm_node ? &nf : nullptr, e0, EL);
  const ExpertTable et = MakeExpertTable(c, EL);
  const auto& lists = et.lists;
  const auto& table = et.table;
  const auto& dtype = et.dtype;
  Allocation tab = c.host_pool->Alloc(table.size() * 4, n.name + " expert table");
  std::memcpy(tab.mapped, table.data(), table.size() * 4);
  c.owned->push_back(tab);
  if (MoeGrouped(c.dev, c.g, n)) {
    RecordGroupedExperts(c, lists, Range(tab), dtype);
    return;
  }
  if (gemv) {
    ES_CHECK(dtype[0] == ExpertType(c.g, n, 0) && dtype[2] == ExpertType(c.g, n, 2),
             "vulkan: moe '", n.name, "': the device copies of its experts changed type");
    if (spec.idot) {
      RecordIdotExperts(c, spec, lists, Range(tab), dtype, x, c.norm_node ? &nf : nullptr);
    } else {
      // Float experts are read by 8-element loads (wload8): their offsets must be whole groups.
      for (int64_t e = 0; e < EL; ++e)
        for (int m = 0; m < 3; ++m)
          ES_CHECK(Repacked(dtype[m]) || table[size_t(6 * e + 2 * m + 1)] % 8 == 0, "vulkan: moe '",
                   n.name, "': expert ", e, " lies off an 8-element boundary");
      RecordVecExperts(c, spec, lists, Range(tab), dtype, x, c.norm_node ? &nf : nullptr);
    }
    return;
  }

  const GemvShape gs = GemvFor(c.dev);

  // Dense experts with rows of whole 8-element groups take the vector variant; block types
  // have one variant (8-element slices).
  auto vec = [&](int64_t cols, DType t) { return cols % 8 == 0 && !Repacked(t); };
  struct {
    uint32_t D, I, top_k;
  } pc{uint32_t(D), uint32_t(I), uint32_t(K)};
  {
    Dispatch& d =
        c.Add(std::string("moe_up_") + TypeSuffix(dtype[0]) + (vec(D, dtype[0]) ? "_vec" : ""),
              {uint32_t(kMoeMaxBlocks), 1, 1, 1, 1, 1}, {gs.wg, gs.rows});
    d.bindings = {lists[0], {c.In(0)}, {ids}, {wts}, {Range(tab)}, {h}};
    d.writes = {5};
    d.Push(pc);
    d.groups[0] = uint32_t((I + gs.rows - 1) / gs.rows);
    d.groups[1] = uint32_t(R * K);
  }
  {
    Dispatch& d =
        c.Add(std::string("moe_down_") + TypeSuffix(dtype[2]) + (vec(I, dtype[2]) ? "_vec" : ""),
              {uint32_t(kMoeMaxBlocks), 1, 1, 1, 1, 1}, {gs.wg, gs.rows});
    d.bindings = {lists[1], {h}, {ids}, {wts}, {Range(tab)}, {c.Out()}};
    d.writes = {5};
    d.Push(pc);
    d.groups[0] = uint32_t((D + gs.rows - 1) / gs.rows);
    d.groups[1] = uint32_t(R);
  }
}

}  // namespace es::vk
