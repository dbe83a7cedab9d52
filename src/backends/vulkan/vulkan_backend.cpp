// The Vulkan backend: graph -> Program (arena plan, dispatches, descriptor sets, one recorded
// command buffer) once per shape; per token only the batch buffer is written and the command
// buffer re-submitted. See vulkan_backend.h.
#include "vulkan_backend.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <sstream>
#include <tuple>

#include "edgeseek/internal/graph/passes/fusions.h"
#include "instance.h"
#include "ops/ops.h"
#include "plan.h"

namespace es {
bool VulkanBackendBuilt() { return true; }
std::unique_ptr<Backend> CreateVulkanBackend(const BackendOptions& opts) {
  return vk::CreateVulkanBackendTuned(opts, vk::VulkanTuning{});
}
}  // namespace es

namespace es::vk {
namespace {
using Clock = std::chrono::steady_clock;
enum Mode : int { kLogits = 0, kArgmax = 1, kSample = 2 };
// Greedy ids of rows up to this many columns take one workgroup per row (argmax.comp,
// sample.comp); longer rows are cut into parts (RowPartsOf).
constexpr uint32_t kArgmaxOneGroupCols = 4096;
// A row's parts for one workgroup each: none up to kArgmaxOneGroupCols columns, else about 1024
// columns a part, at most 256 parts.
struct RowParts {
  uint32_t parts, chunk;
};
RowParts RowPartsOf(uint32_t C) {
  if (C <= kArgmaxOneGroupCols) return {0, 0};
  const uint32_t parts = std::min<uint32_t>(256, (C + 1023) / 1024);
  return {parts, (C + parts - 1) / parts};
}

// The profile's kind of a dispatch: its node's name with every all-digit dotted part (the layer
// number) as '*', then the shader: "model.layers.*.mlp.down_proj [matmul_gemv_q4_0_vec]".
std::string ProfileKind(const std::string& node, const std::string& shader) {
  std::string out;
  size_t i = 0;
  while (i < node.size()) {
    size_t j = node.find('.', i);
    if (j == std::string::npos) j = node.size();
    const std::string part = node.substr(i, j - i);
    const bool digits = !part.empty() && part.find_first_not_of("0123456789") == std::string::npos;
    out += digits ? "*" : part;
    if (j < node.size()) out += '.';
    i = j + 1;
  }
  return out + " [" + shader + "]";
}

// Words of sample.comp's parameter block for n rows of C columns: per row 12 header words
// (temperature, top_k, top_p, min_p, seed, repeat, presence, frequency, n_counts, has_mask,
// 2 unused), then per row kMaxSamplingCounts (id, count), then per row the allow-mask of
// ceil(C / 32) words (bit id % 32 of word id / 32; read only where has_mask).
uint64_t SamplingWords(int64_t n, int64_t C) {
  return uint64_t(n) * (12 + 2 * uint64_t(kMaxSamplingCounts) + (uint64_t(C) + 31) / 32);
}
void WriteSampling(void* mapped, const RowSampling* rows, int64_t n, int64_t C) {
  ES_CHECK(rows, "vulkan: sampling needs the rows' parameters");
  auto* w = static_cast<uint32_t*>(mapped);
  auto f = [](float v) {
    uint32_t u;
    std::memcpy(&u, &v, 4);
    return u;
  };
  for (int64_t r = 0; r < n; ++r) {
    const RowSampling& s = rows[r];
    uint32_t* h = w + 12 * r;
    h[0] = f(s.temperature);
    h[1] = uint32_t(std::max(0, s.top_k));
    h[2] = f(s.top_p);
    h[3] = f(s.min_p);
    h[4] = s.seed;
    h[5] = f(s.repeat_penalty);
    h[6] = f(s.presence_penalty);
    h[7] = f(s.frequency_penalty);
    h[8] = uint32_t(s.counts.size());
    h[9] = s.allow.empty() ? 0u : 1u;
    uint32_t* e = w + 12 * n + 2 * int64_t(kMaxSamplingCounts) * r;
    for (size_t i = 0; i < s.counts.size(); ++i) {
      e[2 * i] = uint32_t(s.counts[i].first);
      e[2 * i + 1] = uint32_t(s.counts[i].second);
    }
    if (s.allow.empty()) continue;
    // A 64-bit word is two 32-bit ones, low first (both sides little-endian); ids past the
    // row's words are banned.
    const size_t words = (size_t(C) + 31) / 32;
    uint32_t* m = w + 12 * n + 2 * int64_t(kMaxSamplingCounts) * n + int64_t(words) * r;
    const size_t copied = std::min(words, 2 * s.allow.size());
    std::memcpy(m, s.allow.data(), copied * 4);
    std::fill(m + copied, m + words, 0u);
  }
}
double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// A mixed step's row tables (BatchLayout::dec_rows, tiles; UseMixedAttention): the rows of
// one-token sequences, and tiles of at most lay.tile_rows consecutive rows of each longer one.
void WriteMixedRows(const BatchLayout& lay, const Batch& b, int32_t* words) {
  int32_t n_dec = 0, n_tiles = 0;
  for (const BatchSeq& s : b.seqs) {
    if (s.n_tokens == 1) {
      words[lay.dec_rows + 1 + n_dec++] = s.row0;
      continue;
    }
    for (int r = 0; r < s.n_tokens; r += lay.tile_rows) {
      words[lay.tiles + 1 + 2 * n_tiles] = s.row0 + r;
      words[lay.tiles + 2 + 2 * n_tiles] = std::min(lay.tile_rows, s.n_tokens - r);
      ++n_tiles;
    }
  }
  words[lay.dec_rows] = n_dec;
  words[lay.tiles] = n_tiles;
}

// The nodes' part of a program's key (the batch shape, cache and mode are mixed in per call).
uint64_t NodesHash(const Graph& g) {
  uint64_t h = 0;
  for (const Node& n : g.nodes()) {
    h = HashMix(h, uint64_t(n.op));
    for (int s : n.src) h = HashMix(h, uint64_t(int64_t(s)));
    for (int64_t d : n.shape) h = HashMix(h, uint64_t(d));
    h = HashMix(h, uint64_t(n.dtype));
    h = HashMix(h, reinterpret_cast<uintptr_t>(n.weight ? n.weight->data : nullptr));
    h = HashMix(h, uint64_t(int64_t(n.layer)));
    h = HashMix(h, ParamsHash(n));
  }
  return h;
}
}  // namespace

struct VulkanBackend::Program {
  MemoryPool* act_pool = nullptr;
  MemoryPool* host_pool = nullptr;
  MemoryPool* readback_pool = nullptr;
  uint64_t key = 0;
  int64_t T = 0, n_out = 0, out_cols = 0, vocab = -1;
  int mode = 0;         // what comes back: kLogits, kArgmax or kSample ids
  Allocation sampling;  // kSample: the rows' parameters (host-visible, sample.comp's layout)
  std::vector<Allocation> arenas, owned;  // from act_pool / host_pool
  Allocation batch, readback;
  BatchLayout layout;
  Node input;  // the kInput node (layout.input): its name and shape, for Run's checks
  std::vector<Dispatch> ds;
  std::unique_ptr<DescriptorArena> descs;
  std::unique_ptr<Sequence> seq;
  std::vector<std::pair<std::string, Op>> node_info;  // per node: name, op (profiling)
  uint64_t bytes = 0;  // its arenas and owned buffers (the program cache's budget)
  std::vector<std::string>
      profile_kinds;  // per dispatch: ProfileKind, made on the first profiled run

