// KV store, causal GQA attention and absorbed MLA against the reference, over a batch of two
// sequences in different slots (a prefill) and then a decode step of both, with f32 and f16
// caches. The expected values are computed from host copies of what each slot holds.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>

#include "backends/cpu/reference.h"
#include "backends/vulkan/ops/ops.h"
#include "edgeseek/internal/core/half.h"
#include "edgeseek/internal/quant/blocks.h"
#include "test_util.h"
#include "vk_util.h"

namespace es::test {
namespace {

// Step 1: slot 1 gets tokens 0..4 (positions 0..4), slot 0 tokens 5, 6 (0..1).
// Step 2: slot 1 token 7 at 5, slot 0 token 8 at 2.
std::vector<Batch> Steps() {
  Batch a;
  a.Add(1, 0, {0, 1, 2, 3, 4}, true);
  a.Add(0, 0, {5, 6}, true);
  a.Finalize();
  Batch b;
  b.Add(1, 5, {7}, true);
  b.Add(0, 2, {8}, true);
  b.Finalize();
  // Step 3 (12 rows > 8: the multi-row prefill kernel): its second group of 8 rows mixes slots.
  Batch c;
  c.Add(1, 6, {0, 1, 2, 3, 4, 5, 6, 7, 8}, true);
  c.Add(0, 3, {8, 7, 6}, true);
  c.Finalize();
  return {a, b, c};
}

std::vector<float> Row(const Tensor& t, int r) {
  const auto v = Values(t);
  return std::vector<float>(v.begin() + r * t.cols(), v.begin() + (r + 1) * t.cols());
}
// A row as a cache of type dt holds it: rounded to f16, or quantized per 32-block (es::Quantize,
// the reference of kv_write.glsl) and dequantized.
std::vector<float> RoundTo(DType dt, std::vector<float> v) {
  if (dt == DType::kF16)
    for (float& x : v) x = F16ToF32(F32ToF16(x));
  if (IsQuantized(dt)) {
    std::vector<uint8_t> q(RowBytes(dt, int64_t(v.size())));
    Quantize(dt, v.data(), q.data(), int64_t(v.size()));
    Dequantize(dt, q.data(), v.data(), int64_t(v.size()));
  }
  return v;
}

class VulkanAttention : public VulkanTest, public ::testing::WithParamInterface<DType> {};

// Decode over a long context takes the split-key path (16 chunks of keys, each more than one
// 128-key tile, merged by attention_combine); a prefill of 2100 rows
// (KV stores only: attention over all of it would be slow on lavapipe) fills the cache first.
// Tokens cycle through a 40-row table so values repeat but positions don't.
TEST_F(VulkanTest, SplitKeyDecodeOverALongContext) {
  const int Hq = 4, Hkv = 2, dk = 16, dv = 8, n_pre = 2100, vocab = 40;
  Tensor Q = RandomTensor("q", DType::kF32, {vocab, Hq * dk}, 41);
  Tensor K = RandomTensor("k", DType::kF32, {vocab, Hkv * dk}, 42, 2.0f);
  Tensor V = RandomTensor("v", DType::kF32, {vocab, Hkv * dv}, 43);
  auto& be = SharedVulkan();
  auto kv = be.CreateKv(KvSpec{2, {Hkv * dk, Hkv * dv}, DType::kF32}, 1, 2200);
  std::vector<float> Kf, Vf;
  auto run = [&](const std::vector<int32_t>& toks, int64_t pos0, bool attend) {
    const int T = int(toks.size());
    Batch b;
    b.Add(0, pos0, toks, true);
    b.Finalize();
    Graph g;
    const int q = Input(g, Q, T), k = Input(g, K, T), v = Input(g, V, T);
    Node sk = Make(Op::kKvStore, "sk", {k}, {T, Hkv * dk}, 1);
    sk.params = KvStoreParams{0};
    Node sv = Make(Op::kKvStore, "sv", {v}, {T, Hkv * dv}, 1);
    sv.params = KvStoreParams{1};
    const int ks = g.Add(sk), vs = g.Add(sv);
    Node at = Make(Op::kAttention, "attn", {q, ks, vs}, {T, Hq * dv}, 1);
    at.params = AttentionParams{Hq, Hkv, dk, dv, 1.0f / std::sqrt(float(dk))};
    if (attend) g.Add(at);
    std::vector<float> got(size_t(T * (attend ? Hq * dv : Hkv * dv)));
    be.Compute(g, b, *kv, got.data());
    std::vector<float> want(size_t(T * Hq * dv));
    for (int t = 0; t < T; ++t) {
      const auto kr = Row(K, toks[size_t(t)]), vr = Row(V, toks[size_t(t)]);
      Kf.insert(Kf.end(), kr.begin(), kr.end());
      Vf.insert(Vf.end(), vr.begin(), vr.end());
    }
    for (int t = 0; t < T && attend; ++t) {
      const auto qr = Row(Q, toks[size_t(t)]);
      ref::AttentionRow(qr.data(), Kf.data(), Vf.data(), pos0 + t + 1, Hq, Hkv, dk, dv,
                        at.Params<AttentionParams>().scale, &want[size_t(t * Hq * dv)]);
    }
    return std::make_pair(got, want);
  };
  std::vector<int32_t> pre(n_pre);
  for (int i = 0; i < n_pre; ++i) pre[size_t(i)] = i * 7 % vocab;
  run(pre, 0, false);
  for (int step = 0; step < 3; ++step) {
    auto [got, want] = run({int32_t(step * 13 % vocab)}, n_pre + step, true);
    ExpectClose(got, want, 1e-5, "split decode step " + std::to_string(step));
  }
}

// KV stores of k and v rows and the attention of q over them, step after step, on one cache;
// each step's output against the reference over host copies of what each slot holds (kc, vc:
// slot -> rows by position, rounded to the cache type). q, k, v rows come from `vocab`-row tables
// indexed by the batch's tokens.
struct AttentionSteps {
  int Hq, Hkv, dk, dv;
  DType kv_type;
  Tensor Q, K, V;
  std::unique_ptr<KvStorage> kv;
  std::map<int, std::vector<std::vector<float>>> kc, vc;

  AttentionSteps(Backend& be, int hq, int hkv, int dk_, int dv_, DType kv_t, int vocab, int slots,
                 int64_t capacity)
      : Hq(hq),
        Hkv(hkv),
        dk(dk_),
        dv(dv_),
        kv_type(kv_t),
        Q(RandomTensor("q", DType::kF32, {vocab, hq * dk_}, 21)),
        K(RandomTensor("k", DType::kF32, {vocab, hkv * dk_}, 22)),
        V(RandomTensor("v", DType::kF32, {vocab, hkv * dv_}, 23)),
        kv(be.CreateKv(KvSpec{2, {hkv * dk_, hkv * dv_}, kv_t}, slots, capacity)) {}

