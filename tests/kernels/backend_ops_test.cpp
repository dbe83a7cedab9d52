// Every graph op on every built backend against the plain reference (src/backends/cpu/reference),
// over odd sizes: one-op graphs fed through the Backend interface, as ggml's test-backend-ops
// does. Tolerances (relative L2) are written beside each case: f32 activations everywhere, so
// differences come only from summation order (and exp/cos implementations).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cpu/reference.h"
#include "edgeseek/internal/backends/backend.h"
#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/core/half.h"
#include "edgeseek/internal/core/thread_pool.h"
#include "edgeseek/internal/quant/blocks.h"
#include "test_util.h"

namespace es {
namespace {

Tensor RandTensor(const std::string& name, DType dt, Shape shape, uint64_t seed,
                  float scale = 0.5f) {
  Tensor t = AllocTensor(name, dt, shape);
  auto v = test::RandomFloats(size_t(t.numel()), seed, scale);
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (dt == DType::kF32)
      static_cast<float*>(MutableData(t))[i] = v[size_t(i)];
    else if (dt == DType::kF16)
      static_cast<uint16_t*>(MutableData(t))[i] = F32ToF16(v[size_t(i)]);
    else
      static_cast<uint16_t*>(MutableData(t))[i] = F32ToBF16(v[size_t(i)]);
  }
  return t;
}

class BackendOps : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    BackendOptions o;
    o.threads = 2;
    be_ = CreateBackend(GetParam(), o);
  }
  // Runs graph g whose first node is an "input" matmul trick: we feed activations through an
  // embedding of an f32 table, so every op sees backend-resident inputs.
  std::unique_ptr<Backend> be_;
};

// Input rows enter through kEmbed over an f32 table whose rows are the activations.
int InputNode(Graph& g, const Tensor& table, int64_t rows) {
  Node n;
  n.op = Op::kEmbed;
  n.name = "input";
  n.src = {g.AddWeight(table)};
  n.shape = {rows, table.cols()};
  return g.Add(std::move(n));
}

Batch SeqBatch(const std::vector<int>& lens, const std::vector<int>& pos0) {
  Batch b;
  int row = 0;
  for (size_t s = 0; s < lens.size(); ++s) {
    std::vector<int32_t> toks(size_t(lens[s]));
    for (auto& t : toks) t = row++;
    b.Add(int(s), pos0[s], toks, true);
  }
  b.Finalize();
  return b;
}

std::vector<float> RunGraph(Backend& be, const Graph& g, const Batch& b, KvStorage* kv = nullptr) {
  std::unique_ptr<KvStorage> own;
  if (!kv) {
    KvSpec s;
    s.n_layers = 1;
    s.width[0] = 1;
    own = be.CreateKv(s, 4, 256);
    kv = own.get();
  }
  const Node& o = g.node(g.output());
  std::vector<float> out(size_t(o.shape[0] * o.shape[1]));
  be.Compute(g, b, *kv, out.data());
  return out;
}

// ArgmaxRowsHost over a pool's threads (the CPU backend's batched greedy steps): the serial ids
// (lowest index on ties), and a non-finite logit fails naming its row as the serial pass would,
// the first bad row when several are; odd row counts and a vocabulary off the 16-lane loop.
TEST(ArgmaxRowsHost, ThreadsGiveTheSerialIdsAndTheFirstBadRow) {
  ThreadPool pool(3);
  for (const int64_t rows : {1, 2, 7, 33}) {
    const int64_t V = 1003;
    std::vector<float> x(size_t(rows * V));
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(float(i) * 0.37f);
    for (int64_t r = 0; r < rows; ++r) x[size_t(r * V + (r * 97) % V)] = 5.0f;  // a known max
    x[size_t(V - 1)] = 5.0f;  // a tie in row 0: the lower index wins
    std::vector<int32_t> serial(static_cast<size_t>(rows)), threaded(serial.size());
    ArgmaxRowsHost(x.data(), rows, V, serial.data());
    ArgmaxRowsHost(x.data(), rows, V, threaded.data(), &pool);
    EXPECT_EQ(threaded, serial) << rows;
    for (int64_t r = 0; r < rows; ++r) EXPECT_EQ(threaded[size_t(r)], (r * 97) % V) << r;
    if (rows < 7) continue;
    x[size_t(5 * V + 11)] = NAN;
    x[size_t(6 * V + 2)] = INFINITY;
    try {
      ArgmaxRowsHost(x.data(), rows, V, threaded.data(), &pool);
      ADD_FAILURE() << "no error with a NaN in row 5";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("for token 11 in output row 5"), std::string::npos)
          << e.what();
    }
  }
}

