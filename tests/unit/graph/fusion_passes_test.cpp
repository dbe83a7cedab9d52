// The backends' fusion passes (graph/passes/fusions.h) on hand-built layers shaped as
// models/arch.cpp builds them: what each pass fuses, that a backend's capability switches each
// off alone, and the structural cases no pass may fuse. The fused kernels' numerics are the
// backends' tests (tests/unit/vulkan: fused against the plain graph).
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "edgeseek/internal/core/tensor.h"
#include "edgeseek/internal/graph/graph.h"
#include "edgeseek/internal/graph/passes/fusions.h"

namespace es {
namespace {

// Every capability on unless switched off.
struct Caps : FusionCaps {
  bool epilogue = true, norm = true, rope_store = true, mla_store = true, raw_rows = true,
       mla_q = true;
  bool Epilogue(const Graph&, const Node&) const override { return epilogue; }
  bool FoldsNorm(const Graph&, const Node&) const override { return norm; }
  bool RopeIntoStore() const override { return rope_store; }
  bool MlaKvStore() const override { return mla_store; }
  bool AttentionTakesRawRows(const Graph&, const Node&) const override { return raw_rows; }
  bool MlaFoldsQRope(const Graph&, const Node&) const override { return mla_q; }
  // Quantized x: every matmul (format 0; `k` format 1 if k_int16), once, producers writing it.
  bool quant = true, once = true, writes = true, k_int16 = false;
  int QuantizedX(const Graph&, const Node& m) const override {
    return !quant ? -1 : k_int16 && m.name == "k" ? 1 : 0;
  }
  bool QuantizeXOnce(const Graph&, const Node&, bool) const override { return once; }
  bool WritesQuantizedX(const Graph&, const Node&, const Node&) const override { return writes; }
};

// Weights are looked at by type and shape only: no data.
struct Weights {
  std::vector<std::unique_ptr<Tensor>> t;
  const Tensor& W(int64_t rows, int64_t cols, DType type = DType::kQ8_0) {
    auto w = std::make_unique<Tensor>();
    w->name = "w" + std::to_string(t.size());
    w->dtype = type;
    w->shape = cols ? Shape{rows, cols} : Shape{rows};
    t.push_back(std::move(w));
    return *t.back();
  }
};

int Add(Graph& g, Op op, const std::string& name, std::vector<int> src, Shape shape,
        OpParams params = {}, int layer = -1) {
  Node n;
  n.op = op;
  n.name = name;
  n.src = std::move(src);
  n.shape = std::move(shape);
  n.params = std::move(params);
  n.layer = layer;
  return g.Add(std::move(n));
}

// Ids of one dense decoder layer (attention + SwiGLU MLP), T rows, as arch.cpp orders them.
struct Dense {
  int x, norm, q, k, v, q_rope, k_rope, k_store, v_store, attn, o, res, norm2, gate, up, act, down,
      out;
};
Dense DenseLayer(Graph& g, Weights& w, int64_t T, const std::shared_ptr<const RopeTable>& rope) {
  const int64_t D = 64, H = 4, Hkv = 2, hd = 16, I = 96;
  Dense d{};
  d.x = Add(g, Op::kInput, "x", {}, {T, D});
  d.norm = Add(g, Op::kRmsNorm, "norm", {d.x, g.AddWeight(w.W(D, 0, DType::kF32))}, {T, D},
               RmsNormParams{1e-6f});
  d.q = Add(g, Op::kMatMul, "q", {d.norm, g.AddWeight(w.W(H * hd, D)), -1}, {T, H * hd});
  d.k = Add(g, Op::kMatMul, "k", {d.norm, g.AddWeight(w.W(Hkv * hd, D)), -1}, {T, Hkv * hd});
  d.v = Add(g, Op::kMatMul, "v", {d.norm, g.AddWeight(w.W(Hkv * hd, D)), -1}, {T, Hkv * hd});
  d.q_rope = Add(g, Op::kRope, "q_rope", {d.q}, {T, H * hd}, RopeParams{H, hd, 0, rope});
  d.k_rope = Add(g, Op::kRope, "k_rope", {d.k}, {T, Hkv * hd}, RopeParams{Hkv, hd, 0, rope});
  d.k_store = Add(g, Op::kKvStore, "k_cache", {d.k_rope}, {T, Hkv * hd}, KvStoreParams{0}, 0);
  d.v_store = Add(g, Op::kKvStore, "v_cache", {d.v}, {T, Hkv * hd}, KvStoreParams{1}, 0);
  d.attn = Add(g, Op::kAttention, "attn", {d.q_rope, d.k_store, d.v_store}, {T, H * hd},
               AttentionParams{H, Hkv, hd, hd, 0.25f}, 0);
  d.o = Add(g, Op::kMatMul, "o", {d.attn, g.AddWeight(w.W(D, H * hd)), -1}, {T, D});
  d.res = Add(g, Op::kAdd, "res", {d.x, d.o}, {T, D});
  d.norm2 = Add(g, Op::kRmsNorm, "norm2", {d.res, g.AddWeight(w.W(D, 0, DType::kF32))}, {T, D},
                RmsNormParams{1e-6f});
  d.gate = Add(g, Op::kMatMul, "gate", {d.norm2, g.AddWeight(w.W(I, D)), -1}, {T, I});
  d.up = Add(g, Op::kMatMul, "up", {d.norm2, g.AddWeight(w.W(I, D)), -1}, {T, I});
  d.act = Add(g, Op::kSwiGLU, "act", {d.gate, d.up}, {T, I});
  d.down = Add(g, Op::kMatMul, "down", {d.act, g.AddWeight(w.W(D, I)), -1}, {T, D});
  d.out = Add(g, Op::kAdd, "out", {d.res, d.down}, {T, D});
  // The graph's output is not the last add (a GEMV may not write the output as an epilogue).
  Add(g, Op::kGetRows, "rows", {d.out}, {1, D});
  return d;
}

std::shared_ptr<const RopeTable> Rope(int dim) {
  auto r = std::make_shared<RopeTable>();
  r->dim = dim;
  r->inv_freq.assign(size_t(dim / 2), 1.0f);
  return r;
}

std::vector<int> Skipped(const FusionPlan& f) {
  std::vector<int> s;
  for (size_t i = 0; i < f.skip.size(); ++i)
    if (f.skip[i]) s.push_back(int(i));
  return s;
}

TEST(FusionPasses, DenseDecodeLayerFusesEverything) {
  Graph g;
  Weights w;
  const Dense d = DenseLayer(g, w, 1, Rope(16));
  const FusionPlan f = PlanFusions(g, Caps{});
  // o + residual, down + residual: the adds are written by the matmuls.
  EXPECT_EQ(f.out_node[size_t(d.o)], d.res);
  EXPECT_EQ(f.res_node[size_t(d.o)], d.x);
  EXPECT_EQ(f.write_at[size_t(d.res)], d.o);
  EXPECT_EQ(f.out_node[size_t(d.down)], d.out);
  EXPECT_EQ(f.res_node[size_t(d.down)], d.res);
  // gate and up: one dual GEMV at up (the later), writing the SwiGLU's output.
  EXPECT_EQ(f.gate_node[size_t(d.up)], d.gate);
  EXPECT_EQ(f.up_node[size_t(d.up)], d.up);
  EXPECT_EQ(f.out_node[size_t(d.up)], d.act);
  EXPECT_EQ(f.write_at[size_t(d.act)], d.up);
  // Both norms folded into every matmul reading them; their inputs live until the last.
  for (int m : {d.q, d.k, d.v}) EXPECT_EQ(f.norm_of[size_t(m)], d.norm);
  for (int m : {d.gate, d.up}) EXPECT_EQ(f.norm_of[size_t(m)], d.norm2);
  EXPECT_EQ(f.live_until[size_t(d.x)], d.v);  // the last matmul folding the norm
  EXPECT_EQ(f.live_until[size_t(d.res)], d.up);
  // k's rope folded into its store, then the attention takes raw q, k, v.
  EXPECT_EQ(f.rope_of[size_t(d.k_store)], d.k_rope);
  EXPECT_EQ(f.attn_rope[size_t(d.attn)], d.q_rope);
  EXPECT_EQ(f.attn_k[size_t(d.attn)], d.k);
  EXPECT_EQ(f.attn_v[size_t(d.attn)], d.v);
  for (int x : {d.q, d.k, d.v}) EXPECT_EQ(f.live_until[size_t(x)], d.attn);
  EXPECT_EQ(Skipped(f), (std::vector<int>{d.norm, d.q_rope, d.k_rope, d.k_store, d.v_store, d.res,
                                          d.norm2, d.gate, d.act, d.out}));
}

TEST(FusionPasses, QuantizedXIsSharedOrWrittenByItsProducer) {
  Graph g;
  Weights w;
  const Dense d = DenseLayer(g, w, 1, Rope(16));
  const FusionPlan f = PlanFusions(g, Caps{});
  // q, k and v share one copy of norm(x), filled by q; o reads the one the attention writes;
  // the dual GEMV (at up) one copy of norm2(res); down the one the dual GEMV writes.
  ASSERT_EQ(f.quantized_x.size(), 4u);
  const auto& c = f.quantized_x;
  EXPECT_EQ((std::vector<int>{c[0].producer, c[0].reader, c[0].last}),
            (std::vector<int>{-1, d.q, d.v}));
  EXPECT_EQ((std::vector<int>{c[1].producer, c[1].reader, c[1].last}),
            (std::vector<int>{d.attn, d.o, d.o}));
  EXPECT_EQ((std::vector<int>{c[2].producer, c[2].reader, c[2].last}),
            (std::vector<int>{-1, d.up, d.up}));
  EXPECT_EQ((std::vector<int>{c[3].producer, c[3].reader, c[3].last}),
            (std::vector<int>{d.up, d.down, d.down}));
  for (int m : {d.q, d.k, d.v}) EXPECT_EQ(f.xq_of[size_t(m)], 0);
  EXPECT_EQ(f.xq_of[size_t(d.o)], 1);
  EXPECT_EQ(f.xq_of[size_t(d.up)], 2);
  EXPECT_EQ(f.xq_of[size_t(d.down)], 3);
  EXPECT_EQ(f.xq_of[size_t(d.gate)], -1);  // folded into the dual GEMV at up

  Caps k16;
  k16.k_int16 = true;  // another format: k quantizes its own copy
  const FusionPlan f16 = PlanFusions(g, k16);
  EXPECT_EQ(f16.xq_of[size_t(d.q)], f16.xq_of[size_t(d.v)]);
  EXPECT_NE(f16.xq_of[size_t(d.k)], f16.xq_of[size_t(d.q)]);
  EXPECT_EQ(f16.quantized_x[size_t(f16.xq_of[size_t(d.q)])].last, d.v);

  Caps nw;
  nw.writes = false;  // producers write plain rows: o and down quantize their own copies
  const FusionPlan fn = PlanFusions(g, nw);
  for (int m : {d.o, d.down}) {
    ASSERT_GE(fn.xq_of[size_t(m)], 0);
    EXPECT_EQ(fn.quantized_x[size_t(fn.xq_of[size_t(m)])].producer, -1);
    EXPECT_EQ(fn.quantized_x[size_t(fn.xq_of[size_t(m)])].reader, m);
  }

  Caps none;
  none.once = none.writes = false;  // each GEMV quantizes x in its workgroups
  EXPECT_TRUE(PlanFusions(g, none).quantized_x.empty());
  none = Caps{};
  none.quant = false;  // no integer-dot GEMVs
  EXPECT_TRUE(PlanFusions(g, none).quantized_x.empty());
}

TEST(FusionPasses, EachCapabilitySwitchesOffItsFusionAlone) {
  Graph g;
  Weights w;
  const Dense d = DenseLayer(g, w, 1, Rope(16));
  Caps none;
  none.epilogue = none.norm = none.rope_store = none.mla_store = none.raw_rows = none.mla_q =
      none.quant = false;
  const FusionPlan plain = PlanFusions(g, none);
  EXPECT_TRUE(Skipped(plain).empty());
  for (size_t i = 0; i < plain.write_at.size(); ++i) EXPECT_EQ(plain.write_at[i], int(i));
  for (int v : plain.live_until) EXPECT_EQ(v, -1);

  Caps c;
  c.epilogue = false;
  FusionPlan f = PlanFusions(g, c);
  EXPECT_EQ(f.out_node[size_t(d.o)], -1);
  EXPECT_EQ(f.gate_node[size_t(d.up)], -1);
  EXPECT_EQ(f.norm_of[size_t(d.gate)], d.norm2);
  EXPECT_EQ(f.attn_rope[size_t(d.attn)], d.q_rope);

  c = Caps{};
  c.norm = false;
  f = PlanFusions(g, c);
  for (int m : {d.q, d.k, d.v, d.gate, d.up}) EXPECT_EQ(f.norm_of[size_t(m)], -1);
  EXPECT_EQ(f.out_node[size_t(d.o)], d.res);

  c = Caps{};
  c.raw_rows = false;
  f = PlanFusions(g, c);
  EXPECT_EQ(f.attn_rope[size_t(d.attn)], -1);
  EXPECT_EQ(f.rope_of[size_t(d.k_store)], d.k_rope);  // the store still rotates
  EXPECT_FALSE(f.skip[size_t(d.k_store)]);

  c = Caps{};
  c.rope_store = false;  // the fused attention needs k's rope in its store
  f = PlanFusions(g, c);
  EXPECT_EQ(f.rope_of[size_t(d.k_store)], -1);
  EXPECT_EQ(f.attn_rope[size_t(d.attn)], -1);
}

TEST(FusionPasses, StructureThatMayNotFuse) {
  Graph g;
  Weights w;
  const int64_t T = 1, D = 64, I = 96;
  const int x = Add(g, Op::kInput, "x", {}, {T, D});
  const int n = Add(g, Op::kRmsNorm, "norm", {x, g.AddWeight(w.W(D, 0, DType::kF32))}, {T, D},
                    RmsNormParams{1e-6f});
  // A matmul read twice takes no epilogue; a norm also read by an add is not folded.
  const int m = Add(g, Op::kMatMul, "m", {n, g.AddWeight(w.W(D, D)), -1}, {T, D});
  const int a1 = Add(g, Op::kAdd, "a1", {x, m}, {T, D});
  const int a2 = Add(g, Op::kAdd, "a2", {m, n}, {T, D});
  // gate and up of different x: no dual GEMV; of different types: none either.
  const int gt = Add(g, Op::kMatMul, "gate", {a1, g.AddWeight(w.W(I, D)), -1}, {T, I});
  const int up = Add(g, Op::kMatMul, "up", {a2, g.AddWeight(w.W(I, D)), -1}, {T, I});
  const int act = Add(g, Op::kSwiGLU, "act", {gt, up}, {T, I});
  const int gt2 = Add(g, Op::kMatMul, "gate2", {a1, g.AddWeight(w.W(I, D)), -1}, {T, I});
  const int up2 =
      Add(g, Op::kMatMul, "up2", {a1, g.AddWeight(w.W(I, D, DType::kQ4_0)), -1}, {T, I});
  const int act2 = Add(g, Op::kSwiGLU, "act2", {gt2, up2}, {T, I});
  // A rope read by a store and by something else stays a rope.
  const auto rope = Rope(16);
  const int r = Add(g, Op::kRope, "rope", {m}, {T, D}, RopeParams{4, 16, 0, rope});
  const int s = Add(g, Op::kKvStore, "store", {r}, {T, D}, KvStoreParams{0}, 0);
  Add(g, Op::kAdd, "sum", {act, act2}, {T, I});
  Add(g, Op::kAdd, "tail", {r, s}, {T, D});
  const FusionPlan f = PlanFusions(g, Caps{});
  EXPECT_EQ(f.out_node[size_t(m)], -1);
  EXPECT_EQ(f.norm_of[size_t(m)], -1);
  EXPECT_EQ(f.gate_node[size_t(up)], -1);
  EXPECT_EQ(f.gate_node[size_t(up2)], -1);
  EXPECT_EQ(f.rope_of[size_t(s)], -1);
  EXPECT_TRUE(Skipped(f).empty());
}

// MLA's layer as arch.cpp builds it: q, its rope, kv_a split into the latent (normed, stored) and
// the rope part (rotated, stored), then the attention.
struct Mla {
  int q, q_rope, kva, c_raw, c_norm, pe_raw, pe, c_store, pe_store, mla;
};
Mla MlaLayer(Graph& g, Weights& w, int64_t r) {
  const int64_t T = 1, D = 64, H = 2, dn = 16, dr = 8, dv = 16;
  const auto rope = Rope(int(dr));
  Mla m{};
  const int x = Add(g, Op::kInput, "x", {}, {T, D});
  m.q = Add(g, Op::kMatMul, "q", {x, g.AddWeight(w.W(H * (dn + dr), D)), -1}, {T, H * (dn + dr)});
  m.q_rope =
      Add(g, Op::kRope, "q_rope", {m.q}, {T, H * (dn + dr)}, RopeParams{H, dn + dr, dn, rope});
  m.kva = Add(g, Op::kMatMul, "kv_a", {x, g.AddWeight(w.W(r + dr, D)), -1}, {T, r + dr});
  m.c_raw = Add(g, Op::kSlice, "c_raw", {m.kva}, {T, r}, SliceParams{0, r});
  m.c_norm = Add(g, Op::kRmsNorm, "kv_a_norm", {m.c_raw, g.AddWeight(w.W(r, 0, DType::kF32))},
                 {T, r}, RmsNormParams{1e-6f});
  m.pe_raw = Add(g, Op::kSlice, "k_pe_raw", {m.kva}, {T, dr}, SliceParams{r, dr});
  m.pe = Add(g, Op::kRope, "k_pe", {m.pe_raw}, {T, dr}, RopeParams{1, dr, 0, rope});
  m.c_store = Add(g, Op::kKvStore, "c_cache", {m.c_norm}, {T, r}, KvStoreParams{0}, 0);
  m.pe_store = Add(g, Op::kKvStore, "k_pe_cache", {m.pe}, {T, dr}, KvStoreParams{1}, 0);
  m.mla = Add(g, Op::kMlaAttention, "mla", {m.q_rope, m.c_store, m.pe_store}, {T, H * dv},
              MlaParams{H, dn, dr, dv, r, 0.1f}, 0);
  Add(g, Op::kGetRows, "rows", {m.mla}, {1, H * dv});
  return m;
}

TEST(FusionPasses, MlaKvChainBecomesOneStoreAndQRotatesInTheKernel) {
  Graph g;
  Weights w;
  const Mla m = MlaLayer(g, w, 32);
  const FusionPlan f = PlanFusions(g, Caps{});
  EXPECT_EQ(f.rope_of[size_t(m.pe_store)], m.pe);
  EXPECT_EQ(f.mla_c_store[size_t(m.pe_store)], m.c_store);
  EXPECT_EQ(f.mla_norm[size_t(m.pe_store)], m.c_norm);
  EXPECT_EQ(f.live_until[size_t(m.kva)], m.pe_store);
  EXPECT_EQ(f.attn_rope[size_t(m.mla)], m.q_rope);
  EXPECT_EQ(Skipped(f), (std::vector<int>{m.q_rope, m.c_raw, m.c_norm, m.pe_raw, m.pe, m.c_store}));

  Caps c;
  c.mla_store = false;
  c.mla_q = false;
  const FusionPlan off = PlanFusions(g, c);
  EXPECT_EQ(off.mla_c_store[size_t(m.pe_store)], -1);
  EXPECT_EQ(off.attn_rope[size_t(m.mla)], -1);
  EXPECT_EQ(Skipped(off), (std::vector<int>{m.pe}));  // the rope still folds into its store
}

TEST(FusionPasses, MlaKvChainOfAnOddLatentIsNotFused) {
  Graph g;
  Weights w;
  const Mla m = MlaLayer(g, w, 31);  // mla_kv_store writes pairs: both widths must be even
  const FusionPlan f = PlanFusions(g, Caps{});
  EXPECT_EQ(f.mla_c_store[size_t(m.pe_store)], -1);
  EXPECT_FALSE(f.skip[size_t(m.c_store)]);
}

}  // namespace
}  // namespace es
