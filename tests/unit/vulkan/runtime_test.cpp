// The Vulkan runtime pieces: range allocator (alignment, coalescing, exhaustion), activation
// planning, the device memory pool (alignment, reuse, block splitting limits, out-of-memory
// errors naming the tensor), pipeline and pipeline-cache reuse, program (descriptor set and
// command buffer) reuse across tokens, per-dispatch timestamps, the `devices` verb, and the
// clear error when no Vulkan loader or driver exists.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "backends/vulkan/memory.h"
#include "backends/vulkan/plan.h"
#include "edgeseek/internal/backends/vulkan.h"
#include "edgeseek/internal/core/progress.h"
#include "test_util.h"
#include "vk_util.h"

namespace es::test {
namespace {

using vk::RangeAllocator;

TEST(VulkanRangeAllocator, AlignsAndCoalesces) {
  RangeAllocator r(1024);
  auto a = r.Alloc(10, 1);
  auto b = r.Alloc(100, 64);
  auto c = r.Alloc(200, 256);
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(*a, 0u);
  EXPECT_EQ(*b % 64, 0u);
  EXPECT_EQ(*c % 256, 0u);
  EXPECT_GE(*b, 10u);
  EXPECT_GE(*c, *b + 100);
  EXPECT_FALSE(r.Alloc(1024, 1));  // does not fit any more
  r.Free(*b, 100);
  r.Free(*a, 10);  // merges with the gap before b and b itself
  r.Free(*c, 200);
  EXPECT_TRUE(r.empty());
  EXPECT_EQ(r.free_ranges(), 1u);
  EXPECT_EQ(r.free_bytes(), 1024u);
  auto whole = r.Alloc(1024, 1024);
  ASSERT_TRUE(whole);
  EXPECT_EQ(*whole, 0u);
}

TEST(VulkanRangeAllocator, ReusesHolesFirstFit) {
  RangeAllocator r(1000);
  std::vector<uint64_t> offs;
  for (int i = 0; i < 10; ++i) offs.push_back(*r.Alloc(100, 1));
  EXPECT_FALSE(r.Alloc(1, 1));
  r.Free(offs[3], 100);
  r.Free(offs[7], 100);
  EXPECT_EQ(r.free_ranges(), 2u);
  EXPECT_EQ(*r.Alloc(60, 1), offs[3]);
  EXPECT_EQ(*r.Alloc(100, 1), offs[7]);
  EXPECT_EQ(*r.Alloc(40, 1), offs[3] + 60);
}

TEST(VulkanPlan, SharesBytesOnlyBetweenDisjointLifetimes) {
  // a [0,1], b [1,2], c [2,3]: a and c may share; b overlaps both.
  const std::vector<vk::Interval> items = {{0, 1, 100}, {1, 2, 100}, {2, 3, 100}};
  const auto p = vk::PlanArena(items, 64, 1 << 20);
  ASSERT_EQ(p.arena_bytes.size(), 1u);
  EXPECT_EQ(p.offset[0], p.offset[2]);
  EXPECT_NE(p.offset[0], p.offset[1]);
  EXPECT_EQ(p.arena_bytes[0], 256u);
  for (uint64_t o : p.offset) EXPECT_EQ(o % 64, 0u);
}

TEST(VulkanPlan, OpensMoreArenasPastTheRangeAndRejectsOversize) {
  const std::vector<vk::Interval> items = {{0, 5, 600}, {1, 5, 600}, {2, 5, 600}};
  const auto p = vk::PlanArena(items, 16, 1024);
  EXPECT_EQ(p.arena_bytes.size(), 3u);
  for (uint64_t b : p.arena_bytes) EXPECT_LE(b, 1024u);
  EXPECT_THROW(vk::PlanArena({{0, 1, 2000}}, 16, 1024), Error);
}

class VulkanRuntime : public VulkanTest {};

TEST_F(VulkanRuntime, PoolAlignsReusesAndReportsPeak) {
  vk::Device& dev = SharedVulkan().device();
  vk::MemoryPool pool(dev, vk::MemoryPool::Kind::kDevice, "test", vk::PoolLimits{1 << 16, 0, 0});
  auto a = pool.Alloc(1000, "a");
  auto b = pool.Alloc(3, "b");
  EXPECT_EQ(a.offset % pool.alignment(), 0u);
  EXPECT_EQ(b.offset % pool.alignment(), 0u);
  EXPECT_EQ(a.buffer, b.buffer);  // sub-allocated from one block
  EXPECT_EQ(pool.n_blocks(), 1u);
  pool.Free(a);
  auto c = pool.Alloc(900, "c");
  EXPECT_EQ(c.offset, a.offset);  // reused
  // Larger than a block: its own block, still within the device range.
  auto big = pool.Alloc(100000, "big");
  EXPECT_NE(big.buffer, a.buffer);
  EXPECT_EQ(pool.n_blocks(), 2u);
  EXPECT_GE(pool.peak_block_bytes(), (1u << 16) + 100000u);
  pool.Free(big);
  EXPECT_EQ(pool.n_blocks(), 1u);  // whole free blocks go back to the driver
  pool.Free(b);
  pool.Free(c);
  EXPECT_EQ(pool.n_blocks(), 0u);
}

TEST_F(VulkanRuntime, PoolErrorsNameTheTensor) {
  vk::Device& dev = SharedVulkan().device();
  vk::MemoryPool limited(dev, vk::MemoryPool::Kind::kDevice, "test",
                         vk::PoolLimits{4096, 8192, 8192});
  auto a = limited.Alloc(4000, "first");
  auto b = limited.Alloc(4000, "second");
  try {
    limited.Alloc(4000, "model.layers.3.mlp.up_proj.weight");
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("out of device memory"), std::string::npos) << m;
    EXPECT_NE(m.find("model.layers.3.mlp.up_proj.weight"), std::string::npos) << m;
  }
  try {
    limited.Alloc(10000, "lm_head.weight");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("lm_head.weight"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("must be split"), std::string::npos) << e.what();
  }
  limited.Free(a);
  limited.Free(b);
}

TEST_F(VulkanRuntime, WeightUploadBeyondTheBudgetIsAClearError) {
  vk::VulkanTuning t;
  t.weights.budget = 64 << 10;
  t.weights.block_bytes = 16 << 10;
  auto be = MakeVulkan(t);
  Tensor small = RandomTensor("small", DType::kF16, {16, 64}, 1);
  be->PrepareWeight(small);
  Tensor huge = RandomTensor("model.embed_tokens.weight", DType::kF16, {1024, 64}, 2);
  try {
    be->PrepareWeight(huge);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.embed_tokens.weight"), std::string::npos)
        << e.what();
  }
}

Graph SmallGraph(const Tensor& E, const Tensor& W1, const Tensor& W2, const Tensor& W3, int T) {
  Graph g;
  const int x = Input(g, E, T);
  std::vector<int> outs;
  for (const Tensor* w : {&W1, &W2, &W3}) {  // three independent matmuls of one input
    Node n;
    n.op = Op::kMatMul;
    n.name = w->name;
    n.src = {x, g.AddWeight(*w)};
    n.shape = {T, w->rows()};
    outs.push_back(g.Add(n));
  }
  Node a;
  a.op = Op::kAdd;
  a.name = "sum";
  a.src = {outs[0], outs[1]};
  a.shape = {T, W1.rows()};
  const int s = g.Add(a);
  a.name = "sum2";
  a.src = {s, outs[2]};
  g.Add(a);
  return g;
}

TEST_F(VulkanRuntime, ProgramsAndPipelinesAreBuiltOnceAndReused) {
  auto be = MakeVulkan({});
  Tensor E = RandomTensor("e", DType::kF32, {16, 32}, 3);
  Tensor W1 = RandomTensor("w1", DType::kF16, {24, 32}, 4),
         W2 = RandomTensor("w2", DType::kF16, {24, 32}, 5),
         W3 = RandomTensor("w3", DType::kBF16, {24, 32}, 6);
  auto kv = be->CreateKv(KvSpec{1, {2, 2}, DType::kF32}, 1, 16);
  std::vector<float> first, out(24);
  for (int step = 0; step < 4; ++step) {
    Graph g = SmallGraph(E, W1, W2, W3, 1);  // rebuilt per token, as the runtime does
    Batch b;
    b.Add(0, step, {step}, true);
    b.Finalize();
    be->Compute(g, b, *kv, out.data());
    if (step == 0) first = out;
  }
  const auto c = be->counters();
  EXPECT_EQ(c.programs_built, 1);
  EXPECT_EQ(c.submits, 4);
  EXPECT_EQ(c.pipelines_created, 4);  // embed_f32, matmul_gemv_f16_vec, matmul_gemv_bf16_vec, add
  // 5 dispatches: embed, 3 matmuls, add ("sum" = w1 + w2 is fused into w2's GEMV epilogue,
  // which then waits for w1; w3 runs next to it).
  EXPECT_EQ(c.dispatches, 5);
  EXPECT_EQ(c.barriers, 3 + 1);  // after embed, before w2, before sum2, and before the readback
  EXPECT_NE(out, first);         // different tokens, different rows
}

// A head split records two graphs a layer: 24 graphs that differ only in their weights, run in
// turn three times, are each recorded once (past max_programs while their arenas fit the
// budget); with a budget of a few bytes only the max_programs most recent stay, so every round
// records them all again.
TEST_F(VulkanRuntime, ProgramsPastMaxProgramsStayWhileTheirBytesFit) {
  Tensor E = RandomTensor("e", DType::kF32, {16, 32}, 3);
  std::vector<Tensor> ws;
  for (int i = 0; i < 3 * 24; ++i)
    ws.push_back(RandomTensor("w" + std::to_string(i), DType::kF16, {24, 32}, uint64_t(10 + i)));
  for (uint64_t budget : {uint64_t(0), uint64_t(16)}) {
    vk::VulkanTuning t;
    t.program_budget = budget;
    auto be = MakeVulkan(t);
    auto kv = be->CreateKv(KvSpec{1, {2, 2}, DType::kF32}, 1, 16);
    std::vector<Graph> graphs;
    for (int i = 0; i < 24; ++i)
      graphs.push_back(
          SmallGraph(E, ws[size_t(3 * i)], ws[size_t(3 * i + 1)], ws[size_t(3 * i + 2)], 1));
    std::vector<std::vector<float>> first;
    for (int round = 0; round < 3; ++round)
      for (size_t i = 0; i < graphs.size(); ++i) {
        auto out = RunGraph(*be, graphs[i], RowsBatch(1), kv.get());
        if (round == 0)
          first.push_back(out);
        else
          EXPECT_EQ(out, first[i]) << "graph " << i << ", round " << round;
      }
    EXPECT_EQ(be->counters().programs_built, budget ? 3 * 24 : 24) << "budget " << budget;
  }
}

// One graph kept across steps (as Runner keeps one per batch shape) while a weight it reads is
// replaced in place by a tensor with other values: the next step reads the new values (the
// program key and the stale-weight check follow the weights' data, not only the graph version),
// and the graph's steps before and after give what fresh graphs give.
TEST_F(VulkanRuntime, KeptGraphFollowsAReplacedWeight) {
  auto be = MakeVulkan({});
  Tensor E = RandomTensor("e", DType::kF32, {16, 32}, 3);
  Tensor W1 = RandomTensor("w1", DType::kF16, {24, 32}, 4),
         W2 = RandomTensor("w2", DType::kF16, {24, 32}, 5),
         W3 = RandomTensor("w3", DType::kBF16, {24, 32}, 6);
  auto kv = be->CreateKv(KvSpec{1, {2, 2}, DType::kF32}, 1, 16);  // one cache: one program key
  const Graph kept = SmallGraph(E, W1, W2, W3, 2);
  const std::vector<float> before = RunGraph(*be, kept, RowsBatch(2), kv.get());
  EXPECT_EQ(RunGraph(*be, kept, RowsBatch(2), kv.get()), before);
  EXPECT_EQ(be->counters().programs_built, 1);
  W2 = RandomTensor("w2", DType::kF16, {24, 32}, 50);
  const std::vector<float> after = RunGraph(*be, kept, RowsBatch(2), kv.get());
  EXPECT_NE(after, before);
  EXPECT_EQ(after, RunGraph(*MakeVulkan({}), SmallGraph(E, W1, W2, W3, 2), RowsBatch(2)));
}

TEST_F(VulkanRuntime, PipelineCacheIsStoredAndLoadedNextStart) {
  ScopedKnobs cache("ES_VK_CACHE_DIR", TempDir());
  std::string path;
  {
    auto be = MakeVulkan({});
    EXPECT_EQ(be->pipelines().loaded_bytes(), 0u);
    be->pipelines().Get("rms_norm", {1, 1, 1});
    be->pipelines().Get("rms_norm", {1, 1, 1});  // same key: no new pipeline
    EXPECT_EQ(be->pipelines().created(), 1);
    path = be->pipelines().path();
  }
  EXPECT_TRUE(std::filesystem::exists(path)) << path;
  {
    auto be = MakeVulkan({});
    EXPECT_GT(be->pipelines().loaded_bytes(), 0u);
  }
}

// A first run compiles its pipelines while recording: one progress line (core/progress.h) counts
// them while a CompileScope lives (the backend holds one over each recording), erased after;
// nothing outside a scope.
TEST_F(VulkanRuntime, CompilingPipelinesShowsProgressWhileRecording) {
  auto read_all = [](std::FILE* f) {
    std::fflush(f);
    std::rewind(f);
    std::string s;
    char buf[256];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) s.append(buf, n);
    return s;
  };
  Tensor E = RandomTensor("e", DType::kF32, {16, 32}, 13);
  Tensor W1 = RandomTensor("w1", DType::kF16, {24, 32}, 14),
         W2 = RandomTensor("w2", DType::kF16, {24, 32}, 15),
         W3 = RandomTensor("w3", DType::kBF16, {24, 32}, 16);
  auto be = MakeVulkan({});  // its own pipelines: none made yet in this process
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  SetProgressOutput(f, 0.0);
  be->pipelines().Get("rms_norm", {1, 1, 1}, {7});  // outside a scope: counted nowhere
  const std::string outside = read_all(f);
  RunGraph(*be, SmallGraph(E, W1, W2, W3, 2), RowsBatch(2));
  SetProgressOutput(nullptr);
  const std::string s = read_all(f);
  std::fclose(f);
  EXPECT_EQ(outside, "");
  EXPECT_EQ(s.find('\n'), std::string::npos) << s;  // one line, rewritten with \r
  EXPECT_NE(s.find("\rcompiling pipelines: 1 "), std::string::npos) << s;
  EXPECT_EQ(s.substr(s.size() - 4), "\r\033[K") << s;  // erased at the end
}