  void Step(Backend& be, const Batch& b, double tol, const std::string& what) {
    const int T = b.n_tokens();
    Graph g;
    const int q = Input(g, Q, T), k = Input(g, K, T), v = Input(g, V, T);
    const float scale = g.node(AddCachedAttention(g, q, k, v, T, Hq, Hkv, dk, dv, 1))
                            .Params<AttentionParams>()
                            .scale;
    std::vector<float> got(size_t(T * Hq * dv));
    be.Compute(g, b, *kv, got.data());

    std::vector<float> want(got.size());
    for (int t = 0; t < T; ++t) {
      const int slot = b.seqs[size_t(b.row_seq[size_t(t)])].slot, pos = b.positions[size_t(t)];
      auto& ks_ = kc[slot];
      auto& vs_ = vc[slot];
      ks_.resize(size_t(pos + 1));
      vs_.resize(size_t(pos + 1));
      ks_[size_t(pos)] = RoundTo(kv_type, Row(K, b.tokens[size_t(t)]));
      vs_[size_t(pos)] = RoundTo(kv_type, Row(V, b.tokens[size_t(t)]));
    }
    for (int t = 0; t < T; ++t) {
      const int slot = b.seqs[size_t(b.row_seq[size_t(t)])].slot, pos = b.positions[size_t(t)];
      std::vector<float> Kf, Vf;
      for (int j = 0; j <= pos; ++j) {
        Kf.insert(Kf.end(), kc[slot][size_t(j)].begin(), kc[slot][size_t(j)].end());
        Vf.insert(Vf.end(), vc[slot][size_t(j)].begin(), vc[slot][size_t(j)].end());
      }
      const auto qr = Row(Q, b.tokens[size_t(t)]);
      ref::AttentionRow(qr.data(), Kf.data(), Vf.data(), pos + 1, Hq, Hkv, dk, dv, scale,
                        &want[size_t(t * Hq * dv)]);
    }
    ExpectClose(got, want, tol, what + " T=" + std::to_string(T));
  }
  // Moves the steps onto a paged cache of `slots` slots whose blocks are scattered: slot s takes
  // blocks from the pool's far end, interleaved with the other slots' (with `pairs`, in pairs of
  // adjacent blocks).
  void ScatterBlocks(Backend& be, int slots, int64_t capacity, bool pairs = false) {
    const int64_t per_slot = capacity / kKvBlockTokens;
    kv = be.CreatePagedKv(KvSpec{2, {Hkv * dk, Hkv * dv}, kv_type}, slots, capacity,
                          slots * per_slot);
    for (int s = 0; s < slots; ++s) {
      std::vector<int32_t> table;
      for (int64_t k = 0; k < per_slot; ++k)
        table.push_back(pairs ? int32_t(2 * ((per_slot / 2 - 1 - k / 2) * slots + s) + k % 2)
                              : int32_t(slots * per_slot - 1 - (k * slots + s)));
      kv->SetBlockTable(s, table.data(), int(table.size()));
    }
  }
};

// Whether the last program of `be` ran a shader whose name starts with `prefix`.
bool Ran(vk::VulkanBackend& be, const std::string& prefix) {
  for (const std::string& n : be.counters().shaders)
    if (n.rfind(prefix, 0) == 0) return true;
  return false;
}
bool Ran(const std::string& prefix) { return Ran(SharedVulkan(), prefix); }

// A backend with f16 math whose prefill attention takes the tensor cores (attention_cm2.comp), or
// none where the device or glslc has no cooperative_matrix2.
std::unique_ptr<vk::VulkanBackend> Cm2Backend() {
  vk::VulkanTuning t;
  t.knobs.Set(vk::Knob::kF16Act, "1");
  auto be = MakeVulkan(t);
  if (!be->device().coopmat2().fa_br || !be->device().f16_math()) return nullptr;
  return be;
}

TEST_P(VulkanAttention, CausalGqaOverTwoSlotsThenDecode) {
  auto& be = SharedVulkan();
  AttentionSteps run(be, 6, 2, 10, 6, GetParam(), 9, 2, 16);
  for (const Batch& b : Steps()) run.Step(be, b, 1e-5, "attention");
  // The cache holds what was stored (read back row by row).
  std::vector<float> row(size_t(run.Hkv * run.dk));
  for (int pos = 0; pos < 6; ++pos) {
    run.kv->ReadRow(1, 1, 0, pos, row.data());
    EXPECT_EQ(row, run.kc[1][size_t(pos)]) << "slot 1 pos " << pos;
  }
}

// Split decode by kv head (attention_decode.comp) over the shapes it takes: 1 to 8 query heads
// per kv head (the 7B's 7), head dims 32 to 256, value widths 16 to 256 (each a different layout
// of the value lanes), f16 and f32 caches; with the default chunks (32 splits of at least 16
// keys), and for two of the shapes many short ones (8 splits, chunk 1), 64 splits of at least 8,
// and long ones of 128 keys (4 tiles a chunk). A 140-row prefill (the multi-row kernel) fills slot
// 1 first; then steps of one row per slot and one of three rows of slot 1 (the stores come first:
// nothing folded here).
TEST(VulkanDecodeAttention, ShapesSplitsAndChunks) {
  struct Shape {
    int Hq, Hkv, dk, dv;
  };
  struct Setting {
    const char *splits, *chunk;
  };
  Batch pre;
  std::vector<int32_t> toks(140);
  for (int i = 0; i < 140; ++i)
    toks[size_t(i)] = (i * 7 + 1) % 401;  // distinct keys: later tiles raise the max
  pre.Add(1, 0, toks, true);
  pre.Add(0, 0, {3, 4, 5}, true);
  pre.Finalize();
  for (const Setting st :
       {Setting{"32", "16"}, Setting{"8", "1"}, Setting{"64", "8"}, Setting{"8", "128"}}) {
    ScopedKnobs env{{"ES_VK_ATTN_SPLITS", st.splits}, {"ES_VK_ATTN_CHUNK", st.chunk}};
    auto be = MakeVulkan({});
    std::vector<Shape> shapes{Shape{7, 1, 128, 128}, Shape{8, 1, 64, 64}};
    if (std::string(st.splits) ==
        "32")  // every shape at the defaults (each is a pipeline to compile)
      shapes.insert(shapes.end(),
                    {Shape{4, 2, 32, 16}, Shape{2, 2, 256, 256}, Shape{6, 2, 64, 32}});
    for (const Shape s : shapes) {
      ASSERT_TRUE(vk::UseDecodeAttention(be->device(), 3, s.Hq, s.Hkv, s.dk, s.dv))
          << s.dk << "/" << s.dv;
      for (DType kt : {DType::kF16, DType::kF32}) {
        const std::string tag = std::string("splits=") + st.splits + " chunk=" + st.chunk +
                                " G=" + std::to_string(s.Hq / s.Hkv) +
                                " dk=" + std::to_string(s.dk) + " dv=" + std::to_string(s.dv) +
                                (kt == DType::kF16 ? " f16" : " f32");
        AttentionSteps run(*be, s.Hq, s.Hkv, s.dk, s.dv, kt, 401, 2, 160);
        run.Step(*be, pre, 1e-5, tag + " prefill");
        for (int step = 0; step < 3; ++step) {
          Batch b;
          if (step == 1) {
            b.Add(1, 140 + step, {int32_t(step * 3 % 23), 7, 11}, true);
          } else {
            b.Add(1, 140 + (step ? 4 : 0), {int32_t(step * 3 % 23)}, true);
          }
          b.Add(0, 3 + step, {int32_t((step * 7 + 2) % 23)}, true);
          b.Finalize();
          run.Step(*be, b, 1e-5, tag + " step " + std::to_string(step));
        }
      }
    }
  }
}

// The ropes of q and k and both cache stores folded into the decode kernel (FUSED): a layer's
// attention(rope(q), store(rope(k)), store(v)) step by step against the CPU backend — NEOX rope
// over the whole head and interleaved rope over 16 of 32 dims at offset 8, f16 and f32 caches,
// default chunks and many short ones. Steps of up to 8 rows where several rows of one slot
// attend to each other's new keys (taken from the step's rows, not the cache) — a 6-row first
// step over two slots, 3 rows of slot 1 with 1 of slot 0 — then single rows, to 40 keys. Each
// step also against the unfused program (ES_VK_ATTN_FUSE=0: rope and store dispatches, then the
// same kernel), which has 3 dispatches more; the caches hold what the unfused stores wrote (the
// rotated keys), to an f16 step. The CPU backend has f32 caches only.
TEST(VulkanDecodeAttention, FoldedRopesAndStoresMatchTheCpuBackend) {
  const int Hq = 6, Hkv = 2, dk = 32, dv = 32, vocab = 19;
  Tensor Q = RandomTensor("q", DType::kF32, {vocab, Hq * dk}, 31);
  Tensor K = RandomTensor("k", DType::kF32, {vocab, Hkv * dk}, 32);
  Tensor V = RandomTensor("v", DType::kF32, {vocab, Hkv * dv}, 33);
  std::vector<Batch> steps;
  {
    Batch a;
    a.Add(1, 0, {1, 2, 3, 4}, true);
    a.Add(0, 0, {5, 6}, true);
    steps.push_back(a);
    Batch b;
    b.Add(1, 4, {7, 8, 9}, true);
    b.Add(0, 2, {10}, true);
    steps.push_back(b);
    for (int i = 0; i < 33; ++i) {
      Batch c;
      c.Add(1, 7 + i, {int32_t(i * 5 % vocab)}, true);
      c.Add(0, 3 + i, {int32_t(i * 3 % vocab)}, true);
      steps.push_back(c);
    }
    for (Batch& x : steps) x.Finalize();
  }
  struct Rope {
    RopeMode mode;
    int dim, off;
  };
  for (const Rope r : {Rope{RopeMode::kNeox, 32, 0}, Rope{RopeMode::kInterleaved, 16, 8}}) {
    auto rt = std::make_shared<RopeTable>();
    rt->mode = r.mode;
    rt->dim = r.dim;
    for (int i = 0; i < r.dim / 2; ++i)
      rt->inv_freq.push_back(std::pow(10000.0f, -2.0f * i / r.dim));
    rt->attention_factor = 1.1f;
    auto build = [&](int T) {
      Graph g;
      const int q = Input(g, Q, T), k = Input(g, K, T), v = Input(g, V, T);
      auto rope = [&](int x, int heads, const char* name) {
        Node n = Make(Op::kRope, name, {x}, {T, heads * dk});
        n.params = RopeParams{heads, dk, r.off, rt};
        return g.Add(n);
      };
      AddCachedAttention(g, rope(q, Hq, "q_rope"), rope(k, Hkv, "k_rope"), v, T, Hq, Hkv, dk, dv,
                         1);
      return g;
    };
    for (DType kt : {DType::kF16, DType::kF32}) {
      for (const char* chunk : {"16", "1"}) {
        const std::string tag = std::string(r.mode == RopeMode::kNeox ? "neox" : "interleaved") +
                                (kt == DType::kF16 ? " f16" : " f32") + " chunk=" + chunk;
        const KvSpec spec{2, {Hkv * dk, Hkv * dv}, kt};
        // Knobs are read when a program is recorded (each shape's first step).
        ScopedKnobs env{{"ES_VK_ATTN_SPLITS", std::string(chunk) == "1" ? "8" : "32"},
                        {"ES_VK_ATTN_CHUNK", chunk}};
        auto be = MakeVulkan({});
        std::unique_ptr<vk::VulkanBackend> plain;
        {
          ScopedKnobs off{{"ES_VK_ATTN_FUSE", "0"}};
          plain = MakeVulkan({});
        }
        auto cpu = CreateCpuBackend(BackendOptions{});  // f32 caches only
        auto kv_gpu = be->CreateKv(spec, 2, 64), kv_plain = plain->CreateKv(spec, 2, 64);
        auto kv_cpu = cpu->CreateKv(KvSpec{2, {Hkv * dk, Hkv * dv}, DType::kF32}, 2, 64);
        for (size_t i = 0; i < steps.size(); ++i) {
          const Graph g = build(steps[i].n_tokens());
          const std::string what = tag + " step " + std::to_string(i);
          const auto got = RunGraph(*be, g, steps[i], kv_gpu.get());
          std::vector<float> unfused;
          unfused = RunGraph(*plain, g, steps[i], kv_plain.get());
          // The same math in other shaders: a GPU compiler may contract the rotation differently,
          // and a key one f16 step apart then (H200: 1.9e-4 on f16 caches).
          ExpectClose(got, unfused, kt == DType::kF16 ? 2e-3 : 1e-5, what + " vs unfused");
          const auto want = RunGraph(*cpu, g, steps[i], kv_cpu.get());
          if (kt == DType::kF32) ExpectClose(got, want, 1e-5, what + " vs cpu");
          if (i == 0) {
            EXPECT_EQ(plain->counters().dispatches, be->counters().dispatches + 3) << tag;
          }
        }
        std::vector<float> a(size_t(Hkv * dk)), c(a.size());
        for (int slot = 0; slot < 2; ++slot)
          for (int part = 0; part < 2; ++part)
            for (int64_t pos = 0; pos < (slot ? 40 : 36); ++pos) {
              kv_gpu->ReadRow(slot, 1, part, pos, a.data());
              kv_plain->ReadRow(slot, 1, part, pos, c.data());
              ExpectClose(a, c, kt == DType::kF16 ? 2e-3 : 1e-6,
                          tag + " cache slot " + std::to_string(slot) + " part " +
                              std::to_string(part) + " pos " + std::to_string(pos));
            }
      }
    }
  }
}

// The prefill attention on tensor cores (attention_cm2.comp, VK_NV_cooperative_matrix2 with f16
// math): head dims 128, 64 and odd ones (padded to 16), GQA, a first prefill whose tiles mix two
// slots (slot 1's 150 rows then slot 0's 70: the tile at row 128 holds both), a second one that
// continues slot 0 from position 70 (keys before the batch, the causal diagonal off the tile
// grid), then a decode step (the other kernel). f16 q, keys and probabilities: 3e-3.
// Needs a device with the extension and a build whose glslc compiled the shader (the GPU
// machine); elsewhere it is skipped.
TEST_P(VulkanAttention, Coopmat2PrefillOverTwoSlots) {
  auto be = Cm2Backend();
  if (!be) GTEST_SKIP() << "no VK_NV_cooperative_matrix2 attention on this device/build";
  const int vocab = 97;
  auto tokens = [&](int n, int seed) {
    std::vector<int32_t> v(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) v[size_t(i)] = (i * 7 + seed) % vocab;
    return v;
  };
  Batch a;
  a.Add(1, 0, tokens(150, 1), true);
  a.Add(0, 0, tokens(70, 2), true);
  a.Finalize();
  Batch b;
  b.Add(0, 70, tokens(100, 3), true);
  b.Finalize();
  Batch c;
  c.Add(1, 150, {5}, true);
  c.Add(0, 170, {6}, true);
  c.Finalize();
  struct Shape {
    int Hq, Hkv, dk, dv;
  };
  for (const Shape s :
       {Shape{4, 2, 128, 128}, Shape{6, 2, 64, 64}, Shape{3, 1, 10, 6}, Shape{2, 2, 200, 136}}) {
    const std::string tag = "cm2 attention Hq=" + std::to_string(s.Hq) +
                            " Hkv=" + std::to_string(s.Hkv) + " dk=" + std::to_string(s.dk) +
                            " dv=" + std::to_string(s.dv);
    AttentionSteps run(*be, s.Hq, s.Hkv, s.dk, s.dv, GetParam(), vocab, 2, 256);
    for (const Batch* step : {&a, &b, &c}) run.Step(*be, *step, 3e-3, tag);
  }
}

// Absorbed MLA (kMlaAttention) step after step over a latent cache of two slots, against
// ref::MlaAttentionRow on what the cache holds. A step's rows are either computed and compared
// or, with `store_only`, only written to the cache (a graph of the two stores: long contexts
// without a long attention on lavapipe).
struct MlaSteps {
  int H, dn, dr, dv, r;
  DType kv_type;
  Tensor Q, C, PE, WukT, Wuv;
  Tensor KvB;  // with UseKvB: kv_b, the node's sixth source (the non-absorbed form's weight)
  std::unique_ptr<KvStorage> kv;
  std::map<int, std::vector<std::vector<float>>> cc, pc;
  MlaSteps(Backend& be, int H_, int dn_, int dr_, int dv_, int r_, DType kt, int capacity,
           int vocab = 97)
      : H(H_),
        dn(dn_),
        dr(dr_),
        dv(dv_),
        r(r_),
        kv_type(kt),
        Q(RandomTensor("q", DType::kF32, {vocab, H * (dn + dr)}, 31)),
        C(RandomTensor("c", DType::kF32, {vocab, r}, 32)),
        PE(RandomTensor("pe", DType::kF32, {vocab, dr}, 33)),
        WukT(RandomTensor("wuk_t", DType::kBF16, {H * r, dn}, 34, 0.5f)),
        Wuv(RandomTensor("wuv", DType::kF16, {H * dv, r}, 35, 0.5f)),
        kv(be.CreateKv(KvSpec{1, {r, dr}, kt}, 2, capacity)) {}
  // kv_b [H*(dn+dv), r] of type `dt` as the node's sixth source; WukT and Wuv then hold its
  // numbers (f32), for the absorbed form and the reference.
  void UseKvB(DType dt) {
    KvB = RandomTensor("kv_b", dt, {H * (dn + dv), r}, 36, 0.5f);
    std::vector<float> v(size_t(KvB.numel()));
    if (IsQuantized(dt))
      Dequantize(dt, KvB.bytes(), v.data(), KvB.numel());
    else
      v = Values(KvB);
    WukT = AllocTensor("wuk_t", DType::kF32, {H * r, dn});
    Wuv = AllocTensor("wuv", DType::kF32, {H * dv, r});
    float* kt = static_cast<float*>(MutableData(WukT));
    float* uv = static_cast<float*>(MutableData(Wuv));
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < dn + dv; ++i)
        for (int j = 0; j < r; ++j) {
          const float x = v[(size_t(h) * size_t(dn + dv) + size_t(i)) * size_t(r) + size_t(j)];
          if (i < dn)
            kt[(size_t(h) * size_t(r) + size_t(j)) * size_t(dn) + size_t(i)] = x;
          else
            uv[(size_t(h) * size_t(dv) + size_t(i - dn)) * size_t(r) + size_t(j)] = x;
        }
  }
  void Step(Backend& be, const Batch& b, double tol, const std::string& tag,
            bool store_only = false) {
    const int T = b.n_tokens();
    Graph g;
    const int q = Input(g, Q, T), c = Input(g, C, T), pe = Input(g, PE, T);
    Node s0 = Make(Op::kKvStore, "sc", {c}, {T, r}, 0);
    s0.params = KvStoreParams{0};
    Node s1 = Make(Op::kKvStore, "spe", {pe}, {T, dr}, 0);
    s1.params = KvStoreParams{1};
    const int cs = g.Add(s0), ps = g.Add(s1);
    std::vector<int> src{q, cs, ps, g.AddWeight(WukT), g.AddWeight(Wuv)};
    if (KvB.data) src.push_back(g.AddWeight(KvB));
    Node m = Make(Op::kMlaAttention, "mla", src, {T, H * dv}, 0);
    m.params = MlaParams{H, dn, dr, dv, r, 0.3f / std::sqrt(float(r) / 16.0f)};
    if (store_only)
      g.Add(Make(Op::kAdd, "out", {ps, ps}, {T, dr}, 0));  // a graph needs an output
    else
      g.Add(m);
    std::vector<float> got(size_t(T) * size_t(store_only ? dr : H * dv));
    be.Compute(g, b, *kv, got.data());
    for (int t = 0; t < T; ++t) {
      const int slot = b.seqs[size_t(b.row_seq[size_t(t)])].slot, pos = b.positions[size_t(t)];
      if (cc[slot].size() < size_t(pos + 1)) cc[slot].resize(size_t(pos + 1));
      if (pc[slot].size() < size_t(pos + 1)) pc[slot].resize(size_t(pos + 1));
      cc[slot][size_t(pos)] = RoundTo(kv_type, Row(C, b.tokens[size_t(t)]));
      pc[slot][size_t(pos)] = RoundTo(kv_type, Row(PE, b.tokens[size_t(t)]));
    }
    if (store_only) return;
    std::vector<float> want(got.size());
    for (int t = 0; t < T; ++t) {
      const int slot = b.seqs[size_t(b.row_seq[size_t(t)])].slot, pos = b.positions[size_t(t)];
      std::vector<float> Cf, Pf;
      for (int j = 0; j <= pos; ++j) {
        Cf.insert(Cf.end(), cc[slot][size_t(j)].begin(), cc[slot][size_t(j)].end());
        Pf.insert(Pf.end(), pc[slot][size_t(j)].begin(), pc[slot][size_t(j)].end());
      }
      const auto qr = Row(Q, b.tokens[size_t(t)]);
      ref::MlaAttentionRow(qr.data(), Cf.data(), Pf.data(), pos + 1, H, dn, dr, dv, r, WukT, Wuv,
                           m.Params<MlaParams>().scale, &want[size_t(t) * size_t(H * dv)]);
    }
    ExpectClose(got, want, tol, tag + " T=" + std::to_string(T));
  }
};

std::vector<int32_t> Tokens(int n, int seed, int vocab = 97) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[size_t(i)] = (i * 7 + seed) % vocab;
  return v;
}