  ~Program() {
    seq.reset();
    descs.reset();
    for (auto& a : arenas) act_pool->Free(a);
    for (auto& a : owned) (a.mapped ? host_pool : act_pool)->Free(a);
    host_pool->Free(batch);
    if (sampling.mapped) host_pool->Free(sampling);
    readback_pool->Free(readback);
  }
};

std::unique_ptr<Backend> CreateVulkanBackendTuned(const BackendOptions& opts,
                                                  const VulkanTuning& tuning) {
  return std::make_unique<VulkanBackend>(opts, tuning);
}

VulkanBackend::VulkanBackend(const BackendOptions& opts, const VulkanTuning& tuning)
    : opts_(opts), tuning_(tuning) {
  // The knobs, parsed once: the environment's, then those the caller set.
  dev_ = std::make_shared<Device>(opts.device, Tuning::FromEnvironment().With(tuning.knobs));
  pipes_ = std::make_unique<PipelineCache>(*dev_);
  weight_pool_ =
      std::make_unique<MemoryPool>(*dev_, MemoryPool::Kind::kDevice, "weights", tuning.weights);
  act_pool_ = std::make_unique<MemoryPool>(*dev_, MemoryPool::Kind::kDevice, "activations",
                                           tuning.activations);
  host_pool_ = std::make_unique<MemoryPool>(*dev_, MemoryPool::Kind::kHostVisible, "batch",
                                            PoolLimits{4ull << 20, 0, 0});
  readback_pool_ = std::make_unique<MemoryPool>(*dev_, MemoryPool::Kind::kReadback, "readback",
                                                PoolLimits{4ull << 20, 0, 0});
  staging_ = std::make_shared<StagingRing>(
      *dev_, std::min<uint64_t>(64ull << 20, weight_pool_->max_range()));
  weights_ = std::make_unique<WeightStore>(*weight_pool_, *staging_);
  uint64_t local = 0;
  for (const VulkanMemoryHeap& h : dev_->info().heaps)
    if (h.device_local) local = std::max(local, h.bytes);
  program_budget_ =
      tuning.program_budget ? tuning.program_budget : std::min<uint64_t>(2ull << 30, local / 16);
}

void VulkanBackend::ClearPrograms() {
  programs_.clear();
  program_bytes_ = 0;
}

void VulkanBackend::Retune(const Tuning& t) {
  dev_->Retune(t);
  ClearPrograms();
}

VulkanBackend::~VulkanBackend() {
  if (opts_.profile) PrintProfile();
  ClearPrograms();
  weights_.reset();
}

std::string VulkanBackend::description() const {
  const auto& i = dev_->info();
  std::ostringstream os;
  os << "vulkan: " << i.name << " (" << i.driver << ", Vulkan "
     << VulkanVersionString(i.api_version) << ", subgroup " << i.subgroup_size;
  if (const auto& c2 = dev_->coopmat2(); c2.bm)
    os << ", NV coopmat2 " << c2.bm << "x" << c2.bn << "x" << c2.bk << "/" << c2.wg
       << (c2.fa_br ? ", attention " + std::to_string(c2.fa_br) + "x" + std::to_string(c2.fa_bc) +
                          "/" + std::to_string(c2.fa_wg)
                    : std::string())
       << (dev_->f16_math() ? " in use" : " (off: f32 math)");
  if (dev_->coopmat_n())
    os << (dev_->coopmat_khr() ? ", KHR coopmat 16x" : ", NV coopmat 16x") << dev_->coopmat_n()
       << "x16" << (dev_->f16_math() ? " in use" : " (off: f32 math)");
  else if ((i.coopmat_khr || i.coopmat_nv) && !dev_->coopmat2().bm)
    os << ", coopmat present (not used)";
  os << (dev_->f16_math() ? ", f16 math" : ", f32 math") << ")";
  return os.str();
}

bool VulkanBackend::Supports(const Graph& g, const Node& n) const {
  return OpSupported(g, n, nullptr);
}

void VulkanBackend::PrepareGraph(const Graph& g) {
  for (const Node& n : g.nodes()) {
    if (n.op != Op::kMoE) continue;
    const int64_t experts = n.Params<MoeOpParams>().LocalExperts();  // a head split's range, or all
    for (int m = 0; m < 3; ++m) {
      std::vector<const Tensor*> members;
      for (int64_t e = 0; e < experts; ++e) {
        const Tensor* t = g.node(n.src[size_t(3 + 3 * e + m)]).weight;
        if (!t || !WeightStore::Supported(t->dtype)) break;  // reported at first use
        if (weights_->DropStale(*t)) ClearPrograms();
        members.push_back(t);
      }
      if (int64_t(members.size()) == experts) weights_->GetExperts(members);
    }
  }
}

void VulkanBackend::PrepareWeight(const Tensor& w) {
  if (!WeightStore::Supported(w.dtype)) return;  // reported by Supports / at first use
  if (weights_->DropStale(w)) ClearPrograms();
  if (weights_->Stacked(w)) return;  // a routed expert: uploaded with its stack (PrepareGraph)
  if (w.shape.size() == 1 && w.dtype != DType::kF32)
    weights_->GetF32(w);  // vectors are read as f32 (norm weights, biases)
  else
    weights_->Get(w);
}

std::unique_ptr<KvStorage> VulkanBackend::CreateKv(const KvSpec& spec, int n_slots,
                                                   int64_t capacity) {
  return CreatePagedKv(spec, n_slots, capacity,
                       int64_t(n_slots) * ((capacity + kKvBlockTokens - 1) / kKvBlockTokens));
}

std::unique_ptr<KvStorage> VulkanBackend::CreatePagedKv(const KvSpec& spec, int n_slots,
                                                        int64_t capacity, int64_t n_blocks) {
  auto kv = std::make_unique<VkKv>(dev_, staging_, spec, n_slots, capacity, n_blocks, tuning_.kv);
  kv_peak_ += kv->bytes();
  return kv;
}

size_t VulkanBackend::peak_bytes() const {
  return weight_pool_->peak_block_bytes() + act_pool_->peak_block_bytes() +
         host_pool_->peak_block_bytes() + kv_peak_;
}

BackendMemory VulkanBackend::memory() const {
  BackendMemory m = dev_->ledger().Report();
  m.device_type = dev_->info().type;
  return m;
}

VulkanCounters VulkanBackend::counters() const {
  VulkanCounters c;
  c.programs_built = programs_built_;
  c.submits = submits_;
  c.pipelines_created = pipes_->created();
  if (!programs_.empty()) {
    c.barriers = programs_.front()->seq->barriers();
    c.dispatches = int(programs_.front()->ds.size());
    for (const Dispatch& d : programs_.front()->ds) c.shaders.push_back(d.pipe->name);
    c.steps = programs_.front()->seq->steps();
  }
  return c;
}

const std::vector<Dispatch>& VulkanBackend::last_dispatches() const {
  static const std::vector<Dispatch> none;
  return programs_.empty() ? none : programs_.front()->ds;
}

VulkanBackend::Program& VulkanBackend::GetProgram(const Graph& g, const Batch& b, VkKv& kv,
                                                  int mode) {
  // A weight whose host tensor died may share its address with a new one: drop its device copy
  // and every recorded program (they bind it). Checked, and the nodes hashed, once per graph
  // version and weights' data pointers: a Runner passes the same graph every decode step, and
  // walking its ~340 weights through the store's map took ~0.2 ms a step, hashing its ~800
  // nodes ~0.1 ms (this repository's CI machine).
  std::vector<const void*>& data = weight_data_;
  data.clear();
  for (const Node& n : g.nodes())
    if (n.op == Op::kWeight && n.weight) data.push_back(n.weight->data);
  auto seen = std::find_if(seen_graphs_.begin(), seen_graphs_.end(), [&](const SeenGraph& s) {
    return s.version == g.version() && s.weight_data == data;
  });
  if (seen == seen_graphs_.end()) {
    bool stale = false;
    for (const Node& n : g.nodes())
      if (n.op == Op::kWeight && n.weight) stale |= weights_->DropStale(*n.weight);
    if (stale) {
      ClearPrograms();
      seen_graphs_.clear();
    }
    if (seen_graphs_.size() == kMaxSeenGraphs) seen_graphs_.pop_back();
    seen_graphs_.insert(seen_graphs_.begin(), {g.version(), NodesHash(g), data});
    seen = seen_graphs_.begin();
  }
  uint64_t key = HashMix(seen->nodes_hash, kv.id());
  key = HashMix(key, uint64_t(b.n_tokens()));
  key = HashMix(key, b.out_rows.size());
  key = HashMix(key, uint64_t(mode));
  key = HashMix(key, MlaStepExpands(g, b) ? 1u : 0u);  // the MLA's form depends on the positions
  for (auto it = programs_.begin(); it != programs_.end(); ++it)
    if ((*it)->key == key) {
      programs_.splice(programs_.begin(), programs_, it);
      return *programs_.front();
    }
  const auto t_build = Clock::now();
  const PipelineCache::CompileScope compiling(*pipes_);  // a first run's wait, on a terminal
  auto p = Build(g, b, kv, mode, key);
  ++programs_built_;
  build_s_ += Since(t_build);
  p->bytes = p->batch.size + p->readback.size + p->sampling.size;
  for (const Allocation& a : p->arenas) p->bytes += a.size;
  for (const Allocation& a : p->owned) p->bytes += a.size;
  program_bytes_ += p->bytes;
  programs_.push_front(std::move(p));
  while (programs_.size() > tuning_.max_programs &&
         (programs_.size() > kMaxPrograms || program_bytes_ > program_budget_)) {
    program_bytes_ -= programs_.back()->bytes;
    programs_.pop_back();
  }
  return *programs_.front();
}

namespace {
// What Build's fusion passes read.
struct FuseInput {
  const Device& dev;
  WeightStore& weights;
  const Graph& g;
  VkKv& kv;
  int64_t T;
  bool mla_expand, fuse;
};
// The Vulkan backend's answers to the fusion passes (graph/passes/fusions.h), per candidate node:
// GEMV-sized matmuls (CanFuseGemv) and MoE nodes on the expert GEMVs (MoeTakesGemv; their down
// GEMV adds the residual) take epilogues and folded RMSNorms; ropes fold into kv stores; MLA's
// kv_a chain becomes one store over an f32 or f16 cache; the split decode attention
// (UseDecodeAttention; ES_VK_ATTN_FUSE; not over a block-quantized cache, whose new keys would
// have to be rounded as their whole 32-blocks store them) takes the raw q, k and v rows; the MLA
// kernel rotates q where MlaFoldsQRope. ES_VK_FUSE=0: none.
class VkFusionCaps : public FusionCaps {
 public:
  explicit VkFusionCaps(const FuseInput& x) : x_(x) {}
  bool Epilogue(const Graph& g, const Node& m) const override {
    if (!x_.fuse) return false;
    if (m.op == Op::kMoE) return MoeTakesGemv(x_.dev, g, m, nullptr);
    return m.op == Op::kMatMul && Gemv(g, m);
  }
  bool FoldsNorm(const Graph& g, const Node& c) const override {
    if (!x_.fuse) return false;
    if (c.op == Op::kMoE) return x_.T <= kGemvMaxRows && MoeTakesGemv(x_.dev, g, c, nullptr);
    return c.op == Op::kMatMul && Gemv(g, c);
  }
  bool RopeIntoStore() const override { return x_.fuse; }
  bool MlaKvStore() const override {
    const DType t = x_.kv.spec().dtype;
    return x_.fuse && (t == DType::kF32 || t == DType::kF16);
  }
  bool AttentionTakesRawRows(const Graph&, const Node& n) const override {
    const AttentionParams& a = n.Params<AttentionParams>();
    return x_.fuse && x_.dev.tuning().On(Knob::kAttnFuse) && !IsQuantized(x_.kv.spec().dtype) &&
           x_.T <= kDecodeFusedMaxRows &&
           UseDecodeAttention(x_.dev, x_.T, uint32_t(a.q_heads), uint32_t(a.kv_heads),
                              uint32_t(a.dk), uint32_t(a.dv));
  }
  bool MlaFoldsQRope(const Graph& g, const Node& n) const override {
    return x_.fuse && vk::MlaFoldsQRope(x_.dev, x_.kv, g, n, x_.T, x_.mla_expand);
  }
  // Integer-dot GEMVs: int8 x for Q4_0 and Q4_K (format 0), int16 for Q8_0 (format 1).
  int QuantizedX(const Graph& g, const Node& m) const override {
    const DeviceWeight& w = Weight(g, m);
    return UseIdotGemv(x_.dev, x_.T, XCols(g, m), w.rows, w.dtype) ? XFormat(w.dtype) : -1;
  }
  bool QuantizeXOnce(const Graph& g, const Node& m, bool dual) const override {
    return IdotQuantizeOnce(x_.dev, x_.T, XCols(g, m), Weight(g, m).rows, dual);
  }
  // The split decode attention's combine step writes its output quantized (ES_VK_ATTN_QUANT);
  // the dual gate/up GEMV (p: its gate) writes silu(gate) * up quantized where DualQuantizesOut,
  // in its own x format, which m's must be (QuantizedX): a Q4_K gate/up (int8 x) serves a Q5_K
  // or Q6_K down (a Q4_K_M file's mix), not a Q8_0 one (int16 x).
  bool WritesQuantizedX(const Graph& g, const Node& p, const Node& m) const override {
    const DType wt = WeightType(g, m);
    if (p.op == Op::kAttention) {
      const int64_t dv = p.Params<AttentionParams>().dv;
      return x_.fuse && x_.dev.tuning().On(Knob::kAttnQuant) && x_.T <= kDecodeMaxRows &&
             dv % 32 == 0 && dv <= 1024;
    }
    const DeviceWeight& gw = x_.weights.Get(*g.node(p.src[1]).weight);
    return p.op == Op::kMatMul && XFormat(gw.dtype) == XFormat(wt) &&
           DualQuantizesOut(x_.dev, x_.T, XCols(g, p), gw);
  }

