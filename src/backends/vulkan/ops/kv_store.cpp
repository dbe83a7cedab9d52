// kKvStore: writes the batch rows into the cache part at each row's (slot, position); with a
// folded rope (OpContext::rope_node) it rotates them on the way; with MLA's kv_a chain folded in
// (OpContext::mla_c_store) one dispatch writes both of MLA's parts.
#include "ops/ops.h"

namespace es::vk {

namespace {
// The folded MLA chain (vulkan_backend.cpp): kva [T, r + dr] → the normed latent into the c
// store's part, the rotated rope part into this store's.
void RecordMlaKvStore(OpContext& c) {
  const KvSpec& spec = c.kv.spec();
  const Node& rope = *c.rope_node;
  const Node& raw = c.g.node(rope.src[0]);  // the rope part's slice of kva
  const BufRange kva = c.act[size_t(raw.src[0])];
  const uint32_t T = uint32_t(c.n.shape[0]), r = uint32_t(c.mla_c_store->shape[1]),
                 dr = uint32_t(c.n.shape[1]);
  const int pc0 = c.mla_c_store->Params<KvStoreParams>().part,
            pc1 = c.n.Params<KvStoreParams>().part;
  ES_CHECK(spec.width[pc0] == int64_t(r) && spec.width[pc1] == int64_t(dr),
           "vulkan: MLA cache stores '", c.mla_c_store->name, "', '", c.n.name,
           "' do not fit the cache parts");
  const bool f16 = spec.dtype == DType::kF16;
  Dispatch& d = c.Add(f16 ? "mla_kv_store_f16" : "mla_kv_store_f32", {1, 1, 1, 1, 1});
  const DeviceWeight& w = c.weights.GetF32(*c.g.node(c.mla_norm->src[1]).weight);
  d.bindings = {{kva},
                {c.batch},
                {Range(w.chunks[0].alloc)},
                {Range(c.kv.part(c.n.layer, pc0))},
                {Range(c.kv.part(c.n.layer, pc1))}};
  d.writes = {3, 4};
  const RopeTable& rt = *rope.Params<RopeParams>().table;
  struct {
    uint32_t T, r, dr, slot_off, pos_off, half, neox, cs_off;
    float eps;
  } pc{T,
       r,
       dr,
       c.layout->slots,
       c.layout->positions,
       uint32_t(rt.dim / 2),
       rt.mode == RopeMode::kNeox ? 1u : 0u,
       c.layout->rope.at(&rt),
       c.mla_norm->Params<RmsNormParams>().eps};
  d.Push(pc);
  Grid1D(d, T, 1);
}
}  // namespace
std::string KvTypeSuffix(DType t) {
  ES_CHECK(t == DType::kF32 || t == DType::kF16 || t == DType::kQ8_0 || t == DType::kQ4_0,
           "vulkan: KV cache type ", Name(t), " is not supported (f32, f16, q8_0 or q4_0)");
  return std::string(Name(t));
}

uint64_t KvWriteUnits(DType t, uint32_t W) {
  if (IsQuantized(t)) return W / 32;
  return t == DType::kF16 ? W / 2 : W;
}

void BuildKvStore(OpContext& c) {
  if (c.mla_c_store) {
    RecordMlaKvStore(c);
    return;
  }
  const int part = c.n.Params<KvStoreParams>().part;
  const KvSpec& spec = c.kv.spec();
  ES_CHECK(c.n.layer >= 0 && c.n.layer < spec.n_layers && part >= 0 && part < 2,
           "vulkan: kv_store '", c.n.name, "' addresses layer ", c.n.layer, " part ", part,
           " outside the cache");
  const uint32_t T = uint32_t(c.n.shape[0]), W = uint32_t(c.n.shape[1]);
  ES_CHECK(int64_t(W) == spec.width[part], "vulkan: kv_store '", c.n.name, "' writes ", W,
           " columns into a cache part of width ", spec.width[part]);
  // A folded rope (vulkan_backend.cpp): the store reads the rope's input and rotates it.
  const Node* rn = c.rope_node;
  Dispatch& d = c.Add("kv_store_" + KvTypeSuffix(spec.dtype) + (rn ? "_rope" : ""), {1, 1, 1});
  d.bindings = {
      {rn ? c.act[size_t(rn->src[0])] : c.In(0)}, {c.batch}, {Range(c.kv.part(c.n.layer, part))}};
  d.writes = {2};
  struct {
    uint32_t T, W, capacity, slot_off, pos_off, hd, off, half, neox, cs_off;
  } pc{T, W, uint32_t(c.kv.capacity()), c.layout->slots, c.layout->positions, 0, 0, 0, 0, 0};
  if (rn) {
    const RopeParams& rp = rn->Params<RopeParams>();
    const RopeTable& rt = *rp.table;
    ES_CHECK(rt.dim % 2 == 0 && rp.offset + rt.dim <= rp.head_dim &&
                 rp.heads * rp.head_dim == int64_t(W),
             "vulkan: rope '", rn->name, "' folded into '", c.n.name, "' does not fit its rows");
    pc.hd = uint32_t(rp.head_dim);
    pc.off = uint32_t(rp.offset);
    pc.half = uint32_t(rt.dim / 2);
    pc.neox = rt.mode == RopeMode::kNeox ? 1u : 0u;
    pc.cs_off = c.layout->rope.at(&rt);
  }
  d.Push(pc);
  Grid1D(d, uint64_t(T) * KvWriteUnits(spec.dtype, W));  // kv_write.glsl's units of a row
}

}  // namespace es::vk