TEST_P(BackendOps, RmsNormMatMulAddSwiGLU) {
  for (DType wt : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int64_t K : {1, 7, 64, 129}) {
      for (int64_t N : {1, 3, 33}) {
        const int64_t R = 5;
        Tensor x = RandTensor("x", DType::kF32, {R, K}, 1);
        Tensor nw = RandTensor("nw", DType::kF32, {K}, 2);
        Tensor w = RandTensor("w", wt, {N, K}, 3);
        Tensor w2 = RandTensor("w2", wt, {N, K}, 4);
        Tensor bias = RandTensor("bias", DType::kF32, {N}, 5);
        Graph g;
        const int in = InputNode(g, x, R);
        Node nn{Op::kRmsNorm, "norm", {in, g.AddWeight(nw)}, {R, K}};
        nn.params = RmsNormParams{1e-6f};
        const int norm = g.Add(nn);
        const int mm =
            g.Add(Node{Op::kMatMul, "mm", {norm, g.AddWeight(w), g.AddWeight(bias)}, {R, N}});
        const int mm2 = g.Add(Node{Op::kMatMul, "mm2", {norm, g.AddWeight(w2), -1}, {R, N}});
        const int act = g.Add(Node{Op::kSwiGLU, "act", {mm, mm2}, {R, N}});
        g.Add(Node{Op::kAdd, "add", {act, mm}, {R, N}});
        const auto got = RunGraph(*be_, g, SeqBatch({int(R)}, {0}));
        // reference
        std::vector<float> xn(size_t(R * K)), a(size_t(R * N)), c(size_t(R * N)), s(size_t(R * N)),
            ref(size_t(R * N));
        ref::RmsNorm(x.as<float>(), nw.as<float>(), R, K, 1e-6f, xn.data());
        ref::MatMul(xn.data(), R, K, w, bias.as<float>(), a.data());
        ref::MatMul(xn.data(), R, K, w2, nullptr, c.data());
        ref::SwiGLU(a.data(), c.data(), R * N, s.data());
        ref::Add(s.data(), a.data(), R * N, ref.data());
        EXPECT_LE(test::RelL2(got, ref), 2e-6) << Name(wt) << " K=" << K << " N=" << N;
      }
    }
  }
}

TEST_P(BackendOps, RopeNeoxAndInterleaved) {
  for (RopeMode mode : {RopeMode::kNeox, RopeMode::kInterleaved}) {
    const int64_t H = 3, hd = 12, off = mode == RopeMode::kNeox ? 0 : 4, R = 7;
    auto rope = std::make_shared<RopeTable>();
    rope->mode = mode;
    rope->dim = int(hd - off);
    for (int i = 0; i < rope->dim / 2; ++i)
      rope->inv_freq.push_back(std::pow(10000.0f, -2.0f * i / rope->dim));
    rope->attention_factor = 1.25f;
    Tensor x = RandTensor("x", DType::kF32, {R, H * hd}, 7);
    Graph g;
    const int in = InputNode(g, x, R);
    Node n{Op::kRope, "rope", {in}, {R, H * hd}};
    n.params = RopeParams{H, hd, off, rope};
    g.Add(n);
    const Batch b = SeqBatch({3, 4}, {5, 100});
    const auto got = RunGraph(*be_, g, b);
    std::vector<float> ref(size_t(R * H * hd));
    ref::Rope(x.as<float>(), R, H, hd, off, *rope, b.positions.data(), ref.data());
    EXPECT_LE(test::RelL2(got, ref), 1e-6);
  }
}

