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
#include <nlohmann/json.hpp>

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
    // The unit profile is a CPU: an untied embedding is resident for the 80 rows of the tokens.
    const size_t embed = size_t(NumElements({w.config.vocab_size, w.config.hidden_size})) * 2;
    const size_t resident = w.config.tie_word_embeddings
                                ? p.weights_bytes
                                : p.weights_bytes - embed + 80 * w.config.hidden_size * 2;
    EXPECT_EQ(p.resident_weights_bytes, resident);
    EXPECT_EQ(p.memory_bytes, resident + p.kv_bytes + p.activation_bytes + p.overhead_bytes);
    // 1 GB/s and 1 GFLOP/s without overheads: each phase's time is its larger term.
    EXPECT_DOUBLE_EQ(p.decode.t_total_s, std::max(p.decode.bytes / 1e9, p.decode.flops / 1e9));
  }
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
  c.rate.value = rate;
  c.rate.source = "test";
  c.rate.calibrated = true;
  c.rate.present = true;
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

}  // namespace
}  // namespace es
