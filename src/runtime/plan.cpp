// Plan arithmetic (see plan.h, docs/plan.md). Sections: the model's tensors (from a file or a
// synthetic preset) → per-layer costs → the two phases against a device profile → memory and
// multi-device shares → JSON and table.
#include "edgeseek/internal/runtime/plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "edgeseek/internal/backends/backend.h"
#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/formats/gguf.h"
#include "edgeseek/internal/formats/gguf_names.h"
#include "edgeseek/internal/formats/quant_policy.h"
#include "edgeseek/internal/formats/safetensors.h"
#include "edgeseek/internal/models/arch.h"
#include "edgeseek/internal/models/presets.h"
#include "edgeseek/internal/runtime/device_profile.h"
#include "edgeseek/internal/runtime/micro_batch.h"
#include "edgeseek/internal/runtime/model.h"
#include "edgeseek/internal/runtime/runner.h"
#include "gguf_model.h"
#include "model_loader.h"

namespace es {
namespace fs = std::filesystem;
using json = nlohmann::json;

// ---- the model's tensors ---------------------------------------------------------------------

size_t ModelWeights::total_bytes() const {
  size_t b = 0;
  for (const PlanTensor& t : tensors) b += t.bytes;
  return b;
}

int64_t ModelWeights::parameters() const {
  int64_t n = 0;
  for (const PlanTensor& t : tensors) n += NumElements(t.shape);
  return n;
}

ModelWeights DescribeModelFile(const std::string& path) {
  ModelWeights w;
  w.name = path;
  std::error_code ec;
  if (fs::path(path).extension() == ".gguf") {
    ES_CHECK(fs::is_regular_file(path, ec), "model ", path, ": no such file");
    const auto file = GgufFile::Open(path);
    w.config = GgufModelConfig(*file);
    for (const GgufTensorInfo& t : file->tensor_infos())
      w.tensors.push_back({t.name, t.shape, t.dtype, t.nbytes});
    return w;
  }
  if (!OnnxModelFile(path).empty()) {
    const std::shared_ptr<Model> m = Model::Load(path);
    w.config = m->config();
    for (const Tensor* t : m->weights())
      w.tensors.push_back({t->name, t->shape, t->dtype, t->nbytes});
    w.import_notes = m->import_notes();
    return w;
  }
  ES_CHECK(fs::is_directory(path, ec), "model ", path,
           ": not a .gguf file, an .onnx file nor a Hugging Face folder");
  w.config = LoadHfConfig(path + "/config.json", kCheckpointLater);
  auto st = SafetensorsSet::Open(path);
  CheckHfLayersPresent(w.config, HfLayersPresent(st->Names()), path + "/config.json");
  for (const std::string& n : st->Names()) {
    const Tensor& t = st->Get(n);
    w.tensors.push_back({n, t.shape, t.dtype, t.nbytes});
  }
  return w;
}

ModelWeights DescribeSynthetic(const std::string& name_or_config, const std::string& type,
                               bool uniform) {
  ModelWeights w;
  w.name = name_or_config;
  w.config =
      fs::exists(name_or_config) ? LoadHfConfig(name_or_config) : PresetConfig(name_or_config);
  // The source a synthetic model starts from is bf16 (Model::Synthetic, `convert --synthetic`).
  QuantPolicy policy;
  if (uniform) {
    policy.default_type = ParseDType(type);
  } else {
    policy = BuiltinQuantPolicy(type);
  }
  for (const WeightSpec& s : ExpectedWeights(w.config)) {
    DType t = DType::kF32;
    if (s.shape.size() >= 2) {
      const auto g = HfToGgufName(s.name);
      t = ChooseType(policy, g ? g->gguf_name : s.name, s.shape, DType::kBF16);
    }
    const int64_t n = NumElements(s.shape);
    w.tensors.push_back(
        {s.name, s.shape, t, RowBytes(t, s.shape.back()) * size_t(n / s.shape.back())});
  }
  return w;
}

void RetypeWeights(ModelWeights& w, const std::string& type) {
  const QuantPolicy policy = BuiltinQuantPolicy(type);
  for (PlanTensor& t : w.tensors) {
    // Every tensor, as `convert` does: 1-D ones become F32 (ChooseType's fixed rule 2).
    const auto g = HfToGgufName(t.name);
    t.type = ChooseType(policy, g ? g->gguf_name : t.name, t.shape, t.type);
    const int64_t n = NumElements(t.shape);
    t.bytes = RowBytes(t.type, t.shape.back()) * size_t(n / t.shape.back());
  }
}

// ---- per-layer costs -------------------------------------------------------------------------

int LayerDispatches(const ModelConfig& c, int layer) {
  int n = c.is_mla() ? 13 + (c.q_lora_rank > 0 ? 2 : 0) : 11;
  if (c.IsMoeLayer(layer))
    n += 3 + (c.n_shared_experts > 0 ? 5 : 0);
  else
    n += 6;
  return n;
}

int HeadDispatches(bool all_rows_read) { return 3 + (all_rows_read ? 0 : 1); }

double AttentionFlops(const ModelConfig& c, int64_t depth0, int64_t queries, bool absorbed) {
  // (query, key) pairs: query i (0-based) at position depth0 + i sees depth0 + i + 1 keys.
  const double pairs =
      double(queries) * double(depth0) + double(queries) * double(queries + 1) / 2.0;
  const double H = c.n_heads;
  if (!c.is_mla()) return 4.0 * H * c.head_dim * pairs;
  const double r = c.kv_lora_rank, dn = c.qk_nope_head_dim, dr = c.qk_rope_head_dim,
               dv = c.v_head_dim;
  const double kvb = 2.0 * H * r * (dn + dv);  // kv_b's multiply-adds, per query or per key
  if (absorbed) return 2.0 * H * (2.0 * r + dr) * pairs + kvb * double(queries);
  return 2.0 * H * (dn + dr + dv) * pairs + kvb * double(depth0 + queries);
}

double ExpectedExperts(int n_experts, int top_k, int64_t rows) {
  if (n_experts <= 0 || top_k <= 0 || rows <= 0) return 0;
  return double(n_experts) * (1.0 - std::pow(1.0 - double(top_k) / n_experts, double(rows)));
}

double GroupedGemmRows(int n_experts, int top_k, int64_t rows, int tile) {
  if (n_experts <= 0 || top_k <= 0 || rows <= 0 || tile <= 0) return 0;
  auto padded = [&](double r) { return std::ceil(r / tile) * tile; };
  const double p = double(top_k) / n_experts;
  if (p >= 1.0) return n_experts * padded(double(rows));
  // Binomial(rows, p) term by term in logs (rows up to a long prompt's).
  const double lp = std::log(p), lq = std::log1p(-p), lf = std::lgamma(double(rows) + 1);
  double e = 0;
  for (int64_t r = 1; r <= rows; ++r) {
    const double lpmf = lf - std::lgamma(double(r) + 1) - std::lgamma(double(rows - r) + 1) +
                        double(r) * lp + double(rows - r) * lq;
    e += std::exp(lpmf) * padded(double(r));
  }
  return n_experts * e;
}

bool MoeGroupedPrefill(const DeviceProfile& d, int64_t rows) {
  return d.backend == "vulkan" && rows > kPlanMoeGemvMaxRows;
}

int GroupedGemmTile(const DeviceProfile& d) { return d.f16_matrix_flops.value > 0 ? 64 : 128; }

namespace {

enum class Role { kEmbed, kLmHead, kFinalNorm, kAttn, kKvB, kFfn, kExperts, kOther };

bool Has(const std::string& s, const char* sub) { return s.find(sub) != std::string::npos; }

// Layer index of "model.layers.N." / "blk.N." names, -1 for the others.
int LayerOf(const std::string& n) {
  for (const char* p : {"model.layers.", "blk."}) {
    if (n.rfind(p, 0) != 0) continue;
    const size_t b = std::strlen(p);
    const size_t e = n.find('.', b);
    if (e == std::string::npos) return -1;
    try {
      return std::stoi(n.substr(b, e - b));
    } catch (const std::exception&) {
      return -1;
    }
  }
  return -1;
}

Role RoleOf(const std::string& n) {
  if (n == "model.embed_tokens.weight" || n == "token_embd.weight") return Role::kEmbed;
  if (n == "lm_head.weight" || n == "output.weight") return Role::kLmHead;
  if (n == "model.norm.weight" || n == "output_norm.weight") return Role::kFinalNorm;
  if (LayerOf(n) < 0) return Role::kOther;
  if (Has(n, ".mlp.experts.") || Has(n, "_exps.")) return Role::kExperts;
  if (Has(n, "kv_b_proj") || Has(n, ".attn_kv_b.") || Has(n, ".attn_k_b.") || Has(n, ".attn_v_b."))
    return Role::kKvB;
  if (Has(n, ".self_attn.") || Has(n, "input_layernorm") || Has(n, ".attn_")) return Role::kAttn;
  return Role::kFfn;
}

// The absorbed pair's type as BuildAbsorbed derives it from kv_b's.
DType AbsorbedType(DType kv_b) {
  if (kv_b == DType::kBF16 || kv_b == DType::kF16) return kv_b;
  return IsQuantized(kv_b) ? DType::kF16 : DType::kF32;
}

// Elements of one matrix of the tensor (a stacked expert tensor counts one expert).
double MatrixElems(const PlanTensor& t) {
  if (t.shape.size() < 2) return 0;
  return double(t.shape[t.shape.size() - 1]) * double(t.shape[t.shape.size() - 2]);
}

// One tensor's share of a tally: its bytes and FLOPs, and the size of one of its matrices (the
// profile's rate curves are looked up there; 0 for vectors and derived weights: the type's
// single rate).
// `rate`: FLOP/s a probe measured for these FLOPs (a prefill's routed experts: MoeExpertRate),
// 0 to take the profile's rate for the type and size.
struct MatCost {
  DType type;
  double bytes, flops, matrix_bytes, rate;
};

struct TypedBytes {
  std::map<DType, double> bytes;  // weight bytes by type
  std::map<DType, double> flops;  // matmul FLOPs by weight type
  std::vector<MatCost> mats;      // the same, tensor by tensor
  void Add(DType t, double b, double f, double matrix_bytes = 0, double rate = 0) {
    bytes[t] += b;
    flops[t] += f;
    mats.push_back({t, b, f, matrix_bytes, rate});
  }
  // Scales every entry's bytes and FLOPs (not the matrix sizes).
  void Scale(double by_bytes, double by_flops) {
    for (auto& [t, b] : bytes) b *= by_bytes, flops[t] *= by_flops;
    for (MatCost& m : mats) m.bytes *= by_bytes, m.flops *= by_flops;
  }
};

// One matrix's bytes (a stacked expert tensor: one expert's), 0 for vectors.
double MatrixBytes(const PlanTensor& t) {
  if (t.shape.size() < 2) return 0;
  return t.shape.size() == 3 ? double(t.bytes) / double(t.shape[0]) : double(t.bytes);
}

}  // namespace

void CheckPlanOptions(const ModelConfig& c, const PlanOptions& o) {
  ES_CHECK(o.context >= 1, "--context must be at least 1 (got ", o.context, ")");
  ES_CHECK(o.prompt >= 1, "--prompt must be at least 1 (got ", o.prompt, ")");
  ES_CHECK(o.gen >= 0, "--gen must not be negative (got ", o.gen, ")");
  ES_CHECK(int64_t(o.prompt) + o.gen <= o.context, "--prompt ", o.prompt, " + --gen ", o.gen,
           " does not fit in --context ", o.context);
  ES_CHECK(o.batch >= 1 && o.batch <= 4096, "--batch must be in 1..4096 (got ", o.batch, ")");
  ES_CHECK(o.devices >= 1 && o.devices <= 64, "--devices must be in 1..64 (got ", o.devices, ")");
  if (o.devices > 1 && o.split == PlanSplit::kLayer)
    ES_CHECK(c.n_layers >= o.devices, "--split layer over ", o.devices,
             " devices needs at least as many layers (the model has ", c.n_layers, ")");
  if (o.devices > 1 && o.split == PlanSplit::kHead) {
    ES_CHECK(c.n_heads % o.devices == 0, "--split head: ", c.n_heads,
             " attention heads do not divide over ", o.devices, " devices");
    if (!c.is_mla())
      ES_CHECK(c.n_kv_heads % o.devices == 0, "--split head: ", c.n_kv_heads,
               " KV heads do not divide over ", o.devices, " devices");
  }
}

// ---- the plan --------------------------------------------------------------------------------

namespace {

void Finish(PhaseCost& ph, double tokens, double t_mem, double t_comp, const DeviceProfile& d) {
  ph.t_memory_s = t_mem;
  ph.t_compute_s = t_comp;
  ph.t_dispatch_s = ph.dispatches * d.dispatch_s.value + d.step_s.value;
  ph.t_total_s = std::max(t_mem, t_comp) + ph.t_dispatch_s + ph.t_layer_s;
  // A probe that ran faster than its roofline (a GPU whose lone matmuls pay more than a model's
  // layers do) takes time off; never below the phase's bytes at the profile's bandwidth.
  if (ph.t_layer_s < 0) ph.t_total_s = std::max(ph.t_total_s, ph.bytes / d.bandwidth.value);
  ph.bound = t_mem >= t_comp ? "bandwidth" : "compute";
  if (ph.t_dispatch_s + ph.t_layer_s > std::max(t_mem, t_comp)) ph.bound = "dispatch";
  ph.tokens_per_s = ph.t_total_s > 0 ? tokens / ph.t_total_s : 0;
}

// What the stored tensors add up to, layer by layer, before the two phases weigh them.
struct WeightTally {
  const PlanTensor* embed = nullptr;
  const PlanTensor* lm_head = nullptr;  // the embedding itself when tied
  size_t other_bytes = 0;               // final norm, anything outside the layers
  std::vector<TypedBytes> dense;        // per layer: attention, dense FFN, router, shared experts
  std::vector<TypedBytes> expert;       // per layer: one routed expert (after ScaleToOneExpert)
  std::vector<DType> kv_b_type;         // per layer: MLA's kv_b as stored
};

// The type most of a layer's dense weight bytes are in (f32 for an empty tally).
DType MainType(const TypedBytes& tb) {
  DType best = DType::kF32;
  double most = -1;
  for (auto& [t, b] : tb.bytes)
    if (b > most) best = t, most = b;
  return best;
}

// Σ over the model's layers of the excess its layers' probes measured (LayerExcess).
double LayersExcess(const ModelConfig& c, const WeightTally& wt, const DeviceProfile& d,
                    int64_t rows) {
  if (d.layer_probes.empty()) return 0;
  double s = 0;
  for (int l = 0; l < c.n_layers; ++l)
    s += LayerExcess(d, c.hidden_size, MainType(wt.dense[size_t(l)]), rows);
  return s;
}

// Each layer's flags, dispatch count and KV share; the byte and FLOP sums start at zero.
void InitLayers(const ModelConfig& c, Plan& p) {
  p.layers.resize(size_t(c.n_layers));
  for (int l = 0; l < c.n_layers; ++l) {
    LayerCost& lc = p.layers[size_t(l)];
    lc.layer = l;
    lc.mla = c.is_mla();
    lc.moe = c.IsMoeLayer(l);
    lc.kv_bytes_per_token = p.kv_bytes_per_token / c.n_layers;
    lc.dispatches = LayerDispatches(c, l);
  }
}

// Sorts every tensor into its layer and role: adds to p.layers' bytes and FLOPs per token and
// to the tally by weight type; finds the embedding and the head.
WeightTally TallyWeights(const ModelWeights& w, const ModelConfig& c, Plan& p) {
  WeightTally wt;
  wt.dense.resize(size_t(c.n_layers));
  wt.expert.resize(size_t(c.n_layers));
  wt.kv_b_type.assign(size_t(c.n_layers), DType::kBF16);
  for (const PlanTensor& t : w.tensors) {
    const Role role = RoleOf(t.name);
    const int l = LayerOf(t.name);
    if (role == Role::kEmbed) wt.embed = &t;
    if (role == Role::kLmHead) wt.lm_head = &t;
    if (l < 0 || l >= c.n_layers) {
      if (role != Role::kEmbed && role != Role::kLmHead) wt.other_bytes += t.bytes;
      continue;
    }
    LayerCost& lc = p.layers[size_t(l)];
    const double mm = 2.0 * MatrixElems(t);
    switch (role) {
      case Role::kAttn:
        lc.attn_bytes += t.bytes;
        lc.proj_flops += mm;
        wt.dense[size_t(l)].Add(t.type, double(t.bytes), mm, MatrixBytes(t));
        break;
      case Role::kKvB: {
        lc.kv_b_bytes += t.bytes;
        wt.kv_b_type[size_t(l)] = t.type;
        // The absorbed pair has kv_b's elements (wuk_t [H·r, dn] + wuv [H·dv, r]).
        const DType at = AbsorbedType(t.type);
        const int64_t elems = NumElements(t.shape);
        lc.absorbed_bytes += RowBytes(at, 1) * size_t(elems);
        break;
      }
      case Role::kExperts: {
        lc.expert_bytes += t.bytes;
        // Stacked GGUF tensors hold every expert; HF names one expert a tensor.
        const double share = t.shape.size() == 3 ? 1.0 / double(t.shape[0]) : 1.0;
        wt.expert[size_t(l)].Add(t.type, double(t.bytes) * share, mm, MatrixBytes(t));
        break;
      }
      default:  // FFN, router, shared experts, norms
        lc.ffn_bytes += t.bytes;
        lc.proj_flops += mm;
        wt.dense[size_t(l)].Add(t.type, double(t.bytes), mm, MatrixBytes(t));
    }
  }
  ES_CHECK(wt.embed != nullptr, "model ", w.name, ": no token embedding tensor");
  if (wt.lm_head == nullptr) {
    ES_CHECK(c.tie_word_embeddings, "model ", w.name,
             ": no output (lm_head) tensor and the embedding is not tied");
    wt.lm_head = wt.embed;
  }
  return wt;
}

// Per expert (HF: each expert's projections summed; GGUF: each stacked tensor's share): scales
// the expert tally to one expert and sets each MoE layer's top-k bytes and FLOPs.
void ScaleToOneExpert(const ModelWeights& w, const ModelConfig& c, WeightTally& wt, Plan& p) {
  const int E = c.n_routed_experts, K = c.num_experts_per_tok;
  for (int l = 0; l < c.n_layers; ++l) {
    LayerCost& lc = p.layers[size_t(l)];
    if (!lc.moe) continue;
    TypedBytes& te = wt.expert[size_t(l)];
    // HF lists E tensors per projection: their Add()s summed all experts; scale to one.
    const bool stacked = std::any_of(w.tensors.begin(), w.tensors.end(), [&](const PlanTensor& t) {
      return LayerOf(t.name) == l && RoleOf(t.name) == Role::kExperts && t.shape.size() == 3;
    });
    if (!stacked) te.Scale(1.0 / E, 1.0 / E);
    double one_flops = 0, one_bytes = 0;
    for (auto& [t, b] : te.bytes) one_bytes += b, one_flops += te.flops[t];
    lc.active_expert_bytes = size_t(one_bytes * K);
    lc.expert_flops = one_flops * K;
  }
}

// Adds the routed experts `rows` rows touch (expected distinct experts, K per row) to tb. With
// `d` (a prefill), their FLOPs take the profile's MoE probes' rate at rows · K / E rows an expert
// where it has one for their type (MoeExpertRate), else the GEMM curve at one expert's matrix.
void AddTouchedExperts(const ModelConfig& c, const TypedBytes& expert, int64_t rows, TypedBytes& tb,
                       const DeviceProfile* d = nullptr) {
  const int E = c.n_routed_experts, K = c.num_experts_per_tok;
  const double touched = ExpectedExperts(E, K, rows);
  const double per_expert = double(rows) * K / E;
  for (const MatCost& m : expert.mats) {
    const double rate =
        d ? MoeExpertRate(*d, m.type, c.hidden_size, c.moe_intermediate_size, per_expert) : 0;
    tb.Add(m.type, m.bytes * touched, m.flops * double(K) * double(rows), m.matrix_bytes, rate);
  }
}

// A Vulkan prefill's grouped expert GEMMs (MoeGroupedPrefill): each touched expert's weights read
// once; the FLOPs of the padded row tiles (GroupedGemmRows); one dispatch a projection over every
// expert, so its rate is the GEMM curve's at the touched experts' bytes together, not one
// expert's (a lone expert-sized GEMM fills a fraction of a large GPU; the grouped one does not).
void AddGroupedExperts(const ModelConfig& c, const TypedBytes& expert, const DeviceProfile& d,
                       int64_t rows, TypedBytes& tb) {
  const int E = c.n_routed_experts, K = c.num_experts_per_tok;
  const double touched = ExpectedExperts(E, K, rows);
  const double padded = GroupedGemmRows(E, K, rows, GroupedGemmTile(d));
  for (const MatCost& m : expert.mats)
    tb.Add(m.type, m.bytes * touched, m.flops * padded, m.matrix_bytes * touched);
}

// Decode: B rows, each at depth prompt + gen / 2.
PhaseCost DecodeCost(const Plan& p, const ModelConfig& c, const WeightTally& wt,
                     const DeviceProfile& d, const PlanOptions& o) {
  const int64_t B = o.batch;
  const int64_t depth = int64_t(o.prompt) + o.gen / 2;
  const double kvt = double(p.kv_bytes_per_token);
  const double embed_row = double(wt.embed->bytes) / double(c.vocab_size);
  TypedBytes tb;
  double attn_flops = 0;
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerCost& lc = p.layers[size_t(l)];
    for (const MatCost& m : wt.dense[size_t(l)].mats)
      tb.Add(m.type, m.bytes, m.flops * double(B), m.matrix_bytes);
    if (lc.mla) {
      // The absorbed pair: its reads, and its multiply-adds are AttentionFlops' per-query term.
      tb.Add(AbsorbedType(wt.kv_b_type[size_t(l)]), double(lc.absorbed_bytes), 0);
    }
    if (lc.moe) AddTouchedExperts(c, wt.expert[size_t(l)], B, tb);
    attn_flops += AttentionFlops(c, depth, 1, true) * double(B);
  }
  const double lm_flops = 2.0 * double(c.vocab_size) * double(c.hidden_size);
  tb.Add(wt.lm_head->type, double(wt.lm_head->bytes), lm_flops * double(B),
         double(wt.lm_head->bytes));
  const double kv_read = double(B) * double(depth + 1) * kvt;  // keys read incl. the new one
  const double kv_write = double(B) * kvt;
  double t_mem =
      (kv_read + kv_write + double(B) * embed_row + double(wt.other_bytes)) / d.bandwidth.value;
  double t_comp = attn_flops / d.GemvComputeRate(DType::kF16);
  PhaseCost ph;
  ph.bytes = kv_read + kv_write + double(B) * embed_row + double(wt.other_bytes);
  // Bytes summed per rate before dividing (one division per type without a curve).
  std::map<double, double> bytes_at_rate;
  for (const MatCost& m : tb.mats)
    bytes_at_rate[d.GemvBytesRate(m.type, m.matrix_bytes)] += m.bytes;
  for (auto& [rate, b] : bytes_at_rate) t_mem += b / rate;
  for (auto& [t, b] : tb.bytes) {
    ph.bytes += b;
    t_comp += tb.flops[t] / d.GemvComputeRate(t);
    ph.flops += tb.flops[t];
  }
  ph.flops += attn_flops;
  ph.steps = 1;
  ph.dispatches = HeadDispatches(true);
  for (const LayerCost& lc : p.layers) ph.dispatches += lc.dispatches;
  ph.t_layer_s =
      LayersExcess(c, wt, d, B) + HeadExcess(d, c.hidden_size, c.vocab_size, wt.lm_head->type);
  Finish(ph, double(B), t_mem, t_comp, d);
  return ph;
}

// Prefill: one chunk of P rows from an empty cache, the last row's logits.
PhaseCost PrefillCost(const Plan& p, const ModelConfig& c, const WeightTally& wt,
                      const DeviceProfile& d, const PlanOptions& o) {
  const int64_t P = o.prompt;
  const double kvt = double(p.kv_bytes_per_token);
  const double embed_row = double(wt.embed->bytes) / double(c.vocab_size);
  TypedBytes tb;
  double attn_flops = 0;
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerCost& lc = p.layers[size_t(l)];
    for (const MatCost& m : wt.dense[size_t(l)].mats)
      tb.Add(m.type, m.bytes, m.flops * double(P), m.matrix_bytes);
    if (lc.mla) {
      // The cheaper form: absorbed reads the pair, non-absorbed expands with kv_b as stored.
      const double fa = AttentionFlops(c, 0, P, true), fn = AttentionFlops(c, 0, P, false);
      attn_flops += std::min(fa, fn);
      if (fa <= fn)
        tb.Add(AbsorbedType(wt.kv_b_type[size_t(l)]), double(lc.absorbed_bytes), 0);
      else
        tb.Add(wt.kv_b_type[size_t(l)], double(lc.kv_b_bytes), 0);
    } else {
      attn_flops += AttentionFlops(c, 0, P, true);
    }
    if (lc.moe && MoeGroupedPrefill(d, P))
      AddGroupedExperts(c, wt.expert[size_t(l)], d, P, tb);
    else if (lc.moe)
      AddTouchedExperts(c, wt.expert[size_t(l)], P, tb, &d);
  }
  const double lm_flops = 2.0 * double(c.vocab_size) * double(c.hidden_size);
  tb.Add(wt.lm_head->type, double(wt.lm_head->bytes), lm_flops, double(wt.lm_head->bytes));
  PhaseCost ph;
  ph.bytes = double(P) * kvt + double(P) * embed_row + double(wt.other_bytes);
  double t_mem = ph.bytes / d.bandwidth.value;
  // Attention's products run where the backend's f16 / f32 matmuls do.
  double t_comp = attn_flops / d.GemmRate(DType::kF16);
  // FLOPs summed per rate before dividing (one division per type without a curve).
  std::map<double, double> flops_at_rate;
  for (const MatCost& m : tb.mats)
    flops_at_rate[m.rate > 0 ? m.rate : d.GemmRate(m.type, m.matrix_bytes)] += m.flops;
  for (auto& [rate, f] : flops_at_rate) t_comp += f / rate;
  for (auto& [t, b] : tb.bytes) {
    ph.bytes += b;
    t_mem += b / d.bandwidth.value;
    ph.flops += tb.flops[t];
  }
  ph.flops += attn_flops;
  ph.steps = 1;
  ph.dispatches = HeadDispatches(P == 1);
  for (const LayerCost& lc : p.layers)
    ph.dispatches +=
        lc.dispatches + (lc.moe && MoeGroupedPrefill(d, P) ? kGroupedMoeDispatches : 0);
  ph.t_layer_s = LayersExcess(c, wt, d, P);
  Finish(ph, double(P), t_mem, t_comp, d);
  return ph;
}

