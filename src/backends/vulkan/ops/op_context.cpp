// Shared op helpers and the op registry (see op_context.h).
#include "ops/op_context.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "ops/ops.h"

namespace es::vk {

Dispatch& OpContext::Add(const std::string& shader, const std::vector<uint32_t>& counts,
                         const std::vector<uint32_t>& spec) {
  Dispatch d;
  d.pipe = &pipes.Get(shader, counts, spec);
  d.node = id;
  d.bindings.resize(counts.size());
  out->push_back(std::move(d));
  return out->back();
}

BufRange Range(const Allocation& a) { return {a.buffer, a.offset, a.size}; }

void Grid1D(Dispatch& d, uint64_t n, uint32_t wg) {
  const uint64_t groups = std::max<uint64_t>(1, (n + wg - 1) / wg);
  d.groups[0] = uint32_t(std::min<uint64_t>(groups, 65535));
  d.groups[1] = uint32_t((groups + 65534) / 65535);
}

const char* TypeSuffix(DType t) {
  switch (t) {
    case DType::kF32:
      return "f32";
    case DType::kF16:
      return "f16";
    case DType::kBF16:
      return "bf16";
    case DType::kQ8_0:
      return "q8_0";
    case DType::kQ4_0:
      return "q4_0";
    case DType::kQ4_1:
      return "q4_1";
    case DType::kQ5_0:
      return "q5_0";
    case DType::kQ5_1:
      return "q5_1";
    case DType::kQ4_K:
      return "q4_k";
    case DType::kQ5_K:
      return "q5_k";
    case DType::kQ6_K:
      return "q6_k";
    case DType::kI4F:
      return "i4f";
    default:
      Fail("vulkan: no shader variant for type ", Name(t));
  }
}

BufRange FoldedNormInput(const OpContext& c, NormFold* nf) {
  if (!c.norm_node) return c.In(0);
  nf->weight = Range(c.weights.GetF32(*c.g.node(c.norm_node->src[1]).weight).chunks[0].alloc);
  nf->eps = c.norm_node->Params<RmsNormParams>().eps;
  return c.act[size_t(c.norm_node->src[0])];
}

GemvShape GemvFor(const Device& dev) {
  GemvShape s;
  const uint32_t sg = std::max<uint32_t>(dev.info().max_subgroup_size, 1);
  const uint32_t tpr = std::max<uint32_t>(32, sg);  // invocations per output
  s.wg = std::max<uint32_t>(128, tpr);
  s.rows = s.wg / tpr;
  return s;
}

std::vector<uint64_t> ScratchBytes(const Device& dev, const VkKv& kv, const Graph& g, const Node& n,
                                   int64_t T, bool mla_expand) {
  switch (n.op) {
    case Op::kMatMul: {
      const uint64_t b = MatMulScratchBytes(dev, g, n);
      return b ? std::vector<uint64_t>{b} : std::vector<uint64_t>{};
    }
    case Op::kMlaAttention:
      return MlaScratch(dev, kv, g, n, T, mla_expand);
    case Op::kMoE:
      return MoeScratch(dev, g, n, T);
    case Op::kAttention: {
      const AttentionParams& a = n.Params<AttentionParams>();
      const uint32_t Hq = uint32_t(a.q_heads), Hkv = uint32_t(a.kv_heads), dk = uint32_t(a.dk),
                     dv = uint32_t(a.dv);
      const uint64_t b = UseMixedAttention(dev, T, Hq, Hkv, dk, dv)
                             ? MixedAttentionBytes(dev, T, Hq, dv)
                             : AttentionSplitBytes(dev, T, Hq, Hkv, dk, dv);
      return b ? std::vector<uint64_t>{b} : std::vector<uint64_t>{};
    }
    default:
      return {};
  }
}

void BuildOp(OpContext& c) {
  switch (c.n.op) {
    case Op::kEmbed:
      return BuildEmbed(c);
    case Op::kRmsNorm:
      return BuildRmsNorm(c);
    case Op::kMatMul:
      return BuildMatMul(c);
    case Op::kAdd:
      return BuildAdd(c);
    case Op::kSwiGLU:
      return BuildSwiGLU(c);
    case Op::kSlice:
      return BuildSlice(c);
    case Op::kRope:
      return BuildRope(c);
    case Op::kKvStore:
      return BuildKvStore(c);
    case Op::kAttention:
      return BuildAttention(c);
    case Op::kMlaAttention:
      return BuildMla(c);
    case Op::kMoE:
      return BuildMoe(c);
    case Op::kGetRows:
      return BuildGetRows(c);
    case Op::kInput:
      return BuildInput(c);
    case Op::kWeight:
    case Op::kCount:
      return;
  }
}

bool OpSupported(const Graph& g, const Node& n, std::string* why) {
  auto weight_ok = [&](int k) {
    const int s = n.src[size_t(k)];
    if (s < 0) return true;
    const Node& w = g.node(s);
    if (w.op != Op::kWeight) return true;
    if (WeightStore::Supported(w.dtype)) return true;
    if (why) *why = "weight '" + w.name + "' has type " + std::string(Name(w.dtype));
    return false;
  };
  for (size_t k = 0; k < n.src.size(); ++k)
    if (!weight_ok(int(k))) return false;
  if (n.op == Op::kAttention || n.op == Op::kMlaAttention) {
    // MLA's absorbed form attends over the latent (rank) plus the rope dims.
    const int64_t dq = n.op == Op::kAttention
                           ? n.Params<AttentionParams>().dk
                           : n.Params<MlaParams>().rank + n.Params<MlaParams>().dr;
    const int64_t dv =
        n.op == Op::kAttention ? n.Params<AttentionParams>().dv : n.Params<MlaParams>().rank;
    if (dq > 1024 || dv > 1024) {
      if (why) *why = "attention head dims above 1024";
      return false;
    }
  }
  if (n.op == Op::kMoE &&
      (n.Params<MoeOpParams>().moe.n_experts > 256 || n.Params<MoeOpParams>().moe.n_group > 64)) {
    if (why) *why = "more than 256 experts or 64 groups";
    return false;
  }
  return n.op != Op::kCount;
}

}  // namespace es::vk