// Attention over a batch of sequences at different positions, GQA; the cache is filled by
// kKvStore in the same graph (earlier positions come from a first graph run).
TEST_P(BackendOps, AttentionGqaBatchOfSequences) {
  const int64_t Hq = 6, Hkv = 2, d = 16;
  KvSpec spec;
  spec.n_layers = 1;
  spec.width[0] = int(Hkv * d);
  spec.width[1] = int(Hkv * d);
  auto kv = be_->CreateKv(spec, 3, 64);
  const float scale = 1.0f / std::sqrt(float(d));
  // Two passes: prefill (lens 5, 9, 1) then a mixed step (1, 2, 3 tokens).
  std::vector<std::vector<std::vector<float>>> ks(3), vs(3);  // per slot: rows
  const std::vector<std::vector<int>> lens = {{5, 9, 1}, {1, 2, 3}};
  std::vector<int> pos = {0, 0, 0};
  for (int pass = 0; pass < 2; ++pass) {
    const Batch b = SeqBatch(lens[size_t(pass)], pos);
    const int64_t T = b.n_tokens();
    Tensor q = RandTensor("q", DType::kF32, {T, Hq * d}, 10 + uint64_t(pass));
    Tensor k = RandTensor("k", DType::kF32, {T, Hkv * d}, 20 + uint64_t(pass));
    Tensor v = RandTensor("v", DType::kF32, {T, Hkv * d}, 30 + uint64_t(pass));
    // The input node reads table rows by batch token ids 0..T-1.
    Graph g;
    const int qi = InputNode(g, q, T), ki = InputNode(g, k, T), vi = InputNode(g, v, T);
    Node sk{Op::kKvStore, "k_cache", {ki}, {T, Hkv * d}};
    sk.layer = 0;
    sk.params = KvStoreParams{0};
    Node sv{Op::kKvStore, "v_cache", {vi}, {T, Hkv * d}};
    sv.layer = 0;
    sv.params = KvStoreParams{1};
    const int s0 = g.Add(sk), s1 = g.Add(sv);
    Node a{Op::kAttention, "attn", {qi, s0, s1}, {T, Hq * d}};
    a.layer = 0;
    a.params = AttentionParams{Hq, Hkv, d, d, scale};
    g.Add(a);
    const auto got = RunGraph(*be_, g, b, kv.get());
    std::vector<float> ref(size_t(T * Hq * d));
    for (int64_t t = 0; t < T; ++t) {
      const int s = b.row_seq[size_t(t)];
      ks[size_t(s)].emplace_back(k.as<float>() + t * Hkv * d, k.as<float>() + (t + 1) * Hkv * d);
      vs[size_t(s)].emplace_back(v.as<float>() + t * Hkv * d, v.as<float>() + (t + 1) * Hkv * d);
    }
    for (int64_t t = 0; t < T; ++t) {
      const int s = b.row_seq[size_t(t)];
      const int64_t n_ctx = b.positions[size_t(t)] + 1;
      std::vector<float> K, V;
      for (int64_t j = 0; j < n_ctx; ++j) {
        K.insert(K.end(), ks[size_t(s)][size_t(j)].begin(), ks[size_t(s)][size_t(j)].end());
        V.insert(V.end(), vs[size_t(s)][size_t(j)].begin(), vs[size_t(s)][size_t(j)].end());
      }
      ref::AttentionRow(q.as<float>() + t * Hq * d, K.data(), V.data(), n_ctx, Hq, Hkv, d, d, scale,
                        &ref[size_t(t * Hq * d)]);
    }
    EXPECT_LE(test::RelL2(got, ref), 1e-5) << "pass " << pass;
    for (size_t s = 0; s < 3; ++s) pos[s] += lens[size_t(pass)][s];
  }
}

// Heads 3 and 5 over two sequences (6 rows) and one row: the CPU backend groups heads that share
// the latent rows (a partial last group, one head a group).
TEST_P(BackendOps, MlaAbsorbed) {
  for (const auto& [H, lens] :
       std::vector<std::pair<int64_t, std::vector<int>>>{{3, {4, 2}}, {5, {4, 2}}, {5, {1}}}) {
    const int64_t dn = 8, dr = 4, dv = 6, r = 10;
    KvSpec spec;
    spec.n_layers = 1;
    spec.width[0] = int(r);
    spec.width[1] = int(dr);
    auto kv = be_->CreateKv(spec, 2, 32);
    const Batch b = SeqBatch(lens, std::vector<int>(lens.size(), 0));
    const int64_t T = b.n_tokens();
    Tensor q = RandTensor("q", DType::kF32, {T, H * (dn + dr)}, 41);
    Tensor c = RandTensor("c", DType::kF32, {T, r}, 42);
    Tensor kpe = RandTensor("kpe", DType::kF32, {T, dr}, 43);
    Tensor wukt = RandTensor("wukt", DType::kBF16, {H * r, dn}, 44);
    Tensor wuv = RandTensor("wuv", DType::kBF16, {H * dv, r}, 45);
    Graph g;
    const int qi = InputNode(g, q, T), ci = InputNode(g, c, T), pi = InputNode(g, kpe, T);
    Node s0{Op::kKvStore, "c", {ci}, {T, r}};
    s0.layer = 0;
    s0.params = KvStoreParams{0};
    Node s1{Op::kKvStore, "pe", {pi}, {T, dr}};
    s1.layer = 0;
    s1.params = KvStoreParams{1};
    const int a0 = g.Add(s0), a1 = g.Add(s1);
    Node m{
        Op::kMlaAttention, "mla", {qi, a0, a1, g.AddWeight(wukt), g.AddWeight(wuv)}, {T, H * dv}};
    m.layer = 0;
    m.params = MlaParams{H, dn, dr, dv, r, 0.3f};
    g.Add(m);
    const auto got = RunGraph(*be_, g, b, kv.get());
    std::vector<float> ref(size_t(T * H * dv));
    for (int64_t t = 0; t < T; ++t) {
      const BatchSeq& s = b.seqs[size_t(b.row_seq[size_t(t)])];
      const int64_t n_ctx = b.positions[size_t(t)] + 1;
      ref::MlaAttentionRow(q.as<float>() + t * H * (dn + dr), c.as<float>() + s.row0 * r,
                           kpe.as<float>() + s.row0 * dr, n_ctx, H, dn, dr, dv, r, wukt, wuv, 0.3f,
                           &ref[size_t(t * H * dv)]);
    }
    EXPECT_LE(test::RelL2(got, ref), 1e-5) << "H=" << H << " rows=" << T;
  }
}