// Live activations of the prefill chunk (f32): the residual stream, the normed input, the
// widest projection outputs (q | k | v or gate | up with the SwiGLU result), attention's
// output, and the one row of logits. An estimate of the arena, not its plan.
size_t ActivationBytes(const ModelConfig& c, const PlanOptions& o) {
  const double T = o.prompt;
  const double D = double(c.hidden_size);
  double widest = double(c.intermediate_size);
  if (c.n_routed_experts > 0)
    widest = std::max(widest, double(c.moe_intermediate_size) * std::max(1, c.n_shared_experts));
  const double q_width = c.is_mla() ? double(c.n_heads) * (c.qk_nope_head_dim + c.qk_rope_head_dim)
                                    : double(c.n_heads) * c.head_dim;
  const double kv_width =
      c.is_mla() ? double(c.kv_lora_rank + c.qk_rope_head_dim) : 2.0 * c.n_kv_heads * c.head_dim;
  return size_t(4.0 * T * (3.0 * D + std::max(3.0 * widest, 2.0 * q_width + kv_width)) +
                4.0 * double(c.vocab_size));
}

// The tokens a sequence's cache holds: both backends allocate it in blocks of kKvBlockTokens
// (backend.h), so a context rounds up to a whole block.
int64_t KvTokens(const PlanOptions& o) {
  return (o.context + kKvBlockTokens - 1) / kKvBlockTokens * kKvBlockTokens;
}