// The tensor-core prefill reads keys through the block tables (attention_cm2.comp stages each
// tile key by key), so it serves a paged cache whose slots hold scattered blocks, of every KV
// type (q8_0 / q4_0 dequantized in the staging), and continuous batching's mixed steps (prompt
// rows on sequence-aligned 32-row tiles, decode rows on the split decode kernel where the head
// dims allow it): a prefill of three ragged prompts (33, 70 and 5 rows), then a mixed step of
// decode rows around prompts of 37, 1 and 2 rows; head dims 128 (the 7B's, 7 query heads a kv
// head; f16 staged 8 halves a load), 36 / 20 (4 a load) and 18 / 10 (one a load, off the 16-wide
// padding). Two block layouts: no two blocks of a slot adjacent (every tile staged), and pairs of
// adjacent blocks scattered (f32 / f16 caches load each 32-key tile straight from the cache; a
// slot whose blocks all follow each other: Coopmat2PrefillOverTwoSlots). Reference over the
// cache's rounded rows; f16 q and probabilities: 5e-3. Skipped where the device or glslc has no
// cooperative_matrix2.
TEST(VulkanAttentionCm2, ScatteredBlocksEveryCacheTypeAndMixedSteps) {
  auto be = Cm2Backend();
  if (!be) GTEST_SKIP() << "no VK_NV_cooperative_matrix2 attention on this device/build";
  auto ran = [&](const std::string& prefix) { return Ran(*be, prefix); };
  struct Shape {
    int Hq, Hkv, dk, dv;
  };
  for (const DType kt : {DType::kF32, DType::kF16, DType::kQ8_0, DType::kQ4_0})
    for (const Shape sh : {Shape{7, 1, 128, 128}, Shape{4, 2, 36, 20}, Shape{3, 1, 18, 10}})
      for (const bool pairs : {false, true}) {
        if (IsQuantized(kt) && (sh.Hkv * sh.dk % 32 != 0 || sh.Hkv * sh.dv % 32 != 0)) continue;
        if (pairs && (IsQuantized(kt) || sh.dk != 128)) continue;
        const int slots = 40;
        const int64_t capacity = 96;
        const std::string tag = std::string(Name(kt)) + " Hq=" + std::to_string(sh.Hq) +
                                " dk=" + std::to_string(sh.dk) + (pairs ? " block pairs" : "");
        AttentionSteps run(*be, sh.Hq, sh.Hkv, sh.dk, sh.dv, kt, 101, slots, capacity);
        run.ScatterBlocks(*be, slots, capacity, pairs);
        Batch pre;
        pre.Add(0, 0, Tokens(33, 1, 101), true);
        pre.Add(1, 0, Tokens(70, 2, 101), true);
        pre.Add(2, 0, Tokens(5, 3, 101), true);
        pre.Finalize();
        run.Step(*be, pre, 5e-3, tag + " prefill");
        EXPECT_TRUE(ran("attention_cm2_" + vk::KvTypeSuffix(kt))) << tag;
        Batch mixed;  // 33 decode rows, prompts of 37, 1 and 2 rows
        for (int s = 0; s < 3; ++s)
          mixed.Add(s, s == 0 ? 33 : s == 1 ? 70 : 5, {int32_t(s + 1)}, true);
        mixed.Add(3, 0, Tokens(37, 4, 101), true);
        mixed.Add(4, 0, {7}, true);
        mixed.Add(5, 0, {8, 9}, true);
        for (int s = 6; s < 36; ++s) mixed.Add(s, 0, {int32_t(s)}, true);
        mixed.Finalize();
        ASSERT_GT(mixed.n_tokens(), vk::kDecodeMaxRows);
        run.Step(*be, mixed, 5e-3, tag + " mixed");
        EXPECT_TRUE(ran("attention_cm2_" + vk::KvTypeSuffix(kt))) << tag;
        EXPECT_EQ(ran("attention_combine_list"),
                  vk::UseDecodeAttention(be->device(), vk::kDecodeMaxRows, uint32_t(sh.Hq),
                                         uint32_t(sh.Hkv), uint32_t(sh.dk), uint32_t(sh.dv)))
            << tag << ": the mixed step's decode rows";
      }
}

