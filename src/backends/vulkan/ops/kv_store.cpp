// kKvStore: writes the batch rows into the cache part at each row's (slot, position); with a
// folded rope (OpContext::rope_node) it rotates them on the way.
#include "ops/ops.h"

namespace es::vk {

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
  const int part = int(c.n.i[0]);
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
  d.bindings = {{rn ? c.act[size_t(rn->src[0])] : c.In(0)}, {c.batch}, {Range(c.kv.part(c.n.layer, part))}};
  d.writes = {2};
  struct {
    uint32_t T, W, capacity, slot_off, pos_off, hd, off, half, neox, cs_off;
  } pc{T, W, uint32_t(c.kv.capacity()), c.layout->slots, c.layout->positions, 0, 0, 0, 0, 0};
  if (rn) {
    const RopeTable& rt = *rn->rope;
    ES_CHECK(rt.dim % 2 == 0 && rn->i[2] + rt.dim <= rn->i[1] && rn->i[0] * rn->i[1] == int64_t(W),
             "vulkan: rope '", rn->name, "' folded into '", c.n.name, "' does not fit its rows");
    pc.hd = uint32_t(rn->i[1]);
    pc.off = uint32_t(rn->i[2]);
    pc.half = uint32_t(rt.dim / 2);
    pc.neox = rt.mode == RopeMode::kNeox ? 1u : 0u;
    pc.cs_off = c.layout->rope.at(&rt);
  }
  d.Push(pc);
  Grid1D(d, uint64_t(T) * KvWriteUnits(spec.dtype, W));  // kv_write.glsl's units of a row
}

}  // namespace es::vk