// Memory: resident weights, KV for batch × context, activations, the profile's overhead.
void AddMemory(const ModelConfig& c, const WeightTally& wt, const DeviceProfile& d,
               const PlanOptions& o, Plan& p) {
  p.kv_bytes = size_t(o.batch) * size_t(KvTokens(o)) * size_t(p.kv_bytes_per_token);
  p.activation_bytes = ActivationBytes(c, o);
  p.overhead_bytes = size_t(d.reserved_bytes.value);
  // The CPU backend reads weights where the file maps them and fills their page tables at load
  // (cpu_backend.cpp Prefault: every weight in the model's order, the embedding first, while
  // their running total fits in half of the available memory — plan takes half the device's),
  // so the embedding is resident whole. An untied one too large for that is a row lookup: only
  // the rows of the tokens seen become resident. GPU backends upload every weight whole.
  p.resident_weights_bytes = p.weights_bytes;
  if (d.backend == "cpu" && wt.lm_head != wt.embed &&
      double(wt.embed->bytes) > d.memory_bytes.value / 2) {
    const double V = double(c.vocab_size);
    const double embed_row = double(wt.embed->bytes) / V;
    const double rows = std::min(V, double(o.batch) * double(int64_t(o.prompt) + o.gen));
    p.resident_weights_bytes -= wt.embed->bytes - size_t(rows * embed_row);
  }
  p.memory_bytes = p.resident_weights_bytes + p.kv_bytes + p.activation_bytes + p.overhead_bytes;
  p.device_memory_bytes = size_t(d.memory_bytes.value);
  p.fits = p.memory_bytes <= p.device_memory_bytes;
}