TEST_P(VulkanAttention, AbsorbedMlaOverTheLatentCache) {
  MlaSteps run(SharedVulkan(), 3, 8, 4, 6, 16, GetParam(), 16);
  for (const Batch& b : Steps()) run.Step(SharedVulkan(), b, 1e-5, "mla");
}

// At DeepSeek's own widths (latent 512, rope 64; 16 heads as V2-Lite, 128 as V3):
// mla_attention.comp over prefills that mix two slots (one workgroup per heads x row), decode rows
// whose keys are split into chunks (1 key up to ~5,000, so chunks of 1 tile, of many tiles and
// empty ones), and a step of 3 rows in one slot. Odd head counts leave a group partly empty.
TEST_P(VulkanAttention, AbsorbedMlaAtRealWidthsAndLongContexts) {
  const DType kt = GetParam();
  const double tol = kt == DType::kF16 ? 2e-4 : 1e-4;
  auto& be = SharedVulkan();
  for (const int H : {16, 5}) {
    const std::string tag = "mla H=" + std::to_string(H);
    MlaSteps run(be, H, 16, 64, 16, 512, kt, 5200);
    Batch a;  // prefill: slot 1's 40 rows, then slot 0's 9 (DIRECT)
    a.Add(1, 0, Tokens(40, 1), true);
    a.Add(0, 0, Tokens(9, 2), true);
    a.Finalize();
    run.Step(be, a, tol, tag + " prefill");
    Batch b;  // decode: contexts 41 and 10 (split)
    b.Add(1, 40, {5}, true);
    b.Add(0, 9, {6}, true);
    b.Finalize();
    run.Step(be, b, tol, tag + " decode");
    Batch c;  // slot 0 to ~5,000 keys, stored only
    c.Add(0, 10, Tokens(4980, 3), true);
    c.Finalize();
    run.Step(be, c, tol, tag, /*store_only=*/true);
    Batch d;  // decode rows at 4,991..4,993 keys in one slot
    d.Add(0, 4990, {7, 8, 9}, true);
    d.Finalize();
    run.Step(be, d, tol, tag + " long decode");
  }
  MlaSteps v3(be, 128, 16, 64, 16, 512, kt, 300);  // V3: 8 groups of 16 heads
  Batch a;
  a.Add(0, 0, Tokens(20, 4), true);
  a.Finalize();
  v3.Step(be, a, tol, "mla H=128 prefill");
  Batch b;
  b.Add(0, 20, {3}, true);
  b.Add(1, 0, {4}, true);  // a row whose only key is its own
  b.Finalize();
  v3.Step(be, b, tol, "mla H=128 decode");
}