// Waiting on a step's fence by polling first (ES_VK_SPIN_US; default 0 on CPU devices like
// lavapipe) changes no result.
TEST_F(VulkanRuntime, SpinWaitGivesTheSameResult) {
  Tensor E = RandomTensor("e", DType::kF32, {16, 32}, 13);
  Tensor W1 = RandomTensor("w1", DType::kF16, {24, 32}, 14),
         W2 = RandomTensor("w2", DType::kF16, {24, 32}, 15),
         W3 = RandomTensor("w3", DType::kBF16, {24, 32}, 16);
  Graph g = SmallGraph(E, W1, W2, W3, 2);
  // Read when a program is recorded: a backend (and program) per setting.
  vk::VulkanTuning blocking_t, polled_t;
  blocking_t.knobs.Set(vk::Knob::kSpinUs, "0");
  polled_t.knobs.Set(vk::Knob::kSpinUs, "200000");  // longer than the step: the poll sees it done
  const std::vector<float> blocking = RunGraph(*MakeVulkan(blocking_t), g, RowsBatch(2));
  const std::vector<float> polled = RunGraph(*MakeVulkan(polled_t), g, RowsBatch(2));
  EXPECT_EQ(polled, blocking);
  // A value that is not a number of microseconds is one clear error, not a silent 0.
  for (const char* bad : {"3ms", "-5", "fast"}) {
    try {
      ScopedKnobs env("ES_VK_SPIN_US", bad);
      ADD_FAILURE() << "ES_VK_SPIN_US=" << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("ES_VK_SPIN_US='" + std::string(bad) + "'"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST_F(VulkanRuntime, ProfileGivesPerOpShaderTimes) {
  auto be = MakeVulkan({}, /*profile=*/true);
  Tensor E = RandomTensor("e", DType::kF32, {16, 32}, 3);
  Tensor W1 = RandomTensor("w1", DType::kF16, {24, 32}, 4),
         W2 = RandomTensor("w2", DType::kF16, {24, 32}, 5),
         W3 = RandomTensor("w3", DType::kBF16, {24, 32}, 6);
  auto kv = be->CreateKv(KvSpec{1, {2, 2}, DType::kF32}, 1, 16);
  Graph g = SmallGraph(E, W1, W2, W3, 2);
  ComputeStats st;
  std::vector<float> out(48);
  be->Compute(g, RowsBatch(2), *kv, out.data(), &st);
  ASSERT_EQ(st.ops.size(), 5u);  // "sum" runs inside w2's GEMV (fused residual add)
  EXPECT_EQ(st.ops[0].op, Op::kEmbed);
  EXPECT_EQ(st.ops[1].name, "w1");
  EXPECT_EQ(st.ops[2].name, "w2");
  EXPECT_EQ(st.ops[4].name, "sum2");
  double sum = 0;
  for (auto& o : st.ops) {
    EXPECT_GE(o.seconds, 0.0);
    sum += o.seconds;
  }
  EXPECT_GT(st.shader_s, 0.0);
  EXPECT_NEAR(sum, st.shader_s, 1e-9);
  EXPECT_GT(st.total_s, 0.0);
  EXPECT_GE(st.total_s, st.upload_s + st.download_s);
  EXPECT_GT(be->peak_bytes(), 0u);
}

// bench --profile: besides the per-family line, a line per dispatch kind (the node name with its
// layer as '*', the shader) with the GEMVs' weight bandwidth; ES_VK_PIPELINE_STATS=1 prints the
// pipelines' statistics or says once that the device has none.
// Speculative decoding on the Vulkan backend (docs/speculative.md): the same greedy ids with
// n-gram drafts and with draft = target (k + 1 rows a verification) as plain decoding on it, and
// as on the CPU backend, for the golden Llama.
TEST(VulkanCli, SpeculativeGreedyEqualsPlain) {
  const std::string base =
      CliPath() + " generate -m " + SourceDir() +
      "/tests/golden/data/models/llama3 --ids 11,57,203,9,140,77,11,57,203,9,140,77 -n 30";
  std::string cpu, plain, out, err;
  ASSERT_EQ(RunCommand(base, &cpu, &err), 0) << err;
  ASSERT_EQ(RunCommand(base + " --backend vulkan", &plain, &err), 0) << err;
  EXPECT_EQ(plain, cpu);
  for (const std::string spec : {" --spec ngram --spec-k 3", " --draft target --spec-k 4"}) {
    ASSERT_EQ(RunCommand(base + " --backend vulkan" + spec, &out, &err), 0) << err;
    EXPECT_EQ(out, plain) << spec;
    EXPECT_NE(err.find("speculative: "), std::string::npos) << err;
  }
  EXPECT_NE(err.find("(100.0%)"), std::string::npos) << err;
}

// bench --json reports the Vulkan pools (BackendMemory, from the device's MemoryLedger). On
// lavapipe (a "cpu" device, not discrete) the device-local blocks hold at least the weights and
// the KV cache; the weights pool's live bytes are plan's weights (each tensor rounded up to 16
// bytes), the KV pool's are plan's KV at bench's context, 8 + 4 + 8 = 20 tokens in whole
// 16-token blocks: 32 tokens. (The activation arenas are not plan's estimate: docs/plan.md.)
TEST(VulkanCli, BenchReportsTheDevicePools) {
  const std::string m = SourceDir() + "/tests/golden/data/models/qwen2_realdim";
  std::string out, err;
  ASSERT_EQ(RunCommand(CliPath() + " bench --backend vulkan -m " + m + " -p 8 -n 4 -r 1 --json",
                       &out, &err),
            0)
      << err;
  const auto j = nlohmann::json::parse(out);
  const auto& d = j["device_memory"];
  ASSERT_TRUE(d.is_object()) << out;
  EXPECT_EQ(d["discrete"].get<bool>(), d["device_type"] == "discrete");
  const uint64_t weights = j["weight_bytes"], kv_token = j["kv_bytes_per_token"];
  EXPECT_GE(d["device_local_bytes"].get<uint64_t>() + d["host_visible_bytes"].get<uint64_t>(),
            weights + 20 * kv_token);
  const auto& pools = d["pools"];
  for (const char* k : {"weights", "kv", "activations", "staging"}) {
    ASSERT_TRUE(pools.contains(k)) << k << " " << out;
    EXPECT_GE(pools[k]["bytes"].get<uint64_t>(), pools[k]["used_bytes"].get<uint64_t>()) << k;
  }
  ASSERT_EQ(RunCommand(CliPath() + " plan -m " + m +
                           " --device dev-epyc-2c-lavapipe -p 8 -n 4 -c 20 --json",
                       &out, &err),
            0)
      << err;
  const auto p = nlohmann::json::parse(out);
  const double plan_weights = p["resident_weights_bytes"];
  EXPECT_NEAR(pools["weights"]["used_bytes"].get<double>(), plan_weights, 0.01 * plan_weights);
  EXPECT_EQ(pools["kv"]["used_bytes"].get<uint64_t>(), p["kv_bytes"].get<uint64_t>());
  EXPECT_EQ(p["kv_bytes"].get<uint64_t>(), 32 * kv_token);
}

TEST(VulkanCli, ProfileListsDispatchKindsWithGemvBandwidth) {
  std::string out, err;
  const int rc = RunCommand(
      "ES_VK_PIPELINE_STATS=1 " + CliPath() + " bench --backend vulkan -m " + SourceDir() +
          "/tests/golden/data/models/qwen2_realdim --dtype q4_0 -p 4 -n 2 -r 1 --profile",
      &out, &err);
  ASSERT_EQ(rc, 0) << err;
  EXPECT_NE(err.find("per dispatch kind"), std::string::npos) << err;
  const size_t down = err.find("model.layers.*.mlp.down_proj [matmul_gemv_q4_0");
  ASSERT_NE(down, std::string::npos) << err;
  EXPECT_NE(err.find("GB/s", down), std::string::npos) << err;
  EXPECT_TRUE(err.find("vulkan pipeline matmul_gemv") != std::string::npos ||
              err.find("ES_VK_PIPELINE_STATS=1, but") != std::string::npos)
      << err;
}

TEST(VulkanCli, DevicesListsTheDeviceAndItsFeatures) {
  std::string out, err;
  const int rc = RunCommand(CliPath() + " devices", &out, &err);
  ASSERT_EQ(rc, 0) << err;
  EXPECT_NE(out.find("subgroup:"), std::string::npos) << out;
  EXPECT_NE(out.find("cooperative matrix"), std::string::npos) << out;
  EXPECT_NE(out.find("memory heaps"), std::string::npos) << out;
  EXPECT_NE(out.find("usable: yes"), std::string::npos) << out;
}

// The bandwidth measurement is a weak symbol of the backend library: it used to be left out of
// the link (a null call, the H200's segfault). It must be present and measure something.
TEST(VulkanCli, DevicesBandwidthMeasuresTheCopyBandwidth) {
  ASSERT_NE(&MeasureVulkanCopyBandwidth, nullptr);
  std::string out, err;
  const int rc = RunCommand(CliPath() + " devices --bandwidth", &out, &err);
  ASSERT_EQ(rc, 0) << err << out;
  const auto at = out.find("copy bandwidth: ");
  ASSERT_NE(at, std::string::npos) << out;
  EXPECT_GT(std::stod(out.substr(at + 16)), 0.0) << out;
}

TEST(VulkanCli, NoDriverOrNoLoaderIsAClearError) {
  std::string out, err;
  int rc = RunCommand("VK_DRIVER_FILES=/nonexistent.json VK_ICD_FILENAMES=/nonexistent.json " +
                          CliPath() + " devices",
                      &out, &err);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(err.find("edgeseek: error: vulkan:"), std::string::npos) << err << out;
  EXPECT_NE(err.find("cpu"), std::string::npos) << "should point at --backend cpu: " << err;
  rc = RunCommand("ES_VK_LOADER=/nonexistent/libvulkan.so.1 " + CliPath() + " devices", &out, &err);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(err.find("no Vulkan loader found"), std::string::npos) << err;
}

}  // namespace
}  // namespace es::test