// --split layer: contiguous layer ranges; the embedding on the first device, the head on the
// last. The hidden state ([B, D] f32) crosses each of the N − 1 boundaries once a step.
void SplitByLayer(const ModelConfig& c, const WeightTally& wt, const DeviceProfile& d,
                  const PlanOptions& o, double link, Plan& p) {
  const int N = o.devices;
  const double D = double(c.hidden_size);
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerCost& lc = p.layers[size_t(l)];
    DeviceShare& s = p.shares[size_t(int64_t(l) * N / c.n_layers)];
    s.weights_bytes +=
        lc.attn_bytes + lc.kv_b_bytes + lc.absorbed_bytes + lc.ffn_bytes + lc.expert_bytes;
    s.kv_bytes += size_t(o.batch) * size_t(KvTokens(o)) * size_t(lc.kv_bytes_per_token);
  }
  p.shares.front().weights_bytes += wt.embed->bytes;
  if (wt.lm_head != wt.embed) p.shares.back().weights_bytes += wt.lm_head->bytes;
  p.shares.back().weights_bytes += wt.other_bytes;
  p.transfer_bytes_per_token = double(N - 1) * D * 4.0;
  // Devices take turns on one token: no gain in speed, a hop per boundary.
  p.t_transfer_s = double(N - 1) * (double(o.batch) * D * 4.0 / link + d.step_s.value);
  p.decode.t_total_s += p.t_transfer_s;
  // The prompt as micro-batches (runtime/micro_batch.h): M parts through the N stages as a
  // wavefront of M + N − 1 waves. A wave is one stage's work on one part: its share of the
  // weights read again (1/N of the bytes), 1/(N M) of the FLOPs, its layers' dispatches. Each
  // boundary carries the prompt's rows in M messages. M = 1: the stages in turn, as decode.
  PhaseCost& pf = p.prefill;
  const int M = MicroBatchParts(int(o.prompt), kMicroBatchRows, 2 * N);
  const double waves = double(M + N - 1);
  pf.t_memory_s = waves * pf.t_memory_s / N;
  pf.t_compute_s = waves * pf.t_compute_s / (double(N) * M);
  pf.t_dispatch_s = waves * pf.t_dispatch_s / N;
  pf.t_layer_s = waves * pf.t_layer_s / (double(N) * M);
  pf.t_total_s = std::max(pf.t_memory_s, pf.t_compute_s) + pf.t_dispatch_s + pf.t_layer_s +
                 double(N - 1) * (double(o.prompt) * D * 4.0 / link + M * d.step_s.value);
  pf.tokens_per_s = pf.t_total_s > 0 ? double(o.prompt) / pf.t_total_s : 0;
}

