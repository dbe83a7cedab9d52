// `edgeseek plan`'s arithmetic against hand-computed values (tests/unit/runtime/plan_expected.py
// does the arithmetic apart from src/runtime/plan.cpp; its output is pinned below), and the
// per-layer dispatch formula against graphs ModelArch actually builds. Shapes: the tiny golden
// configs of every architecture and the real published ones (R1-Distill-Qwen-1.5B, -Llama-8B,
// DeepSeek-V2-Lite, DeepSeek-V3 671B). All bf16 matrices but the router (f32, as `convert`
// writes it), f32 1-D tensors, f16 KV, prompt 64,
// gen 16 (decode at depth 72), batch 1, context 4096.
#include "edgeseek/internal/runtime/plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "edgeseek/internal/backends/backend.h"
#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/models/arch.h"
#include "edgeseek/internal/models/presets.h"
#include "edgeseek/internal/runtime/device_profile.h"
#include "edgeseek/internal/runtime/model.h"
#include "test_util.h"

namespace es {
namespace {

struct Expected {
  const char* model;  // preset name, golden folder under tests/golden/data/models, or "v3-real"
  int64_t params;
  int64_t weights, kv_per_token, kv, decode_bytes;
  double decode_flops, prefill_flops;
};

// plan_expected.py's output (its rows, in its order).
const Expected kExpected[] = {
    {"llama3", 402048, 805376, 512, 2097152, 761600, 795648, 43106304},
    {"qwen2_tied", 320640, 643584, 512, 2097152, 681728, 713728, 36831232},
    {"dsv2_lite", 521984, 1113088, 320, 1310720, 747904, 887040, 42217472},
    {"dsv3", 810272, 1729664, 480, 1966080, 979008, 1182080, 57307136},
    {"r1-distill-qwen-1.5b", 1777088000, 3554465792, 28672, 117440512, 3089843200, 3099697152,
     168529625088},
    {"r1-distill-llama-8b", 8030261248, 16061054976, 131072, 536870912, 15020089344, 15047589888,
     895494389760},
    {"deepseek-v2-lite", 15706484224, 31533283328, 31104, 127401984, 4912244480, 4971239424,
     287918456832},
    {"v3-real", 671026419200, 1344314562560, 70272, 287834112, 73471355136, 74489479168,
     4581580865536},
};

// A profile with round numbers (1 GB/s, 1 GFLOP/s, no overheads) made in memory.
DeviceProfile UnitProfile() {
  nlohmann::json j = {
      {"name", "unit"},
      {"description", "test profile"},
      {"backend", "cpu"},
      {"calibrated", false},
      {"memory_bytes", {{"value", 1e12}, {"source", "test"}, {"calibrated", false}}},
      {"bandwidth", {{"value", 1e9}, {"source", "test"}, {"calibrated", false}}},
      {"fp32_flops", {{"value", 1e9}, {"source", "test"}, {"calibrated", false}}},
      {"dispatch_s", {{"value", 0}, {"source", "test"}, {"calibrated", false}}},
      {"step_s", {{"value", 0}, {"source", "test"}, {"calibrated", false}}}};
  return ParseDeviceProfile(j, "unit");
}

std::string V3RealConfig() {
  // DeepSeek-V3's config.json numbers on the V3 architecture preset.
  ModelConfig c = PresetConfig("deepseek-v3-small");
  c.vocab_size = 129280;
  c.hidden_size = 7168;
  c.intermediate_size = 18432;
  c.n_layers = 61;
  c.n_heads = c.n_kv_heads = 128;
  c.q_lora_rank = 1536;
  c.kv_lora_rank = 512;
  c.qk_nope_head_dim = 128;
  c.qk_rope_head_dim = 64;
  c.v_head_dim = 128;
  c.n_routed_experts = 256;
  c.n_shared_experts = 1;
  c.moe_intermediate_size = 2048;
  c.num_experts_per_tok = 8;
  c.first_k_dense_replace = 3;
  c.n_group = 8;
  c.topk_group = 4;
  const std::string path = test::TempDir() + "/v3_config.json";
  test::WriteFile(path, ToHfConfig(c).dump());
  return path;
}

std::string ModelArg(const std::string& m) {
  if (m == "v3-real") return V3RealConfig();
  for (const auto& n : PresetNames())
    if (n == m) return m;
  return test::SourceDir() + "/tests/golden/data/models/" + m + "/config.json";
}

PlanOptions Options() {
  PlanOptions o;
  o.prompt = 64;
  o.gen = 16;
  o.kv_type = DType::kF16;
  return o;
}

TEST(PlanArith, BytesFlopsAndMemoryMatchHandArithmetic) {
  const DeviceProfile d = UnitProfile();
  for (const Expected& e : kExpected) {
    SCOPED_TRACE(e.model);
    const ModelWeights w = DescribeSynthetic(ModelArg(e.model), "bf16");
    EXPECT_EQ(w.parameters(), e.params);
    const Plan p = MakePlan(w, d, Options());
    EXPECT_EQ(int64_t(p.weights_bytes), e.weights);
    EXPECT_EQ(p.kv_bytes_per_token, e.kv_per_token);
    EXPECT_EQ(int64_t(p.kv_bytes), e.kv);
    EXPECT_DOUBLE_EQ(p.decode.bytes, double(e.decode_bytes));
    EXPECT_DOUBLE_EQ(p.decode.flops, e.decode_flops);
    EXPECT_DOUBLE_EQ(p.prefill.flops, e.prefill_flops);
    // The unit profile is a CPU of 1 TB: every weight is prefaulted at load, so resident.
    EXPECT_EQ(p.resident_weights_bytes, p.weights_bytes);
    EXPECT_EQ(p.memory_bytes, p.weights_bytes + p.kv_bytes + p.activation_bytes + p.overhead_bytes);
    // 1 GB/s and 1 GFLOP/s without overheads: each phase's time is its larger term.
    EXPECT_DOUBLE_EQ(p.decode.t_total_s, std::max(p.decode.bytes / 1e9, p.decode.flops / 1e9));
  }
}

TEST(PlanArith, CpuEmbeddingIsResidentWholeWhereTheBackendPrefaultsIt) {
  // The CPU backend fills every weight's page tables at load, the embedding first, while they fit
  // in half of the available memory (cpu_backend.cpp Prefault): a converted 1.5B's peak RSS on
  // the dev VM held its whole Q8_0 embedding (docs/plan.md, session 35). Past half the device's
  // memory the untied table is a row lookup: the 80 rows of the tokens (prompt 64 + gen 16).
  const ModelWeights w = DescribeSynthetic("r1-distill-qwen-1.5b", "q4_0");
  const size_t embed = size_t(151936) * 1536 / 32 * 34;  // Q8_0
  DeviceProfile d = UnitProfile();
  const Plan whole = MakePlan(w, d, Options());
  EXPECT_EQ(whole.resident_weights_bytes, whole.weights_bytes);
  EXPECT_EQ(whole.memory_bytes,
            whole.weights_bytes + whole.kv_bytes + whole.activation_bytes + whole.overhead_bytes);
  d.memory_bytes.value = 2.0 * double(embed);  // the embedding just fits half
  EXPECT_EQ(MakePlan(w, d, Options()).resident_weights_bytes, whole.weights_bytes);
  d.memory_bytes.value = 2.0 * double(embed) - 2;
  const Plan rows = MakePlan(w, d, Options());
  EXPECT_EQ(rows.resident_weights_bytes, whole.weights_bytes - embed + 80 * 1536 / 32 * 34);
  // A GPU uploads it whole, whatever its memory.
  d.backend = "vulkan";
  EXPECT_EQ(MakePlan(w, d, Options()).resident_weights_bytes, whole.weights_bytes);
}

TEST(PlanArith, InspectAndPlanAgreeOnKvBytes) {
  // The KV figure is ModelConfig::MakeKvSpec's, as `inspect` prints it
  // (docs/log/2026-12-02-cpu-kv-cache-types.md: 1.5B 28 KiB f16, 7.88 KiB q4_0; V2-Lite 30.38 KiB
  // f16).
  const DeviceProfile d = UnitProfile();
  PlanOptions o = Options();
  o.kv_type = DType::kQ4_0;
  EXPECT_EQ(MakePlan(DescribeSynthetic("r1-distill-qwen-1.5b", "bf16"), d, o).kv_bytes_per_token,
            8064);
  o.kv_type = DType::kQ8_0;
  EXPECT_EQ(MakePlan(DescribeSynthetic("deepseek-v2-lite", "bf16"), d, o).kv_bytes_per_token,
            int64_t(PresetConfig("deepseek-v2-lite").MakeKvSpec(DType::kQ8_0).BytesPerToken()));
}

TEST(PlanArith, Q4_0PolicyKeepsEmbeddingsHeadAndValuesInQ8_0) {
  // 1.5B: token_embd, output and every v_proj in Q8_0 (34 bytes / 32), the other matrices Q4_0
  // (18 / 32), 1-D f32 — what `edgeseek convert --type q4_0` writes.
  const ModelWeights w = DescribeSynthetic("r1-distill-qwen-1.5b", "q4_0");
  const int64_t D = 1536, V = 151936, I = 8960, L = 28, kd = 256;
  const int64_t q8 = 2 * V * D + L * kd * D;
  const int64_t q4 = L * (D * D * 2 + kd * D + 3 * D * I);
  const int64_t f32 = L * (2 * D + D + 2 * kd) + D;
  EXPECT_EQ(int64_t(w.total_bytes()), q8 / 32 * 34 + q4 / 32 * 18 + f32 * 4);
}

TEST(PlanArith, ModelFileAndItsRetypedForm) {
  // The llama3 golden folder's safetensors against the preset path over its config.json: the
  // same tensors; retyped to q8_0, every matrix is 34 bytes a 32-element block.
  const std::string dir = test::SourceDir() + "/tests/golden/data/models/llama3";
  ModelWeights w = DescribeModelFile(dir);
  const ModelWeights s = DescribeSynthetic(dir + "/config.json", "bf16");
  EXPECT_EQ(w.parameters(), s.parameters());
  RetypeWeights(w, "q8_0");
  int64_t matrix = 0, vec = 0;
  for (const PlanTensor& t : w.tensors)
    (t.shape.size() == 2 ? matrix : vec) += NumElements(t.shape);
  EXPECT_EQ(int64_t(w.total_bytes()), matrix / 32 * 34 + vec * 4);
  EXPECT_THROW(RetypeWeights(w, "q9"), Error);
}

TEST(PlanArith, MlaPrefillTakesTheCheaperForm) {
  const ModelConfig c = PresetConfig("deepseek-v2-lite");
  // One query at depth 0: absorbed costs more (2H(2r+dr) + kvb vs 2H(dn+dr+dv) + kvb).
  EXPECT_LT(AttentionFlops(c, 0, 1, false), AttentionFlops(c, 0, 1, true) + 1);
  // Hand: H=16, r=512, dr=64, dn=dv=128: absorbed 2*16*1088*pairs + 2*16*512*256*queries.
  EXPECT_DOUBLE_EQ(AttentionFlops(c, 10, 2, true),
                   2.0 * 16 * 1088 * (2 * 10 + 3) + 2.0 * 16 * 512 * 256 * 2);
  EXPECT_DOUBLE_EQ(AttentionFlops(c, 10, 2, false),
                   2.0 * 16 * 320 * (2 * 10 + 3) + 2.0 * 16 * 512 * 256 * 12);
}

TEST(PlanArith, ExpectedExpertsGrowsToAllOfThem) {
  EXPECT_DOUBLE_EQ(ExpectedExperts(64, 6, 1), 6.0);
  EXPECT_NEAR(ExpectedExperts(64, 6, 2), 64 * (1 - (58.0 / 64) * (58.0 / 64)), 1e-12);
  EXPECT_NEAR(ExpectedExperts(64, 6, 512), 64.0, 1e-9);
}

TEST(PlanArith, GroupedGemmRowsPadEachExpertsTiles) {
  // Hand: 2 experts, top-1, 2 rows: an expert gets r ~ Binomial(2, 1/2) rows; tiles of 1 row
  // compute the rows themselves (2), tiles of 2: P(r=1) 2 + P(r=2) 2 = 1.5 an expert, 3 in all.
  EXPECT_NEAR(GroupedGemmRows(2, 1, 2, 1), 2.0, 1e-12);
  EXPECT_NEAR(GroupedGemmRows(2, 1, 2, 2), 3.0, 1e-12);
  // 4 experts, top-2, 3 rows, tiles of 2: r ~ Binomial(3, 1/2): 3/8 * 2 + 3/8 * 2 + 1/8 * 4 = 2
  // an expert.
  EXPECT_NEAR(GroupedGemmRows(4, 2, 3, 2), 8.0, 1e-12);
  // One row: its 6 experts each compute one 64-row tile.
  EXPECT_NEAR(GroupedGemmRows(64, 6, 1, 64), 384.0, 1e-9);
  // V2-Lite at a 512-row prefill: 48 rows an expert on average, one 64-row tile nearly always
  // (python: sum of comb(512, r) p^r q^(512-r) ceil(r/64) 64, p = 6/64) against 3,072 rows.
  EXPECT_NEAR(GroupedGemmRows(64, 6, 512, 64), 4128.79876161105, 1e-6);
  EXPECT_NEAR(GroupedGemmRows(64, 6, 512, 128), 8192.0, 1e-6);
  EXPECT_DOUBLE_EQ(GroupedGemmRows(64, 6, 0, 64), 0.0);
}

TEST(PlanArith, DispatchesMatchTheBuiltGraph) {
  for (const char* m : {"llama3", "qwen2_tied", "dsv2_lite", "dsv3"}) {
    SCOPED_TRACE(m);
    auto model = Model::Load(test::SourceDir() + "/tests/golden/data/models/" + m);
    for (int rows : {1, 5}) {
      Batch b;
      std::vector<int32_t> toks(static_cast<size_t>(rows), 1);
      b.Add(0, 0, toks, false);
      b.Finalize();
      const Graph g = model->arch().Build(b);
      int ops = 0;
      for (const Node& n : g.nodes()) ops += n.op != Op::kWeight;
      int formula = HeadDispatches(rows == 1);
      for (int l = 0; l < model->config().n_layers; ++l)
        formula += LayerDispatches(model->config(), l);
      EXPECT_EQ(ops, formula) << rows << " rows";
    }
  }
}

TEST(PlanArith, SplitsShareMemoryAndMoveHiddenStates) {
  const DeviceProfile d = UnitProfile();
  const ModelWeights w = DescribeSynthetic("r1-distill-qwen-1.5b", "bf16");
  PlanOptions o = Options();
  o.devices = 2;
  o.split = PlanSplit::kLayer;
  const Plan layer = MakePlan(w, d, o);
  ASSERT_EQ(layer.shares.size(), 2u);
  EXPECT_EQ(layer.shares[0].weights_bytes + layer.shares[1].weights_bytes, layer.weights_bytes);
  EXPECT_EQ(layer.shares[0].kv_bytes + layer.shares[1].kv_bytes, layer.kv_bytes);
  EXPECT_DOUBLE_EQ(layer.transfer_bytes_per_token, 1536.0 * 4);  // one boundary, f32 hidden
  {
    // The prompt as micro-batches (runtime/micro_batch.h): 512 rows in 4 parts over 2 stages,
    // 5 waves of a quarter of one stage's FLOPs: 5/8 of one device's compute time (the unit
    // profile is compute-bound there). 64 rows are not cut: one device's time, handed over.
    PlanOptions one = o, cut = o;
    one.devices = 1;
    one.prompt = cut.prompt = 512;
    const Plan p1 = MakePlan(w, d, one), p2 = MakePlan(w, d, cut);
    EXPECT_DOUBLE_EQ(p2.prefill.t_compute_s, p1.prefill.t_compute_s * 5 / 8);
    EXPECT_DOUBLE_EQ(p2.prefill.t_memory_s, p1.prefill.t_memory_s * 5 / 2);
    EXPECT_GT(p2.prefill.tokens_per_s, p1.prefill.tokens_per_s * 1.55);
    one.prompt = cut.prompt = 64;
    const Plan q1 = MakePlan(w, d, one), q2 = MakePlan(w, d, cut);
    EXPECT_DOUBLE_EQ(q2.prefill.t_compute_s, q1.prefill.t_compute_s);
    EXPECT_DOUBLE_EQ(q2.prefill.t_total_s, q1.prefill.t_total_s + 64 * 1536.0 * 4 / 1e9);
  }
  o.split = PlanSplit::kHead;
  const Plan head = MakePlan(w, d, o);
  EXPECT_EQ(head.shares[0].kv_bytes, head.kv_bytes / 2);
  // Two all-reduces a layer, ring over 2 devices: 2 * (1/2) * 2 * D * 4 bytes each.
  EXPECT_DOUBLE_EQ(head.transfer_bytes_per_token, 28 * 2 * (2.0 * 1 / 2 * 1536 * 4));
  // MLA's latent is shared by every head: each device keeps all of it.
  const Plan mla = MakePlan(DescribeSynthetic("deepseek-v2-lite", "bf16"), d, o);
  EXPECT_EQ(mla.shares[1].kv_bytes, mla.kv_bytes);
}

TEST(PlanArith, BadOptionsNameTheOption) {
  const DeviceProfile d = UnitProfile();
  const ModelWeights w = DescribeSynthetic(ModelArg("llama3"), "bf16");
  auto fails = [&](PlanOptions o, const char* what) {
    try {
      MakePlan(w, d, o);
      ADD_FAILURE() << "no error for " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  PlanOptions o = Options();
  o.context = 0;
  fails(o, "--context");
  o = Options();
  o.prompt = 5000;
  fails(o, "does not fit in --context");
  o = Options();
  o.batch = 0;
  fails(o, "--batch");
  o = Options();
  o.devices = 3;
  o.split = PlanSplit::kHead;
  fails(o, "--split head");
}

// ---- rate curves (gemv_curve / gemm_curve) ------------------------------------------------------

CurvePoint Point(double bytes, double rate) {
  CurvePoint c;
  c.k = 64;
  c.n = 64;
  c.weight_bytes = bytes;
  c.rate = MeasuredValue(rate, "test");
  return c;
}

TEST(PlanCurve, InterpolatesInLogBytesAndClampsAtTheEnds) {
  // 1 MB: 10, 10 MB: 16 and 24 (their mean, 20), 100 MB: 30; given out of order.
  const std::vector<CurvePoint> c = {Point(1e8, 30), Point(1e7, 16), Point(1e6, 10),
                                     Point(1e7, 24)};
  std::vector<CurvePoint> sorted = c;
  std::stable_sort(sorted.begin(), sorted.end(), [](const CurvePoint& a, const CurvePoint& b) {
    return a.weight_bytes < b.weight_bytes;
  });
  EXPECT_DOUBLE_EQ(CurveRate(sorted, 1e3), 10);  // below the first point
  EXPECT_DOUBLE_EQ(CurveRate(sorted, 1e6), 10);
  EXPECT_NEAR(CurveRate(sorted, std::pow(10.0, 6.5)), 15, 1e-12);  // halfway in log: (10+20)/2
  EXPECT_DOUBLE_EQ(CurveRate(sorted, 1e7), 20);
  EXPECT_NEAR(CurveRate(sorted, std::pow(10.0, 7.25)), 22.5, 1e-12);  // a quarter: 20 + 10/4
  EXPECT_DOUBLE_EQ(CurveRate(sorted, 1e8), 30);
  EXPECT_DOUBLE_EQ(CurveRate(sorted, 1e12), 30);  // past the last
  EXPECT_DOUBLE_EQ(CurveRate({}, 1e6), 0);
}

TEST(PlanCurve, ProfileRatesPreferTheCurveAndFallBackWithout) {
  DeviceProfile d = UnitProfile();
  d.gemv_bytes_per_s[DType::kQ4_0].value = 5e9;
  d.gemv_curve[DType::kQ4_0] = {Point(1e6, 2e9), Point(1e8, 4e9)};
  d.gemm_curve[DType::kQ4_0] = {Point(1e6, 3e9), Point(1e8, 7e9)};
  EXPECT_DOUBLE_EQ(d.GemvBytesRate(DType::kQ4_0, 1e6), 2e9);
  EXPECT_NEAR(d.GemvBytesRate(DType::kQ4_0, 1e7), 3e9, 1e-3);
  EXPECT_DOUBLE_EQ(d.GemvBytesRate(DType::kQ4_0), 5e9);       // no size: the single rate
  EXPECT_DOUBLE_EQ(d.GemvBytesRate(DType::kQ8_0, 1e7), 1e9);  // no curve, no rate: bandwidth
  EXPECT_NEAR(d.GemmRate(DType::kQ4_0, 1e7), 5e9, 1e-3);
  EXPECT_DOUBLE_EQ(d.GemmRate(DType::kQ4_0), 1e9);  // no size: the class rate
}

TEST(PlanCurve, ProfileWithCurvesRoundTripsThroughJson) {
  DeviceProfile d = UnitProfile();
  d.gemv_curve[DType::kQ8_0] = {Point(1e6, 2e9), Point(3e8, 4.5e9)};
  d.gemv_curve[DType::kQ8_0][1].k = 1536;
  d.gemv_curve[DType::kQ8_0][1].n = 8960;
  d.gemm_curve[DType::kF16] = {Point(4096, 1.25e11)};
  const nlohmann::json j = DeviceProfileToJson(d);
  ASSERT_TRUE(j.contains("gemv_curve"));
  const DeviceProfile r = ParseDeviceProfile(nlohmann::json::parse(j.dump()), "round trip");
  EXPECT_EQ(DeviceProfileToJson(r), j);
  ASSERT_EQ(r.gemv_curve.at(DType::kQ8_0).size(), 2u);
  const CurvePoint& c = r.gemv_curve.at(DType::kQ8_0)[1];
  EXPECT_EQ(c.k, 1536);
  EXPECT_EQ(c.n, 8960);
  EXPECT_DOUBLE_EQ(c.weight_bytes, 3e8);
  EXPECT_DOUBLE_EQ(c.rate.value, 4.5e9);
  EXPECT_EQ(c.rate.source, "test");
  EXPECT_TRUE(c.rate.calibrated);
  EXPECT_DOUBLE_EQ(r.gemm_curve.at(DType::kF16)[0].rate.value, 1.25e11);
  // A point without its source fails the schema, naming the field.
  nlohmann::json bad = j;
  bad["gemv_curve"]["q8_0"][0].erase("source");
  try {
    ParseDeviceProfile(bad, "bad");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gemv_curve"), std::string::npos) << e.what();
  }
  // A curve or a per-type rate of a weight type edgeseek does not know: one error naming it.
  for (const char* key : {"gemv_curve", "gemm_curve"}) {
    nlohmann::json unknown = j;
    unknown[key]["q9_9"] = unknown[key].begin().value();
    try {
      ParseDeviceProfile(unknown, "typo");
      ADD_FAILURE() << key << ": no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("/") + key + "/q9_9"), std::string::npos)
          << e.what();
    }
  }
}

TEST(PlanCurve, VulkanMoePrefillRunsGroupedGemms) {
  // V2-Lite (26 MoE layers: 64 experts, top-6, [1408, 2048] bf16 each) at a 512-row prefill. A
  // Vulkan profile with tensor cores computes each expert's rows in 64-row tiles and records 7
  // more dispatches a MoE layer; the CPU profile computes top-6 x 512 rows of them.
  const ModelWeights w = DescribeSynthetic("deepseek-v2-lite", "bf16");
  DeviceProfile cpu = UnitProfile(), vk = UnitProfile();
  vk.backend = "vulkan";
  vk.f16_matrix_flops.value = 1e9;
  vk.f16_matrix_flops.present = true;
  PlanOptions o = Options();
  o.prompt = 512;
  const Plan pc = MakePlan(w, cpu, o), pv = MakePlan(w, vk, o);
  const double one = 2.0 * 3 * 1408 * 2048;  // one expert's gate, up and down, a row
  const double padded = GroupedGemmRows(64, 6, 512, 64);
  EXPECT_NEAR(pv.prefill.flops - pc.prefill.flops, 26 * one * (padded - 6.0 * 512), 1e3);
  EXPECT_DOUBLE_EQ(pv.prefill.dispatches - pc.prefill.dispatches, 26.0 * 7);
  EXPECT_DOUBLE_EQ(pv.prefill.bytes, pc.prefill.bytes);  // each touched expert read once
  // The grouped GEMM's rate is the curve's at the 64 experts' bytes together (369 MB), not one
  // expert's (5.8 MB): a bf16 curve at 1 GFLOP/s to 100 MB, 4 at 1 GB. The lm_head (one row,
  // [102400, 2048] bf16, 419 MB) takes its own rate; every other bf16 matrix is under 100 MB.
  DeviceProfile curved = vk;
  curved.gemm_curve[DType::kBF16] = {Point(1e8, 1e9), Point(1e9, 4e9)};
  const Plan pk = MakePlan(w, curved, o);
  const double expert_bytes = 1408.0 * 2048 * 2, lm_bytes = 102400.0 * 2048 * 2;
  const double experts = 26 * one * padded, lm = 2.0 * 102400 * 2048;
  const auto& cv = curved.gemm_curve.at(DType::kBF16);
  EXPECT_NEAR(pv.prefill.t_compute_s - pk.prefill.t_compute_s,
              experts * (1 / 1e9 - 1 / CurveRate(cv, 64 * expert_bytes)) +
                  lm * (1 / 1e9 - 1 / CurveRate(cv, lm_bytes)),
              1e-9 * pv.prefill.t_compute_s);
  // Up to 64 rows the experts run as GEMVs, as on the CPU.
  o.prompt = 64;
  EXPECT_DOUBLE_EQ(MakePlan(w, vk, o).prefill.flops, MakePlan(w, cpu, o).prefill.flops);
  // Without tensor cores the plain kernel's 128-row tiles.
  vk.f16_matrix_flops.value = 0;
  EXPECT_EQ(GroupedGemmTile(vk), 128);
}

TEST(PlanCurve, DecodeStreamsEachMatrixAtItsCurveRate) {
  // bf16 matrices at 2 GB/s (a flat curve), everything else at the unit 1 GB/s: t_memory is
  // the bf16 matrices' bytes / 2e9 + the rest / 1e9 (an untied embedding is a row lookup).
  DeviceProfile d = UnitProfile();
  d.gemv_curve[DType::kBF16] = {Point(1, 2e9), Point(1e12, 2e9)};
  for (const char* m : {"llama3", "qwen2_tied"}) {
    SCOPED_TRACE(m);
    const ModelWeights w = DescribeSynthetic(ModelArg(m), "bf16");
    const Plan p = MakePlan(w, d, Options());
    double bf16 = 0;
    for (const PlanTensor& t : w.tensors) {
      const bool embed = t.name == "model.embed_tokens.weight";
      if (t.type == DType::kBF16 && t.shape.size() >= 2 && (!embed || w.config.tie_word_embeddings))
        bf16 += double(t.bytes);
    }
    ASSERT_GT(bf16, 0);
    EXPECT_NEAR(p.decode.t_memory_s, (p.decode.bytes - bf16) / 1e9 + bf16 / 2e9, 1e-15);
    // Prefill: the GEMM curve (none here) leaves it at the unit rates.
    EXPECT_DOUBLE_EQ(p.prefill.t_compute_s,
                     MakePlan(w, UnitProfile(), Options()).prefill.t_compute_s);
  }
}

// A layer probe of a small made-up shape: D 64, 2 heads and 1 KV head of 32, FFN 128, f16
// matrices, f32 KV. Matrices [n, k]: q 64x64, k 32x64, v 32x64, o 64x64, gate and up 128x64,
// down 64x128: 36,864 elements, 73,728 bytes of f16.
LayerProbe SmallProbe(int rows, int layers, int64_t depth, double seconds) {
  LayerProbe p;
  p.hidden = 64, p.heads = 2, p.kv_heads = 1, p.head_dim = 32, p.ffn = 128;
  p.type = DType::kF16;
  p.kv_type = DType::kF32;
  p.rows = rows, p.layers = layers, p.depth = depth;
  p.seconds = MeasuredValue(seconds, "test");
  return p;
}

// Unit bandwidth (1 GB/s), 10 GFLOP/s, f16 GEMV at 2 GB/s, 1 us a dispatch, 0.1 ms a step.
DeviceProfile ProbeProfile() {
  DeviceProfile d = UnitProfile();
  d.fp32_flops.value = 1e10;
  d.dispatch_s.value = 1e-6;
  d.step_s.value = 1e-4;
  d.gemv_bytes_per_s[DType::kF16].value = 2e9;
  d.gemv_bytes_per_s[DType::kF16].present = true;
  return d;
}

TEST(PlanProbe, RooflineAndExcessMatchHandArithmetic) {
  const DeviceProfile d = ProbeProfile();
  // Decode, 2 layers at depth 10. Per layer: matrices 73,728 B / 2e9 = 36.864 us; norms 2 x 256
  // B + KV (10 read + the new one read + its write) x 256 B (k and v rows of 32 f32) = 3,584 B /
  // 1e9 = 3.584 us: t_mem 40.448 us. Compute 73,728 + attention 4·2·32·11 = 2,816 FLOPs / 1e10
  // = 7.6544 us. Roofline: 2 x 40.448 + 35 dispatches x 1 + 100 = 215.896 us.
  const LayerProbe dec = SmallProbe(1, 2, 10, 0.01);
  EXPECT_NEAR(LayerProbeRoofline(dec, d), 215.896e-6, 1e-15);
  EXPECT_NEAR(LayerProbeExcess(dec, d), (0.01 - 215.896e-6) / 2, 1e-15);
  // Prefill, 4 rows from position 0, 1 layer: bytes 73,728 + 512 + 4 x 256 = 75,264 / 1e9 =
  // 75.264 us; compute 4 x 73,728 + attention 4·2·32·(4·5/2) = 297,472 FLOPs / 1e10 = 29.7472
  // us. Roofline: 75.264 + 18 x 1 + 100 = 193.264 us.
  const LayerProbe pre = SmallProbe(4, 1, 0, 0.02);
  EXPECT_NEAR(LayerProbeRoofline(pre, d), 193.264e-6, 1e-15);
  EXPECT_NEAR(LayerProbeExcess(pre, d), 0.02 - 193.264e-6, 1e-15);
}

TEST(PlanProbe, ExcessIsLinearInRowsAndScalesWithWidth) {
  DeviceProfile d = ProbeProfile();
  EXPECT_DOUBLE_EQ(LayerExcess(d, 64, DType::kF16, 1), 0);  // no probes
  const double e1 = (0.01 - 215.896e-6) / 2, e4 = 0.02 - 193.264e-6;
  d.layer_probes = {SmallProbe(4, 1, 0, 0.02)};
  EXPECT_NEAR(LayerExcess(d, 64, DType::kF16, 8), e4 * 2, 1e-15);  // one prefill probe: × rows/4
  d.layer_probes.push_back(SmallProbe(1, 2, 10, 0.01));
  EXPECT_NEAR(LayerExcess(d, 64, DType::kF16, 1), e1, 1e-15);
  EXPECT_NEAR(LayerExcess(d, 64, DType::kF16, 4), e4, 1e-15);
  EXPECT_NEAR(LayerExcess(d, 64, DType::kF16, 2), e1 + (e4 - e1) / 3, 1e-15);
  // Another type at this width: f16's probes; twice the width: twice the excess.
  EXPECT_NEAR(LayerExcess(d, 64, DType::kQ4_0, 1), e1, 1e-15);
  EXPECT_NEAR(LayerExcess(d, 128, DType::kF16, 1), 2 * e1, 1e-15);
  // A probe of the type and a nearer width wins.
  LayerProbe q = SmallProbe(1, 1, 10, 0.5);
  q.type = DType::kQ4_0;
  q.hidden = 96;
  d.layer_probes.push_back(q);
  EXPECT_NEAR(LayerExcess(d, 96, DType::kQ4_0, 1), LayerProbeExcess(q, d), 1e-15);
  EXPECT_NEAR(LayerExcess(d, 64, DType::kQ4_0, 1), e1, 1e-15);  // 64 is nearer 64 than 96
}

TEST(PlanProbe, ExcessIsPiecewiseLinearBetweenTheProbesRows) {
  // Probes at 1, 2 and 4 rows (the CPU's at 1, 64 and 128 since session 41): between two of
  // them, the line through their excesses; from the largest on, the line from 1 to it as before.
  DeviceProfile d = ProbeProfile();
  const LayerProbe two = SmallProbe(2, 1, 0, 0.05);
  d.layer_probes = {SmallProbe(4, 1, 0, 0.02), two, SmallProbe(1, 2, 10, 0.01)};
  const double e1 = (0.01 - 215.896e-6) / 2, e4 = 0.02 - 193.264e-6;
  const double e2 = LayerProbeExcess(two, d);
  EXPECT_GT(e2, e4);  // a bump at 2 rows that the line from 1 to 4 would miss
  EXPECT_NEAR(LayerExcess(d, 64, DType::kF16, 1), e1, 1e-15);
  EXPECT_NEAR(LayerExcess(d, 64, DType::kF16, 2), e2, 1e-15);
  EXPECT_NEAR(LayerExcess(d, 64, DType::kF16, 3), e2 + (e4 - e2) / 2, 1e-15);
  EXPECT_NEAR(LayerExcess(d, 64, DType::kF16, 4), e4, 1e-15);
  EXPECT_NEAR(LayerExcess(d, 64, DType::kF16, 8), e1 + (e4 - e1) * 7 / 3, 1e-15);
  // A second probe of 2 rows: the first one counts.
  d.layer_probes.push_back(SmallProbe(2, 1, 0, 0.5));
  EXPECT_NEAR(LayerExcess(d, 64, DType::kF16, 2), e2, 1e-15);
}

TEST(PlanProbe, PlanChargesEveryLayerItsExcess) {
  DeviceProfile d = ProbeProfile();
  const ModelWeights w = DescribeSynthetic(ModelArg("llama3"), "bf16");
  const Plan before = MakePlan(w, d, Options());
  EXPECT_EQ(before.decode.t_layer_s, 0);
  d.layer_probes = {SmallProbe(1, 2, 10, 0.01), SmallProbe(4, 1, 0, 0.02)};
  const Plan after = MakePlan(w, d, Options());
  const int L = w.config.n_layers;
  const int64_t D = w.config.hidden_size;
  // bf16 layers take the f16 probes.
  EXPECT_NEAR(after.decode.t_layer_s, L * LayerExcess(d, D, DType::kF16, 1), 1e-15);
  EXPECT_NEAR(after.prefill.t_layer_s, L * LayerExcess(d, D, DType::kF16, 64), 1e-15);
  EXPECT_NEAR(after.decode.t_total_s, before.decode.t_total_s + after.decode.t_layer_s, 1e-15);
  EXPECT_NEAR(after.prefill.t_total_s, before.prefill.t_total_s + after.prefill.t_layer_s, 1e-15);
  EXPECT_DOUBLE_EQ(after.decode.t_memory_s, before.decode.t_memory_s);
  // A probe far faster than its roofline: the step is its bytes at the bandwidth (1 GB/s).
  d.layer_probes = {SmallProbe(1, 2, 10, 0)};
  const Plan fast = MakePlan(w, d, Options());
  EXPECT_LT(fast.decode.t_layer_s, 0);
  EXPECT_DOUBLE_EQ(fast.decode.t_total_s, fast.decode.bytes / 1e9);
}

HeadProbe SmallHead(DType t, int64_t vocab, double seconds) {
  HeadProbe h;
  h.hidden = 64, h.vocab = vocab, h.type = t;
  h.seconds = MeasuredValue(seconds, "test");
  return h;
}

TEST(PlanProbe, HeadRooflineAndExcessMatchHandArithmetic) {
  DeviceProfile d = ProbeProfile();
  // [1000, 64] f16: 128,000 B / 2e9 = 64 us + the norm's 256 B / 1e9 = 0.256 us; 128,000 FLOPs /
  // 1e10 = 12.8 us; + 3 dispatches + the step: 167.256 us.
  const HeadProbe h = SmallHead(DType::kF16, 1000, 1e-3);
  EXPECT_NEAR(HeadProbeRoofline(h, d), 167.256e-6, 1e-15);
  EXPECT_DOUBLE_EQ(HeadExcess(d, 64, 1000, DType::kF16), 0);  // no probes
  d.head_probes = {h, SmallHead(DType::kF16, 100000, 0.5)};
  EXPECT_NEAR(HeadExcess(d, 64, 1000, DType::kF16), 1e-3 - 167.256e-6, 1e-15);
  EXPECT_NEAR(HeadExcess(d, 64, 2000, DType::kF16), 2 * (1e-3 - 167.256e-6), 1e-15);
  EXPECT_DOUBLE_EQ(HeadExcess(d, 64, 1000, DType::kQ8_0), 0);  // no probe of the type
  // The plan charges it once a decode step, to the model's own head type (llama3: bf16).
  const ModelWeights w = DescribeSynthetic(ModelArg("llama3"), "bf16");
  const Plan before = MakePlan(w, d, Options());
  EXPECT_EQ(before.decode.t_layer_s, 0);
  d.head_probes.push_back(SmallHead(DType::kBF16, 1000, 1e-3));
  const Plan after = MakePlan(w, d, Options());
  EXPECT_NEAR(after.decode.t_layer_s,
              HeadExcess(d, w.config.hidden_size, w.config.vocab_size, DType::kBF16), 1e-15);
  EXPECT_NE(after.decode.t_layer_s, 0);
  EXPECT_EQ(after.prefill.t_layer_s, 0);
}

TEST(PlanProbe, ProfileWithProbesRoundTripsThroughJson) {
  DeviceProfile d = UnitProfile();
  d.layer_probes = {SmallProbe(1, 2, 64, 0.01), SmallProbe(128, 1, 0, 0.5)};
  d.layer_probes[1].type = DType::kQ4_0;
  d.layer_probes[1].kv_type = DType::kF16;
  const nlohmann::json j = DeviceProfileToJson(d);
  ASSERT_TRUE(j.contains("layer_probes"));
  const DeviceProfile r = ParseDeviceProfile(nlohmann::json::parse(j.dump()), "round trip");
  EXPECT_EQ(DeviceProfileToJson(r), j);
  ASSERT_EQ(r.layer_probes.size(), 2u);
  const LayerProbe& p = r.layer_probes[1];
  EXPECT_EQ(p.hidden, 64);
  EXPECT_EQ(p.heads, 2);
  EXPECT_EQ(p.kv_heads, 1);
  EXPECT_EQ(p.head_dim, 32);
  EXPECT_EQ(p.ffn, 128);
  EXPECT_EQ(p.type, DType::kQ4_0);
  EXPECT_EQ(p.kv_type, DType::kF16);
  EXPECT_EQ(p.rows, 128);
  EXPECT_EQ(p.layers, 1);
  EXPECT_EQ(p.depth, 0);
  EXPECT_DOUBLE_EQ(p.seconds.value, 0.5);
  EXPECT_TRUE(p.seconds.calibrated);
  d.head_probes = {SmallHead(DType::kQ8_0, 151936, 0.004)};
  const nlohmann::json jh = DeviceProfileToJson(d);
  const DeviceProfile rh = ParseDeviceProfile(nlohmann::json::parse(jh.dump()), "round trip");
  EXPECT_EQ(DeviceProfileToJson(rh), jh);
  ASSERT_EQ(rh.head_probes.size(), 1u);
  EXPECT_EQ(rh.head_probes[0].vocab, 151936);
  EXPECT_EQ(rh.head_probes[0].hidden, 64);
  EXPECT_EQ(rh.head_probes[0].type, DType::kQ8_0);
  EXPECT_DOUBLE_EQ(rh.head_probes[0].seconds.value, 0.004);
  // A profile without probes (every one before session 29) loads with none.
  EXPECT_TRUE(UnitProfile().layer_probes.empty());
  // A probe without its depth fails the schema, naming the field.
  nlohmann::json bad = j;
  bad["layer_probes"][0].erase("depth");
  try {
    ParseDeviceProfile(bad, "bad");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layer_probes"), std::string::npos) << e.what();
  }
  // A whole float passes the schema's "integer" but must fit its field: 1e30 was cast to an
  // int64 (undefined behaviour), 1e10 rows to an int.
  for (const auto& [field, value] :
       std::vector<std::pair<std::string, double>>{{"hidden", 1e30}, {"rows", 1e10}}) {
    nlohmann::json big = j;
    big["layer_probes"][0][field] = value;
    try {
      ParseDeviceProfile(big, "big");
      ADD_FAILURE() << field << ": no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("field '" + field + "'"), std::string::npos) << e.what();
    }
  }
}

// A MoE probe of a small made-up shape: D 64, 8 experts of 32, top 2, f16, over `rows` rows and
// `layers` layers, its seconds made from the expert rate it should give (MoeProbeRate's inverse,
// checked against literal numbers in MoeProbeRateMatchesHandArithmetic).
MoeProbe SmallMoe(int rows, int layers, double rate, const DeviceProfile& d, int64_t hidden = 64) {
  MoeProbe m;
  m.hidden = hidden, m.ffn = 32, m.experts = 8, m.top_k = 2;
  m.type = DType::kF16;
  m.rows = rows, m.layers = layers;
  const double experts = 2.0 * rows * 2 * 3 * double(hidden) * 32;
  const double router = 2.0 * rows * 8 * double(hidden) / d.GemmRate(DType::kF32, 4.0 * 8 * hidden);
  m.seconds = MeasuredValue(
      layers * (experts / rate + 3 * d.dispatch_s.value + router) + d.step_s.value, "test");
  return m;
}

TEST(PlanMoe, MoeProbeRateMatchesHandArithmetic) {
  const DeviceProfile d = ProbeProfile();
  // 16 rows, 2 layers. Per layer: experts 2·16·2·3·64·32 = 393,216 FLOPs; the router 2·16·8·64 =
  // 16,384 FLOPs at 1e10 = 1.6384 us; 3 dispatches = 3 us. Measured 2 x (393.216 + 3 + 1.6384) +
  // 100 (the step) = 895.7088 us: the experts took 393.216 us a layer, 1 GFLOP/s.
  MoeProbe m = SmallMoe(16, 2, 1e9, d);
  EXPECT_NEAR(m.seconds.value, 895.7088e-6, 1e-15);
  EXPECT_NEAR(MoeProbeRate(m, d), 1e9, 1e-3);
  // Nothing left after the overheads: no rate.
  m.seconds.value = 50e-6;
  EXPECT_EQ(MoeProbeRate(m, d), 0);
}

TEST(PlanMoe, ExpertRateIsLogLinearInRowsPerExpert) {
  DeviceProfile d = ProbeProfile();
  EXPECT_EQ(MoeExpertRate(d, DType::kF16, 64, 32, 4), 0);  // no probes
  // 8 and 32 rows: 2 and 8 rows an expert (top 2 of 8), at 1 and 4 GFLOP/s.
  d.moe_probes = {SmallMoe(32, 1, 4e9, d), SmallMoe(8, 3, 1e9, d)};
  EXPECT_NEAR(MoeExpertRate(d, DType::kF16, 64, 32, 4), 2.5e9, 1e-3);  // log-midway
  EXPECT_NEAR(MoeExpertRate(d, DType::kF16, 64, 32, 2), 1e9, 1e-3);
  EXPECT_NEAR(MoeExpertRate(d, DType::kF16, 64, 32, 1), 1e9, 1e-3);  // the ends outside
  EXPECT_NEAR(MoeExpertRate(d, DType::kF16, 64, 32, 64), 4e9, 1e-3);
  EXPECT_EQ(MoeExpertRate(d, DType::kQ4_0, 64, 32, 4), 0);  // no probe of the type
  // The probes of the nearest expert shape (D·ffn in log): a wider one at 7 GFLOP/s.
  d.moe_probes.push_back(SmallMoe(16, 1, 7e9, d, 256));
  EXPECT_NEAR(MoeExpertRate(d, DType::kF16, 64, 32, 4), 2.5e9, 1e-3);
  EXPECT_NEAR(MoeExpertRate(d, DType::kF16, 200, 32, 4), 7e9, 1e-3);
}

TEST(PlanMoe, CpuPrefillRunsTheRoutedExpertsAtTheProbesRate) {
  // V2-Lite Q4_0 (26 MoE layers of 64 experts [1408, 2048], top 6; layer 0 dense) at a 64-row
  // prefill on the unit profile (1 GB/s, 1 GFLOP/s: compute-bound). Each layer's routed experts
  // compute F = 2·64·6·3·2048·1408 = 6,643,777,536 FLOPs, at the 1 GFLOP/s class rate without a
  // probe. A q4_0 probe at the prompt's 6 rows an expert that ran them at 0.5 GFLOP/s: 64 rows,
  // one layer of 13.287555072 s of experts + the router (2·64·64·2048 = 16,777,216 FLOPs at
  // 1 GFLOP/s: 0.016777216 s) = 13.304332288 s.
  const ModelWeights w = DescribeSynthetic("deepseek-v2-lite", "q4_0");
  const DeviceProfile unit = UnitProfile();
  DeviceProfile d = unit;
  MoeProbe m;
  m.hidden = 2048, m.ffn = 1408, m.experts = 64, m.top_k = 6;
  m.type = DType::kQ4_0;
  m.rows = 64, m.layers = 1;
  m.seconds = MeasuredValue(13.304332288, "test");
  d.moe_probes = {m};
  EXPECT_NEAR(MoeProbeRate(m, d), 0.5e9, 1e-3);
  const Plan before = MakePlan(w, unit, Options()), after = MakePlan(w, d, Options());
  // 26 x F at 0.5 GFLOP/s where they were at 1: + 26 x 6.643777536 s = + 172.738215936 s.
  EXPECT_NEAR(after.prefill.t_compute_s - before.prefill.t_compute_s, 172.738215936, 1e-6);
  EXPECT_NEAR(after.prefill.t_total_s - before.prefill.t_total_s, 172.738215936, 1e-6);
  EXPECT_NEAR(after.prefill.tokens_per_s, 64 / (before.prefill.t_total_s + 172.738215936), 1e-9);
  EXPECT_LT(after.prefill.tokens_per_s, before.prefill.tokens_per_s);  // slower: fewer rows
  // The bytes, FLOPs, memory and decode stay as they were.
  EXPECT_DOUBLE_EQ(after.prefill.flops, before.prefill.flops);
  EXPECT_DOUBLE_EQ(after.prefill.bytes, before.prefill.bytes);
  EXPECT_EQ(after.memory_bytes, before.memory_bytes);
  EXPECT_DOUBLE_EQ(after.decode.t_total_s, before.decode.t_total_s);
  // A probe of another type (the experts are q4_0), or none: the plan as before.
  d.moe_probes[0].type = DType::kQ8_0;
  EXPECT_DOUBLE_EQ(MakePlan(w, d, Options()).prefill.t_total_s, before.prefill.t_total_s);
  // A Vulkan prefill past 64 rows runs grouped GEMMs (its own arithmetic): the probe is not used.
  d.moe_probes[0].type = DType::kQ4_0;
  DeviceProfile vk = d, vk_plain = unit;
  vk.backend = vk_plain.backend = "vulkan";
  PlanOptions o = Options();
  o.prompt = 512;
  EXPECT_DOUBLE_EQ(MakePlan(w, vk, o).prefill.t_total_s,
                   MakePlan(w, vk_plain, o).prefill.t_total_s);
}

TEST(PlanMoe, ProfileWithMoeProbesRoundTripsThroughJson) {
  DeviceProfile d = UnitProfile();
  EXPECT_TRUE(d.moe_probes.empty());  // a profile without (every one before session 41)
  d.moe_probes = {SmallMoe(16, 2, 1e9, d), SmallMoe(64, 1, 2e9, d)};
  d.moe_probes[1].type = DType::kQ4_0;
  const nlohmann::json j = DeviceProfileToJson(d);
  ASSERT_TRUE(j.contains("moe_probes"));
  const DeviceProfile r = ParseDeviceProfile(nlohmann::json::parse(j.dump()), "round trip");
  EXPECT_EQ(DeviceProfileToJson(r), j);
  ASSERT_EQ(r.moe_probes.size(), 2u);
  const MoeProbe& p = r.moe_probes[1];
  EXPECT_EQ(p.hidden, 64);
  EXPECT_EQ(p.ffn, 32);
  EXPECT_EQ(p.experts, 8);
  EXPECT_EQ(p.top_k, 2);
  EXPECT_EQ(p.type, DType::kQ4_0);
  EXPECT_EQ(p.rows, 64);
  EXPECT_EQ(p.layers, 1);
  EXPECT_DOUBLE_EQ(p.seconds.value, d.moe_probes[1].seconds.value);
  EXPECT_TRUE(p.seconds.calibrated);
  // Without its top_k the schema fails, naming the array; top_k past the experts fails too.
  for (const auto& [field, value] :
       std::vector<std::pair<std::string, int>>{{"top_k", 0}, {"top_k", 9}}) {
    nlohmann::json bad = j;
    if (value == 0)
      bad["moe_probes"][0].erase(field);
    else
      bad["moe_probes"][0][field] = value;
    try {
      ParseDeviceProfile(bad, "bad");
      ADD_FAILURE() << field << " " << value << ": no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("moe_probes"), std::string::npos) << e.what();
    }
  }
  // The committed profiles without the probe still load and keep none.
  EXPECT_TRUE(LoadDeviceProfile("dev-epyc-2c").moe_probes.empty());
}

TEST(PlanMoe, CpuCalibrationRunsTheMoeProbes) {
  CalibrateOptions o;
  o.backend = "cpu";
  o.quick = true;
  o.threads = 1;
  o.seconds_per_case = 0.02;
  const DeviceProfile d = CalibrateDevice(o);
  // quick: 8 experts of [128, 256], top 2, at 4 and 16 rows, q8_0 and q4_0.
  ASSERT_FALSE(d.moe_probes.empty());
  for (const MoeProbe& m : d.moe_probes) {
    SCOPED_TRACE(std::string(Name(m.type)) + " rows " + std::to_string(m.rows));
    EXPECT_EQ(m.hidden, 256);
    EXPECT_EQ(m.experts, 8);
    EXPECT_TRUE(m.seconds.calibrated);
    EXPECT_NE(m.seconds.source.find("median of"), std::string::npos) << m.seconds.source;
    EXPECT_TRUE(std::isfinite(MoeProbeRate(m, d)));
  }
}

TEST(PlanProbe, PrefillProbesOutgrowTheLastLevelCache) {
  // The 7B's Q8_0 layer: 3808 B rows x (q, k, v, o: 8,192 + gate, up: 37,888) + down 20,128 B
  // rows x 3,584 = 247,611,392 B; 0.3 s a layer at the GEMM rate, 0.3 s a case. Before: one
  // layer (inside the dev Xeon's 260 MiB L3); now as many as fill its 1 GiB chain: 5; a 256 MiB
  // chain (no cache size known): 2.
  const size_t GiB = size_t(1) << 30, MiB = size_t(1) << 20;
  EXPECT_EQ(PrefillProbeLayers(247611392, 0.3, GiB, 0.3), 5);
  EXPECT_EQ(PrefillProbeLayers(247611392, 0.3, 256 * MiB, 0.3), 2);
  // The 1.5B's Q4_0 layer (26 MB): the chain would take 42; at most 28.
  EXPECT_EQ(PrefillProbeLayers(26e6, 0.04, GiB, 0.3), 28);
  // A GPU (no chain): 1-4 layers by time, as before.
  EXPECT_EQ(PrefillProbeLayers(247611392, 0.05, 0, 0.3), 4);
  EXPECT_EQ(PrefillProbeLayers(247611392, 0.12, 0, 0.3), 2);
  EXPECT_EQ(PrefillProbeLayers(247611392, 1.0, 0, 0.3), 1);
  // Time asks for more than the chain: time's (4 at most).
  EXPECT_EQ(PrefillProbeLayers(1e9, 0.05, 256 * MiB, 0.3), 4);
}

// The layer chains on lavapipe (`devices --calibrate --backend vulkan --quick`): the Vulkan
// backend records each probe as one program (17 nodes a layer: matmuls fed by its norms, ropes,
// stores, attention, SwiGLU, adds) and runs it; each ran, took longer than its nodes' share of
// the per-op and per-step overheads, and plan reads a finite excess back.
// Every calibration probe is timed by TimeRepeated. A fake clock that each run advances by a
// scripted time: the slow first runs (pipelines compiled, clocks low) are the warm-up, untimed,
// until warmup_s has passed; then at least min_runs timed runs and as many more as the budget
// holds; the median of those, their spread, and the counts.
TEST(PlanProbe, ChainsOutgrowTheLastLevelCache) {
  // A sysfs cache folder as the dev Xeon's: L1d 48K, L1i 32K, L2 2048K, L3 266240K (260 MiB).
  const std::string dir = test::TempDir() + "/cache";
  const struct {
    int level;
    const char *type, *size;
  } caches[] = {{1, "Data", "48K"},
                {1, "Instruction", "32K"},
                {2, "Unified", "2048K"},
                {3, "Unified", "266240K"}};
  for (int i = 0; i < 4; ++i) {
    const std::string d = dir + "/index" + std::to_string(i);
    std::filesystem::create_directories(d);
    test::WriteFile(d + "/level", std::to_string(caches[i].level) + "\n");
    test::WriteFile(d + "/type", std::string(caches[i].type) + "\n");
    test::WriteFile(d + "/size", std::string(caches[i].size) + "\n");
  }
  const size_t llc = size_t(260) << 20;
  EXPECT_EQ(LastLevelCacheBytes(dir), llc);
  EXPECT_EQ(LastLevelCacheBytes(dir + "/none"), 0u);
  // 4 x 260 MiB past the 1 GiB large probe: the chains are 1 GiB (256 MiB before: inside the
  // L3); a 32 MiB L3 (the dev EPYC's) keeps 256 MiB; 100 MiB gives 400 MiB.
  const size_t GiB = size_t(1) << 30, MiB = size_t(1) << 20;
  EXPECT_EQ(ProbeChainBytes(llc, GiB), GiB);
  EXPECT_EQ(ProbeChainBytes(32 * MiB, GiB), 256 * MiB);
  EXPECT_EQ(ProbeChainBytes(100 * MiB, GiB), 400 * MiB);
  EXPECT_EQ(ProbeChainBytes(0, 4 * MiB), 4 * MiB);  // a device's bound wins
  EXPECT_GE(ProbeChainBytes(llc, 4 * GiB), kCacheMultiple * llc);
}

TEST(PlanProbe, BandwidthIsTheFastestStreamFromMemory) {
  // The dev Xeon (session 35): the read sum 19.1 GB/s, the 1 GiB GEMVs f32 30.5, q4_0 23.0.
  const ProfileValue read = MeasuredValue(19.1e9, "read sum");
  std::map<DType, ProfileValue> gemv = {{DType::kF32, MeasuredValue(30.5e9, "f32")},
                                        {DType::kQ4_0, MeasuredValue(23.0e9, "q4_0")}};
  const ProfileValue b = StreamBandwidth(read, gemv);
  EXPECT_DOUBLE_EQ(b.value, 30.5e9);
  EXPECT_TRUE(b.calibrated);
  EXPECT_NE(b.source.find("read sum; the large GEMV probes read their weights faster: f32"),
            std::string::npos)
      << b.source;
  // A read sum faster than every GEMV (the dev EPYC's) stays as it was.
  gemv[DType::kF32].value = 18e9;
  gemv[DType::kQ4_0].value = 17e9;
  EXPECT_DOUBLE_EQ(StreamBandwidth(read, gemv).value, 19.1e9);
  EXPECT_EQ(StreamBandwidth(read, gemv).source, "read sum");
  EXPECT_DOUBLE_EQ(StreamBandwidth(read, {}).value, 19.1e9);
}

TEST(PlanProbe, ProbesWarmUpThenKeepTheMedianOfTheirRuns) {
  double clock = 0;
  const std::vector<double> script = {5.0, 3.0, 0.5, 1.0, 9.0, 2.0, 1.5, 1.2, 1.1, 7.0, 1.3};
  size_t i = 0;
  const auto run = [&] { clock += script[std::min(i++, script.size() - 1)]; };
  const auto now = [&] { return clock; };
  // Warm-up until 6 s: 5 + 3 = 8 (two runs). Timed: 0.5, 1, 9, 2, 1.5 (the five required;
  // 14 s > the budget of 10 then): median 1.5.
  ProbeTiming t = TimeRepeated(run, now, 10.0, 6.0, 5);
  EXPECT_EQ(t.warmups, 2);
  EXPECT_EQ(t.runs, 5);
  EXPECT_DOUBLE_EQ(t.median_s, 1.5);
  EXPECT_DOUBLE_EQ(t.min_s, 0.5);
  EXPECT_DOUBLE_EQ(t.max_s, 9.0);
  EXPECT_EQ(t.Describe(), "median of 5 runs after 2 warm-up, 0.5 .. 9 s");
  // A longer budget takes more runs: 1.2, 1.1, 7 (23.3 s of timed runs then, past 20).
  i = 0, clock = 0;
  t = TimeRepeated(run, now, 20.0, 6.0, 5);
  EXPECT_EQ(t.runs, 8);
  EXPECT_DOUBLE_EQ(t.median_s, 1.5);  // of 0.5 1 1.1 1.2 1.5 2 7 9: the upper middle
  // No warm-up time asked: still one untimed run (the one that compiles).
  i = 0, clock = 0;
  t = TimeRepeated(run, now, 0.0, 0.0, 3);
  EXPECT_EQ(t.warmups, 1);
  EXPECT_EQ(t.runs, 3);
  EXPECT_DOUBLE_EQ(t.median_s, 1.0);  // of 3, 0.5, 1
}

TEST(PlanProbe, VulkanCalibrationRunsTheLayerChains) {
  if (!VulkanBackendBuilt()) GTEST_SKIP() << "built without Vulkan";
  CalibrateOptions o;
  o.backend = "vulkan";
  o.quick = true;
  o.seconds_per_case = 0.02;
  DeviceProfile d;
  try {
    d = CalibrateDevice(o);
  } catch (const Error& e) {
    if (std::string(e.what()).find("no Vulkan device") != std::string::npos ||
        std::string(e.what()).find("vulkan: no") != std::string::npos)
      GTEST_SKIP() << e.what();
    throw;
  }
  ASSERT_FALSE(d.layer_probes.empty());
  bool one = false, many = false;
  for (const LayerProbe& p : d.layer_probes) {
    SCOPED_TRACE(std::string(Name(p.type)) + " rows " + std::to_string(p.rows));
    EXPECT_EQ(p.hidden, 256);
    EXPECT_EQ(p.kv_type, DType::kF16);  // the Vulkan backend's default cache
    EXPECT_TRUE(p.seconds.calibrated);
    EXPECT_GT(p.seconds.value, (17.0 * p.layers + 1) * d.dispatch_s.value + d.step_s.value);
    EXPECT_TRUE(std::isfinite(LayerProbeExcess(p, d)));
    one = one || p.rows == 1;
    many = many || p.rows > 1;
  }
  EXPECT_TRUE(one && many);
  // Each probe is the median of its timed runs after its warm-up (TimeRepeated), said so.
  for (const LayerProbe& p : d.layer_probes)
    EXPECT_NE(p.seconds.source.find("median of"), std::string::npos) << p.seconds.source;
  EXPECT_FALSE(d.head_probes.empty());
  for (const HeadProbe& h : d.head_probes)
    EXPECT_GT(h.seconds.value, 3 * d.dispatch_s.value + d.step_s.value);
  const Plan plan = MakePlan(DescribeSynthetic("r1-distill-qwen-1.5b", "q4_0"), d, Options());
  EXPECT_NE(plan.decode.t_layer_s, 0);
  EXPECT_GT(plan.decode.tokens_per_s, 0);
}

}  // namespace
}  // namespace es
