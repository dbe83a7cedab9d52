// kSlice: columns [col0, col0 + width) of every row, through the strided copy kernel.
#include "ops/ops.h"

namespace es::vk {

struct CopyPush {
  uint32_t R, H, W, is, ihs, ioff, os, ohs, ooff;
};

void BuildSlice(OpContext& c) {
  const uint32_t R = uint32_t(c.n.shape[0]), W = uint32_t(c.n.shape[1]);
  const uint32_t C = uint32_t(c.Src(0).shape[1]);
  Dispatch& d = c.Add("copy", {1, 1});
  d.bindings = {{c.In(0)}, {c.Out()}};
  d.writes = {1};
  d.Push(CopyPush{R, 1, W, C, 0, uint32_t(c.n.Params<SliceParams>().col0), W, 0, 0});
  Grid1D(d, uint64_t(R) * W);
}

}  // namespace es::vk