// --split head: heads (and FFN columns, experts) split N ways; the embedding and lm_head too.
// MLA's latent is shared by every head, so each device keeps the whole latent cache. Two
// all-reduces of [B, D] f32 a layer (after o and after the FFN), ring: 2 (N − 1) / N of the data
// each.
void SplitByHead(const ModelConfig& c, const DeviceProfile& d, const PlanOptions& o, double link,
                 Plan& p) {
  const int N = o.devices;
  const double D = double(c.hidden_size);
  const size_t per = (p.weights_bytes + size_t(N) - 1) / size_t(N);
  const size_t kv = c.is_mla() ? p.kv_bytes : p.kv_bytes / size_t(N);
  for (auto& s : p.shares) s.weights_bytes = per, s.kv_bytes = kv;
  const double ar = 2.0 * double(N - 1) / double(N) * D * 4.0;
  p.transfer_bytes_per_token = 2.0 * c.n_layers * ar;
  p.t_transfer_s = 2.0 * c.n_layers * (double(o.batch) * ar / link + d.dispatch_s.value);
  PhaseCost& ph = p.decode;
  ph.t_memory_s /= N;
  ph.t_compute_s /= N;
  ph.t_total_s =
      std::max(ph.t_memory_s, ph.t_compute_s) + ph.t_dispatch_s + ph.t_layer_s + p.t_transfer_s;
}

