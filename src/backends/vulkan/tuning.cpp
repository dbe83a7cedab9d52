// The tuning registry (see tuning.h): the table, its parser, and the report / Markdown views.
#include "tuning.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "edgeseek/internal/core/error.h"

namespace es::vk {
namespace {

using T = KnobType;
using W = KnobWhen;
using R = KnobRole;

// The registry. Defaults measured on the H200 cite their measurement (docs/vulkan.md and
// docs/log/ have the jobs); "auto" is decided per device or weight type by the code.
const std::array<KnobSpec, kKnobCount> kTable = {{
    {Knob::kLoader, "ES_VK_LOADER", T::kText, "a path", "", W::kProcess, R::kOperational,
     "path of the Vulkan loader to open (empty: libvulkan.so.1, then libvulkan.so)"},
    {Knob::kValidation, "ES_VK_VALIDATION", T::kBool, "0|1", "0", W::kProcess, R::kOperational,
     "1: VK_LAYER_KHRONOS_validation on, its messages counted (the tests turn it on)"},
    {Knob::kCacheDir, "ES_VK_CACHE_DIR", T::kText, "a path", "", W::kDevice, R::kOperational,
     "directory of the on-disk pipeline cache (empty: $XDG_CACHE_HOME/edgeseek or "
     "~/.cache/edgeseek)"},
    {Knob::kPipelineStats, "ES_VK_PIPELINE_STATS", T::kBool, "0|1", "0", W::kDevice,
     R::kOperational,
     "1: every pipeline's statistics (registers, spills) to stderr, where the device has "
     "VK_KHR_pipeline_executable_properties"},
    {Knob::kCoopmat, "ES_VK_COOPMAT", T::kEnum, "auto|0|khr", "auto", W::kDevice, R::kPath,
     "subgroup-scope coopmat GEMM: auto = NV's, else KHR's; 0 = neither; khr = KHR's first"},
    {Knob::kSharedBlock, "ES_VK_SHARED_BLOCK", T::kBool, "0|1", "1", W::kDevice, R::kExperiment,
     "1: the NV coopmat GEMM stores its f16 tiles 8 halves at a time "
     "(VK_KHR_workgroup_memory_explicit_layout); no recorded H200 measurement yet"},
    {Knob::kCm2, "ES_VK_CM2", T::kBool, "0|1", "1", W::kDevice, R::kPath,
     "workgroup-scope coopmat GEMM (VK_NV_cooperative_matrix2) where the device has it; H200 "
     "pp512 7B 7,117 t/s against 5,494 without"},
    {Knob::kCm2Tile, "ES_VK_CM2_TILE", T::kTile, "BMxBNxBK", "128x128x64", W::kDevice,
     R::kExperiment,
     "cm2 GEMM tile; H200 pp512 1.5B 17,582 t/s against 14,250 at 256x128x64 swapped; tests "
     "cover other tiles"},
    {Knob::kCm2Wg, "ES_VK_CM2_WG", T::kUint, "32..1024", "256", W::kDevice, R::kExperiment,
     "cm2 GEMM workgroup size; only 256 measured"},
    {Knob::kCm2X32, "ES_VK_CM2_X32", T::kBool, "0|1", "0", W::kDevice, R::kExperiment,
     "1: the cm2 GEMM loads x as f32 tiles converted in the shader instead of an f16 copy"},
    {Knob::kCm2Swap, "ES_VK_CM2_SWAP", T::kBool, "0|1", "0", W::kDevice, R::kExperiment,
     "1: the cm2 GEMM computes y^T = W x^T (weights as the A operand)"},
    {Knob::kCm2Splitk, "ES_VK_CM2_SPLITK", T::kUint, "0|1|2|4|8", "4", W::kDevice, R::kExperiment,
     "cm2 GEMM split-K: at most this many K slices (0, 1: none); helps the 7B shape, costs the "
     "1.5B's (pp512 1.5B 16,475 t/s against 17,582 without)"},
    {Knob::kCm2SplitkMinK, "ES_VK_CM2_SPLITK_MINK", T::kUint, "1..1048576", "2048", W::kDevice,
     R::kPath, "cm2 split-K only for products with K at least this"},
    {Knob::kCm2Sms, "ES_VK_CM2_SMS", T::kUint, "auto|0..100000", "auto", W::kDevice, R::kPath,
     "multiprocessors split-K fills (auto: VK_NV_shader_sm_builtins; tests set it)"},
    {Knob::kFaCm2, "ES_VK_FA_CM2", T::kBool, "0|1", "1", W::kDevice, R::kPath,
     "prefill attention on cm2 (attention_cm2.comp, 32x32 tiles at 128 invocations) where the "
     "device has row reductions"},
    {Knob::kF16Act, "ES_VK_F16_ACT", T::kEnum, "auto|0|1", "auto", W::kDevice, R::kPath,
     "f16 math in prefill GEMMs: auto = where a coopmat GEMM exists; 0 f32; 1 f16 wherever a "
     "kernel has it"},
    {Knob::kSpinUs, "ES_VK_SPIN_US", T::kUint, "auto|0..10000000", "auto", W::kGraph,
     R::kOperational,
     "microseconds a step's fence is polled before blocking (auto: 3000 on GPUs, 0 on CPU "
     "devices; H200 tg128 1.5B Q4_0 405 -> 445 t/s)"},
    {Knob::kFuse, "ES_VK_FUSE", T::kBool, "0|1", "1", W::kGraph, R::kPath,
     "decode fusions (residual adds, folded norms, dual gate/up GEMV, folded ropes)"},
    {Knob::kGemmBm, "ES_VK_GEMM_BM", T::kUint, "0|64|128", "0", W::kGraph, R::kPath,
     "coopmat GEMM tile rows (0: 128 from 100 tiles, else 64)"},
    {Knob::kGemmSplitk, "ES_VK_GEMM_SPLITK", T::kBool, "0|1", "1", W::kGraph, R::kPath,
     "split-K of the subgroup coopmat GEMM (H200 7B Q4_0 32 rows 1,462 t/s against 892 "
     "without); tests compare both"},
    {Knob::kCm2Quant, "ES_VK_CM2_QUANT", T::kBool, "0|1", "1", W::kGraph, R::kPath,
     "quantized prefill weights through an f16 copy into the cm2 GEMM (pp512 7B Q4_0 8,445 "
     "t/s against 7,116)"},
    {Knob::kDecGemm, "ES_VK_DEC_GEMM", T::kEnum, "auto|0|1", "auto", W::kGraph, R::kPath,
     "Q4_0/Q8_0/Q4_K/Q5_K/Q6_K products of 9-64 rows on the decode-shaped subgroup coopmat "
     "GEMM (matmul_gemm_dec.comp): auto = where the device has subgroup coopmat (H200 7B Q4_0 "
     "9/32 rows 9.4/11.7 ms a step against 15.2/13.4 on the cm2 block loads; H100 7B Q4_K_M "
     "9/32/64 rows 10.9/12.9/19.7 ms against 28.7/30.0/31.9 on the subgroup coopmat GEMM); 1 "
     "wherever it runs (f32 multiply-adds without coopmat: tests); 0 never"},
    {Knob::kGemvTpr, "ES_VK_GEMV_TPR", T::kUint, "4|8|16|32|64|128|256", "128", W::kGraph, R::kPath,
     "quantized GEMV: invocations per output group (7B Q4_0 tg64 197.6 t/s against 184.1 at "
     "64); tests take the clustered variants below the subgroup size"},
    {Knob::kGemvQr, "ES_VK_GEMV_QR", T::kUint, "0|1|2|4|8", "0", W::kGraph, R::kPath,
     "quantized GEMV: adjacent output rows per group (0: 4)"},
    {Knob::kGemvSpl, "ES_VK_GEMV_SPL", T::kUint, "1|2|4", "1", W::kGraph, R::kExperiment,
     "quantized GEMV: consecutive 8-element slices per invocation per step; no recorded "
     "measurement"},
    {Knob::kGemvMagic, "ES_VK_GEMV_MAGIC", T::kBool, "0|1", "1", W::kGraph, R::kExperiment,
     "quantized GEMV: levels to floats by the 0x4B000000 bit trick; no recorded measurement"},
    {Knob::kGemvIdot, "ES_VK_GEMV_IDOT", T::kEnum, "auto|0|1", "auto", W::kGraph, R::kPath,
     "integer-dot GEMV (Q8_0, Q4_0, Q5_K, Q4_K, Q6_K): auto = where the device has 4x8-bit dot "
     "products in hardware"},
    {Knob::kGemvIdotQ4K, "ES_VK_GEMV_IDOT_Q4K", T::kEnum, "auto|0|1", "auto", W::kGraph, R::kPath,
     "dense Q4_K GEMVs on the integer dots (IDOT_K): auto = steps of 2+ rows (H100 V2-Lite "
     "Q4_K_M 5 rows 6.9 ms against 8.3) and one-row GEMVs of 8,192 outputs or more "
     "(ops/matmul.cpp KQuantIdot). Every one on them: H100 7B Q4_K_M tg128 223.8 / 223.0 t/s "
     "against 195.2 / 195.7 on the float GEMV, H200 V2-Lite Q4_K_M 298.5 / 299.6 against "
     "339.8 / 346.2 (its 576-3,072-output GEMVs lose); 1: every one, for tests"},
    {Knob::kGemvIdotQ6K, "ES_VK_GEMV_IDOT_Q6K", T::kEnum, "auto|0|1", "auto", W::kGraph, R::kPath,
     "dense Q6_K GEMVs on the integer dots (IDOT_K6): auto = steps of 2+ rows (H100 7B Q4_K_M "
     "5 rows 9.3 ms with Q4_K's against 10.7) and one-row GEMVs of 8,192 outputs or more. "
     "H100 7B Q4_K_M: lm_head 188.5 us a step against 470.3 (952 GB/s) on the float GEMV, tg128 "
     "233.7 against 223.1; its 512-output attn_v 441 against 372 us; 1: every one, for tests"},
    {Knob::kGemvIdotTpr, "ES_VK_GEMV_IDOT_TPR", T::kUint, "4|8|16|32|64|128|256", "64", W::kGraph,
     R::kPath, "integer-dot GEMV: invocations per output group"},
    {Knob::kGemvIdotQr, "ES_VK_GEMV_IDOT_QR", T::kUint, "0|1|2|4|8", "0", W::kGraph, R::kPath,
     "integer-dot GEMV: rows per group (0: 4, halved over x quantized apart while under "
     "ES_VK_GEMV_MIN_GROUPS workgroups)"},
    {Knob::kGemvIdotWg, "ES_VK_GEMV_IDOT_WG", T::kUint, "128|256", "256", W::kGraph, R::kExperiment,
     "integer-dot GEMV workgroup size (at least TPR); 7B Q4_0 tg128 at TPR 32: 258.7/255.8 t/s "
     "with 128 against 239.4/257.4 at the defaults: not settled"},
    {Knob::kGemvIdotUnroll, "ES_VK_GEMV_IDOT_UNROLL", T::kUint, "auto|1|2|4", "auto", W::kGraph,
     R::kPath,
     "integer-dot GEMV: units of a row loaded ahead of their sums (auto: 1, Q8_0 one-row 2; "
     "others for tests). H100 7B Q4_0 tg64 329.0/328.2 t/s with 1 against 300.2/313.1 with 2, "
     "5-row step 6.2 against 7.2 ms; 7B Q4_K_M 5 rows 10.0 against 15.0 ms; 7B Q8_0 one row "
     "218.2 against 225.0; 4 lost (7B Q8_0 237.9 against 254-258)"},
    {Knob::kGemvIdotLocal, "ES_VK_GEMV_IDOT_LOCAL", T::kUint, "0|1|2|3", "3", W::kGraph, R::kPath,
     "where x is quantized: 0 apart, 1 in the workgroups, 2 rows over 8192 apart, 3 also dual, "
     "2+-row and over-16384-output (lm_head) x apart (7B Q4_0 tg128 282/287 t/s against 264/273 "
     "with 2; the lm_head rule untimed)"},
    {Knob::kGemvMinGroups, "ES_VK_GEMV_MIN_GROUPS", T::kUint, "0|128|256|512|1024|2048", "512",
     W::kGraph, R::kPath,
     "over x quantized apart: QR halves while the GEMV has fewer workgroups (7B down_proj 2.46 "
     "TB/s against 1.53 at 16)"},
    {Knob::kGemvDualQuant, "ES_VK_GEMV_DUAL_QUANT", T::kEnum, "auto|0|1|2", "auto", W::kGraph,
     R::kPath,
     "the dual GEMV writes the down projection's x quantized: auto = 2 for Q4_0, 0 for Q8_0 "
     "(7B Q4_0 357 t/s against 350)"},
    {Knob::kMoeRouteFuse, "ES_VK_MOE_ROUTE_FUSE", T::kBool, "0|1", "1", W::kGraph, R::kPath,
     "MoE decode (up to 4 rows): the router GEMV's last workgroup routes (ops/moe.cpp "
     "RouteInRouterGemv), no moe_route dispatch and one barrier level less a MoE layer (H100, "
     "V2-Lite f16 tg128 279.4 / 280.1 t/s against 268.9 / 266.9 with 0: moe_route apart)"},
    {Knob::kAttnDecode, "ES_VK_ATTN_DECODE", T::kBool, "0|1", "1", W::kGraph, R::kPath,
     "kv-head decode attention (7B Q4_0 tg 354.5 t/s against 320.2 without)"},
    {Knob::kAttnFuse, "ES_VK_ATTN_FUSE", T::kBool, "0|1", "1", W::kGraph, R::kPath,
     "decode attention folds the ropes and cache stores (354.5 against 354.3: one dispatch "
     "less); 0 tests the unfolded path"},
    {Knob::kAttnQuant, "ES_VK_ATTN_QUANT", T::kBool, "0|1", "1", W::kGraph, R::kExperiment,
     "the combine step writes o's x quantized (7B Q4_0 349.8 t/s against 351.7, Q8_0 257.1 "
     "against 254.6: within noise)"},
    {Knob::kAttnSplits, "ES_VK_ATTN_SPLITS", T::kUint, "8|16|32|64", "32", W::kGraph, R::kPath,
     "decode attention: key chunks per (kv head, row) at most"},
    {Knob::kAttnChunk, "ES_VK_ATTN_CHUNK", T::kUint, "1|8|16|32|64|128", "16", W::kGraph, R::kPath,
     "decode attention: keys per chunk at least"},
    {Knob::kMlaRowsHeads, "ES_VK_MLA_ROWS_HEADS", T::kUint, "1|2|4|8|16", "4", W::kGraph,
     R::kExperiment,
     "MLA decode attention in steps of 9-64 rows: query heads a workgroup, each latent row read "
     "once for them (fewer where shared memory is short); an A/B for V2-Lite's served 32-row "
     "steps, whose contexts are ~1,000 keys"},
    {Knob::kMlaRowsSplits, "ES_VK_MLA_ROWS_SPLITS", T::kUint, "auto|1|2|4|8|16|32|64", "auto",
     W::kGraph, R::kExperiment,
     "MLA decode attention in steps of 9-64 rows: key chunks a (head group, row) at most; auto = "
     "64 x 16 / heads x 8 / rows, at least 4 (16 at V2-Lite's 32 rows)"},
}};

const std::vector<RetiredKnob> kRetired = {
    {"ES_VK_CM2_FAST", "on: pp512 1.5B 17,582 t/s / 7B 7,117 with FAST LOOP=1 (docs/vulkan.md)"},
    {"ES_VK_CM2_LOOP", "1 (no K-loop hint): part of the same 17,582 / 7,117 setting"},
    {"ES_VK_CM2_ALIGN", "off: ALIGN 14,918 / 5,981 against 17,582 / 7,117"},
    {"ES_VK_CM2_ORDER", "off: ORDER 14,631 / 5,974 against 17,582 / 7,117"},
    {"ES_VK_CM2_ACC16",
     "off: llama.cpp's setting with f16 accumulators 10,970 / 6,140, without "
     "them 11,164 / 7,322"},
    {"ES_VK_FA_TILE", "32x32: pp512 1.5B 26.5k/26.4k t/s against 25.3k/25.2k at 64x64"},
    {"ES_VK_FA_WG", "128 (with the 32x32 tile above)"},
    {"ES_VK_ORDER",
     "1, dispatches by data-flow level (command.h OrderByLevel): V2-Lite f16 tg128 287.7 / 285.3 "
     "t/s against 272.4 / 270.4, Q4_0 356.5 / 351.3 against 333.5 / 332.5, 7B Q4_0 345.7 / "
     "340.9 against 343.6 / 339.9"},
    {"ES_VK_GEMV_FQR",
     "4 outputs a group for float rows of 2,048 or more, else 1 (ops/matmul.cpp GemvSpecFor): "
     "7B f16 tg128 191.6 t/s at 4 against 161.7 / 164.2 at 1; V2-Lite f16 (all GEMVs alike) "
     "276.8 / 276.2 at 2, 254.5 / 257.6 at 4, 249.6 / 247.5 at 8, 258.2 / 255.1 at 1"},
    {"ES_VK_MOE_ROUTER",
     "off: the router GEMV inside moe_route (one workgroup a token reading the whole router): "
     "V2-Lite Q4_0 tg128 295.0 / 292.2 t/s against 352.4 / 352.9 (an f32 router, 24.6 us a "
     "layer), f16 258.2 / 255.1 against 282.0 / 283.5"},
    {"ES_VK_GEMV_SHORT_ROWS",
     "off: K / 16 lanes an output for MLA's absorbed WukT (K = 128), 6.4 us a dispatch against "
     "6.0 with 32 lanes; V2-Lite f16 tg128 274.1 / 287.2 t/s against 287.7 / 285.3"},
    {"ES_VK_MOE_FUP_QR",
     "2 outputs a group for the float experts' up GEMV (ops/matmul.cpp MoeGemvFor): H100, "
     "V2-Lite f16 tg128 272.0 / 271.3 / 270.1 t/s against 257.3 / 253.3 / 255.4 at 4, 266.7 / "
     "269.8 / 267.0 at 8"},
    {"ES_VK_MOE_FDOWN_UN",
     "0, the float experts' down GEMV one choice at a time: with 3 choices' loads in flight "
     "672.6 us a step against 605.4 (H100, V2-Lite f16), tg128 253.2 / 255.1 t/s against 262.7"},
    {"ES_VK_CM2_BLOCK_ROWS",
     "256: prefill products keep the f16 copy; block loads at every row count (H100, pp512, "
     "two rounds): 7B Q4_0 7,907 / 7,883 t/s at the 128-row tile, 8,244 / 8,408 at 256 rows "
     "against 8,105 / 8,095; 1.5B Q4_0 23,871 / 22,570 against 25,619; 7B Q8_0 7,825 / 8,209 "
     "against 8,009; pp4096 7B Q4_0 8,199 / 9,552 against 9,590"},
    {"ES_VK_MLA_WUV_COMBINE",
     "0, deleted: MLA decode's Wuv GEMV merging its head's split-key chunks (every workgroup "
     "re-reads them): H200, V2-Lite f16 tg128 318.2 / 311.2 t/s against 331.2 / 334.5 without, "
     "260.5 against 285.2 4,096 deep; the merge stays attention_combine's"},
    {"ES_VK_MOE_FDOWN_ROWS",
     "2 groups a workgroup for the float experts' down GEMV: H100, V2-Lite f16 tg128 252.3 at "
     "1, 247.8 at 4, 253.2 / 255.1 at 2"},
    {"ES_VK_GEMV_NARROW",
     "0, deleted: narrow decode GEMVs (a GQA model's 512-output k / v) at QR 1 and TPR up to 256 "
     "while N * TPR / QR was under 65,536: H100 tg128 7B Q4_0 281.4 / 282.4 t/s with it against "
     "304.5 / 306.0 without, V2-Lite f16 284.8 / 283.6 against 290.1 / 287.0, 7B Q4_K_M 242.5 / "
     "233.9 against 235.9 / 233.3"},
    {"ES_VK_NORM_QUANT_FUSE",
     "off, deleted: the output projection's float GEMV writing the FFN norm's quantized x in its "
     "last workgroup: H100 7B Q4_K_M tg128 242.5 / 233.9 t/s with it against da6689e's 244.6 / "
     "236.2; the o GEMV 585.8 us a step with it, ~282 without, for the 186 us of quantize_q8 "
     "it saved"},
    {"ES_VK_MOE_SHARED_FUSE",
     "off, deleted: the shared experts as pseudo-experts of weight 1 inside the float routed "
     "experts' up and down GEMVs (MoE decode, up to 4 rows): H100 V2-Lite f16 tg128 255.6 / "
     "256.4 t/s with it against 267.3 / 269.3 without"},
    {"ES_VK_MLA_COMBINE_FUSE",
     "off, deleted: MLA decode's split-key chunks merged by the last mla_attention workgroup of a "
     "(row, group of heads), no attention_combine: H100 V2-Lite f16 tg128 255.6 / 256.4 t/s with "
     "it against 259.7 / 261.0 without (mla_attention with the merge: 627.2 us a step)"},
    {"ES_VK_CHAIN",
     "off, deleted: decode levels chained by in-shader counters instead of barriers (correct, "
     "greedy ids identical): H100 tg128, atomic-add spin V2-Lite f16 164.5 / 165.5 t/s against "
     "294.9 / 295.0 with barriers, 7B Q4_0 204.1 against 303.8; relaxed atomicLoad spin V2-Lite "
     "f16 181.8 against 280.4, 7B Q4_0 191.1 against 312.5"},
    {"ES_VK_MLA_HEAD_GEMM",
     "9 (more than the GEMV's 8 rows): V2-Lite Q4_0 16 / 32-row steps 9.7 / 13.8 ms against 10.0 / "
     "13.9 from 17 rows, 10.1 / 14.9 prefill only (H100, session 42)"},
    {"ES_VK_MOE_EXPERT_MAJOR",
     "off, deleted: the routed experts' integer-dot GEMVs expert-major (x quantized once, the "
     "pairs grouped by expert, each weight unit unpacked once for up to 8 of an expert's pairs, "
     "the down rows combined after): H200 V2-Lite Q4_0 steps of 8 / 16 / 32 / 64 rows 8.9 / 11.5 / "
     "15.5 / 23.5 ms against 6.8 / 9.5 / 13.6 / 21.9 pair-major (session 42)"},
    {"ES_VK_MOE_EXPERT_DOWN",
     "part of ES_VK_MOE_EXPERT_MAJOR: with the down GEMV token-major 8.1 / 10.6 / 14.7 / 22.9 ms, "
     "still behind the pair-major form"},
    {"ES_VK_MOE_EXPERT_PAIRS", "part of ES_VK_MOE_EXPERT_MAJOR (8 pairs a workgroup measured)"},
    {"ES_VK_MLA_COMBINE_OUT",
     "off, deleted: MLA decode's key-chunk merge and float Wuv product in one dispatch (4 "
     "workgroups a head, each merging the head's partials): H200 V2-Lite Q4_0 one row 357.0 / "
     "352.6 t/s against 369.5 / 374.1 apart (8 rows the same), f16 tg128 276.5 against 304.9 "
     "(session 42)"},
};

const char* kTypeNames[] = {"bool", "uint", "enum", "tile", "text"};
const char* kWhenNames[] = {"process", "device", "graph"};
const char* kSourceNames[] = {"default", "env", "struct"};
const char* kRoleNames[] = {"operational", "path", "experiment"};

std::vector<std::string> SplitBar(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string part; std::getline(ss, part, '|');) out.push_back(part);
  return out;
}

// A whole decimal number (no sign, no trailing text) into *x.
bool ParseU32(const std::string& s, uint32_t* x) {
  if (s.empty() || s.size() > 10) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  const unsigned long long v = std::strtoull(s.c_str(), nullptr, 10);
  if (v > 0xffffffffull) return false;
  *x = uint32_t(v);
  return true;
}

// Whether number x is allowed by a kUint spec part: "lo..hi" or a single number.
bool UintAllowed(const std::string& part, uint32_t x) {
  const size_t dots = part.find("..");
  uint32_t lo = 0, hi = 0;
  if (dots == std::string::npos) return ParseU32(part, &lo) && x == lo;
  return ParseU32(part.substr(0, dots), &lo) && ParseU32(part.substr(dots + 2), &hi) && x >= lo &&
         x <= hi;
}

}  // namespace