// MLA's per-head products (q_nope into the latent, the latent out) on the grouped head GEMMs in
// steps of more than kGemvMaxRows rows (batched decode and prefill), else the per-head GEMVs:
// a 70-row prefill in slot 1, then steps of 1, 8, 9, 33 and 64 rows in slot 0, each against the
// reference, and the grouped GEMM ran exactly from 9 rows (odd head count and widths: H 5, dn 24,
// dr 8, dv 40, r 48).
TEST(VulkanMlaHeadGemm, StepsPastTheGemvRowsTakeTheGroupedHeadGemms) {
  static_assert(vk::kGemvMaxRows == 8, "the row counts below straddle it");
  auto& be = SharedVulkan();
  MlaSteps run(be, 5, 24, 8, 40, 48, DType::kF32, 200);
  Batch pre;
  pre.Add(1, 0, Tokens(70, 5), true);
  pre.Finalize();
  run.Step(be, pre, 1e-4, "prefill");
  EXPECT_TRUE(Ran(be, "moe_gemm")) << "prefill";
  int pos = 0;
  for (const int T : {1, 8, 9, 33, 64}) {
    Batch b;
    b.Add(0, pos, Tokens(T, T), true);
    b.Finalize();
    pos += T;
    run.Step(be, b, 1e-4, "decode");
    EXPECT_EQ(Ran(be, "moe_gemm"), T > vk::kGemvMaxRows) << "T=" << T;
  }
}