// Several devices: each one's share of memory, the bytes and time crossing devices per step.
void SplitAcrossDevices(const ModelConfig& c, const WeightTally& wt, const DeviceProfile& d,
                        const PlanOptions& o, Plan& p) {
  const double link = d.link_bytes_per_s.value > 0 ? d.link_bytes_per_s.value : d.bandwidth.value;
  p.shares.resize(size_t(o.devices));
  if (o.split == PlanSplit::kLayer)
    SplitByLayer(c, wt, d, o, link, p);
  else
    SplitByHead(c, d, o, link, p);
  for (size_t i = 0; i < p.shares.size(); ++i) {
    DeviceShare& s = p.shares[i];
    s.device = int(i);
    s.memory_bytes = s.weights_bytes + s.kv_bytes + p.activation_bytes + p.overhead_bytes;
    s.fits = s.memory_bytes <= p.device_memory_bytes;
  }
  p.fits =
      std::all_of(p.shares.begin(), p.shares.end(), [](const DeviceShare& s) { return s.fits; });
  PhaseCost& ph = p.decode;
  ph.tokens_per_s = ph.t_total_s > 0 ? double(o.batch) / ph.t_total_s : 0;
  if (p.t_transfer_s > std::max({ph.t_memory_s, ph.t_compute_s, ph.t_dispatch_s}))
    ph.bound = "transfer";
}

}  // namespace

// ---- model-shaped probes ---------------------------------------------------------------------

double LayerProbeRoofline(const LayerProbe& pr, const DeviceProfile& d) {
  const int64_t D = pr.hidden, F = pr.ffn, qw = pr.heads * pr.head_dim,
                kvw = pr.kv_heads * pr.head_dim;
  const double R = pr.rows, L = pr.layers;
  // [n, k] of q, k, v, o, gate, up, down.
  const std::pair<int64_t, int64_t> mats[] = {{qw, D}, {kvw, D}, {kvw, D}, {D, qw},
                                              {F, D},  {F, D},   {D, F}};
  const double kv_row = 2.0 * double(RowBytes(pr.kv_type, kvw));
  const double pairs = R * double(pr.depth) + R * (R + 1) / 2;
  const double attn = 4.0 * double(pr.heads) * double(pr.head_dim) * pairs;
  double t_mem = 0, t_comp = 0, other = 2.0 * 4.0 * double(D);  // the two f32 norms
  for (const auto& [n, k] : mats) {
    const double bytes = double(RowBytes(pr.type, k)) * double(n), flops = 2.0 * R * n * k;
    if (pr.rows == 1) {
      t_mem += bytes / d.GemvBytesRate(pr.type, bytes);
      t_comp += flops / d.GemvComputeRate(pr.type);
    } else {
      other += bytes;
      t_comp += flops / d.GemmRate(pr.type, bytes);
    }
  }
  if (pr.rows == 1) {
    other += (double(pr.depth) + 2) * kv_row;  // the keys read incl. the new one, its write
    t_comp += attn / d.GemvComputeRate(DType::kF16);
  } else {
    other += R * kv_row;
    t_comp += attn / d.GemmRate(DType::kF16);
  }
  t_mem += other / d.bandwidth.value;
  return L * std::max(t_mem, t_comp) + (17 * L + 1) * d.dispatch_s.value + d.step_s.value;
}

double LayerProbeExcess(const LayerProbe& pr, const DeviceProfile& d) {
  return (pr.seconds.value - LayerProbeRoofline(pr, d)) / pr.layers;
}