// What a cache of type `t` holds for a row of floats: rounded to f16, or quantized per 32-block
// and dequantized (the reference attention then runs on these rows).
std::vector<float> AsStored(DType t, std::vector<float> v) {
  if (t == DType::kF16)
    for (float& x : v) x = F16ToF32(F32ToF16(x));
  if (IsQuantized(t)) {
    std::vector<uint8_t> q(RowBytes(t, int64_t(v.size())));
    Quantize(t, v.data(), q.data(), int64_t(v.size()));
    Dequantize(t, q.data(), v.data(), int64_t(v.size()));
  }
  return v;
}

// Every KV cache type (f32, f16, q8_0, q4_0) under attention and absorbed MLA, on a paged cache
// whose slots' blocks are scattered (backwards, interleaved): a prefill of ragged sequences
// (lengths 5, 19, 1: the 12-row multi-row kernels on Vulkan) then a mixed step crossing a
// 16-token block boundary (split decode). The reference dequantizes the rows the cache holds
// (AsStored) and runs the plain attention. Widths are whole 32-blocks but odd counts of them
// (head dims 96 and 32, latent 96, rope 32), so blocks' scales share words across rows and heads.
// Tolerances: the CPU quantizes exactly as the reference (es::Quantize), so only summation order
// differs (1e-5); a GPU's 1/d is not correctly rounded (GLSL division, 2.5 ulp), so a value on a
// rounding boundary may take the neighbouring quant: 2e-3 for the block types there.
TEST_P(BackendOps, AttentionAndMlaOverEveryKvType) {
  for (DType kt : {DType::kF32, DType::kF16, DType::kQ8_0, DType::kQ4_0}) {
    const double tol = IsQuantized(kt) && GetParam() != "cpu" ? 2e-3 : 1e-5;
    for (bool mla : {false, true}) {
      const int64_t Hq = 4, Hkv = 2, dk = 96, dv = 32;          // attention
      const int64_t H = 3, dn = 16, dr = 32, dvm = 16, r = 96;  // MLA
      KvSpec spec;
      spec.n_layers = 1;
      spec.dtype = kt;
      spec.width[0] = int(mla ? r : Hkv * dk);
      spec.width[1] = int(mla ? dr : Hkv * dv);
      auto kv = be_->CreatePagedKv(spec, 3, 48, 9);
      for (int s = 0; s < 3; ++s) {
        const int32_t t[3] = {int32_t(8 - s), int32_t(5 - s), int32_t(2 - s)};
        kv->SetBlockTable(s, t, 3);
      }
      const std::string tag = std::string(Name(kt)) + (mla ? " mla" : " attention");
      std::vector<std::vector<std::vector<float>>> rows0(3), rows1(3);  // per slot: stored rows
      const std::vector<std::vector<int>> lens = {{5, 19, 1}, {1, 2, 3}};
      std::vector<int> pos = {0, 0, 0};
      for (int pass = 0; pass < 2; ++pass) {
        const Batch b = SeqBatch(lens[size_t(pass)], pos);
        const int64_t T = b.n_tokens();
        const int64_t qw = mla ? H * (dn + dr) : Hq * dk, ow = mla ? H * dvm : Hq * dv;
        Tensor q = RandTensor("q", DType::kF32, {T, qw}, 10 + uint64_t(pass));
        Tensor k = RandTensor("k", DType::kF32, {T, spec.width[0]}, 20 + uint64_t(pass));
        Tensor v = RandTensor("v", DType::kF32, {T, spec.width[1]}, 30 + uint64_t(pass));
        Tensor wukt = RandTensor("wukt", DType::kBF16, {H * r, dn}, 44);
        Tensor wuv = RandTensor("wuv", DType::kBF16, {H * dvm, r}, 45);
        Graph g;
        const int qi = InputNode(g, q, T), ki = InputNode(g, k, T), vi = InputNode(g, v, T);
        Node sk{Op::kKvStore, "k_cache", {ki}, {T, spec.width[0]}};
        sk.layer = 0;
        sk.params = KvStoreParams{0};
        Node sv{Op::kKvStore, "v_cache", {vi}, {T, spec.width[1]}};
        sv.layer = 0;
        sv.params = KvStoreParams{1};
        const int s0 = g.Add(sk), s1 = g.Add(sv);
        Node a{mla ? Op::kMlaAttention : Op::kAttention, "attn", {qi, s0, s1}, {T, ow}};
        a.layer = 0;
        if (mla) {
          a.src.push_back(g.AddWeight(wukt));
          a.src.push_back(g.AddWeight(wuv));
          a.params = MlaParams{H, dn, dr, dvm, r, 0.3f};
        } else {
          a.params = AttentionParams{Hq, Hkv, dk, dv, 1.0f / std::sqrt(float(dk))};
        }
        const float scale = mla ? a.Params<MlaParams>().scale : a.Params<AttentionParams>().scale;
        g.Add(a);
        const auto got = RunGraph(*be_, g, b, kv.get());
        for (int64_t t = 0; t < T; ++t) {
          const int s = b.row_seq[size_t(t)];
          const float *kr = k.as<float>() + t * spec.width[0],
                      *vr = v.as<float>() + t * spec.width[1];
          rows0[size_t(s)].push_back(AsStored(kt, std::vector<float>(kr, kr + spec.width[0])));
          rows1[size_t(s)].push_back(AsStored(kt, std::vector<float>(vr, vr + spec.width[1])));
        }
        std::vector<float> ref(size_t(T * ow));
        for (int64_t t = 0; t < T; ++t) {
          const int s = b.row_seq[size_t(t)];
          const int64_t n_ctx = b.positions[size_t(t)] + 1;
          std::vector<float> K, V;
          for (int64_t j = 0; j < n_ctx; ++j) {
            K.insert(K.end(), rows0[size_t(s)][size_t(j)].begin(),
                     rows0[size_t(s)][size_t(j)].end());
            V.insert(V.end(), rows1[size_t(s)][size_t(j)].begin(),
                     rows1[size_t(s)][size_t(j)].end());
          }
          if (mla)
            ref::MlaAttentionRow(q.as<float>() + t * qw, K.data(), V.data(), n_ctx, H, dn, dr, dvm,
                                 r, wukt, wuv, scale, &ref[size_t(t * ow)]);
          else
            ref::AttentionRow(q.as<float>() + t * qw, K.data(), V.data(), n_ctx, Hq, Hkv, dk, dv,
                              scale, &ref[size_t(t * ow)]);
        }
        EXPECT_LE(test::RelL2(got, ref), tol) << tag << " pass " << pass;
        for (size_t s = 0; s < 3; ++s) pos[s] += lens[size_t(pass)][s];
      }
      // The cache holds what the reference assumed (ReadRow dequantizes).
      std::vector<float> row(size_t(spec.width[0]));
      for (int64_t p : {0, 15, 16, 19}) {
        kv->ReadRow(1, 0, 0, p, row.data());
        EXPECT_LE(test::RelL2(row, rows0[1][size_t(p)]),
                  IsQuantized(kt) && GetParam() != "cpu" ? 1e-2 : 0.0)
            << tag << " row " << p;
      }
    }
  }
}

