// kMatMul: y = x Wᵀ (+ bias). Steps of up to kGemvMaxRows rows take the GEMV kernel, whose
// workgroups each own a few output columns and stream the weight rows once for all the rows;
// more rows take the tiled GEMM. Weights split into row chunks dispatch once per chunk (output
// column offset n0).
#include <array>
#include <cstdlib>
#include <initializer_list>

#include "ops/ops.h"

namespace es::vk {
namespace {
struct GemvPush {
  uint32_t K, N, R, n0, x_rs, x_hs, x_off, y_rs, y_hs, y_off, has_bias, epi, norm;
  float eps;
};
struct GemmPush {
  uint32_t K, N, R, n0, y_rs, has_bias;
};
struct GemmCmPush {  // matmul_gemm_cm.comp: ks = the K slice of a split (0: whole K)
  uint32_t K, N, R, n0, y_rs, has_bias, ks;
};
constexpr int64_t kGemvFewOutputs = 256;
// ES_VK_GEMV_IDOT_LOCAL=2: x rows longer than this are quantized by a dispatch of their own.
constexpr int64_t kIdotLocalMaxK = 8192;
// ES_VK_GEMV_IDOT_LOCAL=3: GEMVs of more outputs than this read x quantized by a dispatch of its
// own: their workgroups (the 7B's lm_head: 152,064 outputs, 9,504 workgroups of 16) would each
// quantize the whole row again, as the dual GEMVs' (18,944 outputs each) did before mode 3 took
// their x apart (H200, 7B Q4_0 tg128 282/287 t/s against 264/273). Not timed for the lm_head
// alone; `bench --profile` with ES_VK_GEMV_IDOT_LOCAL=2 shows it on the local path.
constexpr int64_t kIdotLocalMaxN = 16384;

// The GEMV's specialization constants (matmul_gemv.comp ids 0..6): workgroup size, invocation
// groups per workgroup, outputs per group (QR), slices per step (SPL), shared partial-sum slots
// (NSG), int-to-float trick (MAGIC), batch rows per workgroup (RB: 1, 2, 4 or 8, the smallest
// covering R). Block-quantized weights take the knobs below (read when a graph is recorded, so
// one process can compare them); the dense types keep GemvFor's geometry with QR = SPL = 1.
//   ES_VK_GEMV_QR   0|1|2|4|8    adjacent output rows per invocation group, sharing each x load
//                                (default 4; 0 says the default)
//   ES_VK_GEMV_TPR  4..256       invocations per group, a power of two (default 128); below the
//                                device's largest subgroup size only where it has clustered
//                                subgroup ops (the "_c" shader variants: a group is one cluster of
//                                a subgroup, summed by subgroupClusteredAdd), else raised to it
//   ES_VK_GEMV_SPL  1|2|4        consecutive 8-element slices per invocation per step (default 1:
//                                4 invocations per 32-block, neighbours read neighbouring words)
//   ES_VK_GEMV_MAGIC 0|1         levels to floats by the 0x4B000000 bit trick (default 1)
// The integer-dot GEMV (Q4_0 and the K-quants over x quantized to int8, Q8_0 to int16; UseIdotGemv;
// the routed experts' GEMVs every block type, MoeGemvFor) has its own knobs:
//   ES_VK_GEMV_IDOT      0|1     1: Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, the experts' block types; 0: none
//                                (default: each where the device has 4x8-bit dot products in
//                                hardware, signed and, for Q8_0's int16 x, mixed-signedness;
//                                set on VulkanTuning::knobs too)
//   ES_VK_GEMV_IDOT_TPR  4..256  invocations per group (default 64; below the subgroup size as
//                                ES_VK_GEMV_TPR: 4, 8 or 16 let a workgroup cover 64, 32 or 16
//                                groups, its x quantized once for all of them)
//   ES_VK_GEMV_IDOT_QR   0|1|2|4|8 adjacent output rows per group (0: the default, 4, halved
//                                over x quantized apart while under ES_VK_GEMV_MIN_GROUPS groups)
//   ES_VK_GEMV_IDOT_WG   128|256 invocations per workgroup (default 256; at least TPR): 16 rows
//                                a workgroup at the defaults (H200, 7B Q4_0 tg128: 237 t/s; 4
//                                rows 161, 32 rows 215; float GEMV 187)
//   ES_VK_GEMV_IDOT_UNROLL 1|2|4 units of each row an invocation loads before using them
//                                (default 1, Q8_0 one-row 2; the experts' GEMVs choose their own,
//                                MoeGemvFor)
//   ES_VK_GEMV_MIN_GROUPS 0..2048 with x quantized apart: workgroups the default QR keeps at
//                                least; it halves from 4 (to 1 at most) while a GEMV of N
//                                outputs would have fewer (default 512; H200, 7B down_proj: 4
//                                rows a workgroup, 896 workgroups, 2.46 TB/s against 1.53 at 16)
//   ES_VK_GEMV_IDOT_LOCAL 0..3   1: each workgroup quantizes the x it reads into shared memory;
//                                0: one quantize_q8 dispatch per input, shared by the matmuls
//                                reading it (one more dispatch, no repeated work); 2: 1 for rows
//                                up to kIdotLocalMaxK, 0 for longer ones (the 7B's down_proj,
//                                18944 wide: H200 tg128 7B Q4_0 276-280 t/s against 268-271 with
//                                1 and 271-273 with 0, same job); 3 (default): as 2, and 0 for
//                                the x of dual (gate/up) GEMVs (7B Q4_0 282/287 against 264/273
//                                with 2, Q8_0 229/227 against 217/219, 1.5B Q4_0 409/415 against
//                                410/405, same job), and 0 for steps of 2-8 rows (H200, `bench
//                                -b`, one job: 7B Q4_0 4 rows 776 t/s against 541 with 3, 8 rows
//                                839 against 548, 1 row 364 / 357; V2-Lite 8 rows 990 / 771): each
//                                workgroup quantizing every row of x costs more than a dispatch;
//                                and 0 for GEMVs of more than kIdotLocalMaxN outputs (lm_heads)
struct GemvSpec {
  uint32_t wg, rows, qr, spl, nsg, magic, rb, kc = 32, un = 1;
  bool cluster = false;  // TPR = wg / rows below the largest subgroup size: the "_c" variants
  std::vector<uint32_t> Spec() const { return {wg, rows, qr, spl, nsg, magic, rb, kc, un}; }
  uint32_t Outputs() const { return rows * qr; }               // outputs per workgroup
  const char* Variant() const { return cluster ? "_c" : ""; }  // shader name suffix
};
// R: the batch rows (RB: the smallest of 1, 2, 4, 8 covering min(R, 8)). idot: the
// integer-dot variant (its own knobs and defaults: a 3584-wide Q4_0 row is only 112 units).
// N: the outputs; unless ES_VK_GEMV_IDOT_QR is set to 1..8, the integer-dot GEMV over x quantized
// by a dispatch of its own (xq) halves its QR (from 4) while that leaves fewer than
// ES_VK_GEMV_MIN_GROUPS workgroups. (With x quantized in each workgroup, more workgroups repeat
// that work: H200, 7B Q4_0 tg128, QR 1 for the 3584-output GEMVs: 199-203 t/s against 257-263.)
// Float rows at least this long take 4 outputs an invocation group (GemvSpecFor).
constexpr int64_t kGemvQuadRowsMinK = 2048;
// K: the row length where known (0: not), for the float GEMV's outputs a group.
GemvSpec GemvSpecFor(const Device& dev, DType wt, bool vec, int64_t R, int64_t N, bool idot = false,
                     bool xq = false, int64_t K = 0) {
  const GemvShape gs = GemvFor(dev);
  const uint32_t min_sg = std::max<uint32_t>(dev.info().min_subgroup_size, 4);
  const uint32_t rb = R <= 1 ? 1 : R <= 2 ? 2 : R <= 4 ? 4 : 8;
  if (!(vec && IsQuantized(wt))) {
    // Few outputs (a MoE router's 64): one output a workgroup, so they spread over more of them.
    // H200, V2-Lite Q4_0 decode after 4,096 tokens, one job: 232.0 / 230.9 t/s against 224.1 /
    // 226.7 with 4 outputs a workgroup (from an empty cache the same within noise).
    const bool few = N <= kGemvFewOutputs;
    GemvSpec s{gs.wg, few ? 1u : gs.rows, 1, 1, gs.wg / min_sg, 1, rb};
    // Rows of at least kGemvQuadRowsMinK: 4 outputs an invocation group of the whole workgroup
    // (matmul_gemv.comp AccumVecRows: each x vec4 read once for the 4 rows, their 4 weight loads
    // in flight together). H200, session 27, one job: 7B f16 tg128 191.6 / 191.6 t/s against
    // 161.7 / 164.2 with 32 lanes an output; V2-Lite f16's 2,048-wide GEMVs 15-22% faster a
    // dispatch (q 1,228 GB/s against 1,045, the shared experts' dual 1,732 against 1,352),
    // lm_head 4,032 GB/s against 2,307. Shorter rows keep 32 lanes an output: MLA's absorbed
    // WukT (K = 128) and Wuv (K = 512) took 7.4 us a dispatch against 6.5, the float experts'
    // down GEMV (K = 1,408, MoeGemvFor) 22.3 against 20.9.
    if (vec && !few && K >= kGemvQuadRowsMinK) {
      s.qr = 4;
      s.rows = std::max<uint32_t>(1, gs.rows / 4);
    }
    return s;
  }
  const uint32_t max_sg = std::max<uint32_t>(dev.info().max_subgroup_size, 1);
  const Tuning& tune = dev.tuning();
  const uint32_t knob = tune.Uint(idot ? Knob::kGemvIdotTpr : Knob::kGemvTpr);
  // Below the subgroup size a group is a cluster of its subgroup (subgroupClusteredAdd); without
  // clustered ops, at least the largest subgroup size (the shared step needs whole subgroups).
  const uint32_t tpr = dev.info().subgroup_clustered ? knob : std::max(knob, max_sg);
  const uint32_t wg = std::max<uint32_t>(idot ? tune.Uint(Knob::kGemvIdotWg) : 128, tpr);
  // QR: 0 (or unset) is the default, 4, which the rule below may lower; any other value is kept.
  const uint32_t qr = tune.Uint(idot ? Knob::kGemvIdotQr : Knob::kGemvQr);
  GemvSpec spec{wg,          wg / tpr,
                qr ? qr : 4, tune.Uint(Knob::kGemvSpl),
                wg / min_sg, tune.On(Knob::kGemvMagic) ? 1u : 0u,
                rb};
  spec.cluster = tpr < max_sg;
  if (idot) {
    // One unit of each row loaded ahead of its sums, but Q8_0's one-row GEMVs two. H100, session
    // 33, one job (bench -b 1,5): 7B Q4_0 329.0 / 328.2 t/s against 300.2 / 313.1 with two, its
    // 5-row step 6.2 ms against 7.2-7.3; 7B Q4_K_M 269.5 against 177.5 (that run noisy), 5 rows
    // 10.0 ms against 15.0; V2-Lite Q4_0 340.7 against 338.9, 5.6 against 5.9 ms; 1.5B Q4_0 5
    // rows 3.2 against 3.5 ms; 7B Q8_0 one row 218.2 against 225.0 (so two there), 5 rows 8.5
    // against 8.8 ms. Q5_K and Q6_K were at one already (twice the words of a unit in flight).
    const bool two = wt == DType::kQ8_0 && rb == 1;
    spec.un = tune.IsAuto(Knob::kGemvIdotUnroll) ? (two ? 2 : 1) : tune.Uint(Knob::kGemvIdotUnroll);
    if (xq && qr == 0) {
      const uint32_t min_groups = tune.Uint(Knob::kGemvMinGroups);
      while (spec.qr > 1 && (N + spec.Outputs() - 1) / spec.Outputs() < min_groups) spec.qr /= 2;
    }
  }
  return spec;
}
// Bytes of one quantized x element for weights of type wt (quant_x.glsl: int16 for Q8_0).
uint64_t XLevelBytes(DType wt) { return wt == DType::kQ8_0 ? 2 : 1; }
// The in-workgroup x quantization's step (spec constant KC): K where rb rows of levels plus
// their scales (a (d, d·Σq) pair, 8 bytes, per 32: 1.25 bytes an element for int8, 2.25 for the
// int16 of Q8_0) fit 24 KiB of shared memory, else the most weight blocks (32 elements; the
// K-quants' 256) that do.
uint32_t IdotLocalStep(int64_t K, uint32_t rb, DType wt) {
  const int64_t quarter_bytes = 4 * int64_t(XLevelBytes(wt)) + 1;  // per element, in quarters
  const int64_t unit = BlockElems(wt) == 256 ? 256 : 32;           // whole blocks (K-quants: 256)
  const int64_t fit = 24576 * 4 / (int64_t(rb) * quarter_bytes) / unit * unit;
  return uint32_t(std::min<int64_t>(K, fit));
}
uint64_t Align256(uint64_t b) { return (b + 255) / 256 * 256; }
uint32_t GemvGroups(int64_t N, const GemvSpec& gs) {
  return uint32_t((N + gs.Outputs() - 1) / gs.Outputs());
}
uint32_t GemvRowGroups(int64_t R, const GemvSpec& gs) { return uint32_t((R + gs.rb - 1) / gs.rb); }
// The GEMV's grid: output groups in x; row groups of RB rows interleaved in x where that stays
// within 65,535 workgroups (matmul_gemv.comp: a weight row's reads by the row groups come close
// together, from the cache after the first), else in z.
void GemvGrid(Dispatch& d, int64_t N, int64_t R, const GemvSpec& gs) {
  const uint64_t og = GemvGroups(N, gs), rg = GemvRowGroups(R, gs);
  const bool inter = rg > 1 && og * rg <= 65535;
  d.groups[0] = uint32_t(inter ? og * rg : og);
  d.groups[2] = uint32_t(inter ? 1 : rg);
}
constexpr uint32_t kGemmTile = 128;  // BM = BN of matmul_gemm.comp, BN of matmul_gemm_cm.comp
// 128-row tiles from this many (H200, pp512: 7B with every projection at 128 rows 5.4k t/s, with
// q/o/down at 64 rows 4.8k; 1.5B within 4% either way).
constexpr uint64_t kCoopmatBigTiles = 100;
// The coopmat GEMM's tile rows for an R x N product (BM 128 unless that leaves too few tiles).
uint32_t CoopmatBm(const Device& dev, int64_t R, int64_t N) {
  if (const uint32_t bm = dev.tuning().Uint(Knob::kGemmBm)) return bm;
  const uint64_t tiles128 = uint64_t((R + 127) / 128) * uint64_t((N + 127) / 128);
  return tiles128 >= kCoopmatBigTiles ? 128 : 64;
}
// Split-K of the coopmat GEMM (matmul_gemm_cm.comp ks): slices of K (a power of two, at most
// kCmMaxSlices, each at least kCmMinSliceSteps steps of 32) while the tiles times the slices stay
// within kCmSplitPerSm workgroups per multiprocessor (the count from VK_NV_shader_sm_builtins;
// unknown: no split; ES_VK_GEMM_SPLITK=0: none, for tests). Returns the slice length in elements
// of K (0: no split) and the slice count in *S. H200, 7B Q4_0 `bench -b N`, one job, against no
// split / 4 a multiprocessor: 9 rows 452 / 267 / 429 t/s, 32 rows 1,462 / 892 / 1,407, 64 rows
// 2,611 / 1,629 / 2,527 (V2-Lite: the same within 1%).
constexpr uint64_t kCmMaxSlices = 16, kCmMinSliceSteps = 4, kCmSplitPerSm = 8;
uint32_t CoopmatSliceK(const Device& dev, int64_t R, int64_t N, int64_t K, uint32_t* S) {
  *S = 1;
  const uint64_t per_sm = dev.tuning().On(Knob::kGemmSplitk) ? kCmSplitPerSm : 0,
                 sms = dev.coopmat2().sms;
  if (!per_sm || !sms) return 0;
  const uint32_t bm = CoopmatBm(dev, R, N);
  const uint64_t tiles = uint64_t((R + bm - 1) / bm) * uint64_t((N + kGemmTile - 1) / kGemmTile);
  const uint64_t steps = uint64_t((K + 31) / 32);
  uint64_t s = 1;
  while (s * 2 <= kCmMaxSlices && tiles * s * 2 <= per_sm * sms &&
         steps / (s * 2) >= kCmMinSliceSteps)
    s *= 2;
  if (s == 1) return 0;
  const uint64_t per = (steps + s - 1) / s;  // steps a slice
  *S = uint32_t((steps + per - 1) / per);
  return *S > 1 ? uint32_t(per * 32) : 0;
}
}  // namespace

namespace {
// Whether weights of type wt take the integer-dot GEMVs at all: ES_VK_GEMV_IDOT (or
// VulkanTuning::knobs) 1 / 0, or, auto, where the hardware does the dot products (Q8_0,
// whose x is int16: the mixed-signedness ones too).
bool IdotOn(const Device& dev, DType wt) {
  const Tuning& tune = dev.tuning();
  const bool on =
      tune.IsAuto(Knob::kGemvIdot)
          ? (wt != DType::kQ8_0 ? dev.info().int_dot_accel : dev.info().int_dot_mixed_accel)
          : tune.Uint(Knob::kGemvIdot) == 1;
  ES_CHECK(!on || dev.info().int_dot,
           "vulkan: the integer-dot GEMV is asked for (ES_VK_GEMV_IDOT=1), but ", dev.info().name,
           " has no shaderIntegerDotProduct");
  return on;
}
}  // namespace

namespace {
// A dense Q4_K / Q6_K GEMV on integer dots (matmul_gemv.comp IDOT_K / IDOT_K6): `knob` 0 / 1,
// auto where it has kIdotKQuantMinRows outputs or more. Q4_K is right on the H200: the fused FFN
// test that held it back in sessions 14-16 missed by one int8 level of h, the down GEMV's x,
// flipping at a rounding boundary between the GPU's f32 sums and the reference's f64 ones
// (session 17's per-output dump; the test allows such flips, ExplainLevelFlips). Session 30:
// every Q4_K GEMV on integer dots took the 7B Q4_K_M's tg128 from 195.2 / 195.7 t/s to 223.8 /
// 223.0 (H100; its 18,944-output dual GEMV 2,475 -> 1,535 us a step) but V2-Lite Q4_K_M's from
// 339.8 / 346.2 down to 298.5 / 299.6 (H200; its Q4_K GEMVs have 576-3,072 outputs: x quantized
// in each of their few workgroups, or a dispatch of its own, costs more than the dots save).
// Q6_K: the 7B's lm_head 470 -> 189 us a step (152,064 outputs), its 512-output attn_v 372 ->
// 441 (too few workgroups). Steps of 2-8 rows take the dots at every output count (x is
// quantized apart for them anyway). H100, session 33, one job, `-b 1,5` with one unit ahead
// (c1955b0): 7B Q4_K_M 5-row step 9.3 ms against 10.7 (Q4_K alone 10.2), V2-Lite Q4_K_M 6.9 ms
// against 8.3; the one-row figures kept the output rule (V2-Lite 327.1 t/s with every Q4_K on
// the dots against 336.1 / 339.3, 7B 258.9 with Q4_K and Q6_K against 268.9 / 268.0).
bool KQuantIdot(const Device& dev, Knob knob, int64_t R, int64_t N) {
  const Tuning& tune = dev.tuning();
  return tune.IsAuto(knob) ? (R > 1 || N >= kIdotKQuantMinRows) : tune.Uint(knob) == 1;
}
}  // namespace

bool UseIdotGemv(const Device& dev, int64_t R, int64_t K, int64_t N, DType wt) {
  const bool k256 = K % 256 == 0;
  const bool typed = wt == DType::kQ8_0 || wt == DType::kQ4_0 || (wt == DType::kQ5_K && k256) ||
                     (wt == DType::kQ4_K && k256 && KQuantIdot(dev, Knob::kGemvIdotQ4K, R, N)) ||
                     (wt == DType::kQ6_K && k256 && KQuantIdot(dev, Knob::kGemvIdotQ6K, R, N));
  if (R > kGemvMaxRows || K % 32 != 0 || !typed) return false;
  return IdotOn(dev, wt);
}

bool IdotQuantizeOnce(const Device& dev, int64_t R, int64_t K, int64_t N, bool dual) {
  const uint32_t mode = dev.tuning().Uint(Knob::kGemvIdotLocal);
  return mode == 0 || (mode == 3 && (R > 1 || dual || N > kIdotLocalMaxN)) ||
         (mode >= 2 && K > kIdotLocalMaxK);
}

uint64_t QuantXBytes(int64_t R, int64_t K, DType wt) {
  return Align256(uint64_t(R * K) * XLevelBytes(wt)) + uint64_t(R * K / 32) * 8;
}

QuantX QuantXRanges(BufRange xq, int64_t R, int64_t K, DType wt) {
  const uint64_t qb = Align256(uint64_t(R * K) * XLevelBytes(wt));
  ES_ASSERT(xq.size >= QuantXBytes(R, K, wt));
  return {BufRange{xq.buffer, xq.offset, uint64_t(R * K) * XLevelBytes(wt)},
          BufRange{xq.buffer, xq.offset + qb, uint64_t(R * K / 32) * 8}, XLevelBytes(wt) == 2};
}

void RecordQuantizeX(OpContext& c, BufRange x, int64_t R, int64_t K, const NormFold* norm,
                     const QuantX& xq) {
  ES_ASSERT(K % 32 == 0);
  Dispatch& d = c.Add(xq.wide ? "quantize_q8_i16" : "quantize_q8", {1, 1, 1, 1});
  d.bindings = {{x}, {norm ? norm->weight : x}, {xq.q}, {xq.ds}};
  d.writes = {2, 3};
  struct {
    uint32_t K, x_rs, norm;
    float eps;
  } push{uint32_t(K), uint32_t(K), norm ? 1u : 0u, norm ? norm->eps : 0.0f};
  d.Push(push);
  d.groups[0] = uint32_t(R);
  d.groups[1] =
      norm ? 1u : uint32_t((K / 32 + 127) / 128);  // quantize_q8.comp: 128 blocks a workgroup
}

// Quantized weights of a prefill (more than kDecodeMaxRows rows) take the workgroup-scope GEMM
// through an f16 copy of each chunk in the matmul's scratch (dequant_f16.comp) when the whole
// weight's copy stays within this many bytes (every projection of the 7B and 14B shapes;
// ES_VK_CM2_QUANT=0: never). Batched decode steps take the coopmat GEMM, which dequantizes in
// its tile loader: H200, 7B Q4_0 `bench -b N`, one job: 32 rows 1,035 t/s against 879 through
// the copy, 64 rows 1,897 against 1,698 (V2-Lite the same within 2%); pp512 8,445 against 7,116.
constexpr uint64_t kCm2QuantMaxBytes = 256ull << 20;

bool UseCoopmat2(const Device& dev, int64_t R, int64_t K, DType wt, int64_t N) {
  if (!dev.f16_math() || dev.coopmat2().bm == 0 || K % 8 != 0) return false;
  if (wt == DType::kF16) return true;
  // Not I4G (no shaders) nor I4F (its f32 scales are not exact in the f16 copy).
  return IsQuantized(wt) && wt != DType::kI4G && wt != DType::kI4F && !dev.coopmat2().x32 &&
         R > kDecodeMaxRows && uint64_t(N) * uint64_t(K) * 2 <= kCm2QuantMaxBytes &&
         dev.tuning().On(Knob::kCm2Quant);
}

bool UseCoopmat(const Device& dev, int64_t K, DType wt) {
  const bool typed = wt == DType::kF32 || wt == DType::kF16 || wt == DType::kBF16 ||
                     (IsQuantized(wt) && wt != DType::kI4G &&
                      wt != DType::kI4F);  // matmul_gemm_cm.comp's types (f16 tiles)
  return typed && dev.f16_math() && dev.coopmat_n() != 0 && K % 8 == 0;
}

namespace {
// Q4_0 / Q8_0 weights of steps of 9-256 rows (batched decode, and continuous batching's mixed
// steps: the engine's 256-token budget of decode rows and prefill chunks): the workgroup-scope
// GEMM with the weights decoded in its tile loads (matmul_gemm_cm2.comp "_q4_0" / "_q8_0"), x
// converted to f16 once (rows padded to whole tiles), no f16 copy of the weights. H200, 7B Q4_0
// `bench -b N`, one job (session 19), per step against the coopmat GEMM that dequantizes in its
// own loader: 9 rows 16.4 ms against 20.1, 16 rows 16.8 against 20.6, 32 rows 13.4-14.0 against
// 18.3 (session 18, with at most two workgroups a multiprocessor: 18.1), 64 rows 19.0 against
// 24.5. Larger prefill steps keep the GEMM over an f16 copy of each weight (dequant_f16.comp),
// whose copy (~11 ms a 7B step) is paid once for many rows: pp512 8,333 t/s through it against
// 7,939 through the tile loads (session 18). Its tiles (Coopmat2Config::dec) were the fastest
// tried: 32 x 64 weight rows x 256 K at 128 invocations took 45.4 ms at 32 rows (session 18).
// Up to 256 rows: block loads at prefill sizes were no faster (H100, session 38, pp512: 7B Q4_0
// 8,244-8,408 t/s at 256-row tiles against 8,095-8,105 through the copy, 7,883-7,907 at 128-row
// tiles; 1.5B 22,570-23,871 against 25,619; pp4096 7B 9,552 against 9,590).
constexpr int64_t kCm2DecodeMaxRows = 256;
bool UseCm2Decode(const Device& dev, int64_t R, int64_t K, DType wt) {
  const Coopmat2Config& t = dev.coopmat2();
  if (!t.block_loads || !t.bm || t.x32 || !dev.f16_math() || R <= kGemvMaxRows ||
      R > kCm2DecodeMaxRows || K % 32 != 0)
    return false;
  return wt == DType::kQ4_0 || wt == DType::kQ8_0;
}

struct Cm2DecodePlan {
  Coopmat2Config::Tile t;
  uint32_t S = 1;  // K slices (split-K: partial tiles to the scratch, then summed)
  int64_t Rp = 0;  // rows padded to whole tiles (x's f16 copy has zero rows up to Rp)
};
// The tile for R rows (up to 64: Coopmat2Config::dec; more: the prefill tile, 128 rows) and the
// K slices, doubled while the workgroups stay within a number a multiprocessor and each slice
// keeps a number of BK steps. Each workgroup walks its K slice serially (a 64-wide step, decoded
// per element in the loads, takes ~2.8 us), so in decode shapes more of them in flight is what
// reads the weights faster: H200, 7B Q4_0, one job (session 19), 32 rows 18.3 ms a step with two
// a multiprocessor and slices of at least 4 steps, 16.0 with 4, 14.7 with 8, 14.1 with 8 and 2
// steps, 13.4 with 16 and 1 step (64 rows 24.5 / 20.9 / 19.8 / 19.0 / 19.0), although the slices'
// partial sums ([S][R][N] f32) are written and read again. Past 64 rows those partials outweigh
// the weights: two a multiprocessor and 4 steps a slice, as the prefill GEMMs.
Cm2DecodePlan PlanCm2Decode(const Device& dev, int64_t R, int64_t N, int64_t K) {
  const Coopmat2Config& c = dev.coopmat2();
  Cm2DecodePlan p;
  p.t = {c.bm, c.bn, c.bk, c.wg};
  for (uint32_t i = 0; i < 3; ++i)
    if (R <= (int64_t(16) << i) && c.dec[i].bm) {
      p.t = c.dec[i];
      break;
    }
  p.Rp = (R + p.t.bm - 1) / p.t.bm * p.t.bm;
  const bool decode = R <= kDecodeMaxRows;
  const uint64_t per_sm = decode ? 16 : 2, min_steps = decode ? 1 : 4,
                 max_slices = decode ? 32 : 16;
  const uint64_t tiles = uint64_t(p.Rp / p.t.bm) * uint64_t((N + p.t.bn - 1) / p.t.bn);
  const uint64_t steps = uint64_t(K) / p.t.bk;
  while (c.sms && p.S * 2 <= max_slices && tiles * p.S * 2 <= per_sm * c.sms &&
         steps / (p.S * 2) >= min_steps)
    p.S *= 2;
  return p;
}

// Q4_0 / Q8_0 / Q4_K / Q5_K / Q6_K products of 9-64 rows (batched decode; the decode rows of
// continuous batching: the K-quants, K-quant files' bulk, took matmul_gemm_cm.comp before) on
// the decode-shaped subgroup coopmat GEMM (matmul_gemm_dec.comp) wherever the device has subgroup
// cooperative matrices: tiles of 16, 32 or 64 batch rows x 128 weight rows, K in steps of 64 (one
// shared stage of 20-28 KiB, so that several workgroups share a multiprocessor), x as an f16 copy
// padded to whole tiles, and K split into slices (their partial tiles summed by
// matmul_gemm_cm2_reduce) while the workgroups stay within kDecPerSm a multiprocessor and each
// slice keeps 2 steps. H200, 7B Q4_0 `bench -b 9,16,32,64 -p 128 -n 64`, one job (session 22), per
// step p50: 9.4 / 9.7 / 11.7 / 18.2 ms, against 15.2 / 15.5 / 13.4 / 19.1 on the workgroup-scope
// block-load GEMM (UseCm2Decode) that took these steps before; K steps of 128 (43 KiB of shared
// memory, 106 registers: two workgroups a multiprocessor): 11.9 / 12.1 / 13.8 / 18.1; slices
// within 4, 16 and 2 workgroups a multiprocessor (K steps of 128): 12.9 / 13.0 / 15.0 / 18.5,
// 11.8 / 12.0 / 13.9 / 18.9, 14.2 / 14.2 / 16.4 / 20.0 against 11.9 / 12.1 / 13.8 / 18.1 at 8.
// Without the workgroup-scope GEMM and the multiprocessor count (ES_VK_CM2=0, no slices), against
// matmul_gemm_cm.comp: 25.4 / 25.5 / 28.9 / 35.9 against 33.8 / 34.3 / 35.7 / 39.2 (K steps of
// 128). ES_VK_DEC_GEMM=1 takes this GEMM wherever it can run (on devices without cooperative
// matrices its f32 multiply-add variant: how lavapipe tests it), 0 never.
constexpr int64_t kDecMaxRows = 64;
constexpr uint64_t kDecPerSm = 8, kDecMaxSlices = 32, kDecMinSliceSteps = 2;
bool UseDecGemm(const Device& dev, int64_t R, int64_t K, DType wt) {
  const bool kq = wt == DType::kQ4_K || wt == DType::kQ5_K ||
                  wt == DType::kQ6_K;  // a 64-wide step: one chunk of a super-block
  if (R <= kGemvMaxRows || R > kDecMaxRows || K % (kq ? 256 : 32) != 0 ||
      (!kq && wt != DType::kQ4_0 && wt != DType::kQ8_0))
    return false;
  const Tuning& tune = dev.tuning();
  if (tune.IsAuto(Knob::kDecGemm)) return dev.coopmat_n() != 0 && dev.f16_math();
  return tune.Text(Knob::kDecGemm) == "1" && dev.info().fp16;
}

struct DecPlan {
  uint32_t bm = 16, bk = 128;
  uint32_t S = 1, ks = 0;  // K slices and the elements of K each (0: whole K)
  int64_t Rp = 0;          // rows padded to whole tiles (x's f16 copy has zero rows up to Rp)
};
DecPlan PlanDec(const Device& dev, int64_t R, int64_t N, int64_t K) {
  const Tuning& tune = dev.tuning();
  DecPlan p;
  p.bm = R <= 16 ? 16 : R <= 32 ? 32 : 64;
  p.bk = 64;
  p.Rp = (R + p.bm - 1) / p.bm * p.bm;
  // The multiprocessors: VK_NV_shader_sm_builtins' count, or ES_VK_CM2_SMS where set (tests).
  uint64_t sms = dev.coopmat2().sms;
  if (!sms && !tune.IsAuto(Knob::kCm2Sms)) sms = tune.Uint(Knob::kCm2Sms);
  const uint64_t tiles = uint64_t(p.Rp / p.bm) * uint64_t((N + 127) / 128);
  const uint64_t steps = uint64_t((K + p.bk - 1) / p.bk);
  uint64_t s = 1;
  while (sms && s * 2 <= kDecMaxSlices && tiles * s * 2 <= kDecPerSm * sms &&
         steps / (s * 2) >= kDecMinSliceSteps)
    s *= 2;
  if (s > 1) {
    const uint64_t per = (steps + s - 1) / s;  // steps a slice
    p.S = uint32_t((steps + per - 1) / per);
    p.ks = p.S > 1 ? uint32_t(per * p.bk) : 0;
  }
  return p;
}
}  // namespace

void RecordHeadGemv(OpContext& c, BufRange x, int64_t R, int64_t H, int64_t N, int64_t K,
                    const DeviceWeight& w, int64_t x_rs, int64_t x_hs, int64_t x_off, BufRange y,
                    int64_t y_rs, int64_t y_hs, int64_t y_off) {
  ES_CHECK(w.chunks.size() == 1, "vulkan: per-head weight is split into chunks (too large)");
  const bool vec = K % 8 == 0 && x_rs % 4 == 0 && x_hs % 4 == 0 && x_off % 4 == 0;
  ES_CHECK(vec || !IsQuantized(w.dtype), "vulkan: quantized per-head weight '", c.n.name,
           "' needs 4-aligned activation offsets");
  const GemvSpec gs = GemvSpecFor(c.dev, w.dtype, vec, R, w.rows, false, false, K);
  Dispatch& d =
      c.Add(std::string("matmul_gemv_") + TypeSuffix(w.dtype) + (vec ? "_vec" : "") + gs.Variant(),
            {1, 1, 1, 1, 1, 1}, gs.Spec());
  d.bindings = {{Range(w.chunks[0].alloc)}, {x}, {x}, {y}, {x}, {x}};
  d.writes = {3};
  d.Push(GemvPush{uint32_t(K), uint32_t(N), uint32_t(R), 0, uint32_t(x_rs), uint32_t(x_hs),
                  uint32_t(x_off), uint32_t(y_rs), uint32_t(y_hs), uint32_t(y_off), 0, 0, 0, 0.0f});
  GemvGrid(d, N, R, gs);
  d.groups[1] = uint32_t(H);
}

// The workgroup-scope GEMM's scratch: x as f16 (R * K halves), then, for split-K, the partial
// products of the K slices ([S][R][N] f32), then, for quantized weights, one chunk's f16 copy
// ([N][K] halves), each part from a 256-byte boundary.
static uint64_t Cm2PartOffset(int64_t R, int64_t K) {
  return Align256(uint64_t(R) * uint64_t(K) * 2);
}
static uint64_t Cm2WeightOffset(int64_t R, int64_t K, uint32_t S, uint64_t N) {
  return S > 1 ? Align256(Cm2PartOffset(R, K) + uint64_t(S) * uint64_t(R) * N * 4)
               : Cm2PartOffset(R, K);
}

uint64_t MatMulScratchBytes(const Device& dev, const Graph& g, const Node& n) {
  if (n.src.size() < 2 || n.src[1] < 0 || !g.node(n.src[1]).weight) return 0;
  const Tensor& W = *g.node(n.src[1]).weight;
  const int64_t R = n.shape[0], K = g.node(n.src[0]).shape[1];
  if (R <= kGemvMaxRows) return 0;
  if (UseDecGemm(dev, R, K, W.dtype)) {  // x as f16 (padded rows), then the slices' partials
    const DecPlan p = PlanDec(dev, R, W.shape[0], K);
    return Cm2PartOffset(p.Rp, K) +
           (p.S > 1 ? uint64_t(p.S) * uint64_t(R) * uint64_t(W.shape[0]) * 4 : 0);
  }
  if (UseCm2Decode(dev, R, K, W.dtype)) {  // x as f16 (padded rows), then the split-K partials
    const Cm2DecodePlan p = PlanCm2Decode(dev, R, W.shape[0], K);
    return Cm2PartOffset(p.Rp, K) +
           (p.S > 1 ? uint64_t(p.S) * uint64_t(p.Rp) * uint64_t(W.shape[0]) * 4 : 0);
  }
  if (dev.coopmat2().x32 || !UseCoopmat2(dev, R, K, W.dtype, W.shape[0])) {
    // The coopmat GEMM's split-K partials ([S][R][N] f32).
    uint32_t S = 1;
    if (!UseCoopmat(dev, K, W.dtype) || !CoopmatSliceK(dev, R, W.shape[0], K, &S)) return 0;
    return uint64_t(S) * uint64_t(R) * uint64_t(W.shape[0]) * 4;
  }
  const uint64_t N = uint64_t(W.shape[0]);
  const uint32_t S = dev.coopmat2().SplitK(uint64_t(R), N, uint64_t(K));
  if (IsQuantized(W.dtype)) return Cm2WeightOffset(R, K, S, N) + N * uint64_t(K) * 2;
  if (S > 1) return Cm2PartOffset(R, K) + uint64_t(S) * uint64_t(R) * N * 4;
  return uint64_t(R) * uint64_t(K) * 2;
}

namespace {
// The sum of a split-K product's S partial products [S][R][N] (+ bias) into y's columns n0.. of
// rows of stride y_rs (matmul_gemm_cm2_reduce.comp, for both tensor-core GEMMs); `dummy` fills
// the bias binding without one.
// `rows` (default R) of y are written: R is the partials' rows (a slice is R x N).
void RecordSplitKSum(OpContext& c, BufRange part, const BufRange* bias, BufRange dummy, BufRange y,
                     uint32_t N, int64_t R, int64_t n0, int64_t y_rs, uint32_t S,
                     int64_t rows = -1) {
  Dispatch& r = c.Add("matmul_gemm_cm2_reduce", {1, 1, 1});
  r.bindings = {{part}, {bias ? *bias : dummy}, {y}};
  r.writes = {2};
  struct {
    uint32_t N, R, n0, y_rs, has_bias, S;
  } push{N, uint32_t(R), uint32_t(n0), uint32_t(y_rs), bias ? 1u : 0u, S};
  r.Push(push);
  r.groups[0] = (N + 255) / 256;
  r.groups[1] = uint32_t(rows < 0 ? R : rows);
}
}  // namespace

namespace {
// x's f16 copy for the workgroup-scope GEMMs (to_f16.comp): n of x's elements, then zeros up to
// n_out (padding rows); both multiples of 4.
void RecordToF16(OpContext& c, BufRange x, BufRange xh, int64_t n, int64_t n_out) {
  Dispatch& d = c.Add("to_f16", {1, 1});
  d.bindings = {{x}, {xh}};
  d.writes = {1};
  const uint32_t n4 = uint32_t(n_out / 4);
  d.Push(std::array<uint32_t, 2>{n4, uint32_t(n / 4)});
  Grid1D(d, n4);
}

// The block-load GEMM (UseCm2Decode): x to f16 in the scratch, then per weight chunk one GEMM
// dispatch (and, split, the sum of its K slices' partial tiles, stored after x's copy).
void RecordCm2Decode(OpContext& c, BufRange x, int64_t R, int64_t K, const DeviceWeight& w,
                     const BufRange* bias, BufRange y, int64_t y_rs, BufRange scratch) {
  const int64_t Rp = PlanCm2Decode(c.dev, R, w.rows, K).Rp;  // the same for every chunk
  const BufRange xh{scratch.buffer, scratch.offset, uint64_t(Rp * K * 2)};
  RecordToF16(c, x, xh, R * K, Rp * K);
  const uint64_t part_off = Cm2PartOffset(Rp, K);
  for (const auto& ch : w.chunks) {
    if (ch.rows == 0) continue;
    const uint32_t N = uint32_t(ch.rows);
    Cm2DecodePlan p = PlanCm2Decode(c.dev, R, N, K);
    const uint64_t part_bytes = uint64_t(p.S) * uint64_t(Rp) * N * 4;
    if (p.S > 1 && scratch.size < part_off + part_bytes) p.S = 1;
    const bool sk = p.S > 1;
    const BufRange part = sk ? BufRange{scratch.buffer, scratch.offset + part_off, part_bytes} : y;
    const BufRange wr = Range(ch.alloc);
    Dispatch& d =
        c.Add(std::string("matmul_gemm_cm2_") + TypeSuffix(w.dtype) + (sk ? "_sk" : ""),
              {1, 1, 1, 1, 1, 1}, {p.t.wg, p.t.bm, p.t.bn, p.t.bk, c.dev.coopmat2().flags});
    d.bindings = {{wr}, {xh}, {bias ? *bias : x}, {y}, {part}, {wr}};
    d.writes = {sk ? 4 : 3};
    struct {
      uint32_t K, N, R, n0, y_rs, has_bias, Ry;
    } push{uint32_t(K),    N,          uint32_t(Rp), uint32_t(ch.row0), uint32_t(y_rs),
           bias ? 1u : 0u, uint32_t(R)};
    d.Push(push);
    d.groups[0] = (N + p.t.bn - 1) / p.t.bn;
    d.groups[1] = uint32_t(Rp / p.t.bm);
    d.groups[2] = p.S;
    // The partials are [S][Rp][N]; the sum writes y's R rows.
    if (sk) RecordSplitKSum(c, part, bias, x, y, N, Rp, ch.row0, y_rs, p.S, R);
  }
}

// The decode-shaped GEMM (UseDecGemm): x to f16 in the scratch (zero rows up to whole tiles),
// then per weight chunk one dispatch (and, split, the sum of its slices' partial tiles, stored
// after x's copy).
void RecordDecGemm(OpContext& c, BufRange x, int64_t R, int64_t K, const DeviceWeight& w,
                   const BufRange* bias, BufRange y, int64_t y_rs, BufRange scratch) {
  const Device& dev = c.dev;
  const int64_t Rp = PlanDec(dev, R, w.rows, K).Rp;  // the same for every chunk
  const BufRange xh{scratch.buffer, scratch.offset, uint64_t(Rp * K * 2)};
  RecordToF16(c, x, xh, R * K, Rp * K);
  const uint64_t part_off = Cm2PartOffset(Rp, K);
  const std::string variant = dev.coopmat_n() == 0 ? std::string("_scalar")
                                                   : "_n" + std::to_string(dev.coopmat_n()) +
                                                         (dev.shared_blocks() ? "_sb" : "") +
                                                         (dev.coopmat_khr() ? "_khr" : "");
  for (const auto& ch : w.chunks) {
    if (ch.rows == 0) continue;
    const uint32_t N = uint32_t(ch.rows);
    DecPlan p = PlanDec(dev, R, N, K);
    const uint64_t part_bytes = uint64_t(p.S) * uint64_t(R) * N * 4;
    if (p.S > 1 && scratch.size < part_off + part_bytes) p.S = 1, p.ks = 0;
    const bool sk = p.S > 1;
    const BufRange part = sk ? BufRange{scratch.buffer, scratch.offset + part_off, part_bytes} : y;
    Dispatch& d = c.Add(std::string("matmul_gemm_dec_") + TypeSuffix(w.dtype) + "_m" +
                            std::to_string(p.bm) + "_k" + std::to_string(p.bk) + variant,
                        {1, 1, 1, 1, 1});
    d.bindings = {{Range(ch.alloc)}, {xh}, {bias ? *bias : x}, {y}, {part}};
    d.writes = {sk ? 4 : 3};
    d.Push(GemmCmPush{uint32_t(K), N, uint32_t(R), uint32_t(ch.row0), uint32_t(y_rs),
                      bias ? 1u : 0u, p.ks});
    d.groups[0] = (N + 127) / 128;
    d.groups[1] = uint32_t(Rp / p.bm);
    d.groups[2] = p.S;
    if (sk) RecordSplitKSum(c, part, bias, x, y, N, R, ch.row0, y_rs, p.S);
  }
}

// Decode-shaped products of more than kGemvMaxRows rows on the GEMMs made for them, the decode
// GEMM first, then the block-load GEMM, where their scratch (x16) fits; false: neither applies.
bool RecordDecodeShaped(OpContext& c, BufRange x, int64_t R, int64_t K, const DeviceWeight& w,
                        const BufRange* bias, BufRange y, int64_t y_rs, const BufRange* x16) {
  if (R <= kGemvMaxRows || !x16) return false;
  if (UseDecGemm(c.dev, R, K, w.dtype) &&
      x16->size >= Cm2PartOffset(PlanDec(c.dev, R, w.rows, K).Rp, K)) {
    RecordDecGemm(c, x, R, K, w, bias, y, y_rs, *x16);
    return true;
  }
  if (UseCm2Decode(c.dev, R, K, w.dtype) &&
      x16->size >= Cm2PartOffset(PlanCm2Decode(c.dev, R, w.rows, K).Rp, K)) {
    RecordCm2Decode(c, x, R, K, w, bias, y, y_rs, *x16);
    return true;
  }
  return false;
}
}  // namespace

void RecordMatMul(OpContext& c, BufRange x, int64_t R, int64_t K, const DeviceWeight& w,
                  const BufRange* bias, BufRange y, int64_t y_rs, const BufRange* residual,
                  const NormFold* norm, const BufRange* x16, const QuantX* xq) {
  ES_ASSERT((!residual && !norm) || (R <= kGemvMaxRows && K % 8 == 0));
  ES_ASSERT(w.cols == K);
  ES_ASSERT(!xq || (!norm && UseIdotGemv(c.dev, R, K, w.rows, w.dtype)));
  if (RecordDecodeShaped(c, x, R, K, w, bias, y, y_rs, x16)) return;
  // Float weights of few outputs (a MoE router's 64) in a decode-shaped step take the GEMV in row
  // groups of 8 too: a GEMM would run one tile (H100, V2-Lite Q4_0, the f32 router of a 32-row
  // step on the coopmat GEMM: 70 us a layer).
  const bool gemv = R <= kGemvMaxRows || (R <= kDecodeMaxRows && w.rows <= kGemvFewOutputs &&
                                          K % 8 == 0 && !IsQuantized(w.dtype));
  const bool vec = K % 8 == 0;
  // Integer dot products over x quantized by a separate dispatch (xq) or in each workgroup.
  const bool idot = gemv && UseIdotGemv(c.dev, R, K, w.rows, w.dtype);
  GemvSpec gs = GemvSpecFor(c.dev, w.dtype, vec, R, w.rows, idot, xq != nullptr, K);
  if (idot && !xq) gs.kc = IdotLocalStep(K, gs.rb, w.dtype);
  // The workgroup-scope coopmat GEMM reads x as f16: one conversion serves every chunk.
  const bool quant = IsQuantized(w.dtype);
  const bool cm2_type = !gemv && UseCoopmat2(c.dev, R, K, w.dtype, w.rows);
  // Its split-K slices and the offset of a chunk's f16 copy in the scratch (cm2 GEMMs only).
  const uint32_t S_all =
      cm2_type ? c.dev.coopmat2().SplitK(uint64_t(R), uint64_t(w.rows), uint64_t(K)) : 1u;
  const uint64_t w16_off = cm2_type ? Cm2WeightOffset(R, K, S_all, uint64_t(w.rows)) : 0;
  // Quantized weights need room for a chunk's f16 copy in the scratch (MatMulScratchBytes).
  const bool cm2 =
      cm2_type && (!quant || (x16 && x16->size >= w16_off + uint64_t(w.rows) * uint64_t(K) * 2));
  const bool cm2_h = cm2 && x16 && x16->size >= uint64_t(R * K * 2);
  const BufRange xh = cm2_h ? BufRange{x16->buffer, x16->offset, uint64_t(R * K * 2)} : x;
  if (cm2_h) RecordToF16(c, x, xh, R * K, R * K);
  for (const auto& ch : w.chunks) {
    if (ch.rows == 0) continue;
    const uint32_t N = uint32_t(ch.rows);
    if (gemv) {
      Dispatch& d = c.Add(std::string("matmul_gemv_") + TypeSuffix(w.dtype) +
                              (xq     ? "_idot"
                               : idot ? "_idotl"
                               : vec  ? "_vec"
                                      : "") +
                              gs.Variant(),
                          {1, 1, 1, 1, 1, 1}, gs.Spec());
      d.bindings = {{Range(ch.alloc)},          {xq ? xq->q : x},
                    {bias ? *bias : x},         {y},
                    {residual ? *residual : x}, {xq ? xq->ds : norm ? norm->weight : x}};
      d.writes = {3};
      d.Push(GemvPush{uint32_t(K), N, uint32_t(R), uint32_t(ch.row0), uint32_t(K), 0, 0,
                      uint32_t(y_rs), 0, 0, bias ? 1u : 0u, residual ? 1u : 0u, norm ? 1u : 0u,
                      norm ? norm->eps : 0.0f});
      GemvGrid(d, N, R, gs);
    } else if (cm2) {
      // Workgroup-scope tensor-core GEMM (matmul_gemm_cm2.comp): the driver stages the tiles.
      const Coopmat2Config& t = c.dev.coopmat2();
      // Split-K (ES_VK_CM2_SPLITK): S slices of K write partial tiles into the scratch after x's
      // f16 copy ("_sk"); matmul_gemm_cm2_reduce sums them (+ bias) into y.
      const uint32_t S = cm2_h ? S_all : 1u;
      const uint64_t part_off = Cm2PartOffset(R, K), part_bytes = uint64_t(S) * uint64_t(R) * N * 4;
      const bool sk = S > 1 && x16->size >= part_off + part_bytes;
      const BufRange part = sk ? BufRange{x16->buffer, x16->offset + part_off, part_bytes} : y;
      BufRange wr = Range(ch.alloc);
      if (quant) {  // this chunk's f16 copy first
        wr = BufRange{x16->buffer, x16->offset + w16_off, uint64_t(N) * uint64_t(K) * 2};
        Dispatch& q = c.Add(std::string("dequant_f16_") + TypeSuffix(w.dtype), {1, 1});
        q.bindings = {{Range(ch.alloc)}, {wr}};
        q.writes = {1};
        const uint32_t n4 = uint32_t(uint64_t(N) * uint64_t(K) / 4);
        q.Push(std::array<uint32_t, 2>{uint32_t(K), n4});
        Grid1D(q, n4);
      }
      Dispatch& d = c.Add(std::string("matmul_gemm_cm2_f16") + (cm2_h ? "_h" : "") +
                              (t.swap ? "_sw" : "") + (sk ? "_sk" : ""),
                          std::vector<uint32_t>(sk ? 5 : 4, 1), {t.wg, t.bm, t.bn, t.bk, t.flags});
      d.bindings = {{wr}, {cm2_h ? xh : x}, {bias ? *bias : x}, {y}};
      d.writes = {3};
      if (sk) {
        d.bindings.push_back({part});
        d.writes = {4};
      }
      d.Push(
          GemmPush{uint32_t(K), N, uint32_t(R), uint32_t(ch.row0), uint32_t(y_rs), bias ? 1u : 0u});
      d.groups[0] = (N + t.bn - 1) / t.bn;
      d.groups[1] = uint32_t((R + t.bm - 1) / t.bm);
      if (sk) {
        d.groups[2] = S;
        RecordSplitKSum(c, part, bias, x, y, N, R, ch.row0, y_rs, S);
      }
    } else if (UseCoopmat(c.dev, K, w.dtype)) {
      // Tensor cores: f16 tiles, f32 accumulators (matmul_gemm_cm.comp); BM x 128 tiles, BM =
      // 64 unless 128-row tiles already give enough workgroups to fill a large GPU.
      // Decode-shaped products split K (CoopmatSliceK): partials into the scratch, then summed.
      const uint32_t bm = CoopmatBm(c.dev, R, N);
      uint32_t S = 1;
      uint32_t ks = CoopmatSliceK(c.dev, R, N, K, &S);
      const uint64_t part_bytes = uint64_t(S) * uint64_t(R) * N * 4;
      if (ks && !(x16 && x16->size >= part_bytes)) ks = 0, S = 1;
      const BufRange part = ks ? BufRange{x16->buffer, x16->offset, part_bytes} : y;
      Dispatch& d =
          c.Add(std::string("matmul_gemm_cm_") + TypeSuffix(w.dtype) + "_n" +
                    std::to_string(c.dev.coopmat_n()) + (bm == 64 ? "_m64" : "") +
                    (c.dev.shared_blocks() ? "_sb" : "") + (c.dev.coopmat_khr() ? "_khr" : ""),
                {1, 1, 1, 1, 1});
      d.bindings = {{Range(ch.alloc)}, {x}, {bias ? *bias : x}, {y}, {part}};
      d.writes = {ks ? 4 : 3};
      d.Push(GemmCmPush{uint32_t(K), N, uint32_t(R), uint32_t(ch.row0), uint32_t(y_rs),
                        bias ? 1u : 0u, ks});
      d.groups[0] = (N + kGemmTile - 1) / kGemmTile;
      d.groups[1] = uint32_t((R + bm - 1) / bm);
      d.groups[2] = S;
      if (ks) {
        RecordSplitKSum(c, part, bias, x, y, N, R, ch.row0, y_rs, S);
      }
    } else {
      Dispatch& d = c.Add(std::string("matmul_gemm_") + TypeSuffix(w.dtype), {1, 1, 1, 1});
      d.bindings = {{Range(ch.alloc)}, {x}, {bias ? *bias : x}, {y}};
      d.writes = {3};
      d.Push(
          GemmPush{uint32_t(K), N, uint32_t(R), uint32_t(ch.row0), uint32_t(y_rs), bias ? 1u : 0u});
      d.groups[0] = (N + kGemmTile - 1) / kGemmTile;
      d.groups[1] = uint32_t((R + kGemmTile - 1) / kGemmTile);
    }
  }
}

bool CanFuseGemv(int64_t R, int64_t K, const DeviceWeight& w) {
  (void)w;
  return R <= kGemvMaxRows && K % 8 == 0;
}

namespace {
// The dual GEMV's spec with 32 outputs a workgroup (QOUT), or false where the knobs and the device
// give none: ES_VK_GEMV_DUAL_QUANT 1 keeps TPR and sets QR = 32 / rows, 2 takes TPR 32 and QR 4;
// unset: 2 for Q4_0, 0 for Q8_0. H200, 7B tg128 (t/s, one job): QR 8 slowed the dual GEMV from
// 2.36 to 1.91 TB/s (Q4_0 341 against 351 without QOUT, Q8_0 245 against 255); TPR 32 QR 4: Q4_0
// 357 against 350, Q8_0 255 against 257; a later job, Q8_0: 260.2 / 261.6 against 264.1 (its
// int16 x makes twice the stores; the dual GEMV at TPR 32 read 2.57 TB/s against 2.80 at 64);
// 512-invocation workgroups of 8 groups (TPR 64, QR 4): Q8_0 249, Q4_0 338.
bool DualQoutSpec(const Device& dev, int64_t R, const DeviceWeight& gate, GemvSpec* gs) {
  const Tuning& tune = dev.tuning();
  const uint32_t mode = tune.IsAuto(Knob::kGemvDualQuant) ? (gate.dtype == DType::kQ8_0 ? 0 : 2)
                                                          : tune.Uint(Knob::kGemvDualQuant);
  if (mode == 0) return false;
  *gs = GemvSpecFor(dev, gate.dtype, true, R, gate.rows, true, true);
  if (mode == 2) gs->rows = gs->wg / 32;
  const uint32_t tpr = gs->wg / gs->rows;
  if (tpr < std::max<uint32_t>(dev.info().max_subgroup_size, 1) || 32 % gs->rows != 0) return false;
  gs->qr = 32 / gs->rows;
  gs->cluster = false;
  return gs->qr <= 8;
}
}  // namespace

namespace {
// Elements of one unit of the integer-dot GEMV (matmul_gemv.comp kUnitElems).
uint64_t IdotUnitElems(DType t) { return t == DType::kQ8_0 ? 16 : BlockElems(t) == 256 ? 64 : 32; }
// The weight types of the experts' integer-dot GEMVs (matmul_gemv.comp IDOT MOE).
bool MoeIdotType(DType t) {
  switch (t) {
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ5_0:
    case DType::kQ5_1:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
      return true;
    default:
      return false;
  }
}
}  // namespace

bool MoeGemvFor(const Device& dev, int64_t R, int64_t D, int64_t I, int64_t top_k, DType gate_up,
                DType down, MoeGemv* out) {
  // One workgroup row per (token, choice) pair: each GEMV has one row of x per workgroup row.
  // Whole subgroups per output: the MOE variants reduce through shared memory (no clusters).
  const uint32_t max_sg = std::max<uint32_t>(dev.info().max_subgroup_size, 1);
  // Integer dots for every block type a K-quant mix puts in experts, gate/up and down of
  // different types: the up GEMV writes h quantized in its own x format (int16 for Q8_0, else
  // int8), which a Q8_0 down under another gate/up type reads as int8 ("_down8": llama.cpp's
  // q4_k_m fallback for rows that are not whole 256-blocks; a Q8_0 gate/up needs a Q8_0 down).
  // Rows of whole blocks; the down GEMV holds the token's choices in shared memory
  // (kMoeGemvMaxChoices). Not taken by the dense GEMVs for the 32-blocks with a fifth bit or a
  // min (UseIdotGemv): there each x costs a quantize dispatch that the experts' GEMVs do not pay
  // (the up GEMV quantizes x in its workgroups, the down GEMV reads h quantized by the up GEMV).
  if (R <= kMoeGemvMaxRows && top_k <= kMoeGemvMaxChoices && MoeIdotType(gate_up) &&
      MoeIdotType(down) && (gate_up != DType::kQ8_0 || down == DType::kQ8_0) &&
      D % BlockElems(gate_up) == 0 && I % 32 == 0 && I % BlockElems(down) == 0 &&
      IdotOn(dev, gate_up)) {  // (the dot products of gate_up's x format serve both)
    GemvSpec up = GemvSpecFor(dev, gate_up, true, 1, I, true, false);
    up.rows = up.wg / std::max<uint32_t>(32, max_sg);  // 32 outputs a workgroup (QOUT)
    if (up.rows == 0 || 32 % up.rows != 0 || 32 / up.rows > 8) return false;
    up.qr = 32 / up.rows;
    up.cluster = false;
    up.kc = IdotLocalStep(D, 1, gate_up);
    // Units loaded ahead only where a lane has more than one a row (V2-Lite's Q4_K gate/up: 32
    // chunks of 64 over 32 lanes; a second slot would re-load the last unit and double the
    // registers of the 4 rows' quants).
    if (uint64_t(D) / IdotUnitElems(gate_up) <= up.wg / up.rows) up.un = 1;
    // The down GEMV's D outputs (V2-Lite: 2048) over at least ES_VK_GEMV_MIN_GROUPS workgroups
    // per token (GemvSpecFor's rule for x quantized apart: QR 1 there, 4 outputs a workgroup,
    // 512 workgroups), each walking its outputs' units of all the token's choices with UN choices
    // loaded before any is used: ceil(top_k / UN) rounds of loads (V2-Lite's 6 choices: 2 rounds
    // of 3 at QR 1, not 6 one after the other).
    GemvSpec dn = GemvSpecFor(dev, down, true, 1, D, true, true);
    dn.rows = std::min(dn.rows, dn.wg / max_sg);
    dn.cluster = false;
    const uint32_t per_round = std::max<uint32_t>(1, 4 / dn.qr);
    const uint32_t rounds = uint32_t((top_k + per_round - 1) / per_round);
    dn.un = uint32_t((top_k + rounds - 1) / rounds);
    *out = MoeGemv{up.Spec(), dn.Spec(), up.Outputs(), dn.Outputs(), true};
    return true;
  }
  // Float and block types: the VEC sums (rows of whole 8-element groups) over f32 x. Past
  // kGemvMaxRows the grouped GEMMs read each chosen expert once a step instead of once a pair.
  if (R > kGemvMaxRows || D % 8 != 0 || I % 8 != 0) return false;
  GemvSpec up = GemvSpecFor(dev, gate_up, true, 1, I, false, false, D),
           dn = GemvSpecFor(dev, down, true, 1, D);
  // The down GEMV of float experts: 2 outputs a workgroup (1,024 workgroups a token for
  // V2-Lite's 2,048), not 4. H200, V2-Lite f16, one job (session 24): the down GEMV 17.6 us a
  // layer against 26.7 (4 outputs) and 25.3 (1 output, 128 invocations summing each); tg128
  // after 512 tokens 267.2 t/s against 252.9. The up GEMV (2,112 workgroups a token) stays at 4:
  // 2 or 1 were no faster.
  if (!IsQuantized(down)) dn.rows = std::min<uint32_t>(dn.rows, 2);
  // The float experts' up GEMV: 2 outputs an invocation group (AccumVecRows), 2 groups a
  // workgroup, not the dense GEMVs' 4 from K 2,048. H100, V2-Lite f16 tg128, one job, three rounds
  // (session 29): 272.0 / 271.3 / 270.1 t/s against 257.3 / 253.3 / 255.4 at 4 and 266.7 / 269.8 /
  // 267.0 at 8; --profile 981.6 us a step at 2, 1,086.6 at 4, 1,018.6 at 8, 985.6 at 1.
  if (!IsQuantized(gate_up) && up.qr > 2) {
    up.qr = 2;
    up.rows = std::max<uint32_t>(1, GemvFor(dev).rows / 2);
  }
  for (const GemvSpec* s : {&up, &dn})
    if (s->cluster || s->rows == 0 || s->wg / s->rows < max_sg) return false;
  *out = MoeGemv{up.Spec(), dn.Spec(), up.Outputs(), dn.Outputs(), false};
  return true;
}

bool DualQuantizesOut(const Device& dev, int64_t R, int64_t K, const DeviceWeight& gate) {
  GemvSpec gs{};
  return UseIdotGemv(dev, R, K, gate.rows, gate.dtype) &&
         IdotQuantizeOnce(dev, R, K, gate.rows, true) && gate.chunks.size() == 1 &&
         gate.rows % 32 == 0 && DualQoutSpec(dev, R, gate, &gs);
}

void RecordGemvSwiGLU(OpContext& c, BufRange x, int64_t R, int64_t K, const DeviceWeight& gate,
                      const DeviceWeight& up, BufRange y, const NormFold* norm, const QuantX* xq,
                      const QuantX* yq) {
  ES_ASSERT(CanFuseGemv(R, K, gate) && gate.dtype == up.dtype && gate.rows == up.rows &&
            gate.chunks.size() == up.chunks.size());
  ES_ASSERT(!xq || (!norm && UseIdotGemv(c.dev, R, K, gate.rows, gate.dtype)));
  ES_ASSERT(!yq || (xq && DualQuantizesOut(c.dev, R, K, gate)));
  const bool idot = UseIdotGemv(c.dev, R, K, gate.rows, gate.dtype);
  GemvSpec gs = GemvSpecFor(c.dev, gate.dtype, true, R, gate.rows, idot, xq != nullptr, K);
  if (yq) DualQoutSpec(c.dev, R, gate, &gs);
  if (idot && !xq) gs.kc = IdotLocalStep(K, gs.rb, gate.dtype);
  for (size_t i = 0; i < gate.chunks.size(); ++i) {
    const auto& cg = gate.chunks[i];
    const auto& cu = up.chunks[i];
    ES_ASSERT(cg.rows == cu.rows && cg.row0 == cu.row0);
    if (cg.rows == 0) continue;
    const uint32_t N = uint32_t(cg.rows);
    Dispatch& d = c.Add(std::string("matmul_gemv_") + TypeSuffix(gate.dtype) +
                            (xq     ? "_idot_dual"
                             : idot ? "_idotl_dual"
                                    : "_dual") +
                            (yq ? "_q" : "") + gs.Variant(),
                        yq ? std::vector<uint32_t>{2, 1, 1, 1, 1, 1, 1, 1}
                           : std::vector<uint32_t>{2, 1, 1, 1, 1, 1},
                        gs.Spec());
    d.bindings = {{Range(cg.alloc), Range(cu.alloc)},     {xq ? xq->q : x}, {x}, {y}, {x},
                  {xq ? xq->ds : norm ? norm->weight : x}};
    d.writes = {3};
    if (yq) {
      d.bindings.push_back({yq->q});
      d.bindings.push_back({yq->ds});
      d.writes = {3, 6, 7};
    }
    d.Push(GemvPush{uint32_t(K), N, uint32_t(R), uint32_t(cg.row0), uint32_t(K), 0, 0,
                    uint32_t(gate.rows), 0, 0, 0u, 0u, norm ? 1u : 0u, norm ? norm->eps : 0.0f});
    GemvGrid(d, N, R, gs);
  }
}

void BuildMatMul(OpContext& c) {
  // A folded RMSNorm (decided by the builder): x is the norm's input, its weight and eps go to
  // the GEMV.
  NormFold nf;
  const BufRange x = FoldedNormInput(c, &nf);
  const NormFold* norm = c.norm_node ? &nf : nullptr;
  // Integer-dot GEMV (decided by the builder): x quantized once, by the first matmul reading it,
  // with the folded norm applied there.
  QuantX xq;
  const int64_t R = c.n.shape[0], K = c.Src(0).shape[1];
  if (c.xq.size) {
    xq = QuantXRanges(c.xq, R, K, c.W(1).dtype);
    if (c.xq_fill) RecordQuantizeX(c, x, R, K, norm, xq);
    norm = nullptr;
  }
  const QuantX* xqp = c.xq.size ? &xq : nullptr;
  if (c.dual_gate) {  // fused gate/up + SwiGLU (decided by the builder)
    const Tensor& gw = *c.g.node(c.dual_gate->src[1]).weight;
    const Tensor& uw = *c.g.node(c.dual_up->src[1]).weight;
    const DeviceWeight& gd = c.weights.Get(gw);
    QuantX yq;
    if (c.dual_yq.size) yq = QuantXRanges(c.dual_yq, R, gd.rows, gd.dtype);
    RecordGemvSwiGLU(c, x, R, K, gd, c.weights.Get(uw), c.Out(), norm, xqp,
                     c.dual_yq.size ? &yq : nullptr);
    return;
  }
  const Tensor& W = c.W(1);
  const DeviceWeight& w = c.weights.Get(W);
  ES_CHECK(w.cols == K, "vulkan: matmul '", c.n.name, "': x has ", K, " columns, weight '", W.name,
           "' has ", w.cols);
  BufRange bias;
  const bool has_bias = c.n.src.size() > 2 && c.n.src[2] >= 0;
  if (has_bias) bias = Range(c.weights.GetF32(c.W(2)).chunks[0].alloc);
  RecordMatMul(c, x, R, K, w, has_bias ? &bias : nullptr, c.Out(), c.n.shape[1],
               c.residual.size ? &c.residual : nullptr, norm,
               c.scratch.empty() ? nullptr : &c.scratch[0], xqp);
}

void RecordRouterGemv(OpContext& c, BufRange x, int64_t R, int64_t K, const DeviceWeight& w,
                      BufRange logits, const NormFold* norm, const GemvRoute& route) {
  ES_ASSERT((w.dtype == DType::kF32 || w.dtype == DType::kF16 || w.dtype == DType::kBF16) &&
            w.chunks.size() == 1 && w.cols == K && K % 8 == 0 && R <= kGemvMaxRows);
  const GemvSpec gs = GemvSpecFor(c.dev, w.dtype, true, R, w.rows, false, false, K);
  ES_ASSERT(gs.wg >= 64 && gs.qr == 1 && !gs.cluster);  // moe_route.glsl's RT_WG
  const uint32_t N = uint32_t(w.rows);
  Dispatch& d = c.Add(std::string("matmul_gemv_") + TypeSuffix(w.dtype) + "_vec_route",
                      {1, 1, 1, 1, 1, 1, 1, 1, 1}, gs.Spec());
  d.bindings = {{Range(w.chunks[0].alloc)}, {x},         {route.bias}, {logits},     {x},
                {norm ? norm->weight : x},  {route.ids}, {route.wts},  {route.count}};
  d.writes = {3, 6, 7, 8};
  struct {
    GemvPush g;
    uint32_t top_k;  // the MOE variants' (unused)
    RoutePush rt;
  } pc{GemvPush{uint32_t(K), N, uint32_t(R), 0, uint32_t(K), 0, 0, N, 0, 0, 0, 0, norm ? 1u : 0u,
                norm ? norm->eps : 0.0f},
       0, route.push};
  d.Push(pc);
  GemvGrid(d, N, R, gs);
}

}  // namespace es::vk