const std::array<KnobSpec, kKnobCount>& TuningTable() { return kTable; }
const KnobSpec& Spec(Knob k) { return kTable[size_t(k)]; }
const std::vector<RetiredKnob>& RetiredKnobs() { return kRetired; }
const char* KnobTypeName(KnobType t) { return kTypeNames[int(t)]; }
const char* KnobWhenName(KnobWhen w) { return kWhenNames[int(w)]; }
const char* KnobSourceName(KnobSource s) { return kSourceNames[int(s)]; }
const char* KnobRoleName(KnobRole r) { return kRoleNames[int(r)]; }

Tuning::Value Tuning::Parse(const KnobSpec& s, const std::string& value) {
  Value v;
  v.text = value;
  bool ok = false;
  switch (s.type) {
    case KnobType::kText:
      ok = true;
      break;
    case KnobType::kBool:
      ok = value == "0" || value == "1";
      v.num[0] = value == "1";
      break;
    case KnobType::kEnum:
      for (const std::string& a : SplitBar(s.allowed)) ok = ok || a == value;
      if (ok && value != "auto") ParseU32(value, &v.num[0]);  // numbers among the words
      break;
    case KnobType::kUint:
      if (value == "auto") {
        for (const std::string& a : SplitBar(s.allowed)) ok = ok || a == "auto";
      } else if (ParseU32(value, &v.num[0])) {
        for (const std::string& a : SplitBar(s.allowed)) ok = ok || UintAllowed(a, v.num[0]);
      }
      break;
    case KnobType::kTile: {
      // "AxB" or "AxBxC": each a number from 1 to 4096
      std::stringstream ss(value);
      int n = 0;
      ok = true;
      for (std::string part; std::getline(ss, part, 'x');) {
        ok = ok && n < 3 && ParseU32(part, &v.num[size_t(n)]) && v.num[size_t(n)] >= 1 &&
             v.num[size_t(n)] <= 4096;
        ++n;
      }
      const std::string shape = s.allowed;  // "BMxBNxBK": as many numbers as it has parts
      ok = ok && n == int(std::count(shape.begin(), shape.end(), 'x')) + 1 && value.back() != 'x';
      break;
    }
  }
  ES_CHECK(ok, "vulkan: ", s.name, "='", value, "' is not allowed (", KnobTypeName(s.type), ": ",
           s.allowed, ")");
  return v;
}

