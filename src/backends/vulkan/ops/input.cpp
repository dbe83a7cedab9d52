// kInput: the batch's host rows (Batch::input, f32 [T, C]). VulkanBackend::Run writes them into
// the batch buffer's input table on every forward, as it writes the token ids; this dispatch
// copies them into the node's activation range, so a recorded program takes new rows each step
// and its readers see device-local memory.
#include "ops/ops.h"

namespace es::vk {

void BuildInput(OpContext& c) {
  const uint32_t R = uint32_t(c.n.shape[0]), C = uint32_t(c.n.shape[1]);
  const BufRange rows{c.batch.buffer, c.batch.offset + uint64_t(c.layout->input) * 4,
                      uint64_t(R) * C * 4};
  Dispatch& d = c.Add("copy", {1, 1});
  d.bindings = {{rows}, {c.Out()}};
  d.writes = {1};
  struct {
    uint32_t R, H, W, is, ihs, ioff, os, ohs, ooff;
  } pc{R, 1, C, C, 0, 0, C, 0, 0};
  d.Push(pc);
  Grid1D(d, uint64_t(R) * C);
}

}  // namespace es::vk
