// KV store, causal GQA attention and absorbed MLA against the reference, over a batch of two
// sequences in different slots (a prefill) and then a decode step of both, with f32 and f16
// caches. The expected values are computed from host copies of what each slot holds.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>

#include "backends/cpu/reference.h"
#include "edgeseek/core/half.h"
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
std::vector<float> RoundTo(DType dt, std::vector<float> v) {
  if (dt == DType::kF16)
    for (float& x : v) x = F16ToF32(F32ToF16(x));
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
    sk.i[0] = 0;
    Node sv = Make(Op::kKvStore, "sv", {v}, {T, Hkv * dv}, 1);
    sv.i[0] = 1;
    const int ks = g.Add(sk), vs = g.Add(sv);
    Node at = Make(Op::kAttention, "attn", {q, ks, vs}, {T, Hq * dv}, 1);
    at.i[0] = Hq, at.i[1] = Hkv, at.i[2] = dk, at.i[3] = dv;
    at.f0 = 1.0f / std::sqrt(float(dk));
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
      ref::AttentionRow(qr.data(), Kf.data(), Vf.data(), pos0 + t + 1, Hq, Hkv, dk, dv, at.f0,
                        &want[size_t(t * Hq * dv)]);
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
      : Hq(hq), Hkv(hkv), dk(dk_), dv(dv_), kv_type(kv_t),
        Q(RandomTensor("q", DType::kF32, {vocab, hq * dk_}, 21)),
        K(RandomTensor("k", DType::kF32, {vocab, hkv * dk_}, 22)),
        V(RandomTensor("v", DType::kF32, {vocab, hkv * dv_}, 23)),
        kv(be.CreateKv(KvSpec{2, {hkv * dk_, hkv * dv_}, kv_t}, slots, capacity)) {}

  void Step(Backend& be, const Batch& b, double tol, const std::string& what) {
    const int T = b.n_tokens();
    Graph g;
    const int q = Input(g, Q, T), k = Input(g, K, T), v = Input(g, V, T);
    Node sk = Make(Op::kKvStore, "sk", {k}, {T, Hkv * dk}, 1);
    sk.i[0] = 0;
    Node sv = Make(Op::kKvStore, "sv", {v}, {T, Hkv * dv}, 1);
    sv.i[0] = 1;
    const int ks = g.Add(sk), vs = g.Add(sv);
    Node at = Make(Op::kAttention, "attn", {q, ks, vs}, {T, Hq * dv}, 1);
    at.i[0] = Hq, at.i[1] = Hkv, at.i[2] = dk, at.i[3] = dv;
    at.f0 = 1.0f / std::sqrt(float(dk));
    g.Add(at);
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
      ref::AttentionRow(qr.data(), Kf.data(), Vf.data(), pos + 1, Hq, Hkv, dk, dv, at.f0,
                        &want[size_t(t * Hq * dv)]);
    }
    ExpectClose(got, want, tol, what + " T=" + std::to_string(T));
  }
};

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

// The prefill attention on tensor cores (attention_cm2.comp, VK_NV_cooperative_matrix2 with f16
// math): head dims 128, 64 and odd ones (padded to 16), GQA, a first prefill whose tiles mix two
// slots (slot 1's 150 rows then slot 0's 70: the tile at row 128 holds both), a second one that
// continues slot 0 from position 70 (keys before the batch, the causal diagonal off the tile
// grid), then a decode step (the other kernel). f16 q, keys and probabilities: 3e-3.
// Needs a device with the extension and a build whose glslc compiled the shader (the GPU
// machine); elsewhere it is skipped.
TEST_P(VulkanAttention, Coopmat2PrefillOverTwoSlots) {
  vk::VulkanTuning t;
  t.f16_act = 1;
  auto be = MakeVulkan(t);
  if (!be->device().coopmat2().fa_br || !be->device().f16_math())
    GTEST_SKIP() << "no VK_NV_cooperative_matrix2 attention on this device/build";
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
  for (const Shape s : {Shape{4, 2, 128, 128}, Shape{6, 2, 64, 64}, Shape{3, 1, 10, 6},
                        Shape{2, 2, 200, 136}}) {
    const std::string tag = "cm2 attention Hq=" + std::to_string(s.Hq) + " Hkv=" +
                            std::to_string(s.Hkv) + " dk=" + std::to_string(s.dk) + " dv=" +
                            std::to_string(s.dv);
    AttentionSteps run(*be, s.Hq, s.Hkv, s.dk, s.dv, GetParam(), vocab, 2, 256);
    for (const Batch* step : {&a, &b, &c}) run.Step(*be, *step, 3e-3, tag);
  }
}