// A block-quantized cache needs widths of whole 32-blocks: one error naming the type.
TEST_P(BackendOps, KvTypeWidthsNotWholeBlocksAreAnError) {
  for (DType kt : {DType::kQ8_0, DType::kQ4_0}) {
    KvSpec spec;
    spec.n_layers = 1;
    spec.dtype = kt;
    spec.width[0] = 48;
    spec.width[1] = 64;
    try {
      be_->CreateKv(spec, 1, 16);
      ADD_FAILURE() << "no error for " << Name(kt);
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(std::string(Name(kt))), std::string::npos) << m;
      EXPECT_NE(m.find("multiples of 32"), std::string::npos) << m;
    }
  }
}

TEST_P(BackendOps, MoeRoutingMethods) {
  const int64_t D = 24, I = 10, R = 6;
  const int E = 8;
  for (TopkMethod m :
       {TopkMethod::kGreedy, TopkMethod::kGroupLimitedGreedy, TopkMethod::kNoauxTc}) {
    auto p = std::make_shared<MoeParams>();
    p->n_experts = E;
    p->top_k = 3;
    p->n_group = m == TopkMethod::kGreedy ? 1 : 4;
    p->topk_group = m == TopkMethod::kGreedy ? 1 : 2;
    p->topk_method = m;
    p->scoring = m == TopkMethod::kNoauxTc ? ScoringFunc::kSigmoid : ScoringFunc::kSoftmax;
    p->norm_topk_prob = m == TopkMethod::kNoauxTc;
    p->routed_scaling_factor = 2.5f;
    p->ffn_dim = int(I);
    Tensor x = RandTensor("x", DType::kF32, {R, D}, 50);
    Tensor gate = RandTensor("gate", DType::kF32, {E, D}, 51, 1.0f);
    Tensor bias = RandTensor("bias", DType::kF32, {E}, 52, 0.1f);
    std::vector<Tensor> ex;
    for (int e = 0; e < E; ++e) {
      ex.push_back(RandTensor("g" + std::to_string(e), DType::kBF16, {I, D}, 60 + uint64_t(e)));
      ex.push_back(RandTensor("u" + std::to_string(e), DType::kBF16, {I, D}, 80 + uint64_t(e)));
      ex.push_back(RandTensor("d" + std::to_string(e), DType::kBF16, {D, I}, 100 + uint64_t(e)));
    }
    Graph g;
    const int xi = InputNode(g, x, R);
    Node n{Op::kMoE,
           "moe",
           {xi, g.AddWeight(gate), m == TopkMethod::kNoauxTc ? g.AddWeight(bias) : -1},
           {R, D}};
    std::vector<const Tensor*> exp;
    for (auto& t : ex) {
      n.src.push_back(g.AddWeight(t));
      exp.push_back(&t);
    }
    n.params = MoeOpParams{*p};
    g.Add(n);
    const auto got = RunGraph(*be_, g, SeqBatch({int(R)}, {0}));
    std::vector<float> ref(size_t(R * D));
    ref::MoE(x.as<float>(), R, D, gate, m == TopkMethod::kNoauxTc ? &bias : nullptr, exp, *p,
             ref.data());
    EXPECT_LE(test::RelL2(got, ref), 2e-6) << "method " << int(m);
  }
}