double LayerExcess(const DeviceProfile& d, int64_t hidden, DType t, int64_t rows) {
  if (d.layer_probes.empty()) return 0;
  // The probes of the nearest width (in log), the first of them where several are as near; of
  // the model's type there, else f16, else the first type probed at that width.
  const LayerProbe& nearest = *std::min_element(
      d.layer_probes.begin(), d.layer_probes.end(), [&](const LayerProbe& a, const LayerProbe& b) {
        return std::abs(std::log(double(hidden) / double(a.hidden))) <
               std::abs(std::log(double(hidden) / double(b.hidden)));
      });
  const int64_t width = nearest.hidden;
  auto has = [&](DType want) {
    return std::any_of(d.layer_probes.begin(), d.layer_probes.end(),
                       [&](const LayerProbe& p) { return p.hidden == width && p.type == want; });
  };
  const DType use = has(t) ? t : has(DType::kF16) ? DType::kF16 : nearest.type;
  const LayerProbe *one = nullptr, *many = nullptr;
  std::vector<const LayerProbe*> by_rows;  // the first probe of each row count, by rows
  for (const LayerProbe& p : d.layer_probes) {
    if (p.hidden != width || p.type != use) continue;
    if (p.rows == 1 && !one) one = &p;
    if (p.rows > 1 && (!many || p.rows > many->rows)) many = &p;
    if (std::none_of(by_rows.begin(), by_rows.end(),
                     [&](const LayerProbe* q) { return q->rows == p.rows; }))
      by_rows.push_back(&p);
  }
  std::sort(by_rows.begin(), by_rows.end(),
            [](const LayerProbe* a, const LayerProbe* b) { return a->rows < b->rows; });
  double e = 0;
  if (one && many && rows < many->rows) {
    // Between two probes' rows: linear between their excesses (session 41: not one line).
    size_t i = 1;
    while (by_rows[i]->rows < rows) ++i;
    const LayerProbe &a = *by_rows[i - 1], &b = *by_rows[i];
    const double ea = LayerProbeExcess(a, d), eb = LayerProbeExcess(b, d);
    e = ea + (eb - ea) * double(rows - a.rows) / double(b.rows - a.rows);
  } else if (one && many) {
    const double e1 = LayerProbeExcess(*one, d), em = LayerProbeExcess(*many, d);
    e = e1 + (em - e1) * double(rows - 1) / double(many->rows - 1);
  } else if (one) {
    e = LayerProbeExcess(*one, d);
  } else if (many) {
    e = LayerProbeExcess(*many, d) * double(rows) / double(many->rows);
  }
  return e * double(hidden) / double(width);
}

double HeadProbeRoofline(const HeadProbe& h, const DeviceProfile& d) {
  const double bytes = double(RowBytes(h.type, h.hidden)) * double(h.vocab);
  const double t_mem =
      bytes / d.GemvBytesRate(h.type, bytes) + 4.0 * double(h.hidden) / d.bandwidth.value;
  const double t_comp = 2.0 * double(h.vocab) * double(h.hidden) / d.GemvComputeRate(h.type);
  return std::max(t_mem, t_comp) + 3 * d.dispatch_s.value + d.step_s.value;
}

double HeadExcess(const DeviceProfile& d, int64_t hidden, int64_t vocab, DType t) {
  const double vd = double(hidden) * double(vocab);
  const HeadProbe* best = nullptr;
  auto dist = [&](const HeadProbe& h) {
    return std::abs(std::log(vd / (double(h.hidden) * double(h.vocab))));
  };
  for (const HeadProbe& h : d.head_probes)
    if (h.type == t && (!best || dist(h) < dist(*best))) best = &h;
  if (!best) return 0;
  return (best->seconds.value - HeadProbeRoofline(*best, d)) * vd /
         (double(best->hidden) * double(best->vocab));
}

double MoeProbeRate(const MoeProbe& pr, const DeviceProfile& d) {
  const double R = pr.rows, D = double(pr.hidden);
  const double expert_flops = 2.0 * R * pr.top_k * 3.0 * D * double(pr.ffn);
  const double router_bytes = 4.0 * pr.experts * D;
  const double router_s = 2.0 * R * pr.experts * D / d.GemmRate(DType::kF32, router_bytes);
  const double left =
      (pr.seconds.value - d.step_s.value) / pr.layers - 3 * d.dispatch_s.value - router_s;
  return left > 0 ? expert_flops / left : 0;
}

double MoeExpertRate(const DeviceProfile& d, DType t, int64_t hidden, int64_t ffn,
                     double rows_per_expert) {
  auto dist = [&](const MoeProbe& p) {
    return std::abs(std::log(double(hidden) * double(ffn) / (double(p.hidden) * double(p.ffn))));
  };
  const MoeProbe* nearest = nullptr;
  for (const MoeProbe& p : d.moe_probes)
    if (p.type == t && (!nearest || dist(p) < dist(*nearest))) nearest = &p;
  if (!nearest) return 0;
  // The rate by rows an expert, interpolated as a rate curve is by weight size (CurveRate: linear
  // in the log, the ends outside).
  std::vector<CurvePoint> by_rows;
  for (const MoeProbe& p : d.moe_probes) {
    if (p.type != t || p.hidden != nearest->hidden || p.ffn != nearest->ffn) continue;
    CurvePoint c;
    c.weight_bytes = double(p.rows) * p.top_k / p.experts;
    c.rate.value = MoeProbeRate(p, d);
    by_rows.push_back(c);
  }
  std::stable_sort(by_rows.begin(), by_rows.end(), [](const CurvePoint& a, const CurvePoint& b) {
    return a.weight_bytes < b.weight_bytes;
  });
  return CurveRate(by_rows, rows_per_expert);
}

Plan MakePlan(const ModelWeights& w, const DeviceProfile& d, const PlanOptions& o) {
  const ModelConfig& c = w.config;
  CheckPlanOptions(c, o);
  CheckKvType(c, w.name, o.kv_type);
  Plan p;
  p.model = w.name;
  p.device = d.name;
  p.backend = d.backend;
  p.calibrated = d.calibrated;
  p.options = o;
  p.kv_bytes_per_token = int64_t(c.MakeKvSpec(o.kv_type).BytesPerToken());
  InitLayers(c, p);
  WeightTally wt = TallyWeights(w, c, p);
  ScaleToOneExpert(w, c, wt, p);
  // Weights: every stored tensor plus the derived absorbed pair.
  p.weights_bytes = w.total_bytes();
  for (const LayerCost& lc : p.layers) p.derived_bytes += lc.absorbed_bytes;
  p.weights_bytes += p.derived_bytes;
  p.decode = DecodeCost(p, c, wt, d, o);
  p.prefill = PrefillCost(p, c, wt, d, o);
  AddMemory(c, wt, d, o, p);
  if (o.devices > 1) SplitAcrossDevices(c, wt, d, o, p);
  return p;
}

// ---- output ------------------------------------------------------------------------------------

namespace {

json PhaseJson(const PhaseCost& ph) {
  return {{"bytes", ph.bytes},
          {"flops", ph.flops},
          {"dispatches", ph.dispatches},
          {"t_memory_s", ph.t_memory_s},
          {"t_compute_s", ph.t_compute_s},
          {"t_dispatch_s", ph.t_dispatch_s},
          {"t_layer_s", ph.t_layer_s},
          {"t_total_s", ph.t_total_s},
          {"bound", ph.bound},
          {"tokens_per_s", ph.tokens_per_s}};
}

}  // namespace