Tuning::Tuning() {
  for (const KnobSpec& s : kTable) v_[size_t(s.id)] = Parse(s, s.def);
}

Tuning Tuning::FromEnvironment() {
  Tuning t;
  for (const KnobSpec& s : kTable) {
    const char* e = std::getenv(s.name);
    if (!e || !*e) continue;
    t.v_[size_t(s.id)] = Parse(s, e);
    t.v_[size_t(s.id)].source = KnobSource::kEnv;
  }
  for (const RetiredKnob& r : kRetired)
    if (const char* e = std::getenv(r.name); e && *e)
      std::fprintf(stderr, "vulkan: %s=%s ignored: no longer a knob (settled: %s)\n", r.name, e,
                   r.settled);
  return t;
}

const Tuning& Tuning::Process() {
  static const Tuning t = FromEnvironment();
  return t;
}

Tuning& Tuning::Set(Knob k, const std::string& value) {
  v_[size_t(k)] = Parse(Spec(k), value);
  v_[size_t(k)].source = KnobSource::kStruct;
  return *this;
}

Tuning& Tuning::Set(const std::string& name, const std::string& value) {
  for (const KnobSpec& s : kTable)
    if (name == s.name) return Set(s.id, value);
  for (const RetiredKnob& r : kRetired)
    ES_CHECK(name != r.name, "vulkan: ", name, " is no longer a knob (settled: ", r.settled, ")");
  Fail("vulkan: no tuning knob named ", name);
}

