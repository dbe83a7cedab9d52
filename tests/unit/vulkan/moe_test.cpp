// MoE routing and expert execution against the reference: softmax greedy (V2-Lite style),
// group-limited greedy (V2), noaux_tc with sigmoid scores, correction bias, normalisation and
// routed scaling (V3); odd and vector-friendly sizes; f32/bf16/f16 experts.
#include <gtest/gtest.h>

#include "backends/cpu/reference.h"
#include "test_util.h"
#include "vk_util.h"

namespace es::test {
namespace {

struct MoeCase {
  const char* name;
  int R, D, I, E, k, n_group, topk_group;
  ScoringFunc scoring;
  TopkMethod method;
  bool norm, bias;
  float scaling;
  DType dt;
  float bias_scale = 0.2f;  // the correction bias in [-bias_scale, bias_scale]
  // A head split's expert range: the node holds experts [e0, e0 + n_local) of the E the router
  // scores (n_local = 0: all); the other experts' choices add nothing.
  int e0 = 0, n_local = 0;
};

class VulkanMoe : public VulkanTest, public ::testing::WithParamInterface<MoeCase> {};

TEST_P(VulkanMoe, MatchesReference) {
  const MoeCase& c = GetParam();
  auto p = std::make_shared<MoeParams>();
  p->n_experts = c.E;
  p->top_k = c.k;
  p->n_group = c.n_group;
  p->topk_group = c.topk_group;
  p->scoring = c.scoring;
  p->topk_method = c.method;
  p->norm_topk_prob = c.norm;
  p->routed_scaling_factor = c.scaling;
  p->ffn_dim = c.I;
  Tensor X = RandomTensor("x", DType::kF32, {c.R, c.D}, 41);
  Tensor G = RandomTensor("router", DType::kF32, {c.E, c.D}, 42);
  Tensor Bias = RandomTensor("bias", DType::kF32, {c.E}, 43, c.bias_scale);
  std::vector<Tensor> ex;
  ex.reserve(size_t(3 * c.E));
  for (int e = 0; e < c.E; ++e) {
    ex.push_back(
        RandomTensor("g" + std::to_string(e), c.dt, {c.I, c.D}, uint64_t(100 + 3 * e), 0.5f));
    ex.push_back(
        RandomTensor("u" + std::to_string(e), c.dt, {c.I, c.D}, uint64_t(101 + 3 * e), 0.5f));
    ex.push_back(
        RandomTensor("d" + std::to_string(e), c.dt, {c.D, c.I}, uint64_t(102 + 3 * e), 0.5f));
  }
  Graph g;
  Node n;
  n.op = Op::kMoE;
  n.name = "moe";
  n.src = {Input(g, X, c.R), g.AddWeight(G), c.bias ? g.AddWeight(Bias) : -1};
  const int e1 = c.n_local ? c.e0 + c.n_local : c.E;
  for (int e = c.n_local ? c.e0 : 0; e < e1; ++e)
    for (int m = 0; m < 3; ++m) n.src.push_back(g.AddWeight(ex[size_t(3 * e + m)]));
  n.shape = {c.R, c.D};
  n.params = MoeOpParams{*p, c.n_local ? c.e0 : 0, c.n_local};
  g.Add(n);
  auto kv = SharedVulkan().CreateKv(KvSpec{1, {2, 2}, DType::kF32}, 1, 256);
  std::vector<float> got(size_t(c.R * c.D));
  SharedVulkan().Compute(g, RowsBatch(c.R), *kv, got.data());
  // The reference over every expert, those outside the range with a zero down projection.
  std::vector<Tensor> zero_down;
  zero_down.reserve(size_t(c.E));
  std::vector<const Tensor*> eptr;
  for (int e = 0; e < c.E; ++e)
    for (int m = 0; m < 3; ++m) {
      const Tensor& t = ex[size_t(3 * e + m)];
      if (m == 2 && c.n_local && (e < c.e0 || e >= e1)) {
        zero_down.push_back(RandomTensor("z" + std::to_string(e), c.dt, {c.D, c.I}, 7, 0.0f));
        eptr.push_back(&zero_down.back());
      } else {
        eptr.push_back(&t);
      }
    }
  std::vector<float> want(got.size());
  ref::MoE(X.as<float>(), c.R, c.D, G, c.bias ? &Bias : nullptr, eptr, *p, want.data());
  // More than 8 rows take the grouped GEMMs, on tensor cores with f16 math where the device has
  // them.
  ExpectClose(got, want, c.R > 8 && SharedVulkan().device().f16_math() ? 3e-3 : 1e-5, c.name);
}

// A head split's shards of one MoE node add up to the whole node: experts [0, 3), [3, 8) and the
// whole, on the integer-dot expert GEMVs (Q8_0, Q4_0: the up GEMV skips a pair of weight 0, the
// down GEMV the token's choices of weight 0) and the float ones (f16), 1 and 5 rows. The shards
// add the same terms in another order: equal within float rounding.
TEST_F(VulkanTest, MoeExpertRangesAddUpToTheWholeNode) {
  const int E = 8, D = 64, I = 96;
  auto p = std::make_shared<MoeParams>();
  p->n_experts = E;
  p->top_k = 3;
  p->ffn_dim = I;
  p->norm_topk_prob = true;
  vk::VulkanTuning t;
  t.knobs.Set(vk::Knob::kGemvIdot, "1");
  auto be = MakeVulkan(t);
  for (DType dt : {DType::kQ8_0, DType::kQ4_0, DType::kF16})
    for (int R : {1, 5}) {
      Tensor X = RandomTensor("x", DType::kF32, {R, D}, 61);
      Tensor G = RandomTensor("router", DType::kF32, {E, D}, 62);
      std::vector<Tensor> ex;
      for (int e = 0; e < E; ++e) {
        ex.push_back(RandomTensor("g" + std::to_string(e), dt, {I, D}, uint64_t(200 + 3 * e)));
        ex.push_back(RandomTensor("u" + std::to_string(e), dt, {I, D}, uint64_t(201 + 3 * e)));
        ex.push_back(RandomTensor("d" + std::to_string(e), dt, {D, I}, uint64_t(202 + 3 * e)));
      }
      auto run = [&](int e0, int n) {
        Graph g;
        Node m;
        m.op = Op::kMoE;
        m.name = "moe";
        m.src = {Input(g, X, R), g.AddWeight(G), -1};
        for (int e = e0; e < e0 + n; ++e)
          for (int k = 0; k < 3; ++k) m.src.push_back(g.AddWeight(ex[size_t(3 * e + k)]));
        m.shape = {R, D};
        m.params = MoeOpParams{*p, n < E ? e0 : 0, n < E ? n : 0};
        g.Add(m);
        return RunGraph(*be, g, RowsBatch(R));
      };
      const std::vector<float> whole = run(0, E), a = run(0, 3), b = run(3, 5);
      std::vector<float> sum(whole.size());
      for (size_t i = 0; i < sum.size(); ++i) sum[i] = a[i] + b[i];
      ExpectClose(sum, whole, 1e-5, std::string(Name(dt)) + " R=" + std::to_string(R));
    }
}

// The graph of one MoE node over `ex` (3 per expert: gate, up, down).
Graph MoeGraph(const Tensor& X, const Tensor& G, std::vector<Tensor>& ex,
               std::shared_ptr<MoeParams> p, int R, int D) {
  Graph g;
  Node n;
  n.op = Op::kMoE;
  n.name = "moe";
  n.src = {Input(g, X, R), g.AddWeight(G), -1};
  for (auto& t : ex) n.src.push_back(g.AddWeight(t));
  n.shape = {R, D};
  n.params = MoeOpParams{*p};
  g.Add(n);
  return g;
}

// Experts are stacked per projection and bound by their stacks' buffers: with a 24 KiB largest
// range, 12 f16 experts of 32 x 64 (4 KiB) fill 2 blocks a projection — 4 buffers for the UP
// kernel and 2 for DOWN, where one
// allocation per expert took 6 pool blocks for the 36 matrices (more than the 4 the kernels
// bound: "experts span more than 4 memory blocks", as the f16 V2-Lite did). Through
// PrepareGraph (the runtime's order: stacks first, then PrepareWeight skips their members) and
// through a first use without it.
TEST_F(VulkanTest, MoeExpertStacksSpanSeveralBuffers) {
  const int R = 5, D = 64, I = 32, E = 12;
  auto p = std::make_shared<MoeParams>();
  p->n_experts = E;
  p->top_k = 3;
  p->ffn_dim = I;
  Tensor X = RandomTensor("x", DType::kF32, {R, D}, 51);
  Tensor G = RandomTensor("router", DType::kF32, {E, D}, 52);
  std::vector<Tensor> ex;
  for (int e = 0; e < E; ++e) {
    ex.push_back(
        RandomTensor("g" + std::to_string(e), DType::kF16, {I, D}, uint64_t(200 + 3 * e), 0.5f));
    ex.push_back(
        RandomTensor("u" + std::to_string(e), DType::kF16, {I, D}, uint64_t(201 + 3 * e), 0.5f));
    ex.push_back(
        RandomTensor("d" + std::to_string(e), DType::kF16, {D, I}, uint64_t(202 + 3 * e), 0.5f));
  }
  const Graph g = MoeGraph(X, G, ex, p, R, D);
  std::vector<const Tensor*> eptr;
  for (auto& t : ex) eptr.push_back(&t);
  std::vector<float> want(size_t(R * D));
  ref::MoE(X.as<float>(), R, D, G, nullptr, eptr, *p, want.data());
  for (bool prepare : {true, false}) {
    vk::VulkanTuning t;
    t.weights.max_range = 24 << 10;
    t.weights.block_bytes = 24 << 10;
    auto be = MakeVulkan(t);
    if (prepare) {
      be->PrepareGraph(g);
      for (auto& w : ex) be->PrepareWeight(w);
    }
    auto kv = be->CreateKv(KvSpec{1, {2, 2}, DType::kF32}, 1, 64);
    std::vector<float> got(size_t(R * D));
    be->Compute(g, RowsBatch(R), *kv, got.data());
    ExpectClose(got, want, 1e-5, prepare ? "prepared stacks" : "stacks at first use");
    // The stacks stay valid: the same graph again reuses its program (no stale-weight rebuild).
    const auto before = be->counters();
    be->Compute(g, RowsBatch(R), *kv, got.data());
    EXPECT_EQ(be->counters().programs_built, before.programs_built);
    ExpectClose(got, want, 1e-5, "second step");
  }
}

// Decode steps of up to 4 rows route in the router GEMV's last workgroup (matmul_gemv.comp
// ROUTE, ops/moe.cpp RouteInRouterGemv): no moe_route dispatch. Every routing mode, odd expert
// counts and top-k, an expert range, 1, 3 and 4 rows, against the plain path (moe_route apart,
// ES_VK_MOE_ROUTE_FUSE=0) and the reference, two steps of other rows (each records its own
// program here; the count's reset for a re-submitted program is checked by VulkanModel's decode
// steps: without it their logits are 0.6 apart). An odd width keeps moe_route.
TEST_F(VulkanTest, MoeRouterGemvRoutesAsMoeRoute) {
  struct Case {
    const char* name;
    int D, E, k, n_group, topk_group;
    ScoringFunc scoring;
    TopkMethod method;
    bool norm, bias;
    float scaling, bias_scale;
    int e0 = 0, n_local = 0;
  };
  const Case cases[] = {
      {"v2_lite_softmax_top6", 32, 64, 6, 1, 1, ScoringFunc::kSoftmax, TopkMethod::kGreedy, false,
       false, 1.0f, 0.0f},
      {"odd_experts_top5", 24, 7, 5, 1, 1, ScoringFunc::kSoftmax, TopkMethod::kGreedy, true, false,
       1.5f, 0.0f},
      {"group_limited", 16, 8, 3, 4, 2, ScoringFunc::kSoftmax, TopkMethod::kGroupLimitedGreedy,
       false, false, 2.5f, 0.0f},
      {"noaux_tc_v3", 32, 256, 8, 8, 4, ScoringFunc::kSigmoid, TopkMethod::kNoauxTc, true, true,
       2.5f, 0.2f},
      {"noaux_tc_negative_kept", 32, 16, 8, 8, 4, ScoringFunc::kSigmoid, TopkMethod::kNoauxTc, true,
       true, 2.5f, 1.0f},
      {"noaux_tc_top_k_past_kept", 16, 8, 3, 4, 1, ScoringFunc::kSigmoid, TopkMethod::kNoauxTc,
       false, true, 1.0f, 1.0f},
      {"range_noaux", 24, 16, 4, 4, 2, ScoringFunc::kSigmoid, TopkMethod::kNoauxTc, true, true,
       2.5f, 0.2f, 12, 4},
      {"odd_width_apart", 13, 8, 3, 1, 1, ScoringFunc::kSoftmax, TopkMethod::kGreedy, true, false,
       1.0f, 0.0f},
  };
  auto fused = MakeVulkan({});
  vk::VulkanTuning off;
  off.knobs.Set(vk::Knob::kMoeRouteFuse, "0");
  auto plain = MakeVulkan(off);
  const int I = 16;
  for (const Case& c : cases)
    for (int R : {1, 3, 4}) {
      const std::string what = std::string(c.name) + " R=" + std::to_string(R);
      MoeParams p;
      p.n_experts = c.E;
      p.top_k = c.k;
      p.n_group = c.n_group;
      p.topk_group = c.topk_group;
      p.scoring = c.scoring;
      p.topk_method = c.method;
      p.norm_topk_prob = c.norm;
      p.routed_scaling_factor = c.scaling;
      p.ffn_dim = I;
      // Rows [0, R) for the first step, [R, 2R) for the second.
      Tensor X = RandomTensor("x", DType::kF32, {2 * R, c.D}, 71);
      Tensor G = RandomTensor("router", DType::kF32, {c.E, c.D}, 72);
      Tensor Bias = RandomTensor("bias", DType::kF32, {c.E}, 73, c.bias_scale);
      std::vector<Tensor> ex;
      ex.reserve(size_t(3 * c.E));
      for (int e = 0; e < c.E; ++e) {
        const uint64_t s = uint64_t(300 + 3 * e);
        ex.push_back(RandomTensor("g" + std::to_string(e), DType::kF32, {I, c.D}, s, 0.5f));
        ex.push_back(RandomTensor("u" + std::to_string(e), DType::kF32, {I, c.D}, s + 1, 0.5f));
        ex.push_back(RandomTensor("d" + std::to_string(e), DType::kF32, {c.D, I}, s + 2, 0.5f));
      }
      Graph g;
      Node n;
      n.op = Op::kMoE;
      n.name = "moe";
      n.src = {Input(g, X, R), g.AddWeight(G), c.bias ? g.AddWeight(Bias) : -1};
      const int e1 = c.n_local ? c.e0 + c.n_local : c.E;
      for (int e = c.e0; e < e1; ++e)
        for (int m = 0; m < 3; ++m) n.src.push_back(g.AddWeight(ex[size_t(3 * e + m)]));
      n.shape = {R, c.D};
      n.params = MoeOpParams{p, c.e0, c.n_local};
      g.Add(n);
      std::vector<const Tensor*> eptr;
      for (auto& t : ex) eptr.push_back(&t);
      for (int step = 0; step < 2; ++step) {
        const std::string ws = what + " step " + std::to_string(step);
        Batch b;
        std::vector<int32_t> toks;
        for (int t = 0; t < R; ++t) toks.push_back(step * R + t);
        b.Add(0, 0, toks, true);
        b.Finalize();
        const std::vector<float> got = RunGraph(*fused, g, b), want = RunGraph(*plain, g, b);
        bool route_apart = false, route_in_gemv = false;
        for (const vk::Dispatch& d : fused->last_dispatches()) {
          route_apart |= d.pipe->name == "moe_route";
          route_in_gemv |= d.pipe->name.find("_vec_route") != std::string::npos;
        }
        EXPECT_EQ(route_in_gemv, c.D % 8 == 0) << ws;
        EXPECT_NE(route_apart, route_in_gemv) << ws;
        // The same logits and choices; the weights' sums may round apart (another workgroup
        // size).
        ExpectClose(got, want, 1e-6, ws + " against moe_route");
        if (c.n_local) continue;  // the reference has no range
        std::vector<float> ref(got.size());
        ref::MoE(X.as<float>() + size_t(step * R * c.D), R, c.D, G, c.bias ? &Bias : nullptr, eptr,
                 p, ref.data());
        ExpectClose(got, ref, 1e-5, ws + " against the reference");
      }
    }
}

INSTANTIATE_TEST_SUITE_P(
    Routing, VulkanMoe,
    ::testing::Values(
        MoeCase{"softmax_greedy", 3, 24, 16, 8, 2, 1, 1, ScoringFunc::kSoftmax, TopkMethod::kGreedy,
                false, false, 1.0f, DType::kBF16},
        MoeCase{"group_limited", 5, 13, 7, 8, 3, 4, 2, ScoringFunc::kSoftmax,
                TopkMethod::kGroupLimitedGreedy, false, false, 2.5f, DType::kF32},
        MoeCase{"noaux_tc_sigmoid_bias", 4, 32, 24, 16, 4, 4, 2, ScoringFunc::kSigmoid,
                TopkMethod::kNoauxTc, true, true, 2.5f, DType::kF16},
        // V3 real widths' routing with 16 experts: 8 groups of 2, 4 kept, top 8,
        // so every kept expert is chosen, and a bias of up to 1 in size makes some
        // kept choices negative: noaux_tc masks with -inf, so they still beat the
        // masked experts (a 0.0 mask picked masked ones instead).
        MoeCase{"noaux_tc_negative_kept_choices", 6, 32, 16, 16, 8, 8, 4, ScoringFunc::kSigmoid,
                TopkMethod::kNoauxTc, true, true, 2.5f, DType::kF16, 1.0f},
        // top_k past the kept experts (2 of 8 kept, top 3): the third comes from
        // the masked ones, lowest index first, as the reference's stable sort.
        MoeCase{"noaux_tc_top_k_past_kept", 3, 16, 8, 8, 3, 4, 1, ScoringFunc::kSigmoid,
                TopkMethod::kNoauxTc, false, true, 1.0f, DType::kF32, 1.0f},
        MoeCase{"prefill_rows", 11, 16, 8, 6, 2, 1, 1, ScoringFunc::kSoftmax, TopkMethod::kGreedy,
                true, false, 1.0f, DType::kBF16},
        // Grouped GEMMs: V3's 256 experts top 8 in 8 groups (top 4) over 40 rows;
        // every expert taking every row (top_k = E: several row tiles each); 64
        // experts top 1 over 20 rows (most experts get none).
        MoeCase{"v3_grouped_rows", 40, 32, 16, 256, 8, 8, 4, ScoringFunc::kSigmoid,
                TopkMethod::kNoauxTc, true, true, 2.5f, DType::kF16},
        MoeCase{"all_rows_on_every_expert", 150, 24, 16, 3, 3, 1, 1, ScoringFunc::kSoftmax,
                TopkMethod::kGreedy, false, false, 1.0f, DType::kF32},
        MoeCase{"most_experts_empty", 20, 16, 24, 64, 1, 1, 1, ScoringFunc::kSoftmax,
                TopkMethod::kGreedy, false, false, 1.0f, DType::kBF16},
        // Expert ranges (a head split's shard): the expert GEMVs, the plain expert kernels
        // (odd widths) and the grouped GEMMs, a range at either end and in the middle.
        MoeCase{"range_gemv", 3, 24, 16, 8, 2, 1, 1, ScoringFunc::kSoftmax, TopkMethod::kGreedy,
                false, false, 1.0f, DType::kBF16, 0.2f, 2, 4},
        MoeCase{"range_odd_widths_noaux", 4, 13, 7, 16, 4, 4, 2, ScoringFunc::kSigmoid,
                TopkMethod::kNoauxTc, true, true, 2.5f, DType::kF32, 0.2f, 12, 4},
        MoeCase{"range_grouped_rows", 70, 32, 16, 16, 4, 1, 1, ScoringFunc::kSoftmax,
                TopkMethod::kGreedy, true, false, 1.0f, DType::kF16, 0.2f, 0, 5}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace es::test
