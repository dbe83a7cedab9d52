// The CPU backend's MLA attention in its two forms (backends/cpu/mla_form.h): sequences whose
// rows save multiply-adds by expanding K_nope and V from the latent cache through kv_b (src 5)
// take the non-absorbed form, the others (decode rows, short chunks of a long context) the
// absorbed one — both in one step, on a paged cache with scattered blocks, against the plain
// absorbed reference (ref::MlaAttentionRow) with WukT / Wuv cut from the same kv_b. Odd heads,
// odd row counts (partial blocks of 4 query rows), a chunk continuing a prefill, every CPU cache
// type, kv_b in f32, bf16 and q8_0, 1 to 3 threads.
#include <gtest/gtest.h>

#include <vector>

#include "backends/cpu/mla_form.h"
#include "backends/cpu/reference.h"
#include "edgeseek/internal/backends/backend.h"
#include "edgeseek/internal/core/half.h"
#include "edgeseek/internal/quant/blocks.h"
#include "test_util.h"

namespace es {
namespace {

// Activations enter through kEmbed over an f32 table whose rows are the values (row t of the
// batch reads table row t: the batch's token ids are 0..T-1).
int InputNode(Graph& g, const Tensor& table, int64_t rows) {
  Node n;
  n.op = Op::kEmbed;
  n.name = "input";
  n.src = {g.AddWeight(table)};
  n.shape = {rows, table.cols()};
  return g.Add(std::move(n));
}

Tensor F32Tensor(const std::string& name, Shape shape, const std::vector<float>& v) {
  Tensor t = AllocTensor(name, DType::kF32, std::move(shape));
  std::copy(v.begin(), v.end(), static_cast<float*>(MutableData(t)));
  return t;
}

// kv_b [rows, cols] of type `type` from f32 values; *exact: the values it holds, as f32.
Tensor MakeKvB(DType type, int64_t rows, int64_t cols, const std::vector<float>& v,
               std::vector<float>* exact) {
  Tensor t = AllocTensor("kv_b", type, {rows, cols});
  exact->assign(v.size(), 0.0f);
  for (int64_t i = 0; i < rows; ++i) {
    const float* src = v.data() + i * cols;
    float* ex = exact->data() + i * cols;
    uint8_t* dst = static_cast<uint8_t*>(MutableData(t)) + size_t(i) * t.row_bytes();
    if (type == DType::kF32) {
      std::copy(src, src + cols, reinterpret_cast<float*>(dst));
      std::copy(src, src + cols, ex);
    } else if (type == DType::kBF16) {
      for (int64_t j = 0; j < cols; ++j) {
        reinterpret_cast<uint16_t*>(dst)[j] = F32ToBF16(src[j]);
        ex[j] = BF16ToF32(F32ToBF16(src[j]));
      }
    } else {
      Quantize(type, src, dst, cols);
      Dequantize(type, dst, ex, cols);
    }
  }
  return t;
}

TEST(CpuMla, FormsMatchTheAbsorbedReference) {
  const int64_t H = 3, dn = 32, dr = 32, dv = 16, r = 96;  // dn: whole 32-blocks (Q8_0 WukT)
  // Pass 0: a prefill of ragged sequences (5, 19 rows expand; 1 row stays absorbed). Pass 1: a
  // 20-row chunk continuing slot 0's prefill (expands), a decode row and a 3-row chunk
  // (absorbed): both forms in one step, the absorbed rows scattered among the expanded ones.
  const std::vector<std::vector<int>> lens = {{5, 19, 1}, {20, 1, 3}};
  const std::vector<std::vector<bool>> expands = {{true, true, false}, {true, false, false}};
  {
    std::vector<int> pos = {0, 0, 0};
    for (size_t pass = 0; pass < 2; ++pass) {
      for (size_t s = 0; s < 3; ++s) {
        EXPECT_EQ(cpu::MlaSeqExpands(H, dn, dr, dv, r, pos[s], lens[pass][s]), expands[pass][s])
            << "pass " << pass << " slot " << s;
        pos[s] += lens[pass][s];
      }
    }
  }
  for (DType kvb_type : {DType::kF32, DType::kBF16, DType::kQ8_0}) {
    std::vector<float> kvb_f32;
    const Tensor kvb = MakeKvB(kvb_type, H * (dn + dv), r,
                               test::RandomFloats(size_t(H * (dn + dv) * r), 50, 0.3f), &kvb_f32);
    // The absorbed pair cut from kv_b's values: WukT [H r, dn] (WukT[h r + j, i] = kv_b[h (dn +
    // dv) + i, j]), Wuv [H dv, r] (Wuv[h dv + i] = kv_b[h (dn + dv) + dn + i]).
    std::vector<float> wukt_v(size_t(H * r * dn)), wuv_v(size_t(H * dv * r));
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t j = 0; j < r; ++j)
        for (int64_t i = 0; i < dn; ++i)
          wukt_v[size_t((h * r + j) * dn + i)] = kvb_f32[size_t((h * (dn + dv) + i) * r + j)];
      for (int64_t i = 0; i < dv; ++i)
        for (int64_t j = 0; j < r; ++j)
          wuv_v[size_t((h * dv + i) * r + j)] = kvb_f32[size_t((h * (dn + dv) + dn + i) * r + j)];
    }
    const Tensor wukt = F32Tensor("wukt", {H * r, dn}, wukt_v);
    const Tensor wuv = F32Tensor("wuv", {H * dv, r}, wuv_v);
    // Tolerances. f32 / bf16 kv_b: both forms exact up to summation order (~2e-7 measured). q8_0
    // kv_b: the non-absorbed form's K_nope and V and the absorbed form's Wuv read kv_b's blocks
    // with int16 activations (per 32, d = absmax / 32512; ~2e-5); the absorbed form's WukT is a
    // Q8_0 copy whose blocks run along dn, re-rounding kv_b's values as a GGUF's wk_b would
    // (~3e-3 measured).
    const double tol = kvb_type != DType::kQ8_0 ? 2e-6 : 1e-4, tol_absorbed_q8 = 6e-3;
    for (DType kt : {DType::kF32, DType::kF16, DType::kQ8_0, DType::kQ4_0}) {
      for (int threads : {1, 3}) {
        BackendOptions o;
        o.threads = threads;
        auto be = CreateBackend("cpu", o);
        KvSpec spec;
        spec.n_layers = 1;
        spec.dtype = kt;
        spec.width[0] = int(r);
        spec.width[1] = int(dr);
        auto kv = be->CreatePagedKv(spec, 3, 48, 9);
        for (int s = 0; s < 3; ++s) {
          const int32_t t[3] = {int32_t(8 - s), int32_t(5 - s), int32_t(2 - s)};
          kv->SetBlockTable(s, t, 3);
        }
        const std::string tag = "kv_b " + std::string(Name(kvb_type)) + ", cache " +
                                std::string(Name(kt)) + ", threads " + std::to_string(threads);
        std::vector<std::vector<std::vector<float>>> cs(3), ps(3);  // per slot: stored rows
        std::vector<int> pos = {0, 0, 0};
        for (size_t pass = 0; pass < 2; ++pass) {
          Batch b;
          int row = 0;
          for (int s = 0; s < 3; ++s) {
            std::vector<int32_t> toks(size_t(lens[pass][size_t(s)]));
            for (auto& t : toks) t = row++;
            b.Add(s, pos[size_t(s)], toks, true);
          }
          b.Finalize();
          const int64_t T = b.n_tokens(), qw = H * (dn + dr);
          const Tensor q = F32Tensor("q", {T, qw}, test::RandomFloats(size_t(T * qw), 60 + pass));
          const Tensor c = F32Tensor("c", {T, r}, test::RandomFloats(size_t(T * r), 70 + pass));
          const Tensor kpe =
              F32Tensor("kpe", {T, dr}, test::RandomFloats(size_t(T * dr), 80 + pass));
          Graph g;
          const int qi = InputNode(g, q, T), ci = InputNode(g, c, T), pi = InputNode(g, kpe, T);
          Node s0{Op::kKvStore, "c", {ci}, {T, r}};
          s0.layer = 0;
          s0.params = KvStoreParams{0};
          Node s1{Op::kKvStore, "pe", {pi}, {T, dr}};
          s1.layer = 0;
          s1.params = KvStoreParams{1};
          const int a0 = g.Add(s0), a1 = g.Add(s1);
          Node m{Op::kMlaAttention,
                 "mla",
                 {qi, a0, a1, g.AddWeight(wukt), g.AddWeight(wuv), g.AddWeight(kvb)},
                 {T, H * dv}};
          m.layer = 0;
          m.params = MlaParams{H, dn, dr, dv, r, 0.2f};
          g.Add(m);
          // As the runner does: a block-quantized kv_b gets its WukT read as a Q8_0 copy.
          be->PrepareGraph(g);
          std::vector<float> got(size_t(T * H * dv));
          be->Compute(g, b, *kv, got.data());
          // The reference over what the cache holds (its type's rounding).
          for (int64_t t = 0; t < T; ++t) {
            const int s = b.row_seq[size_t(t)];
            std::vector<float> cr(c.as<float>() + t * r, c.as<float>() + (t + 1) * r);
            std::vector<float> pr(kpe.as<float>() + t * dr, kpe.as<float>() + (t + 1) * dr);
            for (auto* v : {&cr, &pr}) {
              std::vector<uint8_t> raw(RowBytes(kt, int64_t(v->size())));
              if (kt == DType::kF32) continue;
              if (kt == DType::kF16) {
                for (float& x : *v) x = F16ToF32(F32ToF16(x));
              } else {
                Quantize(kt, v->data(), raw.data(), int64_t(v->size()));
                Dequantize(kt, raw.data(), v->data(), int64_t(v->size()));
              }
            }
            cs[size_t(s)].push_back(cr);
            ps[size_t(s)].push_back(pr);
          }
          std::vector<float> ref(size_t(T * H * dv));
          for (int64_t t = 0; t < T; ++t) {
            const int s = b.row_seq[size_t(t)];
            const int64_t n_ctx = b.positions[size_t(t)] + 1;
            std::vector<float> C, P;
            for (int64_t j = 0; j < n_ctx; ++j) {
              C.insert(C.end(), cs[size_t(s)][size_t(j)].begin(), cs[size_t(s)][size_t(j)].end());
              P.insert(P.end(), ps[size_t(s)][size_t(j)].begin(), ps[size_t(s)][size_t(j)].end());
            }
            ref::MlaAttentionRow(q.as<float>() + t * qw, C.data(), P.data(), n_ctx, H, dn, dr, dv,
                                 r, wukt, wuv, m.Params<MlaParams>().scale,
                                 &ref[size_t(t * H * dv)]);
          }
          // Per sequence, so that a wrong row in a short one is not averaged away.
          for (const BatchSeq& s : b.seqs) {
            const size_t o = size_t(s.row0 * H * dv), len = size_t(s.n_tokens * H * dv);
            EXPECT_LE(
                test::RelL2(std::vector<float>(got.begin() + o, got.begin() + o + len),
                            std::vector<float>(ref.begin() + o, ref.begin() + o + len)),
                kvb_type == DType::kQ8_0 && !expands[pass][size_t(s.slot)] ? tol_absorbed_q8 : tol)
                << tag << ", pass " << pass << ", slot " << s.slot
                << (expands[pass][size_t(s.slot)] ? " (non-absorbed)" : " (absorbed)");
          }
          for (size_t s = 0; s < 3; ++s) pos[s] += lens[pass][s];
        }
      }
    }
  }
}