// MLA decode attention in steps of 9-64 rows under ES_VK_MLA_ROWS_HEADS / _SPLITS (an open A/B):
// at V2-Lite's widths (16 heads, latent 512, rope 64), f16 cache, 32 rows continuing a 120-key
// context, each setting against the reference, and mla_attention.comp's grid is (head groups,
// rows, chunks) as set (heads halved where shared memory is short); steps of up to 8 rows keep 4
// heads and 64 chunks whatever the knobs say.
TEST(VulkanMlaRows, HeadGroupsAndChunksOfBatchedDecodeAsSet) {
  struct Case {
    const char *heads, *splits;
    uint32_t groups, chunks;
  };
  for (const Case& k : {Case{"4", "auto", 4, 16}, Case{"16", "4", 1, 4}, Case{"8", "64", 2, 64},
                        Case{"1", "1", 16, 1}}) {
    vk::VulkanTuning t;
    t.knobs.Set(vk::Knob::kMlaRowsHeads, k.heads).Set(vk::Knob::kMlaRowsSplits, k.splits);
    auto be = MakeVulkan(t);
    const std::string tag = std::string("heads ") + k.heads + " splits " + k.splits;
    MlaSteps run(*be, 16, 16, 64, 16, 512, DType::kF16, 200);
    Batch pre;
    pre.Add(0, 0, Tokens(120, 1), true);
    pre.Finalize();
    run.Step(*be, pre, 2e-4, tag + " prefill");
    int pos = 120;
    for (const int T : {32, 8}) {
      Batch b;
      b.Add(0, pos, Tokens(T, T), true);
      b.Finalize();
      pos += T;
      run.Step(*be, b, 2e-4, tag + " T=" + std::to_string(T));
      // Fewer heads where a group's q and scores (f32) do not fit the shared memory (lavapipe's
      // 32 KiB holds 8 heads of 576 dims, not 16).
      uint32_t heads = 16 / (T > 8 ? k.groups : 4);
      while (4ull * heads * (512 + 64 + 32) + 12ull * heads + 1024 >
             be->device().info().max_shared_memory)
        heads /= 2;
      const uint32_t groups = 16 / heads, chunks = T > 8 ? k.chunks : 64;
      int found = 0;
      for (const vk::Dispatch& d : be->last_dispatches()) {
        if (d.pipe->name.rfind("mla_attention", 0) != 0) continue;
        ++found;
        EXPECT_EQ(d.groups[0], groups) << tag << " T=" << T;
        EXPECT_EQ(d.groups[1], uint32_t(T)) << tag << " T=" << T;
        EXPECT_EQ(d.groups[2], chunks) << tag << " T=" << T;
      }
      EXPECT_EQ(found, 1) << tag << " T=" << T;
    }
  }
}

