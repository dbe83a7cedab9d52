// kRope: rotation with per-row cos/sin tables that the host fills from the batch positions for
// each distinct RopeTable (exactly the reference's f32 angle, cos and sin), so the shader needs
// no transcendental of a large angle (GPU cos/sin lose accuracy there).
#include "ops/ops.h"

namespace es::vk {

void BuildRope(OpContext& c) {
  const RopeParams& rp = c.n.Params<RopeParams>();
  const RopeTable& rt = *rp.table;
  const uint32_t R = uint32_t(c.n.shape[0]);
  ES_CHECK(rt.dim % 2 == 0 && rp.offset + rt.dim <= rp.head_dim, "vulkan: rope '", c.n.name,
           "': rotated dims ", rt.dim, " at offset ", rp.offset, " do not fit head dim ",
           rp.head_dim);
  Dispatch& d = c.Add("rope", {1, 1, 1});
  d.bindings = {{c.In(0)}, {c.batch}, {c.Out()}};
  d.writes = {2};
  struct {
    uint32_t R, H, hd, off, half, neox, cs_off;
  } pc{R,
       uint32_t(rp.heads),
       uint32_t(rp.head_dim),
       uint32_t(rp.offset),
       uint32_t(rt.dim / 2),
       rt.mode == RopeMode::kNeox ? 1u : 0u,
       c.layout->rope.at(&rt)};
  d.Push(pc);
  Grid1D(d, uint64_t(R) * c.n.shape[1]);
}

}  // namespace es::vk
