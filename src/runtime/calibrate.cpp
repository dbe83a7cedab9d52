// `edgeseek devices --calibrate`: measures this machine into a device profile (device_profile.h).
// Everything runs through the backend's own kernels (Backend::Compute over small graphs), so the
// rates are what a model's matmuls reach, not a synthetic peak:
//  - bandwidth: the CPU's streaming read sum (bench.h MeasureReadBandwidth) or the Vulkan
//    device's copy probe (bytes read + written a second);
//  - GEMV bytes/s per weight type: one row against a 1 GiB weight (far larger than the caches);
//  - GEMM FLOP/s per weight type: prefill-shaped rows against a square weight;
//  - both again at the presets' matmul shapes (CurveShapes), each with its own per-op cost
//    (a CPU matmul's parallel region fork / join) inside: the rate curves plan interpolates;
//  - per-op overhead: a chain of 257 tiny adds against a chain of 1 (the difference / 256);
//  - per-step overhead: the chain of 1;
//  - model-shaped layer chains (LayerProbes): dense GQA layers of the presets' shapes as one
//    graph, one row at a depth and a prefill's rows, so that what a model's layer pays beyond
//    its matmuls' rates (norms, rope, attention, SwiGLU, x quantization, parallel regions, a
//    GPU's dispatches and barriers) is measured, not assumed.
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "edgeseek/internal/backends/backend.h"
#include "edgeseek/internal/backends/vulkan.h"
#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/core/half.h"
#include "edgeseek/internal/models/presets.h"
#include "edgeseek/internal/quant/blocks.h"
#include "edgeseek/internal/runtime/bench.h"
#include "edgeseek/internal/runtime/device_profile.h"

namespace es {
namespace {

using Clock = std::chrono::steady_clock;

// A [rows, cols] weight of `t` with values in [-0.5, 0.5): `distinct` rows quantized (64 unless
// asked), repeated (the kernels' speed does not depend on the values; a GiB of Q4_0 quantized row
// by row would take most of a minute).
Tensor RandomWeight(const std::string& name, DType t, int64_t rows, int64_t cols, uint64_t seed,
                    int64_t distinct = 64) {
  Tensor w = AllocTensor(name, t, {rows, cols});
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  std::vector<float> row(static_cast<size_t>(cols));
  auto* dst = static_cast<uint8_t*>(MutableData(w));
  const size_t rb = RowBytes(t, cols);
  distinct = std::min(rows, distinct);
  for (int64_t r = 0; r < distinct; ++r) {
    for (float& v : row) v = u(rng);
    Quantize(t, row.data(), dst + size_t(r) * rb, cols);
  }
  for (int64_t r = distinct; r < rows; ++r)
    std::memcpy(dst + size_t(r) * rb, dst + size_t(r % distinct) * rb, rb);
  return w;
}

Batch RowsBatch(int rows) {
  Batch b;
  std::vector<int32_t> toks(static_cast<size_t>(rows));
  for (int i = 0; i < rows; ++i) toks[size_t(i)] = i;
  b.Add(0, 0, toks, true);
  b.Finalize();
  return b;
}

int MatMulNode(Graph& g, int x, const Tensor& w, int64_t rows) {
  Node n;
  n.op = Op::kMatMul;
  n.name = "matmul";
  n.src = {x, g.AddWeight(w), -1};
  n.shape = {rows, w.rows()};
  return g.Add(std::move(n));
}

// Input rows enter through kEmbed over an f32 table (the backend-resident activations).
int InputNode(Graph& g, const Tensor& table, int64_t rows) {
  Node n;
  n.op = Op::kEmbed;
  n.name = "input";
  n.src = {g.AddWeight(table)};
  n.shape = {rows, table.cols()};
  return g.Add(std::move(n));
}

// One Compute of `g` timed as every probe is (TimeRepeated), after `warmup` seconds of untimed
// runs (default: a third of the budget).
ProbeTiming TimeGraph(Backend& be, const Graph& g, const Batch& b, KvStorage& kv, double budget,
                      double warmup = -1) {
  const Node& out = g.node(g.output());
  std::vector<float> result(size_t(out.shape[0] * out.shape[1]));
  const auto start = Clock::now();
  return TimeRepeated([&] { be.Compute(g, b, kv, result.data()); },
                      [&] { return std::chrono::duration<double>(Clock::now() - start).count(); },
                      budget, warmup < 0 ? budget / 3 : warmup);
}

// Untimed work before the first probe: a GPU idles at low clocks and takes hundreds of
// milliseconds of load to raise them, and a first run compiles pipelines. A 256-row f16 GEMM
// against [2048, 2048], over and over for `seconds` (at least once).
void WarmUpDevice(Backend& be, KvStorage& kv, double seconds) {
  const Tensor w = RandomWeight("warm_up", DType::kF16, 2048, 2048, 17);
  be.PrepareWeight(w);
  const Tensor x = RandomWeight("x", DType::kF32, 256, 2048, 19);
  Graph g;
  MatMulNode(g, InputNode(g, x, 256), w, 256);
  TimeGraph(be, g, RowsBatch(256), kv, 0, seconds);
}

std::string Today() {
  char buf[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(buf, sizeof buf, "%Y-%m-%d", std::gmtime(&now));
  return buf;
}

// The process's resident set now (/proc/self/statm's second field, in pages); 0 if unreadable.
size_t CurrentRssBytes() {
  std::ifstream f("/proc/self/statm");
  size_t pages = 0, resident = 0;
  if (!(f >> pages >> resident)) return 0;
  return resident * size_t(sysconf(_SC_PAGESIZE));
}

size_t MemTotalBytes() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  size_t kb = 0;
  std::string unit;
  while (f >> key >> kb >> unit)
    if (key == "MemTotal:") return kb * 1024;
  return 0;
}

// The matmul shapes [n, k] of the presets' layers (1.5B: hidden 1536, FFN 8960, KV 256; 7B:
// 3584 / 18944 / 512; V2-Lite: 2048, experts 1408, shared 2816, dense FFN 10944, MLA latent
// 576), so plan interpolates between rates measured where the models' matmuls are.
std::vector<std::pair<int64_t, int64_t>> CurveShapes(bool quick) {
  if (quick) return {{64, 256}, {256, 512}, {512, 256}};
  return {{256, 1536},  {1536, 1536},  {8960, 1536}, {1536, 8960},  {576, 2048},
          {1408, 2048}, {2816, 2048},  {2048, 1408}, {10944, 2048}, {512, 3584},
          {3584, 3584}, {18944, 3584}, {3584, 18944}};
}

// Times `rows` x k by random [n, k] weights of type t through the backend, less the step's own
// time and each matmul's per-op cost (plan charges those per step and per graph node).
// GEMM (rows > 1): one weight, FLOP/s. GEMV (rows = 1): as a model's layers do, a chain of
// distinct weights alternating [n, k] and [k, n], `chain_bytes` of them in all (so they stream
// from memory, not the caches; each matmul pays its own parallel region), weight bytes/s.
struct MatMulProbe {
  Backend& be;
  KvStorage& kv;
  double budget, step_s, dispatch_s;
  size_t chain_bytes;
  std::string tag;