// Routed experts at sizes where the CPU backend splits each expert's columns into blocks (I and D
// above 64), with block-quantized experts, 8..256 experts, top-k 1..8 and ragged rows per expert:
// most experts with no row (R = 1 of 64), one row, and every row on one expert (its router row
// dominates). Each batch row must also equal that row run alone (bit-identical on the CPU, the
// batch-invariance contract; within the types' tolerance elsewhere).
TEST_P(BackendOps, MoeExpertCountsTypesAndRaggedRows) {
  struct Case {
    int E, top_k;
    int64_t R, D, I;
    DType wt;
    bool one_expert;  // every row's first choice is expert E / 2
    double tol;       // against the reference: f32 / quantized activations
  };
  const std::vector<Case> cases = {
      {8, 1, 5, 96, 200, DType::kBF16, false, 2e-6},
      {64, 6, 1, 128, 160, DType::kQ4_0, false, 3e-2},
      {64, 6, 7, 128, 160, DType::kQ8_0, false, 1e-2},
      {16, 4, 9, 64, 320, DType::kQ4_0, true, 3e-2},
      {256, 8, 3, 64, 96, DType::kQ8_0, false, 1e-2},
  };
  for (const Case& c : cases) {
    auto p = std::make_shared<MoeParams>();
    p->n_experts = c.E;
    p->top_k = c.top_k;
    p->ffn_dim = int(c.I);
    p->norm_topk_prob = c.top_k > 1;
    Tensor x = RandTensor("x", DType::kF32, {c.R, c.D}, 150);
    Tensor gate = RandTensor("gate", DType::kF32, {c.E, c.D}, 151, 1.0f);
    if (c.one_expert) {
      // x's signs alternate with k and gate[E/2] = ±50 with the same signs: its logit is
      // 50 Σ|x| for every row, far above the other experts' logits.
      float* gw = static_cast<float*>(MutableData(gate)) + (c.E / 2) * c.D;
      for (int64_t r = 0; r < c.R; ++r) {
        float* xr = static_cast<float*>(MutableData(x)) + r * c.D;
        for (int64_t k = 0; k < c.D; ++k) xr[k] = std::fabs(xr[k]) * (k % 2 ? 1.0f : -1.0f);
      }
      for (int64_t k = 0; k < c.D; ++k) gw[k] = k % 2 ? 50.0f : -50.0f;
    }
    std::vector<Tensor> ex;
    for (int e = 0; e < c.E; ++e) {
      for (int m = 0; m < 3; ++m) {
        const Shape sh = m == 2 ? Shape{c.D, c.I} : Shape{c.I, c.D};
        Tensor f = RandTensor("e" + std::to_string(e) + "." + std::to_string(m), DType::kF32, sh,
                              200 + uint64_t(3 * e + m));
        if (c.wt == DType::kBF16 || c.wt == DType::kF32) {
          ex.push_back(RandTensor(f.name, c.wt, sh, 200 + uint64_t(3 * e + m)));
          continue;
        }
        Tensor q = AllocTensor(f.name, c.wt, sh);
        Quantize(c.wt, f.as<float>(), MutableData(q), f.numel());
        ex.push_back(std::move(q));
      }
    }
    auto run = [&](int64_t r0, int64_t rows) {
      Tensor xs = AllocTensor("xs", DType::kF32, {rows, c.D});
      std::memcpy(MutableData(xs), x.as<float>() + r0 * c.D, size_t(rows * c.D) * 4);
      Graph g;
      const int xi = InputNode(g, xs, rows);
      Node n{Op::kMoE, "moe", {xi, g.AddWeight(gate), -1}, {rows, c.D}};
      for (auto& t : ex) n.src.push_back(g.AddWeight(t));
      n.params = MoeOpParams{*p};
      g.Add(n);
      return RunGraph(*be_, g, SeqBatch({int(rows)}, {0}));
    };
    const std::string what = "E=" + std::to_string(c.E) + " k=" + std::to_string(c.top_k) +
                             " R=" + std::to_string(c.R) + " " + std::string(Name(c.wt));
    const auto got = run(0, c.R);
    std::vector<const Tensor*> exp;
    for (auto& t : ex) exp.push_back(&t);
    std::vector<float> ref(size_t(c.R * c.D));
    ref::MoE(x.as<float>(), c.R, c.D, gate, nullptr, exp, *p, ref.data());
    EXPECT_LE(test::RelL2(got, ref), c.tol) << what;
    for (int64_t r = 0; r < c.R; r += std::max<int64_t>(1, c.R / 3)) {
      const auto alone = run(r, 1);
      const std::vector<float> in_batch(got.begin() + r * c.D, got.begin() + (r + 1) * c.D);
      if (GetParam() == "cpu") {
        EXPECT_EQ(alone, in_batch) << what << " row " << r;
      } else {
        EXPECT_LE(test::RelL2(alone, in_batch), c.tol) << what << " row " << r;
      }
    }
  }
}

