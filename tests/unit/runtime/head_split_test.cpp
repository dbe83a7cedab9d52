// Head split (runtime/head_split.h) on CPU devices: a runner whose layers are sharded over two
// or four CPU backends (kv heads and FFN columns; MLA by head with the latent replicated; routed
// experts by range) computes the plain runner's logits within f32 summation order (the partial
// sums are added on the host in another order than one matmul adds them: 1e-5 relative L2), for
// a dense and two MLA+MoE goldens, over prefill, decode, a batch of two sequences, greedy ids and
// block tables; and the errors for head counts that do not divide. In chunks (the host summing
// one while the devices compute the next), the whole batch's logits bit for bit, with one device
// lagging too.
#include "edgeseek/internal/runtime/head_split.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "counting_backend.h"
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

// ---- chunks: the host sums one chunk while the devices compute the next ----------------------

// A head split over `n` CPU devices whose forwards of at least 2 x chunk_rows rows run in chunks
// of at least chunk_rows (0: never; MakeSplitRunner chunks only where a device is a GPU).
// `lagging`, if any, replaces device `slow`.
std::unique_ptr<Runner> Chunked(std::shared_ptr<Model> m, int n, int chunk_rows,
                                std::unique_ptr<Backend> lagging = nullptr, int slow = 0) {
  RunnerOptions ro = Opts();
  ro.context = 320;
  std::vector<std::unique_ptr<Backend>> devs;
  for (int d = 0; d < n; ++d) devs.push_back(CreateBackend("cpu", Bo()));
  if (lagging) devs[size_t(slow)] = std::move(lagging);
  std::vector<std::unique_ptr<PipelineStage>> front;
  front.push_back(MakeHeadSplitStage(std::move(devs), chunk_rows));
  const int L = m->config().n_layers;
  return std::make_unique<Runner>(std::move(m), std::move(front), std::vector<int>{0, L},
                                  CreateBackend("cpu", Bo()), ro);
}

HeadSplitCounts Counts(const Runner& r) { return GetHeadSplitCounts(*r.stages()[0]); }

std::vector<int32_t> Ids(int n, int seed) {
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back(int32_t((i * 7 + seed) % 29 + 1));
  return ids;
}

// A prefill of two sequences in one batch, a decode step of both, a mixed batch (a decode row
// beside a third prompt) and greedy ids: the chunked runner's logits equal the whole-batch
// head split's bit for bit. `len`: each prompt's tokens (a multiple of chunk_rows / 2 keeps
// every chunk's piece of a sequence as long as MLA's form choice needs, see below).
void ExpectChunksEqualWhole(const std::string& name, int devices, int chunk_rows, int len) {
  SCOPED_TRACE(name + " over " + std::to_string(devices) + " devices in chunks of " +
               std::to_string(chunk_rows));
  auto m = Golden(name);
  auto whole = Chunked(m, devices, 0), cut = Chunked(m, devices, chunk_rows);
  auto same = [&](const Batch& b, const char* what) {
    EXPECT_EQ(Logits(*cut, b), Logits(*whole, b)) << what;
  };
  Batch prefill;
  prefill.Add(0, 0, Ids(len, 1), true);
  prefill.Add(1, 0, Ids(len, 5), true);
  prefill.Finalize();
  same(prefill, "prefill");
  Batch step;
  step.Add(0, len, {3});
  step.Add(1, len, {4});
  step.Finalize();
  same(step, "decode");
  Batch mixed;
  mixed.Add(0, len + 1, {6});
  mixed.Add(2, 0, Ids(len + 1, 3), true);
  mixed.Finalize();
  same(mixed, "mixed");
  std::vector<int32_t> a, b;
  cut->ForwardArgmax(Prompt(1, len + 1, Ids(2 * chunk_rows, 2), false), &a);
  whole->ForwardArgmax(Prompt(1, len + 1, Ids(2 * chunk_rows, 2), false), &b);
  EXPECT_EQ(a, b);
  // Prefill, mixed and greedy ran in chunks, the decode step whole; every chunk's sum of every
  // block counted.
  EXPECT_EQ(Counts(*cut).chunked_forwards, 3);
  EXPECT_GE(Counts(*cut).reduces, 3 * 2 * 2 * m->config().n_layers);
  EXPECT_EQ(Counts(*whole).chunked_forwards, 0);
}