// MLA in the non-absorbed form (ops/mla_non_absorbed.cpp) at DeepSeek's widths (dn 128, dr 64,
// dv 128, r 512; 16 heads as V2-Lite and an odd 5): steps of at least kMlaNonAbsorbedMinRows
// rows gather the latent rows, expand K_nope and V from kv_b (f16 here, q8_0 in one case) by
// grouped GEMMs and run the prefill attention (attention_cm2.comp with coopmat2, else
// attention_rows.comp's 192-wide variant) — a fresh prompt, a chunk continuing it (rows at
// positions > 0) together with a fresh prompt of the other slot, row counts off every tile
// (197, 251) — against the reference of the absorbed form; a step one row short of the threshold
// takes the absorbed kernel (mla_attention.comp), and its rows are right too. The dispatch
// names of each program say which form ran.
TEST_P(VulkanAttention, MlaNonAbsorbedAtRealWidths) {
  const DType kt = GetParam();
  auto& be = SharedVulkan();
  // f16 math (tensor cores): the GEMMs and the attention take f16 operands.
  const double tol = be.device().f16_math() ? 5e-3 : kt == DType::kF16 ? 2e-4 : 1e-4;
  static_assert(vk::kMlaNonAbsorbedMinRows == 192, "the row counts below straddle it");
  for (const int H : {16, 5}) {
    const std::string tag = "mla non-absorbed H=" + std::to_string(H) + " " + std::string(Name(kt));
    MlaSteps run(be, H, 128, 64, 128, 512, kt, 700);
    run.UseKvB(DType::kF16);
    Batch a;  // a fresh prompt of 197 rows in slot 0
    a.Add(0, 0, Tokens(197, 1), true);
    a.Finalize();
    run.Step(be, a, tol, tag + " prompt");
    EXPECT_TRUE(Ran("mla_gather_") && Ran("moe_gemm") && !Ran("mla_attention")) << tag;
    EXPECT_TRUE(Ran(be.device().f16_math() && be.device().coopmat2().fa_br
                        ? "attention_cm2_f32"
                        : "attention_rows_f32_dk192"))
        << tag;
    Batch b;  // slot 0 continues at 197 (chunked prefill), slot 1 starts: 251 rows
    b.Add(0, 197, Tokens(211, 2), true);
    b.Add(1, 0, Tokens(40, 3), true);
    b.Finalize();
    run.Step(be, b, tol, tag + " continued + fresh");
    EXPECT_TRUE(Ran("mla_gather_")) << tag;
    Batch c;  // one row short of the threshold: the absorbed form, both slots continuing
    c.Add(1, 40, Tokens(100, 4), true);
    c.Add(0, 408, Tokens(91, 5), true);
    c.Finalize();
    run.Step(be, c, tol, tag + " absorbed");
    EXPECT_TRUE(Ran("mla_attention") && !Ran("mla_gather_")) << tag;
  }
  if (kt != DType::kF32) return;
  for (const DType cache : {DType::kQ8_0}) {  // a block-quantized cache, a q8_0 kv_b
    MlaSteps run(be, 16, 128, 64, 128, 512, cache, 300);
    run.UseKvB(DType::kQ8_0);
    Batch a;
    a.Add(1, 0, Tokens(200, 6), true);
    a.Finalize();
    run.Step(be, a, be.device().f16_math() ? 5e-3 : 1e-4, "mla non-absorbed q8_0");
    EXPECT_TRUE(Ran("mla_gather_q8_0") && Ran("moe_gemm")) << "q8_0";
  }
}

// The step's choice of form (MlaStepExpands): fresh prompts and long chunks expand; a step as
// long that also carries a decode row of a 4,000-key context keeps the absorbed form (expanding
// that slot's whole context for one row costs ~20x what the absorbed rows cost); fewer rows than
// kMlaNonAbsorbedMinRows never expand. No device: the rule is host arithmetic.
TEST(VulkanMlaForm, TheStepExpandsOnlyWhereItSavesMultiplyAdds) {
  Graph g;
  Node n = Make(Op::kMlaAttention, "mla", {}, {1, 16 * 128});
  n.params = MlaParams{16, 128, 64, 128, 512, 1.0f};  // V2-Lite's widths
  g.Add(n);
  auto step = [&](std::initializer_list<std::pair<int, std::pair<int, int>>> rows) {
    Batch b;  // (slot, (first position, rows))
    for (const auto& [slot, pr] : rows) b.Add(slot, pr.first, Tokens(pr.second, slot), true);
    b.Finalize();
    return vk::MlaStepExpands(g, b);
  };
  EXPECT_TRUE(step({{0, {0, 197}}}));                   // a fresh prompt
  EXPECT_TRUE(step({{0, {197, 211}}, {1, {0, 40}}}));   // a long chunk continuing, a fresh prompt
  EXPECT_TRUE(step({{0, {3000, 192}}}));                // past ~171 rows, after any context
  EXPECT_FALSE(step({{0, {0, 191}}}));                  // short of the row count
  EXPECT_FALSE(step({{0, {4000, 1}}, {1, {0, 200}}}));  // a decode row of a long context with them
  Graph dense;
  Node a = Make(Op::kAttention, "attn", {}, {1, 64});
  a.params = AttentionParams{1, 1, 64, 64, 0.125f};
  dense.Add(a);
  Batch b;
  b.Add(0, 0, Tokens(300, 1), true);
  b.Finalize();
  EXPECT_FALSE(vk::MlaStepExpands(dense, b));  // no MLA
}