// Experts of one projection that disagree in type or shape: one error naming the tensor (and
// the backend keeps working).
TEST_P(BackendOps, MoeExpertsThatDisagreeAreNamed) {
  const int64_t R = 2, D = 32, I = 16;
  const int E = 4;
  auto p = std::make_shared<MoeParams>();
  p->n_experts = E;
  p->top_k = 2;
  p->ffn_dim = int(I);
  Tensor x = RandTensor("x", DType::kF32, {R, D}, 161);
  Tensor gate = RandTensor("router", DType::kF32, {E, D}, 162);
  for (int bad : {0, 1}) {
    std::vector<Tensor> ex;
    for (int e = 0; e < E; ++e) {
      const bool odd = e == 2;
      ex.push_back(RandTensor("g" + std::to_string(e), DType::kF16, {I, D}, uint64_t(300 + e)));
      ex.push_back(RandTensor("u" + std::to_string(e), odd && bad == 0 ? DType::kF32 : DType::kF16,
                              {I, D}, uint64_t(310 + e)));
      ex.push_back(RandTensor("d" + std::to_string(e), DType::kF16,
                              odd && bad == 1 ? Shape{D, I / 2} : Shape{D, I}, uint64_t(320 + e)));
    }
    Graph g;
    const int xi = InputNode(g, x, R);
    Node n{Op::kMoE, "moe", {xi, g.AddWeight(gate), -1}, {R, D}};
    for (auto& t : ex) n.src.push_back(g.AddWeight(t));
    n.params = MoeOpParams{*p};
    g.Add(n);
    try {
      RunGraph(*be_, g, SeqBatch({int(R)}, {0}));
      ADD_FAILURE() << "no error for " << (bad == 0 ? "u2 of another type" : "d2 of another shape");
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(bad == 0 ? "'u2'" : "'d2'"), std::string::npos)
          << e.what();
    }
  }
}