std::string HumanBytes(double b) {
  const char* u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int i = 0;
  while (b >= 1024 && i < 4) b /= 1024, ++i;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f %s", b, u[i]);
  return buf;
}

json PlanToJson(const Plan& p) {
  const PlanOptions& o = p.options;
  json j = {{"model", p.model},
            {"device", p.device},
            {"backend", p.backend},
            {"calibrated", p.calibrated},
            {"context", o.context},
            {"prompt", o.prompt},
            {"gen", o.gen},
            {"batch", o.batch},
            {"kv_type", std::string(Name(o.kv_type))},
            {"prefill_tokens_per_s", p.prefill.tokens_per_s},
            {"decode_tokens_per_s", p.decode.tokens_per_s},
            {"prefill_bound", p.prefill.bound},
            {"decode_bound", p.decode.bound},
            {"memory_bytes", p.memory_bytes},
            {"weights_bytes", p.weights_bytes},
            {"resident_weights_bytes", p.resident_weights_bytes},
            {"derived_weights_bytes", p.derived_bytes},
            {"kv_bytes", p.kv_bytes},
            {"kv_bytes_per_token", p.kv_bytes_per_token},
            {"activation_bytes", p.activation_bytes},
            {"overhead_bytes", p.overhead_bytes},
            {"device_memory_bytes", p.device_memory_bytes},
            {"fits", p.fits},
            {"prefill", PhaseJson(p.prefill)},
            {"decode", PhaseJson(p.decode)}};
  json layers = json::array();
  for (const LayerCost& l : p.layers)
    layers.push_back({{"layer", l.layer},
                      {"attn_bytes", l.attn_bytes},
                      {"kv_b_bytes", l.kv_b_bytes},
                      {"absorbed_bytes", l.absorbed_bytes},
                      {"ffn_bytes", l.ffn_bytes},
                      {"expert_bytes", l.expert_bytes},
                      {"active_expert_bytes", l.active_expert_bytes},
                      {"proj_flops_per_token", l.proj_flops},
                      {"expert_flops_per_token", l.expert_flops},
                      {"kv_bytes_per_token", l.kv_bytes_per_token},
                      {"dispatches", l.dispatches}});
  j["layers"] = layers;
  if (o.devices > 1) {
    j["devices"] = o.devices;
    j["split"] = o.split == PlanSplit::kLayer ? "layer" : "head";
    j["transfer_bytes_per_token"] = p.transfer_bytes_per_token;
    j["t_transfer_s"] = p.t_transfer_s;
    for (const DeviceShare& s : p.shares)
      j["per_device"].push_back({{"device", s.device},
                                 {"weights_bytes", s.weights_bytes},
                                 {"kv_bytes", s.kv_bytes},
                                 {"memory_bytes", s.memory_bytes},
                                 {"fits", s.fits}});
  }
  return j;
}

std::string PlanTable(const Plan& p) {
  const PlanOptions& o = p.options;
  std::string s;
  char buf[512];
  // At least one argument after the format: every call has one (a format without arguments would
  // be -Wformat-security's case).
  auto line = [&](const char* fmt, auto a0, auto... a) {
    std::snprintf(buf, sizeof buf, fmt, a0, a...);
    s += buf;
  };
  line("model:    %s\n", p.model.c_str());
  line("device:   %s (%s backend, %s)\n", p.device.c_str(), p.backend.c_str(),
       p.calibrated ? "calibrated" : "nominal: numbers from datasheets, not measured here");
  line("shape:    prompt %d, gen %d, batch %d, context %lld, KV %s\n", o.prompt, o.gen, o.batch,
       (long long)o.context, std::string(Name(o.kv_type)).c_str());
  s += "\nmemory                     bytes\n";
  line("  weights                  %s (%s derived: MLA absorbed pair; resident %s)\n",
       HumanBytes(double(p.weights_bytes)).c_str(), HumanBytes(double(p.derived_bytes)).c_str(),
       HumanBytes(double(p.resident_weights_bytes)).c_str());
  line("  KV cache                 %s (%s/token x %lld x %d)\n",
       HumanBytes(double(p.kv_bytes)).c_str(), HumanBytes(double(p.kv_bytes_per_token)).c_str(),
       (long long)o.context, o.batch);
  line("  activations              %s\n", HumanBytes(double(p.activation_bytes)).c_str());
  line("  runtime / driver         %s\n", HumanBytes(double(p.overhead_bytes)).c_str());
  line("  total                    %s of %s: %s\n", HumanBytes(double(p.memory_bytes)).c_str(),
       HumanBytes(double(p.device_memory_bytes)).c_str(), p.fits ? "fits" : "DOES NOT FIT");
  s +=
      "\nphase     tokens/s   bytes/step   GFLOP/step  dispatches  t_mem ms  t_comp ms  t_disp ms  "
      "bound\n";
  for (const auto* ph : {&p.prefill, &p.decode}) {
    line("%-8s %9.1f %12s %11.2f %11.0f %9.2f %10.2f %10.2f  %s\n",
         ph == &p.prefill ? "prefill" : "decode", ph->tokens_per_s, HumanBytes(ph->bytes).c_str(),
         ph->flops / 1e9, ph->dispatches, ph->t_memory_s * 1e3, ph->t_compute_s * 1e3,
         ph->t_dispatch_s * 1e3, ph->bound.c_str());
  }
  if (p.prefill.t_layer_s != 0 || p.decode.t_layer_s != 0)
    line("(t_total includes the layer probes' excess: prefill %.2f ms, decode %.2f ms)\n",
         p.prefill.t_layer_s * 1e3, p.decode.t_layer_s * 1e3);
  if (o.devices > 1) {
    line("\n%d devices, split by %s: %s crosses devices per token (%.3f ms a step)\n", o.devices,
         o.split == PlanSplit::kLayer ? "layer" : "head",
         HumanBytes(p.transfer_bytes_per_token).c_str(), p.t_transfer_s * 1e3);
    for (const DeviceShare& sh : p.shares)
      line("  device %d: weights %s, KV %s, total %s%s\n", sh.device,
           HumanBytes(double(sh.weights_bytes)).c_str(), HumanBytes(double(sh.kv_bytes)).c_str(),
           HumanBytes(double(sh.memory_bytes)).c_str(), sh.fits ? "" : " DOES NOT FIT");
  }
  return s;
}

}  // namespace es
