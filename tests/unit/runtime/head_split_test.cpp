// Head split (runtime/head_split.h) on CPU devices: a runner whose layers are sharded over two
// or four CPU backends (kv heads and FFN columns; MLA by head with the latent replicated; routed
// experts by range) computes the plain runner's logits within f32 summation order (the partial
// sums are added on the host in another order than one matmul adds them: 1e-5 relative L2), for
// a dense and two MLA+MoE goldens, over prefill, decode, a batch of two sequences, greedy ids and
// block tables; and the errors for head counts that do not divide.
#include "edgeseek/internal/runtime/head_split.h"

#include <gtest/gtest.h>

#include "edgeseek/internal/backends/backend.h"
#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/models/arch.h"
#include "edgeseek/internal/runtime/model.h"
#include "edgeseek/internal/runtime/pipeline.h"
#include "edgeseek/internal/runtime/runner.h"
#include "test_util.h"

namespace es {
namespace {

// f32 sums in another order (the all-reduce), nothing else: well below the goldens' 1e-4.
constexpr double kTol = 1e-5;

std::shared_ptr<Model> Golden(const std::string& name) {
  return Model::Load(test::SourceDir() + "/tests/golden/data/models/" + name);
}

RunnerOptions Opts() {
  RunnerOptions ro;
  ro.n_slots = 3;
  ro.context = 64;
  return ro;
}

BackendOptions Bo() {
  BackendOptions bo;
  bo.threads = 2;
  return bo;
}

std::unique_ptr<Runner> Plain(std::shared_ptr<Model> m) {
  return std::make_unique<Runner>(std::move(m), CreateBackend("cpu", Bo()), Opts());
}

std::unique_ptr<Runner> HeadSplit(std::shared_ptr<Model> m, const std::string& devices) {
  SplitOptions so;
  so.devices = devices;
  so.split = "head";
  return MakeSplitRunner(std::move(m), "cpu", Bo(), Opts(), so);
}

std::vector<float> Logits(Runner& r, const Batch& b) {
  std::vector<float> l;
  r.Forward(b, &l);
  return l;
}

Batch Prompt(int slot, int64_t pos0, std::vector<int32_t> ids, bool all = true) {
  Batch b;
  b.Add(slot, pos0, ids, all);
  b.Finalize();
  return b;
}

// Prefill, three decode steps, a mixed batch of two sequences and greedy ids against the plain
// runner.
void ExpectHeadSplitEqualsPlain(const std::string& name, const std::string& devices) {
  SCOPED_TRACE(name + " over " + devices);
  auto m = Golden(name);
  auto plain = Plain(m), split = HeadSplit(m, devices);
  ASSERT_EQ(split->stages().size(), 1u);
  EXPECT_EQ(split->stage_first_layers(), (std::vector<int>{0, m->config().n_layers}));
  const std::vector<int32_t> ids = {1, 7, 3, 11, 5, 2, 9};
  EXPECT_LE(test::RelL2(Logits(*split, Prompt(0, 0, ids)), Logits(*plain, Prompt(0, 0, ids))),
            kTol);
  for (int t = 0; t < 3; ++t) {
    const Batch step = Prompt(0, int64_t(ids.size()) + t, {int32_t(4 + t)});
    EXPECT_LE(test::RelL2(Logits(*split, step), Logits(*plain, step)), kTol) << "step " << t;
  }
  Batch mixed;
  mixed.Add(0, int64_t(ids.size()) + 3, {6});
  mixed.Add(1, 0, {2, 8, 1}, true);
  mixed.Finalize();
  EXPECT_LE(test::RelL2(Logits(*split, mixed), Logits(*plain, mixed)), kTol);
  std::vector<int32_t> a, b;
  split->ForwardArgmax(Prompt(2, 0, {5, 4, 3}, false), &a);
  plain->ForwardArgmax(Prompt(2, 0, {5, 4, 3}, false), &b);
  EXPECT_EQ(a, b);
}

TEST(HeadSplit, DenseCpuShardsEqualPlainRunner) {
  ExpectHeadSplitEqualsPlain("llama3", "cpu,cpu");  // 2 kv heads, 4 heads: 1 + 2 a device
}

TEST(HeadSplit, MlaMoeCpuShardsEqualPlainRunner) {
  // dsv2_lite: layer 0 dense, layer 1 MoE (8 experts, 2 shared); dsv3: q_lora, 16 experts in
  // 4 groups (noaux_tc), one shared expert, over 2 and 4 devices.
  ExpectHeadSplitEqualsPlain("dsv2_lite", "cpu,cpu");
  ExpectHeadSplitEqualsPlain("dsv3", "cpu,cpu");
  ExpectHeadSplitEqualsPlain("dsv3", "cpu,cpu,cpu,cpu");
}

TEST(HeadSplit, ShardsHoldTheirHeadsExpertsAndCache) {
  auto m = Golden("dsv2_lite");
  auto split = HeadSplit(m, "cpu,cpu");
  const std::string d = split->stages()[0]->description();
  EXPECT_NE(d.find("heads 0-1, experts 0-3 on cpu"), std::string::npos) << d;
  EXPECT_NE(d.find("heads 2-3, experts 4-7 on cpu"), std::string::npos) << d;
  // MLA: the latent is replicated, so two shards hold two whole caches.
  EXPECT_EQ(split->stages()[0]->kv_bytes(), 2 * Plain(m)->kv_bytes_total());
  // Dense: each shard caches its own kv head (llama3: one of two).
  auto dense = Golden("llama3");
  EXPECT_EQ(HeadSplit(dense, "cpu,cpu")->stages()[0]->kv_bytes(), Plain(dense)->kv_bytes_total());
}

TEST(HeadSplit, BlockTablesReachEveryShard) {
  // As LayerSplit.BlockTablesReachEveryStage: slot 1 reads slot 0's first block as a prefix.
  auto m = Golden("dsv3");
  auto plain = Plain(m), split = HeadSplit(m, "cpu,cpu");
  ASSERT_TRUE(split->kv_paged());
  const int64_t per_slot = plain->kv_blocks() / plain->n_slots();
  ASSERT_GE(per_slot, 2);
  std::vector<int32_t> t0, t1;
  for (int64_t i = 0; i < per_slot; ++i) t0.push_back(int32_t(2 * per_slot + i));
  t1 = {t0[0]};
  for (int64_t i = 1; i < per_slot; ++i) t1.push_back(int32_t(per_slot + i));
  for (Runner* r : {plain.get(), split.get()}) {
    r->SetBlockTable(0, t0);
    r->SetBlockTable(1, t1);
    r->SetBlockTable(2, {});
  }
  std::vector<int32_t> a;
  for (int i = 0; i < kKvBlockTokens + 3; ++i) a.push_back(int32_t((i * 5 + 1) % 30));
  const std::vector<int32_t> b = {2, 7, 1, 8};
  EXPECT_LE(test::RelL2(Logits(*split, Prompt(0, 0, a)), Logits(*plain, Prompt(0, 0, a))), kTol);
  EXPECT_LE(test::RelL2(Logits(*split, Prompt(1, kKvBlockTokens, b)),
                        Logits(*plain, Prompt(1, kKvBlockTokens, b))),
            kTol);
}

// One clear error naming the model and its numbers.
void ExpectError(const std::string& model, const std::string& devices,
                 const std::vector<std::string>& parts, const std::string& layers = "") {
  auto m = Golden(model);
  SplitOptions so;
  so.devices = devices;
  so.split = "head";
  so.layer_counts = layers;
  try {
    MakeSplitRunner(m, "cpu", Bo(), Opts(), so);
    ADD_FAILURE() << model << " over " << devices << ": no error";
  } catch (const Error& e) {
    for (const std::string& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

TEST(HeadSplit, HeadCountsThatDoNotDivideAreErrors) {
  ExpectError(
      "qwen2_sharded", "cpu,cpu",
      {"model 'qwen2_sharded'", "--split head over 2 devices", "1 KV heads", "5 attention heads"});
  ExpectError("llama3", "cpu,cpu,cpu", {"2 KV heads", "4 attention heads", "divide by 3"});
  ExpectError("dsv2_lite", "cpu,cpu,cpu", {"4 attention heads (MLA)", "divide by 3"});
  ExpectError("llama3", "cpu,cpu", {"--split-layers 1,1", "--split layer"}, "1,1");
}

TEST(HeadSplit, ArchShardsCutEveryLayer) {
  auto m = Golden("llama3");
  const ModelArch& a = m->arch();
  ShardSpec s;
  s.index = 1, s.count = 2;
  auto sh = a.MakeShard(s);
  ASSERT_EQ(sh->layers.size(), 2u);
  const LayerWeights& w = sh->layers[0];
  EXPECT_EQ(w.heads, 2);
  EXPECT_EQ(w.kv_heads, 1);
  EXPECT_EQ(w.q->shape, (Shape{2 * 32, 128}));
  EXPECT_EQ(w.k->shape, (Shape{32, 128}));
  EXPECT_EQ(w.o->shape, (Shape{128, 2 * 32}));
  EXPECT_EQ(w.gate->rows() + a.MakeShard({0, 2, 0, 0})->layers[0].gate->rows(), 288);
  EXPECT_EQ(a.ShardKvSpec(*sh, DType::kF32).width[0], 32);
  // Shard 1's attention block is its partial sum alone (no residual add); shard 0's adds x.
  const Batch one = Prompt(0, 0, {1});
  EXPECT_EQ(a.BuildShardBlock(*sh, one, 0, false).nodes().back().op, Op::kMatMul);
  EXPECT_EQ(a.BuildShardBlock(*a.MakeShard({0, 2, 0, 0}), one, 0, false).nodes().back().op,
            Op::kAdd);
  EXPECT_THROW(a.MakeShard({0, 3, 0, 0}), Error);
}

}  // namespace
}  // namespace es