  CurvePoint Measure(DType t, int64_t n, int64_t k, int rows) {
    const std::string tn(Name(t));
    const Tensor w0 = RandomWeight("w_" + tn, t, n, k, 2 + uint64_t(rows));
    const size_t bytes = w0.nbytes;
    int links = 1;  // GEMM, or a GEMV weight as large as half the chain
    if (rows == 1 && 2 * bytes <= chain_bytes)
      links = n == k ? int(std::min<size_t>(chain_bytes / bytes, 4096))
                     : 2 * int(std::clamp<size_t>(chain_bytes / bytes / 2, 1, 2048));
    // Odd links are [k, n] (same bytes; the values do not matter): copies of w1.
    const Tensor w1 = n == k || links == 1 ? w0 : RandomWeight("w_" + tn, t, k, n, 7);
    std::vector<Tensor> ws;
    ws.reserve(size_t(links));
    for (int i = 0; i < links; ++i) {
      const Tensor& src = i % 2 ? w1 : w0;
      if (i == 0 || (i == 1 && n != k)) {
        ws.push_back(src);
      } else {
        ws.push_back(AllocTensor(src.name, t, src.shape));
        std::memcpy(MutableData(ws.back()), src.data, bytes);
      }
    }
    for (const Tensor& w : ws) be.PrepareWeight(w);
    Tensor x = RandomWeight("x", DType::kF32, rows, k, 3 + uint64_t(rows));
    Graph g;
    int h = InputNode(g, x, rows);
    for (const Tensor& w : ws) h = MatMulNode(g, h, w, rows);
    const ProbeTiming pt = TimeGraph(be, g, RowsBatch(rows), kv, budget);
    const double s = std::max(pt.median_s - step_s - links * dispatch_s, 1e-9);
    CurvePoint c;
    c.k = k;
    c.n = n;
    c.weight_bytes = double(bytes);
    const std::string shape = std::to_string(rows) + " x " + std::to_string(k) + " by [" +
                              std::to_string(n) + ", " + std::to_string(k) + "] " + tn;
    if (rows == 1)
      c.rate =
          MeasuredValue(double(bytes) * links / s,
                        tag + shape +
                            (links > 1 ? " (a chain of " + std::to_string(links) +
                                             " distinct weights, [n, k] and [k, n])"
                                       : std::string()) +
                            ", weight bytes / (median - step - per op x links); " + pt.Describe());
    else
      c.rate = MeasuredValue(2.0 * rows * double(n) * double(k) / s,
                             tag + shape + ", 2RNK / (median - step - per op); " + pt.Describe());
    return c;
  }
};

// Model-shaped chains: `layers` dense GQA decoder layers of a preset's shape as ONE graph, as
// ModelArch::Build records them (norm, q / k / v, two ropes, two KV stores, attention, o,
// residual add; norm, gate / up, SwiGLU, down, residual add: 17 nodes a layer), every matrix
// of one type and distinct per layer (so the weights stream as a model's do), no biases.
struct LayerChainProbe {
  Backend& be;
  double budget;
  std::string tag;