 private:
  bool Gemv(const Graph& g, const Node& m) const {
    return CanFuseGemv(x_.T, XCols(g, m), x_.weights.Get(*g.node(m.src[1]).weight));
  }
  static int64_t XCols(const Graph& g, const Node& m) { return g.node(m.src[0]).shape[1]; }
  // The integer-dot GEMVs' x format for weights of type t (quant_x.glsl): 1 int16, 0 int8.
  static int XFormat(DType t) { return t == DType::kQ8_0 ? 1 : 0; }
  // The weight matmul m multiplies by (its second input).
  const DeviceWeight& Weight(const Graph& g, const Node& m) const {
    return x_.weights.Get(*g.node(m.src[1]).weight);
  }
  DType WeightType(const Graph& g, const Node& m) const { return Weight(g, m).dtype; }
  const FuseInput& x_;
};

// Where the integer-dot GEMVs read x quantized (items added to the activation plan), per node.
struct QuantXPlan {
  std::vector<int> xq_item, out_xq_item, dual_yq_item;
  std::vector<char> xq_fill;
  std::vector<DType> out_xq_type;
};
// The plan's quantized copies of x (ShareQuantizedX) as arena items: a producer's from the
// producer to its reader, a shared one from its first reader (which fills it) to its last.
QuantXPlan PlanQuantizedX(const FuseInput& x, const FusionPlan& f, std::vector<Interval>& items) {
  QuantXPlan q;
  const size_t n_nodes = x.g.nodes().size();
  q.xq_item.assign(n_nodes, -1);
  q.out_xq_item.assign(n_nodes, -1);
  q.dual_yq_item.assign(n_nodes, -1);
  q.xq_fill.assign(n_nodes, 0);
  q.out_xq_type.assign(n_nodes, DType::kF32);
  const Graph& g = x.g;
  std::vector<int> item_of;
  for (const QuantizedX& c : f.quantized_x) {
    const Node& m = g.node(c.reader);
    const DType wt = x.weights.Get(*g.node(m.src[1]).weight).dtype;
    const int item = int(items.size());
    item_of.push_back(item);
    items.push_back({c.producer >= 0 ? c.producer : c.reader, c.last,
                     QuantXBytes(x.T, g.node(m.src[0]).shape[1], wt)});
    if (c.producer < 0) {
      q.xq_fill[size_t(c.reader)] = 1;
    } else if (g.node(c.producer).op == Op::kAttention) {
      q.out_xq_item[size_t(c.producer)] = item;
      q.out_xq_type[size_t(c.producer)] = wt;
    } else {
      q.dual_yq_item[size_t(c.producer)] = item;
    }
  }
  for (size_t i = 0; i < n_nodes; ++i)
    if (f.xq_of[i] >= 0) q.xq_item[i] = item_of[size_t(f.xq_of[i])];
  return q;
}

// Node i's fusions into its OpContext: the epilogue, folded norm and ropes, the MLA store, the
// fused attention's raw rows, quantized x and the dual GEMV (what PlanFusions and PlanQuantizedX
// decided); `range` gives a plan item's buffer range.
void SetFusions(OpContext& ci, int i, const FusionPlan& fz, const QuantXPlan& qx,
                const std::vector<BufRange>& act, const std::function<BufRange(int)>& item_range) {
  const auto& nodes = ci.g.nodes();
  const auto& [xq_item, out_xq_item, dual_yq_item, xq_fill, out_xq_type] = qx;
  const auto& out_node = fz.out_node;
  const auto& res_node = fz.res_node;
  const auto& gate_node = fz.gate_node;
  const auto& up_node = fz.up_node;
  const auto& norm_of = fz.norm_of;
  const auto& rope_of = fz.rope_of;
  const auto& mla_c_store = fz.mla_c_store;
  const auto& mla_norm = fz.mla_norm;
  const auto& attn_rope = fz.attn_rope;
  const auto& attn_k = fz.attn_k;
  const auto& attn_v = fz.attn_v;
  ci.out_node = out_node[size_t(i)];
  if (res_node[size_t(i)] >= 0) ci.residual = act[size_t(res_node[size_t(i)])];
  if (norm_of[size_t(i)] >= 0) ci.norm_node = &nodes[size_t(norm_of[size_t(i)])];
  if (rope_of[size_t(i)] >= 0) ci.rope_node = &nodes[size_t(rope_of[size_t(i)])];
  if (mla_c_store[size_t(i)] >= 0) {
    ci.mla_c_store = &nodes[size_t(mla_c_store[size_t(i)])];
    ci.mla_norm = &nodes[size_t(mla_norm[size_t(i)])];
  }
  if (attn_rope[size_t(i)] >= 0) {
    ci.attn_rope = &nodes[size_t(attn_rope[size_t(i)])];
    if (attn_k[size_t(i)] >= 0) {  // kAttention (kMlaAttention folds only its q rope)
      ci.attn_k = act[size_t(attn_k[size_t(i)])];
      ci.attn_v = act[size_t(attn_v[size_t(i)])];
    }
  }
  if (xq_item[size_t(i)] >= 0) {
    ci.xq = item_range(xq_item[size_t(i)]);
    ci.xq_fill = xq_fill[size_t(i)] != 0;
  }
  if (dual_yq_item[size_t(i)] >= 0) ci.dual_yq = item_range(dual_yq_item[size_t(i)]);
  if (out_xq_item[size_t(i)] >= 0) {
    ci.out_xq = item_range(out_xq_item[size_t(i)]);
    ci.out_xq_type = out_xq_type[size_t(i)];
  }
  if (gate_node[size_t(i)] >= 0) {
    ci.dual_gate = &nodes[size_t(gate_node[size_t(i)])];
    ci.dual_up = &nodes[size_t(up_node[size_t(i)])];
  }
}

}  // namespace

namespace {
// Where node i's scratch starts to live in the arena plan (it ends at i). A MoE's lives from its x
// on: reusing the shared experts' intermediate (read by their down GEMV, beside which the routed
// experts' up GEMV runs) would make the up GEMV's writes wait for that read, a barrier level
// (command.h OrderByLevel).
int ScratchFrom(const Node& n, int i) { return n.op == Op::kMoE ? std::min(i, n.src[0]) : i; }
}  // namespace

std::unique_ptr<VulkanBackend::Program> VulkanBackend::Build(const Graph& g, const Batch& b,
                                                             VkKv& kv, int mode, uint64_t key) {
  auto p = std::make_unique<Program>();
  p->act_pool = act_pool_.get();
  p->host_pool = host_pool_.get();
  p->readback_pool = readback_pool_.get();
  p->key = key;
  p->mode = mode;
  const auto& nodes = g.nodes();
  const int N = int(nodes.size());
  ES_CHECK(N > 0 && nodes.back().op != Op::kWeight, "vulkan: the graph has no output op");
  const int64_t T = b.n_tokens();
  p->T = T;
  const bool mla_expand = MlaStepExpands(g, b);  // in the key (Run)
  for (const Node& n : nodes) {
    std::string why;
    ES_CHECK(OpSupported(g, n, &why), "vulkan: node '", n.name, "' (", OpName(n.op),
             ") is not supported: ", why);
    if (n.op != Op::kWeight)
      ES_CHECK(n.shape.size() == 2, "vulkan: node '", n.name, "' is not 2-D ", ShapeStr(n.shape));
    if (n.op == Op::kEmbed) {
      const int64_t v = g.node(n.src[0]).weight->rows();
      p->vocab = p->vocab < 0 ? v : std::min(p->vocab, v);
    }
    p->node_info.emplace_back(n.name, n.op);
  }

  const bool fuse = dev_->tuning().On(Knob::kFuse);
  const FuseInput in{*dev_, *weights_, g, kv, T, mla_expand, fuse};
  const FusionPlan fz = PlanFusions(g, VkFusionCaps(in));
  const auto& write_at = fz.write_at;
  const auto& skip = fz.skip;
  const auto& live_until = fz.live_until;

  // ---- activation plan: intervals from Graph::LastUse (kv_store passes its input through) ---
  std::vector<int> last = g.LastUse();
  for (int i = 0; i < N; ++i) last[size_t(i)] = std::max(last[size_t(i)], live_until[size_t(i)]);
  std::vector<int> owner(size_t(N), -1);
  for (int i = 0; i < N; ++i) {
    const Node& n = nodes[size_t(i)];
    if (n.op == Op::kWeight) continue;
    owner[size_t(i)] = n.op == Op::kKvStore ? owner[size_t(n.src[0])] : i;
  }
  std::vector<Interval> items;
  std::vector<int> item_of(size_t(N), -1);
  for (int i = 0; i < N; ++i)
    if (owner[size_t(i)] == i) {
      const Node& n = nodes[size_t(i)];
      item_of[size_t(i)] = int(items.size());
      items.push_back({write_at[size_t(i)], i == N - 1 ? N : last[size_t(i)],
                       uint64_t(n.shape[0] * n.shape[1]) * 4});
    }
  for (int i = 0; i < N; ++i)
    if (owner[size_t(i)] >= 0 && owner[size_t(i)] != i) {
      Interval& it = items[size_t(item_of[size_t(owner[size_t(i)])])];
      it.end = std::max(it.end, i == N - 1 ? N : last[size_t(i)]);
    }
  std::vector<std::vector<int>> scratch_items(static_cast<size_t>(N));
  for (int i = 0; i < N; ++i) {
    if (nodes[size_t(i)].op == Op::kWeight) continue;
    for (uint64_t bytes : ScratchBytes(*dev_, kv, g, nodes[size_t(i)], T, mla_expand)) {
      scratch_items[size_t(i)].push_back(int(items.size()));
      items.push_back({ScratchFrom(nodes[size_t(i)], i), i, bytes});
    }
  }
  const QuantXPlan qx = PlanQuantizedX(in, fz, items);
  const ArenaPlan plan = PlanArena(items, act_pool_->alignment(), act_pool_->max_range());
  for (size_t a = 0; a < plan.arena_bytes.size(); ++a)
    p->arenas.push_back(
        act_pool_->Alloc(plan.arena_bytes[a], "activation arena " + std::to_string(a)));
  auto item_range = [&](int it) {
    const Allocation& a = p->arenas[size_t(plan.arena[size_t(it)])];
    return BufRange{a.buffer, a.offset + plan.offset[size_t(it)],
                    (std::max<uint64_t>(items[size_t(it)].bytes, 4) + 15) / 16 * 16};
  };
  std::vector<BufRange> act(static_cast<size_t>(N), BufRange{});
  for (int i = 0; i < N; ++i)
    if (owner[size_t(i)] >= 0) act[size_t(i)] = item_range(item_of[size_t(owner[size_t(i)])]);

  LayoutBatch(p.get(), g, b, kv, mla_expand);
  BatchLayout& lay = p->layout;

  // ---- dispatches --------------------------------------------------------------------------
  OpContext c{*dev_, *pipes_, *weights_, kv, g, nodes[0]};
  c.act = act;
  c.batch = Range(p->batch);
  c.layout = &lay;
  c.out = &p->ds;
  c.T = T;
  c.host_pool = host_pool_.get();
  c.owned = &p->owned;
  for (int i = 0; i < N; ++i) {
    const Node& n = nodes[size_t(i)];
    if (n.op == Op::kWeight) continue;
    OpContext ci{*dev_, *pipes_, *weights_, kv, g, n};
    ci.id = i;
    ci.act = act;
    ci.batch = c.batch;
    ci.layout = &lay;
    ci.out = &p->ds;
    ci.T = T;
    ci.mla_expand = mla_expand;
    ci.host_pool = host_pool_.get();
    ci.owned = &p->owned;
    for (int it : scratch_items[size_t(i)]) ci.scratch.push_back(item_range(it));
    if (skip[size_t(i)]) continue;
    SetFusions(ci, i, fz, qx, act, item_range);
    BuildOp(ci);
  }
  BufRange result = RecordResult(p.get(), c, act[size_t(N - 1)], mode);
  p->readback = readback_pool_->Alloc(result.size, "output readback");
  // Profiles keep the graph's order: their dispatches are serialised anyway, each timed alone.
  if (!opts_.profile) OrderByLevel(p->ds);
  p->descs = std::make_unique<DescriptorArena>(*dev_, p->ds);
  p->seq = std::make_unique<Sequence>(*dev_, opts_.profile);
  p->seq->Record(p->ds,
                 {CopyStep{result, BufRange{p->readback.buffer, p->readback.offset, result.size}}});
  pipes_->Save();
  return p;
}

// The batch buffer's layout (per-token tables, rope tables, block tables, MLA view, mixed-step
// rows, input rows) and the buffer.
void VulkanBackend::LayoutBatch(Program* p, const Graph& g, const Batch& b, VkKv& kv,
                                bool mla_expand) {
  const auto& nodes = g.nodes();
  const int64_t T = b.n_tokens();
  // ---- batch buffer layout -------------------------------------------------------------------
  BatchLayout& lay = p->layout;
  // Words 0 and 1: where the KV block tables start and the blocks per slot (kv_addr.glsl).
  uint32_t w = 2;
  lay.tokens = w, w += uint32_t(T);
  lay.positions = w, w += uint32_t(T);
  lay.slots = w, w += uint32_t(T);
  lay.out_rows = w, w += uint32_t(std::max<size_t>(b.out_rows.size(), 1));
  for (const Node& n : nodes)
    if (n.op == Op::kRope && !lay.rope.count(n.Params<RopeParams>().table.get())) {
      const RopeTable* rt = n.Params<RopeParams>().table.get();
      lay.rope[rt] = w;
      w += uint32_t(T) * uint32_t(rt->dim / 2) * 2;
    }
  lay.kv_tables = w, w += uint32_t(kv.tables().size());
  if (std::any_of(nodes.begin(), nodes.end(), [&](const Node& n) {
        return MlaTakesNonAbsorbed(*dev_, kv, g, n, T, mla_expand);
      })) {
    lay.mla_view = w = (w + 63) / 64 * 64;  // bound on its own: 256-byte aligned
    w += uint32_t(MlaViewWords(kv, T));
  }
  for (const Node& n : nodes) {
    if (n.op != Op::kAttention) continue;
    const AttentionParams& a = n.Params<AttentionParams>();
    const uint32_t dk = uint32_t(a.dk), dv = uint32_t(a.dv);
    if (!UseMixedAttention(*dev_, T, uint32_t(a.q_heads), uint32_t(a.kv_heads), dk, dv)) continue;
    const int rows = MixedTileRows(*dev_, T, dk, dv);
    ES_CHECK(lay.tile_rows == 0 || lay.tile_rows == rows, "vulkan: attention '", n.name,
             "' takes tiles of ", rows, " rows, another attention of the graph ", lay.tile_rows);
    if (lay.dec_rows) continue;
    lay.tile_rows = rows;
    lay.dec_rows = w;  // count, rows
    w += uint32_t(T) + 1;
    lay.tiles = w;  // count, (first row, rows) pairs: at most a tile a row
    w += 2 * uint32_t(T) + 1;
  }
  for (const Node& n : nodes)  // every kInput node reads the batch's one set of rows
    if (n.op == Op::kInput && !lay.input) {
      lay.input = w = (w + 63) / 64 * 64;  // bound on its own: 256-byte aligned
      w += uint32_t(n.shape[0] * n.shape[1]);
      p->input = n;
    } else if (n.op == Op::kInput) {
      ES_CHECK(n.shape == p->input.shape, "vulkan: input nodes '", p->input.name, "' ",
               ShapeStr(p->input.shape), " and '", n.name, "' ", ShapeStr(n.shape), " differ");
    }
  lay.words = w;
  p->batch = host_pool_->Alloc(uint64_t(w) * 4, "batch tables");
}

// The program's result: the last node's rows, or (kArgmax, kSample) their ids, recorded after
// the graph's dispatches.
BufRange VulkanBackend::RecordResult(Program* p, OpContext& c, BufRange last, int mode) {
  const int N = int(c.g.nodes().size());
  const Node& out = c.g.nodes().back();
  p->n_out = out.shape[0];
  p->out_cols = out.shape[1];
  BufRange result = last;
  result.size = uint64_t(p->n_out * p->out_cols) * 4;
  if (mode == kArgmax) {
    Allocation ids = act_pool_->Alloc(uint64_t(p->n_out) * 4, "argmax ids");
    p->owned.push_back(ids);
    const uint32_t C = uint32_t(p->out_cols);
    if (const auto [parts, chunk] = RowPartsOf(C); parts) {
      // Long rows: parts of about 1024 columns a workgroup each, then one workgroup per row over
      // the parts' best (argmax.comp PARTIAL, FINAL).
      Allocation pv = act_pool_->Alloc(uint64_t(p->n_out) * parts * 8, "argmax parts");
      p->owned.push_back(pv);
      const BufRange vals{pv.buffer, pv.offset, uint64_t(p->n_out) * parts * 4};
      const BufRange idx{pv.buffer, pv.offset + vals.size, vals.size};
      Dispatch& d = c.Add("argmax_partial", {1, 1, 1});
      d.node = N - 1;
      d.bindings = {{result}, {vals}, {idx}};
      d.writes = {1, 2};
      d.Push(std::array<uint32_t, 2>{C, chunk});
      d.groups[0] = parts;
      d.groups[1] = uint32_t(p->n_out);
      Dispatch& f = c.Add("argmax_final", {1, 1, 1});
      f.node = N - 1;
      f.bindings = {{vals}, {Range(ids)}, {idx}};
      f.writes = {1};
      f.Push(parts);
      Grid1D(f, uint64_t(p->n_out), 1);
    } else {
      Dispatch& d = c.Add("argmax", {1, 1});
      d.node = N - 1;
      d.bindings = {{result}, {Range(ids)}};
      d.writes = {1};
      d.Push(C);
      Grid1D(d, uint64_t(p->n_out), 1);
    }
    result = Range(ids);
    result.size = uint64_t(p->n_out) * 4;
  } else if (mode == kSample) {
    // One workgroup per row (sample.comp); penalties are applied to the logits in place. Over
    // long rows the greedy rows without penalties take their pick from parts of about 1024
    // columns a workgroup first (sample.comp PARTIAL), as argmax does.
    Allocation ids = act_pool_->Alloc(uint64_t(p->n_out) * 4, "sampled ids");
    p->owned.push_back(ids);
    p->sampling =
        host_pool_->Alloc(SamplingWords(p->n_out, p->out_cols) * 4, "sampling parameters");
    const uint32_t C = uint32_t(p->out_cols), R = uint32_t(p->n_out);
    const auto [parts, chunk] = RowPartsOf(C);
    std::array<uint32_t, 5> push{C, R, uint32_t(kMaxSamplingCounts), parts, chunk};
    BufRange picks = Range(p->sampling);  // bound, not read, without parts
    if (parts) {
      Allocation pa = act_pool_->Alloc(uint64_t(R) * parts * 8, "sampling parts");
      p->owned.push_back(pa);
      picks = Range(pa);
      Dispatch& d = c.Add("sample_partial", {1, 1, 1});
      d.node = N - 1;
      d.bindings = {{result}, {picks}, {Range(p->sampling)}};
      d.writes = {1};
      d.Push(push);
      d.groups[0] = parts;
      d.groups[1] = R;
    }
    Dispatch& d = c.Add("sample", {1, 1, 1, 1});
    d.node = N - 1;
    d.bindings = {{result}, {Range(ids)}, {Range(p->sampling)}, {picks}};
    d.writes = {0, 1};
    d.Push(push);
    Grid1D(d, uint64_t(R), 1);
    result = Range(ids);
    result.size = uint64_t(p->n_out) * 4;
  }
  return result;
}

namespace {
// The rows' rope cos/sin tables in the batch buffer (words `fw`), one pair per table the program
// uses, at its layout offset: cos [T, dim / 2] then sin.
void WriteRopeTables(const BatchLayout& lay, const Batch& b, float* fw) {
  const int64_t T = b.n_tokens();
  for (const auto& [rt, off] : lay.rope) {
    const int64_t half = rt->dim / 2;
    float* cs = fw + off;
    float* sn = cs + T * half;
    for (int64_t t = 0; t < T; ++t) {
      const float pos = float(b.positions[size_t(t)]);
      for (int64_t k = 0; k < half; ++k) {
        const float angle = pos * rt->inv_freq[size_t(k)];  // as the reference: f32 angle
        cs[t * half + k] = std::cos(angle) * rt->attention_factor;
        sn[t * half + k] = std::sin(angle) * rt->attention_factor;
      }
    }
  }
}
}  // namespace

void VulkanBackend::Run(Program& p, const Batch& b, VkKv& kv, void* out, ComputeStats* stats,
                        const RowSampling* rows) {
  const auto t_start = Clock::now();
  const int64_t T = b.n_tokens();
  ES_CHECK(T == p.T, "vulkan: batch has ", T, " tokens, the graph was built for ", p.T);
  ES_CHECK(b.positions.size() == size_t(T) && b.row_seq.size() == size_t(T),
           "vulkan: the batch is not finalized (call Batch::Finalize)");
  // A graph may also output every row (ModelArch::BuildHidden: logits are not its output).
  ES_CHECK(int64_t(b.out_rows.size()) == p.n_out || (p.mode == kLogits && p.n_out == T),
           "vulkan: the batch has ", b.out_rows.size(), " output rows, the graph ", p.n_out);
  if (p.mode == kSample) WriteSampling(p.sampling.mapped, rows, p.n_out, p.out_cols);
  // ---- upload: the per-token tables --------------------------------------------------------
  int32_t* words = reinterpret_cast<int32_t*>(p.batch.mapped);
  const auto& lay = p.layout;
  for (int64_t t = 0; t < T; ++t) {
    const int32_t tok = b.tokens[size_t(t)];
    ES_CHECK(p.vocab < 0 || (tok >= 0 && tok < p.vocab), "token id ", tok,
             " is outside the vocabulary (", p.vocab, " tokens)");
    const BatchSeq& s = b.seqs[size_t(b.row_seq[size_t(t)])];
    ES_CHECK(s.slot >= 0 && s.slot < kv.n_slots(), "vulkan: KV slot ", s.slot,
             " is outside the cache (", kv.n_slots(), " slots)");
    ES_CHECK(b.positions[size_t(t)] >= 0 && b.positions[size_t(t)] < kv.capacity(),
             "sequence in slot ", s.slot, " exceeds the context of ", kv.capacity(), " tokens");
    ES_CHECK(b.positions[size_t(t)] < kv.mapped_tokens(s.slot), "sequence in slot ", s.slot,
             " position ", b.positions[size_t(t)], " has no KV block (the slot's table maps ",
             kv.mapped_tokens(s.slot), " tokens)");
    words[lay.tokens + t] = tok;
    words[lay.positions + t] = b.positions[size_t(t)];
    words[lay.slots + t] = s.slot;
  }
  // The block tables as they are now (the engine may change them between steps).
  words[0] = int32_t(lay.kv_tables);
  words[1] = int32_t(kv.blocks_per_slot());
  std::copy(kv.tables().begin(), kv.tables().end(), words + lay.kv_tables);
  if (lay.mla_view) WriteMlaView(lay, b, kv, words);
  if (lay.input) {  // the host rows of this forward (ops/input.cpp copies them on the device)
    std::memcpy(words + lay.input, InputRows(b, p.input),
                size_t(p.input.shape[0] * p.input.shape[1]) * 4);
  }
  if (lay.dec_rows) WriteMixedRows(lay, b, words);
  for (size_t i = 0; i < b.out_rows.size(); ++i) {
    ES_CHECK(b.out_rows[i] >= 0 && b.out_rows[i] < T, "vulkan: out row ", b.out_rows[i],
             " outside the batch");
    words[lay.out_rows + i] = b.out_rows[i];
  }
  WriteRopeTables(lay, b, reinterpret_cast<float*>(p.batch.mapped));
  const double upload_s = Since(t_start);
  // ---- dispatch ----------------------------------------------------------------------------
  const auto t_submit = Clock::now();
  const double submit_s = p.seq->SubmitAndWait();
  const double gpu_wall_s = Since(t_submit);
  ++submits_;
  // ---- download ----------------------------------------------------------------------------
  const auto t_down = Clock::now();
  std::memcpy(out, p.readback.mapped,
              p.readback.size < uint64_t(p.n_out * (p.mode != kLogits ? 1 : p.out_cols)) * 4
                  ? p.readback.size
                  : uint64_t(p.n_out * (p.mode != kLogits ? 1 : p.out_cols)) * 4);
  const double download_s = Since(t_down);
  if (opts_.profile && p.seq->timer()) {
    // Decode: every row samples a token (one row per sequence, batched decode included).
    PhaseProfile& pp = profile_[p.n_out == T ? 0 : 1];
    const auto iv = p.seq->timer()->Intervals();
    if (p.profile_kinds.empty())
      for (const Dispatch& d : p.ds)
        p.profile_kinds.push_back(ProfileKind(p.node_info[size_t(d.node)].first, d.pipe->name));
    double span = 0;
    for (size_t i = 0; i < iv.size() && i < p.ds.size(); ++i) {
      span += iv[i];
      const Dispatch& d = p.ds[i];
      const auto& [name, op] = p.node_info[size_t(d.node)];
      pp.family_s[OpName(op)] += iv[i];
      PhaseProfile::Kind& k = pp.kinds[p.profile_kinds[i]];
      k.s += iv[i];
      ++k.count;
      if (d.pipe->name.rfind("matmul_gemv", 0) == 0 && !d.bindings.empty())
        for (const BufRange& r : d.bindings[0]) k.weight_bytes += double(r.size);
    }
    ++pp.runs;
    pp.tokens += T;
    pp.upload_s += upload_s;
    pp.submit_s += submit_s;
    pp.gpu_span_s += span;
    pp.idle_s += std::max(0.0, gpu_wall_s - submit_s - span);
    pp.download_s += download_s;
    pp.dispatches = int(p.ds.size());
    pp.barriers = p.seq->barriers();
  }
  if (stats) {
    stats->upload_s += upload_s;
    stats->download_s += download_s;
    stats->ops.clear();
    double shader = 0;
    if (const Timer* tm = p.seq->timer()) {
      const auto iv = tm->Intervals();
      for (size_t i = 0; i < iv.size() && i < p.ds.size(); ++i) {
        const auto& [name, op] = p.node_info[size_t(p.ds[i].node)];
        if (!stats->ops.empty() && stats->ops.back().name == name)
          stats->ops.back().seconds += iv[i];
        else
          stats->ops.push_back({name, op, iv[i]});
        shader += iv[i];
      }
      stats->shader_s += shader;
      stats->dispatch_s += submit_s + std::max(0.0, gpu_wall_s - submit_s - shader);
    } else {
      stats->shader_s += gpu_wall_s - submit_s;
      stats->dispatch_s += submit_s;
    }
    stats->total_s += Since(t_start);
  }
}

void VulkanBackend::PrintProfile() const {
  std::fprintf(stderr, "vulkan profile: %d programs built (graph shapes recorded) in %.1f ms\n",
               programs_built_, build_s_ * 1e3);
  const char* names[2] = {"decode (one token a sequence)", "prefill and mixed steps"};
  for (int ph = 0; ph < 2; ++ph) {
    const PhaseProfile& pp = profile_[ph];
    if (pp.runs == 0) continue;
    const double k = 1e6 / pp.runs;  // microseconds per step
    std::fprintf(
        stderr,
        "vulkan profile, %s: %d steps (%lld tokens), per step: upload %.1f us, submit %.1f us, "
        "GPU first->last timestamp %.1f us (%d dispatches, %d barriers), launch + wake-up "
        "%.1f us, download %.1f us\n",
        names[ph], pp.runs, static_cast<long long>(pp.tokens), pp.upload_s * k, pp.submit_s * k,
        pp.gpu_span_s * k, pp.dispatches, pp.barriers, pp.idle_s * k, pp.download_s * k);
    std::vector<std::pair<double, std::string>> fam;
    for (const auto& [name, s] : pp.family_s) fam.push_back({s, name});
    std::sort(fam.rbegin(), fam.rend());
    std::fprintf(stderr, "  shader time per op family (us/step, incl. barrier waits):");
    for (const auto& [s, name] : fam) std::fprintf(stderr, " %s %.1f", name.c_str(), s * k);
    std::fprintf(stderr, "\n");
    std::vector<std::pair<double, std::string>> kinds;
    for (const auto& [name, kd] : pp.kinds) kinds.push_back({kd.s, name});
    std::sort(kinds.rbegin(), kinds.rend());
    std::fprintf(stderr,
                 "  per dispatch kind (us/step, dispatches/step; GEMVs: GB/s of their weights):\n");
    for (size_t i = 0; i < kinds.size() && i < 16; ++i) {
      const PhaseProfile::Kind& kd = pp.kinds.at(kinds[i].second);
      std::fprintf(stderr, "    %-60s %9.1f us %5.1f", kinds[i].second.c_str(), kd.s * k,
                   double(kd.count) / pp.runs);
      if (kd.weight_bytes > 0 && kd.s > 0)
        std::fprintf(stderr, "  %7.1f GB/s", kd.weight_bytes / kd.s / 1e9);
      std::fprintf(stderr, "\n");
    }
  }
}

namespace {
VkKv* AsVkKv(KvStorage& kv) {
  auto* v = dynamic_cast<VkKv*>(&kv);
  ES_CHECK(v, "vulkan: the KV cache was not created by the Vulkan backend");
  return v;
}
// The argmax and sample shaders write -1 for a row holding a NaN or infinite logit; the same
// error as CheckFiniteLogits on the host path (issue 23: such rows decoded as token 0 forever).
void CheckDeviceIds(const int32_t* ids, size_t rows) {
  static const char kWhy[] =
      ": its weights or hyperparameters are corrupt (a NaN or infinite weight value, or a "
      "degenerate rope base or norm epsilon)";
  for (size_t r = 0; r < rows; ++r)
    if (ids[r] < 0) Fail("vulkan: the model computed a non-finite logit in output row ", r, kWhy);
}
}  // namespace

void VulkanBackend::Compute(const Graph& g, const Batch& b, KvStorage& kv_base, float* out,
                            ComputeStats* stats) {
  VkKv* kv = AsVkKv(kv_base);
  Program& p = GetProgram(g, b, *kv, kLogits);
  Run(p, b, *kv, out, stats);
}

void VulkanBackend::ComputeArgmax(const Graph& g, const Batch& b, KvStorage& kv_base, int32_t* ids,
                                  ComputeStats* stats) {
  VkKv* kv = AsVkKv(kv_base);
  Program& p = GetProgram(g, b, *kv, kArgmax);
  Run(p, b, *kv, ids, stats);
  CheckDeviceIds(ids, b.out_rows.size());
}

void VulkanBackend::ComputeSample(const Graph& g, const Batch& b, KvStorage& kv_base,
                                  const RowSampling* rows, int32_t* ids, ComputeStats* stats) {
  VkKv* kv = AsVkKv(kv_base);
  for (size_t r = 0; r < b.out_rows.size(); ++r)
    ES_CHECK(rows[r].counts.size() <= size_t(kMaxSamplingCounts), "vulkan: sampling row ", r,
             " carries ", rows[r].counts.size(), " penalized ids; the device takes at most ",
             kMaxSamplingCounts);
  Program& p = GetProgram(g, b, *kv, kSample);
  Run(p, b, *kv, ids, stats, rows);
  CheckDeviceIds(ids, b.out_rows.size());
}

}  // namespace es::vk
