// kKvStore: writes the batch rows into the cache part at each row's (slot, position).
#include "ops/ops.h"

namespace es::vk {

void BuildKvStore(OpContext& c) {
  const int part = int(c.n.i[0]);
  const KvSpec& spec = c.kv.spec();
  ES_CHECK(c.n.layer >= 0 && c.n.layer < spec.n_layers && part >= 0 && part < 2,
           "vulkan: kv_store '", c.n.name, "' addresses layer ", c.n.layer, " part ", part,
           " outside the cache");
  const uint32_t T = uint32_t(c.n.shape[0]), W = uint32_t(c.n.shape[1]);
  ES_CHECK(int64_t(W) == spec.width[part], "vulkan: kv_store '", c.n.name, "' writes ", W,
           " columns into a cache part of width ", spec.width[part]);
  const bool f16 = spec.dtype == DType::kF16;
  Dispatch& d = c.Add(f16 ? "kv_store_f16" : "kv_store_f32", {1, 1, 1});
  d.bindings = {{c.In(0)}, {c.batch}, {Range(c.kv.part(c.n.layer, part))}};
  d.writes = {2};
  struct {
    uint32_t T, W, capacity, slot_off, pos_off;
  } pc{T, W, uint32_t(c.kv.capacity()), c.layout->slots, c.layout->positions};
  d.Push(pc);
  Grid1D(d, uint64_t(T) * (f16 ? W / 2 : W));
}

}  // namespace es::vk
