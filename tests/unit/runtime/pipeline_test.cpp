// Layer split (runtime/pipeline.h) on the CPU: a runner split into CPU stages computes the logits
// of the plain runner bit for bit (the residual stream crosses in f32) for a dense and an
// MLA+MoE golden, over prefill, incremental decode, a batch of sequences, greedy ids and paged
// block tables; the choice of layer ranges; the device list and its errors.
#include "edgeseek/internal/runtime/pipeline.h"

#include <gtest/gtest.h>

#include <map>

#include "edgeseek/internal/backends/backend.h"
#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/models/arch.h"
#include "edgeseek/internal/models/config.h"
#include "edgeseek/internal/runtime/engine.h"
#include "edgeseek/internal/runtime/generator.h"
#include "edgeseek/internal/runtime/micro_batch.h"
#include "edgeseek/internal/runtime/model.h"
#include "edgeseek/internal/runtime/runner.h"
#include "test_util.h"

namespace es {
namespace {

std::shared_ptr<Model> Golden(const std::string& name) {
  return Model::Load(test::SourceDir() + "/tests/golden/data/models/" + name);
}

RunnerOptions Opts() {
  RunnerOptions ro;
  ro.n_slots = 3;
  ro.context = 64;
  return ro;
}

std::unique_ptr<Runner> Plain(std::shared_ptr<Model> m) {
  BackendOptions bo;
  bo.threads = 2;
  return std::make_unique<Runner>(std::move(m), CreateBackend("cpu", bo), Opts());
}

// CPU stages starting at `first` (first[0] = 0), the runner's backend the last.
std::unique_ptr<Runner> Split(std::shared_ptr<Model> m, std::vector<int> first,
                              RunnerOptions ro = Opts()) {
  BackendOptions bo;
  bo.threads = 2;
  std::vector<std::unique_ptr<PipelineStage>> front;
  for (size_t i = 1; i < first.size(); ++i)
    front.push_back(MakeLocalStage(CreateBackend("cpu", bo)));
  return std::make_unique<Runner>(std::move(m), std::move(front), std::move(first),
                                  CreateBackend("cpu", bo), ro);
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

// Every split of the model's layers into 2 (and 3, where it has them) stages: prefill, decode
// steps, a mixed batch of two sequences and greedy ids equal the plain runner's, bit for bit.
void ExpectSplitsEqualPlain(const std::string& name) {
  auto m = Golden(name);
  const int n = m->config().n_layers;
  std::vector<std::vector<int>> splits;
  for (int a = 1; a < n; ++a) splits.push_back({0, a});
  if (n >= 3) splits.push_back({0, 1, 2});
  ASSERT_FALSE(splits.empty());
  auto plain = Plain(m);
  const std::vector<int32_t> ids = {1, 7, 3, 11, 5, 2, 9};
  const std::vector<float> ref = Logits(*plain, Prompt(0, 0, ids));
  std::vector<std::vector<float>> ref_steps;
  for (int t = 0; t < 3; ++t)
    ref_steps.push_back(Logits(*plain, Prompt(0, int64_t(ids.size()) + t, {int32_t(4 + t)})));
  Batch mixed;
  mixed.Add(0, int64_t(ids.size()) + 3, {6});
  mixed.Add(1, 0, {2, 8, 1}, true);
  mixed.Finalize();
  const std::vector<float> ref_mixed = Logits(*plain, mixed);
  std::vector<int32_t> ref_ids;
  plain->ForwardArgmax(Prompt(2, 0, {5, 4, 3}, false), &ref_ids);

  for (const auto& first : splits) {
    SCOPED_TRACE(name + ": stages from layers " + std::to_string(first[1]) +
                 (first.size() > 2 ? "," + std::to_string(first[2]) : ""));
    auto split = Split(m, first);
    EXPECT_EQ(split->stages().size(), first.size() - 1);
    EXPECT_EQ(split->kv_bytes_per_token(), plain->kv_bytes_per_token());
    EXPECT_EQ(Logits(*split, Prompt(0, 0, ids)), ref);
    for (int t = 0; t < 3; ++t)
      EXPECT_EQ(Logits(*split, Prompt(0, int64_t(ids.size()) + t, {int32_t(4 + t)})),
                ref_steps[size_t(t)])
          << "decode step " << t;
    EXPECT_EQ(Logits(*split, mixed), ref_mixed);
    std::vector<int32_t> got;
    split->ForwardArgmax(Prompt(2, 0, {5, 4, 3}, false), &got);
    EXPECT_EQ(got, ref_ids);
  }
}

TEST(LayerSplit, DenseCpuStagesEqualPlainRunner) { ExpectSplitsEqualPlain("qwen2_sharded"); }
TEST(LayerSplit, MlaMoeCpuStagesEqualPlainRunner) { ExpectSplitsEqualPlain("dsv3"); }
TEST(LayerSplit, MlaMoeDenseFirstLayerCpuStagesEqualPlainRunner) {
  ExpectSplitsEqualPlain("dsv2_lite");  // layer 0 dense, layer 1 MoE: one in each stage
}

// Micro-batches (micro_batch.h): with parts of at least 2 rows, a 7-row prompt runs as 3 or 4
// parts cut inside the sequence, the stages side by side; logits, greedy and sampled ids equal
// the plain runner's, and so does the decode that reads the parts' KV rows. Bit for bit where
// the model's math does not depend on the row count (`tol` 0); MLA takes its absorbed or expanded
// form by rows, so its parts' logits match to rounding (`tol`).
void ExpectMicroBatchesEqualPlain(const std::string& name, std::vector<int> first, float tol) {
  auto m = Golden(name);
  auto plain = Plain(m);
  RunnerOptions ro = Opts();
  ro.micro_batch_rows = 2;
  auto split = Split(m, std::move(first), ro);
  auto expect_logits = [&](const Batch& b, const char* what) {
    const std::vector<float> want = Logits(*plain, b), got = Logits(*split, b);
    ASSERT_EQ(got.size(), want.size()) << what;
    if (tol == 0) {
      EXPECT_EQ(got, want) << what;
      return;
    }
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], tol) << what << " " << i;
  };
  const std::vector<int32_t> ids = {1, 7, 3, 11, 5, 2, 9};
  expect_logits(Prompt(0, 0, ids), "prompt");
  const int64_t n = int64_t(ids.size());
  Batch mixed;  // a decode row, a prompt wanting its last row only, a prompt wanting all
  mixed.Add(0, n, {6});
  mixed.Add(1, 0, {2, 8, 1, 4, 4});
  mixed.Add(2, 0, {3, 9, 2}, true);
  mixed.Finalize();
  expect_logits(mixed, "mixed");
  Batch step;  // the three sequences' next rows read every part's KV rows
  step.Add(0, n + 1, {5});
  step.Add(1, 5, {7});
  step.Add(2, 3, {1});
  step.Finalize();
  expect_logits(step, "decode");
  std::vector<int32_t> want, got;
  Batch again;  // slot 1 from the start: parts with no wanted row stand in their last
  again.Add(1, 0, {4, 4, 2, 9, 9, 3, 1, 8});
  again.Finalize();
  plain->ForwardArgmax(again, &want);
  split->ForwardArgmax(again, &got);
  EXPECT_EQ(got, want);
  std::vector<RowSampling> rows(1);
  rows[0].temperature = 0.8f;
  rows[0].seed = 1234;
  plain->ForwardSample(again, rows, &want);
  split->ForwardSample(again, rows, &got);
  EXPECT_EQ(got, want);
  std::vector<float> logits;
  ComputeStats st;
  split->Forward(Prompt(2, 0, ids), &logits, &st);
  EXPECT_GT(st.total_s, 0.0);
  // Every forward above but the one-row-a-sequence decode step ran as micro-batches.
  EXPECT_EQ(split->micro_batched_forwards(), 5);
  EXPECT_EQ(plain->micro_batched_forwards(), 0);
}

TEST(LayerSplit, DenseMicroBatchesEqualPlain) {
  ExpectMicroBatchesEqualPlain("qwen2_sharded", {0, 1}, 0);
}
TEST(LayerSplit, MlaMoeMicroBatchesOverThreeStagesEqualPlain) {
  ExpectMicroBatchesEqualPlain("dsv3", {0, 1, 2}, 1e-4f);
}
TEST(LayerSplit, MlaMoeDenseFirstLayerMicroBatchesEqualPlain) {
  ExpectMicroBatchesEqualPlain("dsv2_lite", {0, 1}, 1e-4f);
}

TEST(LayerSplit, MicroBatchesCutRowsInOrder) {
  EXPECT_EQ(MicroBatchParts(127, 64, 4), 1);
  EXPECT_EQ(MicroBatchParts(128, 64, 4), 2);
  EXPECT_EQ(MicroBatchParts(1000, 64, 4), 4);
  EXPECT_EQ(MicroBatchParts(1000, 0, 4), 1);
  Batch b;
  b.Add(3, 10, {1});                // row 0, wanted
  b.Add(0, 0, {5, 6, 7, 8, 9});     // rows 1-5, the last wanted
  b.Add(2, 4, {2, 3, 4, 5}, true);  // rows 6-9, all wanted
  b.Finalize();
  const std::vector<MicroBatch> p = SplitMicroBatches(b, 3);  // rows [0,3) [3,6) [6,10)
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0].row0, 0);
  EXPECT_EQ(p[0].batch.tokens, (std::vector<int32_t>{1, 5, 6}));
  ASSERT_EQ(p[0].batch.seqs.size(), 2u);
  EXPECT_EQ(p[0].batch.seqs[1].slot, 0);
  EXPECT_EQ(p[0].batch.positions, (std::vector<int32_t>{10, 0, 1}));
  EXPECT_EQ(p[0].batch.out_rows, (std::vector<int32_t>{0}));
  EXPECT_EQ(p[0].out_of, (std::vector<int>{0}));
  EXPECT_EQ(p[1].row0, 3);
  EXPECT_EQ(p[1].batch.positions, (std::vector<int32_t>{2, 3, 4}));  // slot 0 from position 2
  EXPECT_EQ(p[1].batch.out_rows, (std::vector<int32_t>{2}));
  EXPECT_EQ(p[1].out_of, (std::vector<int>{1}));
  EXPECT_EQ(p[2].batch.positions, (std::vector<int32_t>{4, 5, 6, 7}));
  EXPECT_EQ(p[2].batch.out_rows, (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(p[2].out_of, (std::vector<int>{2, 3, 4, 5}));
  const std::vector<MicroBatch> q = SplitMicroBatches(b, 5);  // rows [0,2) [2,4) [4,6) ...
  EXPECT_EQ(q[1].batch.out_rows, (std::vector<int32_t>{1}));  // no wanted row: its last stands in
  EXPECT_EQ(q[1].out_of, (std::vector<int>{-1}));
}

TEST(LayerSplit, GreedyGenerationEqualsPlain) {
  auto m = Golden("llama3");
  auto plain = Plain(m), split = Split(m, {0, 1});
  GenerateOptions go;
  go.max_new_tokens = 12;
  go.min_new_tokens = 12;
  go.sampling.temperature = 0;
  const std::vector<int32_t> prompt = {1, 2, 3, 4};
  EXPECT_EQ(Generate(*split, split->AcquireSlot(), prompt, go),
            Generate(*plain, plain->AcquireSlot(), prompt, go));
}

TEST(LayerSplit, BlockTablesReachEveryStage) {
  // Slot 0 on slot 2's blocks; slot 1 shares slot 0's first block (a cached prefix: its first
  // kKvBlockTokens positions) and computes only the positions after it. A stage that ignored
  // the tables would read slot 1's own, never written, first block instead.
  auto m = Golden("dsv3");
  auto plain = Plain(m), split = Split(m, {0, 1, 2});
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
  EXPECT_EQ(Logits(*split, Prompt(0, 0, a)), Logits(*plain, Prompt(0, 0, a)));
  EXPECT_EQ(Logits(*split, Prompt(1, kKvBlockTokens, b)),
            Logits(*plain, Prompt(1, kKvBlockTokens, b)));
  EXPECT_EQ(Logits(*split, Prompt(0, int64_t(a.size()), {9})),
            Logits(*plain, Prompt(0, int64_t(a.size()), {9})));
}

// The server's path: the engine over a shared KV pool smaller than slots x context (block tables
// change as requests come and go), the prefix cache on, chunked prefill, sampled tokens. A
// split runner (CPU stages) emits the plain runner's tokens, bit for bit. (Prompts share one
// prefix at the same positions, so this does not catch a stage that ignores block tables:
// BlockTablesReachEveryStage does.)
// Four sampled requests through the engine (a paged pool with the prefix cache, steps of up to 20
// rows: two prompts sharing a 35-token system prompt, then two more after them), on the plain
// runner or on three CPU stages; the tokens each request got, and how many forwards ran as
// micro-batches (RunnerOptions::micro_batch_rows `micro`).
std::map<std::string, std::vector<int32_t>> EngineTokens(const std::string& name, bool split,
                                                         int micro, int64_t* micro_forwards) {
  auto m = Golden(name);
  const int V = m->vocab_size();
  RunnerOptions ro;
  ro.n_slots = 3;
  ro.context = 96;
  ro.kv_memory_bytes = 10 * kKvBlockTokens * m->config().MakeKvSpec(DType::kF32).BytesPerToken();
  ro.micro_batch_rows = micro;
  std::unique_ptr<Runner> r;
  if (split) {
    std::vector<std::unique_ptr<PipelineStage>> front;
    front.push_back(MakeLocalStage(CreateBackend("cpu", {})));
    front.push_back(MakeLocalStage(CreateBackend("cpu", {})));
    r = std::make_unique<Runner>(m, std::move(front), std::vector<int>{0, 1, 2},
                                 CreateBackend("cpu", {}), ro);
  } else {
    r = std::make_unique<Runner>(m, CreateBackend("cpu", {}), ro);
  }
  const Runner* runner = r.get();
  auto queue = std::make_shared<RequestQueue>(QosPolicy{});
  EngineOptions eo;
  eo.prefix_cache = true;
  eo.max_batch_tokens = 20;
  Engine e(WrapRunner(std::move(r)), queue, eo);
  std::map<std::string, std::vector<int32_t>> out;
  std::vector<int32_t> sys;
  for (int i = 0; i < 35; ++i) sys.push_back(int32_t((i * 7 + 3) % V));
  auto submit = [&](const std::string& id, int extra, uint64_t seed) {
    auto q = std::make_shared<SeqRequest>();
    q->id = id;
    q->prompt = sys;
    for (int i = 0; i < extra; ++i) q->prompt.push_back(int32_t((i * 5 + int(seed)) % V));
    q->max_tokens = 10;
    q->sampling.temperature = 0.8f;
    q->sampling.seed = seed;
    q->on_event = [&out, id](const SeqEvent& ev) {
      if (ev.kind == SeqEventKind::kToken) out[id].push_back(ev.token);
    };
    queue->Push(q);
  };
  submit("a", 6, 1);
  submit("b", 9, 2);
  while (e.Step()) {
  }
  submit("c", 20, 3);
  submit("d", 3, 4);
  while (e.Step()) {
  }
  EXPECT_GT(e.stats().prefix_hit_tokens, 0);
  *micro_forwards = runner->micro_batched_forwards();
  return out;
}

TEST(LayerSplit, EngineWithPagedPoolAndPrefixCacheEqualsPlain) {
  int64_t micro = 0;
  const auto plain = EngineTokens("dsv3", false, kMicroBatchRows, &micro);
  const auto split = EngineTokens("dsv3", true, kMicroBatchRows, &micro);
  ASSERT_EQ(plain.size(), 4u);
  for (const auto& [id, toks] : plain) EXPECT_EQ(split.at(id), toks) << id;
  EXPECT_EQ(micro, 0);  // steps of 20 rows are not cut at 64
}

TEST(LayerSplit, EngineStepsAsMicroBatchesEqualPlain) {
  // Parts of at least 4 rows: the prompt steps (up to 20 rows, chunks of two prompts beside
  // decode rows) run cut over the three stages; a dense golden, so bit for bit.
  int64_t micro = 0;
  const auto plain = EngineTokens("qwen2_sharded", false, 4, &micro);
  const auto split = EngineTokens("qwen2_sharded", true, 4, &micro);
  ASSERT_EQ(plain.size(), 4u);
  for (const auto& [id, toks] : plain) EXPECT_EQ(split.at(id), toks) << id;
  EXPECT_GT(micro, 0);
}

TEST(LayerSplit, StageGraphOfTheWholeModelIsBuild) {
  auto m = Golden("dsv3");
  const Batch b = Prompt(0, 0, {1, 2, 3}, false);
  const Graph whole = m->arch().Build(b);
  const Graph stage = m->arch().BuildStage(b, 0, m->config().n_layers, true);
  ASSERT_EQ(whole.nodes().size(), stage.nodes().size());
  for (size_t i = 0; i < whole.nodes().size(); ++i) {
    EXPECT_EQ(whole.nodes()[i].name, stage.nodes()[i].name);
    EXPECT_EQ(whole.nodes()[i].layer, stage.nodes()[i].layer);
  }
  // A later stage starts from the input rows and caches in its own layer 0.
  const Graph tail = m->arch().BuildStage(b, 2, 3, false);
  EXPECT_EQ(tail.nodes().front().op, Op::kInput);
  for (const Node& n : tail.nodes()) {
    if (n.op == Op::kKvStore) {
      EXPECT_EQ(n.layer, 0);
    }
  }
  EXPECT_EQ(tail.node(tail.output()).shape, (Shape{3, m->config().hidden_size}));
  EXPECT_THROW(m->arch().BuildStage(b, 2, 4, false), Error);
}

TEST(LayerSplit, SplitAsksForMtpSinkIsAnError) {
  auto split = Split(Golden("llama3"), {0, 1});
  try {
    split->SetHiddenSink([](const Batch&, const float*) {});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layer-split"), std::string::npos) << e.what();
  }
}

TEST(LayerSplit, LayersByBytesBalanceContiguousRanges) {
  // Equal layers: an even cut; the embedding and head weigh on the end stages.
  EXPECT_EQ(SplitLayersByBytes(std::vector<double>(8, 1.0), 0, 0, 2), (std::vector<int>{0, 4}));
  EXPECT_EQ(SplitLayersByBytes(std::vector<double>(9, 1.0), 0, 0, 3), (std::vector<int>{0, 3, 6}));
  EXPECT_EQ(SplitLayersByBytes(std::vector<double>(8, 1.0), 4.0, 0, 2), (std::vector<int>{0, 2}));
  EXPECT_EQ(SplitLayersByBytes(std::vector<double>(8, 1.0), 0, 4.0, 2), (std::vector<int>{0, 6}));
  // Uneven layers (MoE after dense ones): cut at the byte midpoint, not the layer midpoint.
  EXPECT_EQ(SplitLayersByBytes({1, 1, 1, 1, 4, 4}, 0, 0, 2), (std::vector<int>{0, 5}));
  // Every stage keeps a layer even when one layer outweighs the rest.
  EXPECT_EQ(SplitLayersByBytes({100, 1, 1}, 0, 0, 3), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(SplitLayersByBytes({1, 1, 100}, 0, 0, 3), (std::vector<int>{0, 1, 2}));
  EXPECT_THROW(SplitLayersByBytes({1, 1}, 0, 0, 3), Error);
}

TEST(LayerSplit, LayerBytesCountWeightsAndCache) {
  auto m = Golden("dsv2_lite");
  const auto none = LayerBytes(*m, DType::kF32, 0), some = LayerBytes(*m, DType::kF32, 100);
  ASSERT_EQ(none.size(), 2u);
  EXPECT_LT(none[0], none[1]);  // the MoE layer outweighs the dense one
  KvSpec one = m->config().MakeKvSpec(DType::kF32);
  one.n_layers = 1;
  EXPECT_DOUBLE_EQ(some[0] - none[0], double(one.BytesPerToken()) * 100);
  double total = EmbedBytes(*m) + HeadBytes(*m) -
                 double(m->arch().embedding()->nbytes) * (m->config().tie_word_embeddings ? 1 : 0);
  for (double b : none) total += b;
  // Every loaded tensor is in some stage, plus what MLA derives at load (wuk_t, wuv).
  EXPECT_GE(total, double(m->weight_bytes()));
}

TEST(LayerSplit, LayerCountsParseAndName) {
  EXPECT_EQ(SplitLayersByCounts("10,18", 28, 2), (std::vector<int>{0, 10}));
  EXPECT_EQ(SplitLayersByCounts("1,1,1", 3, 3), (std::vector<int>{0, 1, 2}));
  const auto msg = [](const std::string& s, int n, int k) {
    try {
      SplitLayersByCounts(s, n, k);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(msg("10,x", 28, 2).find("'x' is not a positive layer count"), std::string::npos);
  EXPECT_NE(msg("10,0", 10, 2).find("'0'"), std::string::npos);
  EXPECT_NE(msg("10,17", 28, 2).find("covers 27 layers"), std::string::npos);
  EXPECT_NE(msg("28", 28, 2).find("1 stages for 2 devices"), std::string::npos);
}

TEST(LayerSplit, DeviceListParsesAndNamesBadItems) {
  const auto d = ParseDevices("cpu,0, 1 ,0");
  ASSERT_EQ(d.size(), 4u);
  EXPECT_EQ(d[0].backend, "cpu");
  EXPECT_EQ(d[1].backend, "vulkan");
  EXPECT_EQ(d[1].device, "0");
  EXPECT_EQ(d[2].device, "1");
  EXPECT_EQ(d[3].Label(), "vulkan:0");
  EXPECT_THROW(ParseDevices("0,,1"), Error);
  EXPECT_THROW(ParseDevices(""), Error);
}

TEST(LayerSplit, FactorySplitsOverCpuDevicesAndRefusesHeadSplitOfOneKvHead) {
  auto m = Golden("qwen2_sharded");
  BackendOptions bo;
  bo.threads = 1;
  SplitOptions so;
  so.devices = "cpu,cpu,cpu";
  auto r = MakeSplitRunner(m, "cpu", bo, Opts(), so);
  EXPECT_EQ(r->stages().size(), 2u);
  EXPECT_EQ(r->stage_first_layers(), (std::vector<int>{0, 1, 2}));
  so.devices = "cpu,cpu";
  so.layer_counts = "1,2";
  EXPECT_EQ(MakeSplitRunner(m, "cpu", bo, Opts(), so)->stage_first_layers(),
            (std::vector<int>{0, 1}));
  so.layer_counts = "";
  so.split = "head";  // qwen2_sharded has one KV head: it cannot shard (head_split_test.cpp)
  try {
    MakeSplitRunner(m, "cpu", bo, Opts(), so);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--split head"), std::string::npos) << e.what();
  }
  so.split = "layer";
  so.devices = "cpu,cpu,cpu,cpu";  // 4 stages for 3 layers
  EXPECT_THROW(MakeSplitRunner(m, "cpu", bo, Opts(), so), Error);
  so.devices = "";
  so.layer_counts = "1,2";
  EXPECT_THROW(MakeSplitRunner(m, "cpu", bo, Opts(), so), Error);
}

}  // namespace
}  // namespace es