// Continuous batching's mixed steps (more than kDecodeMaxRows rows, UseMixedAttention) over a
// paged cache whose slots hold scattered blocks: the decode rows (one-token sequences) take the
// split decode kernel over the batch's row list, the prompts' rows tiles of one sequence each
// (attention_rows.comp over the tile table). Ragged prompts (1 to 37 rows: tiles of 1 to 8 rows,
// and a 2-row "prompt"), decode rows at contexts 3 to 60 between and after them, then a step of
// 70 decode rows only; the 7B's heads (7 query heads a kv head, 128 wide) and a narrow shape.
TEST_P(VulkanAttention, MixedStepsSplitDecodeRowsAndTileEachPrompt) {
  auto& be = SharedVulkan();
  struct Shape {
    int Hq, Hkv, dk, dv;
  };
  for (const Shape sh : {Shape{7, 1, 128, 128}, Shape{8, 2, 32, 64}}) {
    const int slots = 72;
    const int64_t capacity = 64;
    const std::string tag = std::string(Name(GetParam())) + " Hq=" + std::to_string(sh.Hq) +
                            " dk=" + std::to_string(sh.dk);
    AttentionSteps run(be, sh.Hq, sh.Hkv, sh.dk, sh.dv, GetParam(), 101, slots, capacity);
    run.ScatterBlocks(be, slots, capacity);
    // Slots 0..9 hold prompts of 3..57 tokens (one prefill step of 300 rows).
    Batch pre;
    for (int s = 0; s < 10; ++s) pre.Add(s, 0, Tokens(3 + 6 * s, s, 101), true);
    pre.Finalize();
    run.Step(be, pre, 1e-5, tag + " prefill");
    // Mixed: 10 decode rows, prompts of 37, 9, 1 and 2 rows in slots 10..13, 10 more decode rows.
    Batch mixed;
    for (int s = 0; s < 5; ++s) mixed.Add(s, 3 + 6 * s, {int32_t(s + 1)}, true);
    mixed.Add(10, 0, Tokens(37, 3, 101), true);
    for (int s = 5; s < 10; ++s) mixed.Add(s, 3 + 6 * s, {int32_t(s + 1)}, true);
    mixed.Add(11, 0, Tokens(9, 4, 101), true);
    mixed.Add(12, 0, {7}, true);
    mixed.Add(13, 0, {8, 9}, true);
    for (int s = 14; s < 24; ++s) mixed.Add(s, 0, {int32_t(s)}, true);
    mixed.Finalize();
    ASSERT_GT(mixed.n_tokens(), 64);
    run.Step(be, mixed, 1e-5, tag + " mixed");
    bool list = false;
    for (const std::string& n : be.counters().shaders)
      list = list || n.rfind("attention_combine_list", 0) == 0;
    EXPECT_TRUE(list) << tag << ": the mixed step did not take the decode-row list";
    // 70 decode rows, no prompt.
    Batch dec;
    for (int s = 0; s < 70; ++s) {
      const int pos = s < 10    ? 4 + 6 * s
                      : s == 10 ? 37
                      : s == 11 ? 9
                      : s == 12 ? 1
                      : s == 13 ? 2
                      : s < 24  ? 1
                                : 0;
      dec.Add(s, pos, {int32_t((s * 5) % 101)}, true);
    }
    dec.Finalize();
    run.Step(be, dec, 1e-5, tag + " decode only");
  }
}

INSTANTIATE_TEST_SUITE_P(KvTypes, VulkanAttention, ::testing::Values(DType::kF32, DType::kF16),
                         [](const auto& info) { return std::string(Name(info.param)); });

// Block-quantized caches (q8_0, q4_0: kv_type.glsl, written by kv_write.glsl) through every
// attention kernel, against the reference over the dequantized rows: the decode kernel by kv head
// (attention_decode.comp) and the 8-row prefill tiles (attention_rows.comp) at head dims 32 / 64;
// with ES_VK_ATTN_DECODE=0 the split per-head kernel (attention.comp SPLIT); at head dims 160 / 96
// (5 and 3 blocks: scales sharing words across heads and rows; no decode kernel for dv 96, and
// prefill past attention_rows' 128) attention.comp split and per row. 2e-3: GLSL's 1 / d is not
// correctly rounded, so a value on a rounding boundary may take the neighbouring quant.
TEST(VulkanQuantKv, EveryAttentionKernelOverTheDequantizedCache) {
  struct Case {
    int Hq, Hkv, dk, dv;
    const char* decode;
  };
  for (DType kt : {DType::kQ8_0, DType::kQ4_0}) {
    for (const Case cs :
         {Case{4, 2, 32, 64, "1"}, Case{4, 2, 32, 64, "0"}, Case{2, 1, 160, 96, "1"}}) {
      ScopedKnobs env{{"ES_VK_ATTN_DECODE", cs.decode}};
      auto be = MakeVulkan({});
      const std::string tag = std::string(Name(kt)) + " dk=" + std::to_string(cs.dk) +
                              " dv=" + std::to_string(cs.dv) + " decode=" + cs.decode;
      AttentionSteps run(*be, cs.Hq, cs.Hkv, cs.dk, cs.dv, kt, 9, 2, 32);
      for (const Batch& b : Steps()) run.Step(*be, b, 2e-3, tag);
      std::vector<float> row(size_t(run.Hkv * run.dk));
      for (int pos = 0; pos < 15; ++pos) {
        run.kv->ReadRow(1, 1, 0, pos, row.data());
        ExpectClose(row, run.kc[1][size_t(pos)], 1e-2, tag + " row " + std::to_string(pos));
      }
    }
  }
}

// MLA over an int8 (q8_0) or q4_0 latent at DeepSeek's widths (latent 512 = 16 blocks, rope 64
// = 2): a prefill of two slots (DIRECT), split decode, and decode rows at ~300 keys.
TEST(VulkanQuantKv, MlaOverAQuantizedLatent) {
  auto& be = SharedVulkan();
  for (DType kt : {DType::kQ8_0, DType::kQ4_0}) {
    const std::string tag = std::string("mla ") + std::string(Name(kt));
    MlaSteps run(be, 16, 16, 64, 16, 512, kt, 400);
    Batch a;
    a.Add(1, 0, Tokens(40, 1), true);
    a.Add(0, 0, Tokens(9, 2), true);
    a.Finalize();
    run.Step(be, a, 2e-3, tag + " prefill");
    Batch b;
    b.Add(1, 40, {5}, true);
    b.Add(0, 9, {6}, true);
    b.Finalize();
    run.Step(be, b, 2e-3, tag + " decode");
    Batch c;
    c.Add(0, 10, Tokens(290, 3), true);
    c.Finalize();
    run.Step(be, c, 2e-3, tag, /*store_only=*/true);
    Batch d;
    d.Add(0, 300, {7, 8, 9}, true);
    d.Finalize();
    run.Step(be, d, 2e-3, tag + " long decode");
  }
}

TEST_F(VulkanTest, KvStoreRejectsPositionsBeyondCapacity) {
  Tensor K = RandomTensor("k", DType::kF32, {4, 4}, 1);
  Graph g;
  Node s = Make(Op::kKvStore, "sk", {Input(g, K, 1)}, {1, 4}, 0);
  s.params = KvStoreParams{0};
  g.Add(s);
  auto kv = SharedVulkan().CreateKv(KvSpec{1, {4, 4}, DType::kF32}, 1, 4);
  Batch b;
  b.Add(0, 4, {0}, true);
  b.Finalize();
  std::vector<float> out(4);
  try {
    SharedVulkan().Compute(g, b, *kv, out.data());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("exceeds the context"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace es::test