Tuning Tuning::With(const Tuning& over) const {
  Tuning t = *this;
  for (int i = 0; i < kKnobCount; ++i)
    if (over.v_[size_t(i)].source == KnobSource::kStruct) t.v_[size_t(i)] = over.v_[size_t(i)];
  return t;
}

bool Tuning::On(Knob k) const {
  ES_ASSERT(Spec(k).type == KnobType::kBool);
  return v_[size_t(k)].num[0] != 0;
}
uint32_t Tuning::Uint(Knob k) const {
  ES_ASSERT((Spec(k).type == KnobType::kUint || Spec(k).type == KnobType::kEnum) && !IsAuto(k));
  return v_[size_t(k)].num[0];
}
bool Tuning::IsAuto(Knob k) const { return v_[size_t(k)].text == "auto"; }
const std::string& Tuning::Text(Knob k) const { return v_[size_t(k)].text; }
std::array<uint32_t, 3> Tuning::Tile(Knob k) const {
  ES_ASSERT(Spec(k).type == KnobType::kTile);
  return v_[size_t(k)].num;
}

std::string TuningReport(const Tuning& t) {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof(line), "%-24s %-12s %-12s %-8s %-8s %s\n", "knob", "value", "default",
                "source", "read at", "role");
  out += line;
  for (const KnobSpec& s : kTable) {
    std::snprintf(line, sizeof(line), "%-24s %-12s %-12s %-8s %-8s %s\n", s.name,
                  t.Text(s.id).empty() ? "\"\"" : t.Text(s.id).c_str(), *s.def ? s.def : "\"\"",
                  KnobSourceName(t.source(s.id)), KnobWhenName(s.when), KnobRoleName(s.role));
    out += line;
  }
  return out;
}

std::string TuningText(bool markdown) {
  return markdown ? TuningMarkdown() : TuningReport(Tuning::FromEnvironment());
}

std::string TuningMarkdown() {
  std::string out =
      "| knob | type | values | default | read at | role | what |\n"
      "|---|---|---|---|---|---|---|\n";
  auto cell = [](const char* s) {
    std::string c;
    for (const char* p = s; *p; ++p) c += *p == '|' ? std::string("\\|") : std::string(1, *p);
    return c;
  };
  for (const KnobSpec& s : kTable)
    out += std::string("| `") + s.name + "` | " + KnobTypeName(s.type) + " | " + cell(s.allowed) +
           " | " + (*s.def ? cell(s.def) : std::string("(empty)")) + " | " + KnobWhenName(s.when) +
           " | " + KnobRoleName(s.role) + " | " + cell(s.doc) + " |\n";
  out +=
      "\nRetired (settled; setting one prints a warning and changes nothing):\n\n"
      "| knob | kept as code |\n|---|---|\n";
  for (const RetiredKnob& r : kRetired)
    out += std::string("| `") + r.name + "` | " + cell(r.settled) + " |\n";
  return out;
}

}  // namespace es::vk