TEST_P(VulkanAttention, AbsorbedMlaOverTheLatentCache) {
  const DType kv_type = GetParam();
  const int H = 3, dn = 8, dr = 4, dv = 6, r = 16;
  Tensor Q = RandomTensor("q", DType::kF32, {9, H * (dn + dr)}, 31);
  Tensor C = RandomTensor("c", DType::kF32, {9, r}, 32);
  Tensor PE = RandomTensor("pe", DType::kF32, {9, dr}, 33);
  Tensor WukT = RandomTensor("wuk_t", DType::kBF16, {H * r, dn}, 34, 0.5f);
  Tensor Wuv = RandomTensor("wuv", DType::kF16, {H * dv, r}, 35, 0.5f);
  auto& be = SharedVulkan();
  auto kv = be.CreateKv(KvSpec{1, {r, dr}, kv_type}, 2, 16);
  std::map<int, std::vector<std::vector<float>>> cc, pc;
  for (const Batch& b : Steps()) {
    const int T = b.n_tokens();
    Graph g;
    const int q = Input(g, Q, T), c = Input(g, C, T), pe = Input(g, PE, T);
    Node s0 = Make(Op::kKvStore, "sc", {c}, {T, r}, 0);
    s0.i[0] = 0;
    Node s1 = Make(Op::kKvStore, "spe", {pe}, {T, dr}, 0);
    s1.i[0] = 1;
    const int cs = g.Add(s0), ps = g.Add(s1);
    Node m = Make(Op::kMlaAttention, "mla", {q, cs, ps, g.AddWeight(WukT), g.AddWeight(Wuv)},
                  {T, H * dv}, 0);
    m.i[0] = H, m.i[1] = dn, m.i[2] = dr, m.i[3] = dv, m.i[4] = r;
    m.f0 = 0.3f;
    g.Add(m);
    std::vector<float> got(size_t(T * H * dv));
    be.Compute(g, b, *kv, got.data());
    for (int t = 0; t < T; ++t) {
      const int slot = b.seqs[size_t(b.row_seq[size_t(t)])].slot, pos = b.positions[size_t(t)];
      cc[slot].resize(size_t(pos + 1));
      pc[slot].resize(size_t(pos + 1));
      cc[slot][size_t(pos)] = RoundTo(kv_type, Row(C, b.tokens[size_t(t)]));
      pc[slot][size_t(pos)] = RoundTo(kv_type, Row(PE, b.tokens[size_t(t)]));
    }
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
                           m.f0, &want[size_t(t * H * dv)]);
    }
    ExpectClose(got, want, 1e-5, "mla T=" + std::to_string(T));
  }
}

INSTANTIATE_TEST_SUITE_P(KvTypes, VulkanAttention, ::testing::Values(DType::kF32, DType::kF16),
                         [](const auto& info) { return std::string(Name(info.param)); });

TEST_F(VulkanTest, KvStoreRejectsPositionsBeyondCapacity) {
  Tensor K = RandomTensor("k", DType::kF32, {4, 4}, 1);
  Graph g;
  Node s = Make(Op::kKvStore, "sk", {Input(g, K, 1)}, {1, 4}, 0);
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