// The switch on V2-Lite's dimensions (16 heads, dn 128, dr 64, dv 128, r 512): decode rows and
// short chunks of a long context stay absorbed; prefills expand; a context whose expanded keys
// and values would pass kMlaExpandMaxBytes stays absorbed.
TEST(CpuMla, FormByMultiplyAdds) {
  const int64_t H = 16, dn = 128, dr = 64, dv = 128, r = 512;
  for (int64_t pos : {0, 1, 17, 4095}) EXPECT_FALSE(cpu::MlaSeqExpands(H, dn, dr, dv, r, pos, 1));
  EXPECT_TRUE(cpu::MlaSeqExpands(H, dn, dr, dv, r, 0, 2));
  EXPECT_TRUE(cpu::MlaSeqExpands(H, dn, dr, dv, r, 0, 64));
  EXPECT_TRUE(cpu::MlaSeqExpands(H, dn, dr, dv, r, 0, 512));
  EXPECT_TRUE(cpu::MlaSeqExpands(H, dn, dr, dv, r, 512, 512));
  EXPECT_FALSE(cpu::MlaSeqExpands(H, dn, dr, dv, r, 4000, 4));
  const int64_t max_keys = cpu::kMlaExpandMaxBytes / (H * (dn + dv) * 4);
  EXPECT_TRUE(cpu::MlaSeqExpands(H, dn, dr, dv, r, 0, max_keys));
  EXPECT_FALSE(cpu::MlaSeqExpands(H, dn, dr, dv, r, 0, max_keys + 1));
}

}  // namespace
}  // namespace es
