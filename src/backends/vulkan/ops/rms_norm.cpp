// kRmsNorm: one workgroup per row (subgroup sum of squares), weight as f32.
#include "ops/ops.h"

namespace es::vk {

void BuildRmsNorm(OpContext& c) {
  const DeviceWeight& w = c.weights.GetF32(c.W(1));
  Dispatch& d = c.Add("rms_norm", {1, 1, 1});
  d.bindings = {{c.In(0)}, {Range(w.chunks[0].alloc)}, {c.Out()}};
  d.writes = {2};
  struct {
    uint32_t D;
    float eps;
  } pc{uint32_t(c.n.shape[1]), c.n.Params<RmsNormParams>().eps};
  d.Push(pc);
  Grid1D(d, uint64_t(c.n.shape[0]), 1);
}

}  // namespace es::vk
