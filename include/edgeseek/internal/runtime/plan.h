// Plan: what a model needs and how fast it runs on a device, before running it (issue 20).
//
// The arithmetic is exact and shape-driven: bytes of every weight tensor (its type's RowBytes),
// FLOPs of every matmul (2 × rows × the weight's elements), attention at a KV depth (GQA, MLA in
// the absorbed form for decode and the cheaper of absorbed / non-absorbed for prefill), MoE at the
// expected number of distinct experts a step touches, KV bytes from ModelConfig::MakeKvSpec (what
// `inspect` and the runner use). The prediction is a roofline per phase with the device profile's
// calibrated rates (device_profile.h): time = max(bytes / bandwidth, FLOPs / compute rate) +
// dispatches × per-dispatch overhead + the per-step overhead, and the larger of those three
// terms names the phase's binding limit. docs/plan.md has the formulas and the validation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "edgeseek/internal/core/dtype.h"
#include "edgeseek/internal/core/tensor.h"
#include "edgeseek/internal/models/config.h"

namespace es {

struct DeviceProfile;
struct LayerProbe;
struct HeadProbe;
struct MoeProbe;

// ---- a model's weights, as stored or as a quantization would store them ----------------------
struct PlanTensor {
  std::string name;  // checkpoint name: Hugging Face ("model.layers.3.mlp.up_proj.weight") or GGUF
  Shape shape;       // outermost first; GGUF expert tensors are stacked [experts, rows, cols]
  DType type = DType::kF32;
  size_t bytes = 0;
};

struct ModelWeights {
  std::string name;
  ModelConfig config;
  std::vector<PlanTensor> tensors;
  std::vector<std::string> import_notes;  // an ONNX model's lift summary (Model::import_notes)
  size_t total_bytes() const;
  int64_t parameters() const;
};

// A GGUF file (its own types; the config from its metadata, nothing loaded), a Hugging Face
// folder (config.json + safetensors headers) or an ONNX model (lifted: its tensors as edgeseek
// holds them). Throws es::Error naming the path.
ModelWeights DescribeModelFile(const std::string& path);
// A built-in preset or config.json path with the weights `edgeseek convert --type TYPE` writes:
// TYPE is a quantization preset (q8_0, q4_0, q4_k_m, i4g: BuiltinQuantPolicy, so embeddings and
// the value path follow its rules) or one type for every matrix (bf16, f16, f32, q6_k, ...);
// 1-D tensors are f32. `uniform` applies TYPE to every matrix, rules ignored (inspect's --dtype).
ModelWeights DescribeSynthetic(const std::string& name_or_config, const std::string& type,
                               bool uniform = false);
// The types TYPE's policy gives a model file's tensors, as `edgeseek convert` would write them
// (matrices by the policy, 1-D tensors F32).
void RetypeWeights(ModelWeights& w, const std::string& type);

// ---- what a plan is asked ------------------------------------------------------------------
enum class PlanSplit : uint8_t { kLayer, kHead };

struct PlanOptions {
  int64_t context = 4096;  // KV capacity per sequence (memory)
  int prompt = 512;        // prefill: one chunk of this many tokens from an empty cache
  int gen = 128;           // decode: steps after the prompt; predicted at depth prompt + gen / 2
  int batch = 1;           // sequences decoding together (rows of a decode step)
  DType kv_type = DType::kF16;
  int devices = 1;
  PlanSplit split = PlanSplit::kLayer;
};
// Throws es::Error naming the option when a value is out of range (context 0, prompt past the
// context, a KV type the model's rows do not split into, ...).
void CheckPlanOptions(const ModelConfig& c, const PlanOptions& o);

// ---- per-layer costs -------------------------------------------------------------------------
// One transformer layer. Bytes are weight bytes; FLOPs count multiply and add as two.
struct LayerCost {
  int layer = 0;
  bool mla = false, moe = false;
  size_t attn_bytes = 0;      // norms + projections (MLA: q path, kv_a, o; not kv_b)
  size_t kv_b_bytes = 0;      // MLA: kv_b as stored (non-absorbed prefill reads it)
  size_t absorbed_bytes = 0;  // MLA: wuk_t + wuv as the loader derives them (decode reads them)
  size_t ffn_bytes = 0;       // norm + dense FFN, or router + shared experts
  size_t expert_bytes = 0;    // all routed experts
  size_t active_expert_bytes = 0;  // top-k routed experts at one token
  double proj_flops = 0;    // per token: matmuls outside attention's inner products and experts
  double expert_flops = 0;  // per token: the top-k routed experts
  int64_t kv_bytes_per_token = 0;
  int dispatches = 0;  // graph nodes (ops) of the layer, see LayerDispatches
};

// Graph nodes one layer adds to ModelArch::Build's graph (kWeight nodes excluded): GQA
// attention 11 (norm, q, k, v, 2 rope, 2 stores, attention, o, residual), MLA 13 (norm, q,
// q rope, kv_a, 2 slices, kv norm, k_pe rope, 2 stores, mla, o, residual; q_lora makes q three:
// q_a, its norm, q_b), dense FFN 6 (norm, gate, up, act, down, residual), MoE 3 + 5 with shared
// experts (norm, experts, residual; gate, up, act, down, add). The test PlanArith.
// DispatchesMatchTheBuiltGraph checks these against built graphs.
int LayerDispatches(const ModelConfig& c, int layer);
// Nodes outside the layers: embed, final norm, lm_head (+ get_rows when not every row is read).
int HeadDispatches(bool all_rows_read);

// Attention FLOPs for `queries` new tokens appended at KV depth `depth0` (each attends to every
// earlier key and itself): GQA 4·H·hd per (query, key); MLA absorbed 2·H·(2r + dr) per (query,
// key) + 2·H·r·(dn + dv) per query (q through wuk_t, output through wuv); MLA non-absorbed
// 2·H·(dn + dr + dv) per (query, key) + 2·H·r·(dn + dv) per new key (kv_b expands each latent).
double AttentionFlops(const ModelConfig& c, int64_t depth0, int64_t queries, bool absorbed);

// Expected distinct experts a step of `rows` tokens touches, each picking top_k of n uniformly:
// n·(1 − (1 − k/n)^rows).
double ExpectedExperts(int n_experts, int top_k, int64_t rows);

// A Vulkan prefill's MoE layer runs its routed experts as grouped GEMMs (ops/moe.cpp MoeGrouped,
// past the expert GEMVs' kMoeGemvMaxRows = 64 rows): the router GEMM, moe_route, moe_compact
// (the rows grouped by expert), gate and up as one dispatch each over every expert, SwiGLU, down
// (one dispatch) and moe_combine. Each expert's rows are computed in row tiles (64 rows on the
// cooperative-matrix kernel, 128 on the plain one); a partly filled tile costs a whole one.
constexpr int64_t kPlanMoeGemvMaxRows = 64;
// The dispatches the kMoE node records in that path beyond the one graph node: 8 − 1.
constexpr int kGroupedMoeDispatches = 7;
// Whether a prefill of `rows` rows on the profile's backend takes the grouped expert GEMMs.
bool MoeGroupedPrefill(const DeviceProfile& d, int64_t rows);
// The grouped GEMMs' row tile on the profile's device: 64 with tensor cores (f16_matrix_flops,
// matmul_gemm_cm.comp's bm), else 128 (matmul_gemm.comp's).
int GroupedGemmTile(const DeviceProfile& d);
// Rows the grouped GEMMs compute, summed over the experts, for `rows` tokens each routed to
// top_k of n_experts uniformly: n · E[ceil(r / tile) · tile], r ~ Binomial(rows, k / n) the rows
// one expert gets (mean rows · k / n; an expert with none costs nothing).
double GroupedGemmRows(int n_experts, int top_k, int64_t rows, int tile);

// ---- model-shaped probes (device_profile.h LayerProbe) -------------------------------------
// Plan's roofline of a layer probe's graph, weighed as DecodeCost (rows 1) or PrefillCost
// (rows > 1) weigh a model's layers: max(t_memory, t_compute) + (17 · layers + 1) dispatches ×
// dispatch_s + step_s, where t_memory is the matrices at the GEMV curve (decode) or bandwidth
// (prefill) plus the norms and KV at bandwidth, and t_compute the matmul FLOPs at the type's
// rate plus attention (GQA, 4·H·hd a (query, key) pair) at the f16 rate.
double LayerProbeRoofline(const LayerProbe& probe, const DeviceProfile& d);
// What one of the probe's layers took beyond that roofline, in seconds: (measured − roofline) /
// layers (negative where the probe ran faster than the roofline says).
double LayerProbeExcess(const LayerProbe& probe, const DeviceProfile& d);
// The excess plan charges one layer of width `hidden` whose matrices are mostly of type `t` in a
// step of `rows` rows: from the probes of the nearest width (|log| of the ratio; type t, else
// f16, else the first), linear in rows between the two probes whose rows bracket `rows` (the
// CPU's are at 1, 64 and 128 rows since session 41), and from the largest-rows probe on along
// the line through the one-row probe and it (one probe alone: its excess, × rows / its rows for a
// prefill probe), × hidden / the probe's width where the widths differ. 0 without probes.
double LayerExcess(const DeviceProfile& d, int64_t hidden, DType t, int64_t rows);
// The head probe's roofline as DecodeCost weighs an lm_head: max(its bytes at the GEMV curve +
// the norm's at the bandwidth, 2·V·D at the type's GEMV compute rate) + 3 dispatches (input,
// norm, lm_head) + step_s; its excess is the measured seconds less that.
double HeadProbeRoofline(const HeadProbe& probe, const DeviceProfile& d);
// The excess a decode step's head (once a step) of [vocab, hidden] and type `t` is charged: the
// probe of that type with the nearest V·D (|log| of the ratio), × V·D / the probe's; 0 without one.
double HeadExcess(const DeviceProfile& d, int64_t hidden, int64_t vocab, DType t);

// The routed experts' FLOP/s a MoE probe measured: its layers' expert FLOPs (2 · rows · top_k ·
// 3 · hidden · ffn each) over its seconds less the step, and per layer 3 dispatches (norm, MoE,
// add) and the router GEMM (2 · rows · experts · hidden FLOPs at the f32 GEMM rate). The rate
// holds what the CPU's MoE node does beside its GEMMs (routing, compacting, the combine) and the
// experts' weight stream. 0 where nothing is left after those.
double MoeProbeRate(const MoeProbe& probe, const DeviceProfile& d);
// The rate a prefill's routed experts of type `t` run at, `rows_per_expert` rows each on average
// (prompt · top_k / experts): from the probes of type t of the expert shape nearest
// hidden · ffn (|log| of the ratio), linear in log(rows per expert) between the two probes
// around it, the nearest end's outside them. 0 without a probe of the type (plan then takes the
// GEMM curve at one expert's matrix, as before).
double MoeExpertRate(const DeviceProfile& d, DType t, int64_t hidden, int64_t ffn,
                     double rows_per_expert);

// ---- the plan --------------------------------------------------------------------------------
struct PhaseCost {
  double bytes = 0, flops = 0;
  double dispatches = 0;  // per step
  double steps = 0;
  double t_memory_s = 0, t_compute_s = 0, t_dispatch_s = 0, t_total_s = 0;
  // Σ layers LayerExcess + (decode) HeadExcess (profiles with probes; else 0), in t_total_s;
  // where negative,
  // t_total_s is at least bytes / the profile's bandwidth.
  double t_layer_s = 0;
  std::string bound;  // "bandwidth", "compute" or "dispatch"
  double tokens_per_s = 0;
};

struct DeviceShare {
  int device = 0;
  size_t weights_bytes = 0, kv_bytes = 0, memory_bytes = 0;
  bool fits = false;
};

struct Plan {
  std::string model, device, backend;
  bool calibrated = false;
  PlanOptions options;
  std::vector<LayerCost> layers;
  size_t weights_bytes = 0;  // every tensor as stored + derived (MLA absorbed pair)
  size_t derived_bytes = 0;  // the absorbed pair alone
  // What of the weights is in memory: all of them, except on the CPU backend an untied embedding
  // table (mmapped, a row lookup) counts only the rows of batch x (prompt + gen) tokens.
  size_t resident_weights_bytes = 0;
  size_t kv_bytes = 0;  // batch × context × bytes per token
  int64_t kv_bytes_per_token = 0;
  size_t activation_bytes = 0;  // the prefill chunk's live activations + logits
  size_t overhead_bytes = 0;    // the profile's runtime / driver share
  size_t memory_bytes = 0;      // resident weights + KV + activations + overhead
  size_t device_memory_bytes = 0;
  bool fits = false;
  PhaseCost prefill, decode;
  // --devices N > 1: memory per device and bytes crossing devices per decoded token.
  std::vector<DeviceShare> shares;
  double transfer_bytes_per_token = 0;
  double t_transfer_s = 0;  // per decode step, at the profile's link bandwidth
};

Plan MakePlan(const ModelWeights& w, const DeviceProfile& device, const PlanOptions& o);
nlohmann::json PlanToJson(const Plan& p);
std::string PlanTable(const Plan& p);  // the human-readable form
// Bytes as "1.50 GiB" (B, KiB, MiB, GiB, TiB; two decimals): plan's table and `inspect`.
std::string HumanBytes(double bytes);

}  // namespace es