TEST_P(BackendOps, SliceAndGetRows) {
  Tensor x = RandTensor("x", DType::kF32, {5, 11}, 90);
  Graph g;
  const int in = InputNode(g, x, 5);
  Node s{Op::kSlice, "slice", {in}, {5, 4}};
  s.params = SliceParams{6, 4};
  const int sl = g.Add(s);
  g.Add(Node{Op::kGetRows, "rows", {sl}, {2, 4}});
  Batch b;
  b.Add(0, 0, {0, 1, 2}, false);  // out row 2
  b.Add(1, 0, {3, 4}, false);     // out row 4
  b.Finalize();
  const auto got = RunGraph(*be_, g, b);
  const float* xv = x.as<float>();
  const std::vector<float> ref = {xv[2 * 11 + 6], xv[2 * 11 + 7], xv[2 * 11 + 8], xv[2 * 11 + 9],
                                  xv[4 * 11 + 6], xv[4 * 11 + 7], xv[4 * 11 + 8], xv[4 * 11 + 9]};
  EXPECT_EQ(got, ref);
}

// kInput: the batch's host rows, new on every forward of one graph over one cache (a GPU backend
// reuses the program it recorded for the first and must upload the rows each time), alone as the
// output (exact) and read by an RMSNorm (its reference), over odd rows and columns.
TEST_P(BackendOps, InputRowsNewEveryForward) {
  KvSpec spec;
  spec.n_layers = 1;
  spec.width[0] = 1;
  auto kv = be_->CreateKv(spec, 1, 64);
  for (int64_t R : {1, 5, 13}) {
    for (int64_t C : {1, 7, 129}) {
      Tensor nw = RandTensor("nw", DType::kF32, {C}, 2);
      Graph copy, norm;
      copy.Add(Node{Op::kInput, "rows", {}, {R, C}});
      Node nn{Op::kRmsNorm,
              "norm",
              {norm.Add(Node{Op::kInput, "rows", {}, {R, C}}), norm.AddWeight(nw)},
              {R, C}};
      nn.params = RmsNormParams{1e-6f};
      norm.Add(nn);
      Batch b = SeqBatch({int(R)}, {0});
      b.input_cols = C;
      for (int step = 0; step < 3; ++step) {
        SCOPED_TRACE("R=" + std::to_string(R) + " C=" + std::to_string(C) + " forward " +
                     std::to_string(step));
        const auto x = test::RandomFloats(size_t(R * C), uint64_t(1000 * R + 10 * C + step));
        b.input = x.data();
        EXPECT_EQ(RunGraph(*be_, copy, b, kv.get()), x);
        std::vector<float> ref(size_t(R * C));
        ref::RmsNorm(x.data(), nw.as<float>(), R, C, 1e-6f, ref.data());
        EXPECT_LE(test::RelL2(RunGraph(*be_, norm, b, kv.get()), ref), 2e-6);
      }
    }
  }
}

// A batch without the rows, or with rows of another width: one error naming the input node.
TEST_P(BackendOps, InputRowsMissingOrOfAnotherWidthAreNamed) {
  Graph g;
  g.Add(Node{Op::kInput, "mtp.hidden", {}, {3, 5}});
  Batch b = SeqBatch({3}, {0});
  const std::vector<float> x(15, 1.0f);
  auto expect_error = [&](const std::string& what) {
    try {
      RunGraph(*be_, g, b);
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  expect_error("graph input 'mtp.hidden' needs its rows: the batch carries no input");
  b.input = x.data();
  b.input_cols = 3;
  expect_error("graph input 'mtp.hidden' takes rows of 5 columns, the batch's input has 3");
  b.input_cols = 5;
  EXPECT_EQ(RunGraph(*be_, g, b), x);
}

std::vector<std::string> Backends() {
  std::vector<std::string> b = {"cpu"};
  if (VulkanBackendBuilt()) b.push_back("vulkan");
  return b;
}

INSTANTIATE_TEST_SUITE_P(All, BackendOps, ::testing::ValuesIn(Backends()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace es