TEST(HeadSplit, ChunksGiveTheWholeBatchLogitsBitForBit) {
  // Dense: chunks of 2 to 4 rows cut the sequences anywhere (llama3: 2 kv heads; llama3_f32: 3).
  ExpectChunksEqualWhole("llama3", 2, 4, 7);
  ExpectChunksEqualWhole("llama3_f32", 3, 2, 7);
  // MLA + MoE: the CPU's MLA takes its absorbed or expanded form by a sequence's rows in the
  // step (cpu/mla_form.h); at these dims a piece of 64 rows expands wherever it starts, as the
  // whole prompt does, so 64-row chunks keep the form and the sums (routed experts by range).
  ExpectChunksEqualWhole("dsv2_lite", 2, 64, 128);
  ExpectChunksEqualWhole("dsv3", 4, 64, 128);
  // MakeSplitRunner over CPU devices alone never chunks (they lost to the whole batch).
  auto m = Golden("llama3");
  SplitOptions so;
  so.devices = "cpu,cpu";
  so.split = "head";
  RunnerOptions ro = Opts();
  ro.micro_batch_rows = 2;
  auto cpus = MakeSplitRunner(m, "cpu", Bo(), ro, so);
  Logits(*cpus, Prompt(0, 0, Ids(16, 1)));
  EXPECT_EQ(Counts(*cpus).chunked_forwards, 0);
}

// A device that takes `lag` longer than the CPU it wraps for every block: one device falls
// behind the others, so a device that went on without a sum (or a sum taken without a part)
// would read rows not yet written.
class LaggingBackend : public test::CountingBackend {
 public:
  LaggingBackend(std::unique_ptr<Backend> inner, std::chrono::microseconds lag)
      : CountingBackend(std::move(inner), &counts_), lag_(lag) {}
  void Compute(const Graph& g, const Batch& batch, KvStorage& kv, float* out,
               ComputeStats* stats) override {
    std::this_thread::sleep_for(lag_);
    CountingBackend::Compute(g, batch, kv, out, stats);
  }

 private:
  test::ReadBack counts_;  // the base's counts (its pointer is taken before this is made)
  std::chrono::microseconds lag_;
};

TEST(HeadSplit, ChunksWaitForTheirSumsAndOverlapThem) {
  // The lagging device first, then last: each device in turn is the one the others must wait
  // for. Removing either wait (a device for the sum of its chunk's previous block, the host for
  // every part of a block) makes the fast device read x, or the host a part, too early.
  auto m = Golden("llama3");
  const int L = m->config().n_layers;
  auto whole = Chunked(m, 2, 0);
  Batch prefill;
  prefill.Add(0, 0, Ids(5, 1), true);
  prefill.Add(1, 0, Ids(4, 2), true);
  prefill.Finalize();  // 9 rows: 4 chunks of 2 or 3
  const std::vector<float> want = Logits(*whole, prefill);
  for (int slow : {0, 1}) {
    SCOPED_TRACE("device " + std::to_string(slow) + " lags");
    auto lagging =
        std::make_unique<LaggingBackend>(CreateBackend("cpu", Bo()), std::chrono::milliseconds(2));
    auto cut = Chunked(m, 2, 2, std::move(lagging), slow);
    EXPECT_EQ(Logits(*cut, prefill), want);
    const HeadSplitCounts c = Counts(*cut);
    EXPECT_EQ(c.chunked_forwards, 1);
    EXPECT_EQ(c.reduces, 4 * 2 * L);  // every chunk's sum of every block
    // The lagging device computes its next chunk while the host sums: all but the sums that
    // wait for its last block.
    EXPECT_GE(c.overlapped_reduces, 4 * 2 * L - 4) << c.overlapped_reduces;
  }
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