  LayerProbe Measure(const ModelConfig& c, DType t, int rows, int64_t depth, int layers) {
    const int64_t D = c.hidden_size, H = c.n_heads, KVH = c.n_kv_heads, hd = c.head_dim,
                  F = c.intermediate_size;
    KvSpec spec;
    spec.n_layers = layers;
    spec.width[0] = spec.width[1] = int(KVH * hd);
    spec.dtype = be.default_kv_type();
    auto kv = be.CreateKv(spec, 1, int(depth + rows + 1));
    const auto rope = std::make_shared<RopeTable>(c.MakeRope());
    std::vector<Tensor> ws;  // owned here for the graph's lifetime
    ws.reserve(size_t(layers) * 9);
    auto weight = [&](const std::string& name, DType wt, int64_t n, int64_t k) -> const Tensor& {
      ws.push_back(wt == DType::kF32 && n == 1 ? RandomWeight(name, wt, 1, k, 5)
                                               : RandomWeight(name, wt, n, k, 11 + ws.size()));
      if (n == 1) ws.back().shape = {k};  // a norm's weight is a vector
      be.PrepareWeight(ws.back());
      return ws.back();
    };
    const Tensor table = RandomWeight("embed", DType::kF32, rows, D, 1);
    Graph g;
    int h = InputNode(g, table, rows);
    auto node = [&](Op op, std::vector<int> src, Shape shape, const std::string& name) {
      Node n;
      n.op = op;
      n.name = name;
      n.src = std::move(src);
      n.shape = std::move(shape);
      return n;
    };
    auto add = [&](Node n) { return g.Add(std::move(n)); };
    auto norm = [&](int x, const std::string& name) {
      Node n =
          node(Op::kRmsNorm, {x, g.AddWeight(weight(name, DType::kF32, 1, D))}, {rows, D}, name);
      n.params = RmsNormParams{c.rms_norm_eps};
      return add(std::move(n));
    };
    auto mm = [&](int x, int64_t n, int64_t k, const std::string& name) {
      return MatMulNode(g, x, weight(name, t, n, k), rows);
    };
    for (int l = 0; l < layers; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      const int x1 = norm(h, p + "input_layernorm.weight");
      const int q = mm(x1, H * hd, D, p + "self_attn.q"),
                k = mm(x1, KVH * hd, D, p + "self_attn.k"),
                v = mm(x1, KVH * hd, D, p + "self_attn.v");
      int ids[2] = {q, k};
      for (int i = 0; i < 2; ++i) {
        Node r = node(Op::kRope, {ids[i]}, g.node(ids[i]).shape, p + (i ? "k_rope" : "q_rope"));
        r.params = RopeParams{i ? KVH : H, hd, 0, rope};
        ids[i] = add(std::move(r));
      }
      int st[2] = {ids[1], v};
      for (int part = 0; part < 2; ++part) {
        Node s = node(Op::kKvStore, {st[part]}, g.node(st[part]).shape, p + "cache");
        s.layer = l;
        s.params = KvStoreParams{part};
        st[part] = add(std::move(s));
      }
      Node a = node(Op::kAttention, {ids[0], st[0], st[1]}, {rows, H * hd}, p + "self_attn.attn");
      a.layer = l;
      a.params = AttentionParams{H, KVH, hd, hd, c.AttentionScale()};
      const int o = mm(add(std::move(a)), D, H * hd, p + "self_attn.o");
      h = add(node(Op::kAdd, {h, o}, {rows, D}, p + "attn_residual"));
      const int x2 = norm(h, p + "post_attention_layernorm.weight");
      const int gt = mm(x2, F, D, p + "mlp.gate_proj"), up = mm(x2, F, D, p + "mlp.up_proj");
      const int act = add(node(Op::kSwiGLU, {gt, up}, {rows, F}, p + "mlp.act"));
      h = add(
          node(Op::kAdd, {h, mm(act, D, F, p + "mlp.down_proj")}, {rows, D}, p + "mlp_residual"));
    }
    std::vector<int32_t> toks(static_cast<size_t>(rows));
    for (int i = 0; i < rows; ++i) toks[size_t(i)] = i;
    Batch b;
    b.Add(0, depth, toks, true);
    b.Finalize();
    LayerProbe lp;
    lp.hidden = D, lp.heads = H, lp.kv_heads = KVH, lp.head_dim = hd, lp.ffn = F;
    lp.type = t, lp.kv_type = spec.dtype, lp.rows = rows, lp.layers = layers, lp.depth = depth;
    const ProbeTiming pt = TimeGraph(be, g, b, *kv, budget);
    lp.seconds = MeasuredValue(
        pt.median_s, tag + std::to_string(layers) + " dense GQA layers [D " + std::to_string(D) +
                         ", FFN " + std::to_string(F) + "] of " + std::string(Name(t)) +
                         " as one graph, " + std::to_string(rows) + " rows at KV depth " +
                         std::to_string(depth) + ", seconds of one Compute: " + pt.Describe());
    return lp;
  }
};

// The head of a decode step: the final norm and an lm_head [V, D] of type t over one row.
HeadProbe MeasureHead(Backend& be, KvStorage& kv, const ModelConfig& c, DType t, double budget,
                      const std::string& tag) {
  const int64_t D = c.hidden_size, V = c.vocab_size;
  Tensor norm_w = RandomWeight("model.norm.weight", DType::kF32, 1, D, 5);
  norm_w.shape = {D};
  const Tensor head = RandomWeight("lm_head.weight", t, V, D, 13);
  be.PrepareWeight(norm_w);
  be.PrepareWeight(head);
  const Tensor table = RandomWeight("embed", DType::kF32, 1, D, 1);
  Graph g;
  Node n;
  n.op = Op::kRmsNorm;
  n.name = "model.norm";
  n.src = {InputNode(g, table, 1), g.AddWeight(norm_w)};
  n.shape = {1, D};
  n.params = RmsNormParams{c.rms_norm_eps};
  MatMulNode(g, g.Add(std::move(n)), head, 1);
  HeadProbe h;
  h.hidden = D, h.vocab = V, h.type = t;
  const ProbeTiming pt = TimeGraph(be, g, RowsBatch(1), kv, budget);
  h.seconds = MeasuredValue(
      pt.median_s, tag + "final norm + lm_head [" + std::to_string(V) + ", " + std::to_string(D) +
                       "] " + std::string(Name(t)) +
                       " over one row as one graph, seconds of one Compute: " + pt.Describe());
  return h;
}

// A prefill's routed experts (MoeProbe): `layers` MoE FFN halves of c's shape as ONE graph of
// `rows` rows, as ModelArch::Build records a MoE layer's routed part (RMS norm, the MoE node over
// the f32 router and every expert's gate / up / down, the residual add: 3 nodes a layer), every
// expert of type t and distinct per layer. The input rows are all distinct (the routing of
// repeated rows would repeat), so the router spreads them as a model's random-looking tokens.
MoeProbe MeasureMoe(Backend& be, KvStorage& kv, const ModelConfig& c, DType t, int rows, int layers,
                    double budget, const std::string& tag) {
  const int64_t D = c.hidden_size, I = c.moe_intermediate_size;
  const int E = c.n_routed_experts;
  MoeParams mp;
  mp.n_experts = E;
  mp.top_k = c.num_experts_per_tok;
  mp.scoring = c.scoring_func == "sigmoid" ? ScoringFunc::kSigmoid : ScoringFunc::kSoftmax;
  mp.routed_scaling_factor = float(c.routed_scaling_factor);
  mp.ffn_dim = int(I);
  std::vector<Tensor> ws;  // owned here for the graph's lifetime
  ws.reserve(size_t(layers) * (3 * size_t(E) + 2));
  auto weight = [&](const std::string& name, DType wt, int64_t n, int64_t k) -> const Tensor& {
    ws.push_back(RandomWeight(name, wt, n, k, 23 + ws.size()));
    if (n == 1) ws.back().shape = {k};  // the norm's weight is a vector
    be.PrepareWeight(ws.back());
    return ws.back();
  };
  const Tensor table = RandomWeight("embed", DType::kF32, rows, D, 1, rows);
  Graph g;
  int h = InputNode(g, table, rows);
  for (int l = 0; l < layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    Node norm;
    norm.op = Op::kRmsNorm;
    norm.name = p + "post_attention_layernorm";
    norm.src = {h, g.AddWeight(weight(norm.name + ".weight", DType::kF32, 1, D))};
    norm.shape = {rows, D};
    norm.params = RmsNormParams{c.rms_norm_eps};
    const int x = g.Add(std::move(norm));
    Node m;
    m.op = Op::kMoE;
    m.name = p + "mlp.experts";
    m.src = {x, g.AddWeight(weight(p + "mlp.gate.weight", DType::kF32, E, D)), -1};
    for (int e = 0; e < E; ++e) {
      const std::string ex = p + "mlp.experts." + std::to_string(e) + ".";
      m.src.push_back(g.AddWeight(weight(ex + "gate_proj.weight", t, I, D)));
      m.src.push_back(g.AddWeight(weight(ex + "up_proj.weight", t, I, D)));
      m.src.push_back(g.AddWeight(weight(ex + "down_proj.weight", t, D, I)));
    }
    m.shape = {rows, D};
    m.layer = l;
    m.params = MoeOpParams{mp};
    const int moe = g.Add(std::move(m));
    Node add;
    add.op = Op::kAdd;
    add.name = p + "mlp_residual";
    add.src = {h, moe};
    add.shape = {rows, D};
    h = g.Add(std::move(add));
  }
  MoeProbe mo;
  mo.hidden = D, mo.ffn = I, mo.experts = E, mo.top_k = mp.top_k;
  mo.type = t, mo.rows = rows, mo.layers = layers;
  const ProbeTiming pt = TimeGraph(be, g, RowsBatch(rows), kv, budget);
  mo.seconds = MeasuredValue(pt.median_s,
                             tag + std::to_string(layers) + " MoE layers' routed experts [D " +
                                 std::to_string(D) + ", " + std::to_string(E) + " experts of " +
                                 std::to_string(I) + ", top " + std::to_string(mp.top_k) + "] of " +
                                 std::string(Name(t)) + " as one graph, " + std::to_string(rows) +
                                 " rows, seconds of one Compute: " + pt.Describe());
  return mo;
}

// The MoE probes (CPU; a Vulkan prefill past 64 rows runs grouped GEMMs, plan's own arithmetic):
// V2-Lite's routed experts (quick: a small made-up shape) at 16, 64 and 256 rows (1.5, 6 and 24
// rows an expert), q8_0 and q4_0, as many layers as fill chain_bytes (at least one, at most 8);
// a case whose run would take over 4 x seconds at the GEMM rate is skipped.
void ProbeMoe(Backend& be, KvStorage& kv, const CalibrateOptions& o, size_t chain_bytes,
              const std::string& tag, DeviceProfile& p) {
  ModelConfig c = PresetConfig("deepseek-v2-lite");
  std::vector<int> rows = {16, 64, 256};
  if (o.quick) {
    c.hidden_size = 256, c.moe_intermediate_size = 128;
    c.n_routed_experts = 8, c.num_experts_per_tok = 2;
    rows = {4, 16};
  }
  const int64_t D = c.hidden_size, I = c.moe_intermediate_size, E = c.n_routed_experts;
  for (DType t : {DType::kQ8_0, DType::kQ4_0}) {
    const double layer_bytes =
        double(E) * double(2 * RowBytes(t, D) * size_t(I) + RowBytes(t, I) * size_t(D));
    const int layers = int(std::clamp<double>(std::ceil(double(chain_bytes) / layer_bytes), 1, 8));
    for (int r : rows) {
      const double flops = 2.0 * r * c.num_experts_per_tok * 3.0 * double(D) * double(I);
      if (layers * flops / p.GemmRate(t, layer_bytes / double(E)) > 4 * o.seconds_per_case)
        continue;
      p.moe_probes.push_back(MeasureMoe(be, kv, c, t, r, layers, o.seconds_per_case, tag));
    }
  }
}

// The dense presets whose layers are probed (quick: one small made-up shape).
std::vector<ModelConfig> ProbeConfigs(bool quick) {
  if (!quick) return {PresetConfig("r1-distill-qwen-1.5b"), PresetConfig("r1-distill-qwen-7b")};
  ModelConfig c = PresetConfig("r1-distill-qwen-1.5b");
  c.hidden_size = 256, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 64;
  c.intermediate_size = 512;
  c.vocab_size = 4096;
  return {c};
}

// Layer chains per dense preset and type: one row at depth 64 (decode) and a prefill's rows
// from position 0. Layers: as many as fill chain_bytes (at least one, at most 28), fewer where
// the device is slow (each case near `seconds` a run; a case over 4 x that is skipped).
// A head is one weight timed over and over: probed only where it is at least kCacheMultiple
// times the last-level cache (llc_bytes; 0: unknown, every head), else its repeats read the
// cache, not memory as a model's head does (the dev Xeon's 260 MiB L3 held the 1.5B's 248 MB
// Q8_0 head: 28 GB/s against 20-23 from memory) and plan charges it its roofline alone.
void ProbeLayers(Backend& be, KvStorage& kv, const CalibrateOptions& o, size_t max_bytes,
                 size_t chain_bytes, size_t llc_bytes, const std::string& tag, DeviceProfile& p) {
  LayerChainProbe probe{be, o.seconds_per_case, tag};
  // The heads (the presets' lm_head is q8_0 under q4_0 / q8_0, f16 under f16).
  for (const ModelConfig& c : ProbeConfigs(o.quick))
    for (DType t : {DType::kF16, DType::kQ8_0}) {
      const size_t bytes = RowBytes(t, c.hidden_size) * size_t(c.vocab_size);
      if (bytes <= max_bytes && bytes >= kCacheMultiple * llc_bytes &&
          double(bytes) / p.GemvBytesRate(t) <= 4 * o.seconds_per_case)
        p.head_probes.push_back(MeasureHead(be, kv, c, t, o.seconds_per_case, tag));
    }
  // A prefill's rows: the CPU validation's prompt is short (64), a GPU's 512 (plan_validate.sh).
  // The CPU's at 64 and 128: its layers' excess is not linear in rows below 128 (the dev EPYC's
  // 7B Q8_0 prefill of 64 rows paid ~34 ms a layer where the line from 1 to 128 rows said 8.6;
  // session 41), so plan interpolates between the probes' rows (LayerExcess).
  std::vector<int> prefill_rows = {128};
  if (o.quick) prefill_rows = {16};
  if (o.backend == "vulkan" && !o.quick) prefill_rows = {512};
  if (o.backend == "cpu" && !o.quick) prefill_rows = {64, 128};
  for (const ModelConfig& c : ProbeConfigs(o.quick)) {
    const int64_t D = c.hidden_size, F = c.intermediate_size,
                  qkvo = 2 * D * c.n_heads * c.head_dim + 2 * D * c.n_kv_heads * c.head_dim;
    for (DType t : {DType::kF16, DType::kQ8_0, DType::kQ4_0}) {
      const size_t layer_bytes = RowBytes(t, D) * size_t(qkvo / D + 2 * F) + RowBytes(t, F) * D;
      if (layer_bytes > max_bytes) continue;
      const double gemv = p.GemvBytesRate(t), gemm = p.GemmRate(t);
      const double layer_s = double(layer_bytes) / gemv;
      const int layers = int(std::clamp<double>(
          std::min(double(chain_bytes) / double(layer_bytes), o.seconds_per_case / layer_s), 1,
          28));
      if (layer_s <= 4 * o.seconds_per_case)
        p.layer_probes.push_back(probe.Measure(c, t, 1, 64, layers));
      for (int rows : prefill_rows) {
        const double flops = 2.0 * rows * double(qkvo + 3 * D * F);
        if (flops / gemm <= 4 * o.seconds_per_case)
          p.layer_probes.push_back(probe.Measure(
              c, t, rows, 0,
              PrefillProbeLayers(double(layer_bytes), flops / gemm,
                                 o.backend == "cpu" ? chain_bytes : 0, o.seconds_per_case)));
      }
    }
  }
}

// Memory and bandwidth, and the process's share (own_bytes: its resident set before the probes;
// 0 on a GPU, whose driver share is not in the process: nominal).
void MeasureMemory(const CalibrateOptions& o, const std::string& tag, size_t own_bytes,
                   DeviceProfile& p) {
  if (o.backend == "cpu") {
    p.memory_bytes = MeasuredValue(double(MemTotalBytes()), tag + "/proc/meminfo MemTotal");
    const size_t bytes = o.quick ? (size_t(64) << 20) : (size_t(1) << 30);
    p.bandwidth = MeasuredValue(
        MeasureReadBandwidth(o.threads, bytes) * 1e9,
        tag + "streaming read sum over " + std::to_string(bytes >> 20) + " MiB, best of 3");
  } else {
    ES_CHECK(ListVulkanDevices && MeasureVulkanCopyBandwidth, "this build has no Vulkan backend");
    uint64_t heap = 0;
    for (const auto& d : ListVulkanDevices()) {
      if (!o.device.empty() && std::to_string(d.index) != o.device &&
          d.name.find(o.device) == std::string::npos)
        continue;
      for (const auto& h : d.heaps) heap = std::max(heap, h.device_local ? h.bytes : uint64_t(0));
      break;
    }
    p.memory_bytes = MeasuredValue(
        double(heap), tag + "largest device-local heap (vkGetPhysicalDeviceMemoryProperties)");
    const uint64_t bytes = o.quick ? (uint64_t(32) << 20) : (uint64_t(256) << 20);
    p.bandwidth = MeasuredValue(MeasureVulkanCopyBandwidth(o.device, bytes),
                                tag + "buffer copy of " + std::to_string(bytes >> 20) +
                                    " MiB, bytes read + written a second");
  }
  if (own_bytes > 0) {
    p.reserved_bytes = MeasuredValue(
        double(own_bytes),
        tag + "this process's resident set before its first probe (/proc/self/statm)");
  } else {
    p.reserved_bytes = MeasuredValue(
        o.backend == "cpu" ? double(128 << 20) : double(512 << 20),
        "nominal: process / driver share, not measured (CPU 128 MiB, Vulkan 512 MiB)");
    p.reserved_bytes.calibrated = false;
  }
}

}  // namespace

ProbeTiming TimeRepeated(const std::function<void()>& run, const std::function<double()>& now,
                         double budget_s, double warmup_s, int min_runs) {
  ProbeTiming p;
  for (const double start = now(); p.warmups == 0 || now() - start < warmup_s; ++p.warmups) run();
  std::vector<double> t;
  for (const double start = now();
       int(t.size()) < min_runs || (now() - start < budget_s && t.size() < 1000);) {
    const double t0 = now();
    run();
    t.push_back(now() - t0);
  }
  std::sort(t.begin(), t.end());
  p.runs = int(t.size());
  p.median_s = t[t.size() / 2];
  p.min_s = t.front(), p.max_s = t.back();
  return p;
}

std::string ProbeTiming::Describe() const {
  char buf[160];
  std::snprintf(buf, sizeof buf, "median of %d runs after %d warm-up, %.3g .. %.3g s", runs,
                warmups, min_s, max_s);
  return buf;
}

size_t LastLevelCacheBytes(const std::string& cache_dir) {
  size_t best = 0;
  int best_level = 0;
  for (int i = 0; i < 16; ++i) {
    const std::string d = cache_dir + "/index" + std::to_string(i);
    std::ifstream lf(d + "/level"), sf(d + "/size"), tf(d + "/type");
    int level = 0;
    std::string size, type;
    if (!(lf >> level) || !(sf >> size)) continue;
    if ((tf >> type) && type == "Instruction") continue;
    size_t v = 0, at = 0;
    while (at < size.size() && std::isdigit(static_cast<unsigned char>(size[at])))
      v = v * 10 + size_t(size[at++] - '0');
    if (at < size.size()) {
      const char u = char(std::toupper(static_cast<unsigned char>(size[at])));
      v <<= u == 'K' ? 10 : u == 'M' ? 20 : u == 'G' ? 30 : 0;
    }
    if (level > best_level || (level == best_level && v > best)) best = v, best_level = level;
  }
  return best;
}

ProfileValue StreamBandwidth(const ProfileValue& read, const std::map<DType, ProfileValue>& gemv) {
  const std::pair<const DType, ProfileValue>* best = nullptr;
  for (const auto& e : gemv)
    if (!best || e.second.value > best->second.value) best = &e;
  if (!best || best->second.value <= read.value) return read;
  char buf[160];
  std::snprintf(buf, sizeof buf,
                "; the large GEMV probes read their weights faster: %s at %.1f GB/s (the read "
                "sum: %.1f)",
                std::string(Name(best->first)).c_str(), best->second.value / 1e9, read.value / 1e9);
  ProfileValue v = read;
  v.value = best->second.value;
  v.source += buf;
  return v;
}

int PrefillProbeLayers(double layer_bytes, double layer_s, size_t chain_bytes, double seconds) {
  double layers = std::clamp<double>(seconds / layer_s, 1, 4);
  if (chain_bytes > 0) layers = std::max(layers, std::ceil(double(chain_bytes) / layer_bytes));
  return int(std::clamp<double>(layers, 1, 28));
}

size_t ProbeChainBytes(size_t llc_bytes, size_t max_bytes) {
  return std::min(max_bytes, std::max(size_t(256) << 20, kCacheMultiple * llc_bytes));
}

DeviceProfile CalibrateDevice(const CalibrateOptions& o) {
  ES_CHECK(o.backend == "cpu" || o.backend == "vulkan", "--backend must be cpu or vulkan (got '",
           o.backend, "')");
  BackendOptions bo;
  bo.threads = o.threads;
  bo.device = o.device;
  std::unique_ptr<Backend> be = CreateBackend(o.backend, bo);
  // The CPU's share beside the model: what this process holds before any probe allocates (code,
  // libraries, the backend's threads), as a run holds it beside its weights, KV and activations
  // (a converted 1.5B's peak RSS is those plus ~15 MB on the dev VM, docs/plan.md). A GPU
  // driver's share is not in the process's memory: nominal.
  const size_t own_bytes = o.backend == "cpu" ? CurrentRssBytes() : 0;
  const std::string tag =
      "edgeseek devices --calibrate --backend " + o.backend + ", " + Today() + ": ";
  DeviceProfile p;
  p.backend = o.backend;
  p.calibrated = true;
  p.description = be->description();
  p.name = o.backend == "cpu" ? "calibrated-cpu" : "calibrated-vulkan";

  MeasureMemory(o, tag, own_bytes, p);

  KvSpec spec;
  spec.n_layers = 1;
  spec.width[0] = spec.width[1] = 32;
  auto kv = be->CreateKv(spec, 1, 1024);
  // Clocks up and the first pipelines compiled before anything is timed (each probe also warms
  // up on its own graph: TimeGraph).
  if (!o.quick) WarmUpDevice(*be, *kv, 1.0);

  // Per-op and per-step overhead: chains of tiny adds.
  {
    Tensor table = RandomWeight("table", DType::kF32, 1, 64, 1);
    auto chain = [&](int n) {
      Graph g;
      int x = InputNode(g, table, 1);
      for (int i = 0; i < n; ++i) {
        Node a;
        a.op = Op::kAdd;
        a.name = "add" + std::to_string(i);
        a.src = {x, x};
        a.shape = {1, 64};
        x = g.Add(std::move(a));
      }
      return g;
    };
    const Batch b = RowsBatch(1);
    const double t1 = TimeGraph(*be, chain(1), b, *kv, o.seconds_per_case).median_s;
    const double t257 = TimeGraph(*be, chain(257), b, *kv, o.seconds_per_case).median_s;
    p.step_s =
        MeasuredValue(t1, tag + "one Compute of a 2-op graph (submit + wait + host), median");
    p.dispatch_s = MeasuredValue(std::max(0.0, (t257 - t1) / 256.0),
                                 tag + "(a 257-add chain - a 1-add chain) / 256, medians");
  }

  // GEMV and GEMM per weight type: one large shape, then the presets' matmul shapes.
  const int64_t K = o.quick ? 512 : 4096;
  // Like the read probe: far larger than any cache, as a model's weight stream is (a 64 MiB
  // weight read 30-40% faster here than the 8-15 GB models did, docs/plan.md).
  // A GPU's buffers are bounded by its heap (lavapipe reports 2 GiB): an eighth of it at most.
  size_t gemv_bytes = o.quick ? (size_t(4) << 20) : (size_t(1) << 30);
  if (o.backend == "vulkan")
    gemv_bytes = std::min(gemv_bytes, std::max(size_t(4) << 20, size_t(p.memory_bytes.value / 8)));
  const int gemm_rows = o.quick ? 32 : 256;
  const int64_t gemm_n = o.quick ? 512 : 2048;
  // The GEMV chains and the layer chains stream from memory as a model does: larger than the
  // last-level cache by kCacheMultiple (ProbeChainBytes).
  const size_t llc_bytes = o.backend == "cpu" && !o.quick ? LastLevelCacheBytes() : 0;
  const size_t chain_bytes =
      o.quick ? std::min(gemv_bytes, size_t(4) << 20) : ProbeChainBytes(llc_bytes, gemv_bytes);
  MatMulProbe probe{*be,         *kv, o.seconds_per_case, p.step_s.value, p.dispatch_s.value,
                    chain_bytes, tag};
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0}) {
    const int64_t N = std::max<int64_t>(64, int64_t(gemv_bytes / RowBytes(t, K)));
    const CurvePoint gemv = probe.Measure(t, N, K, 1);
    const CurvePoint gemm = probe.Measure(t, gemm_n, K, gemm_rows);
    p.gemv_bytes_per_s[t] = gemv.rate;
    p.gemm_flops[t] = gemm.rate;
    // A slow device (lavapipe) gets a shorter chain, and skips the GEMMs that would take more
    // than a few cases' time a run: each case stays near seconds_per_case.
    probe.chain_bytes = std::min(chain_bytes, size_t(gemv.rate.value * o.seconds_per_case));
    for (const auto& [n, k] : CurveShapes(o.quick)) {
      if (RowBytes(t, k) * size_t(n) > gemv_bytes) continue;
      p.gemv_curve[t].push_back(probe.Measure(t, n, k, 1));
      if (2.0 * gemm_rows * double(n) * double(k) / gemm.rate.value <= 4 * o.seconds_per_case)
        p.gemm_curve[t].push_back(probe.Measure(t, n, k, gemm_rows));
    }
    p.gemv_curve[t].push_back(gemv);
    p.gemm_curve[t].push_back(gemm);
    for (auto* c : {&p.gemv_curve[t], &p.gemm_curve[t]})
      std::stable_sort(c->begin(), c->end(), [](const CurvePoint& a, const CurvePoint& b) {
        return a.weight_bytes < b.weight_bytes;
      });
  }
  // The CPU's read sum streamed 19-20 GB/s on the dev Xeon where its f32 GEMV read a 1 GiB
  // weight at 30: the memory delivers the faster. The large probes count where their weight is
  // at least twice the last-level cache (a cyclic stream of twice an LRU cache never hits it;
  // 1 GiB is 3.9x the Xeon's 260 MiB).
  if (o.backend == "cpu" && !o.quick && gemv_bytes >= 2 * llc_bytes)
    p.bandwidth = StreamBandwidth(p.bandwidth, p.gemv_bytes_per_s);
  // The class rates the plan falls back to for types not measured.
  p.fp32_flops = p.gemm_flops[DType::kF32];
  p.int8_dot_ops = p.gemm_flops[DType::kQ8_0];
  if (o.backend == "vulkan") p.f16_matrix_flops = p.gemm_flops[DType::kF16];
  ProbeLayers(*be, *kv, o, gemv_bytes, chain_bytes, llc_bytes, tag, p);
  if (o.backend == "cpu") ProbeMoe(*be, *kv, o, chain_bytes, tag, p);
  return p;
}

}  // namespace es
