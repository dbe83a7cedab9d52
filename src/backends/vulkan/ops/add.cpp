// kAdd: residual add, elementwise.
#include "ops/ops.h"

namespace es::vk {

void BuildAdd(OpContext& c) {
  const uint32_t n = uint32_t(c.n.shape[0] * c.n.shape[1]);
  Dispatch& d = c.Add("add", {1, 1, 1});
  d.bindings = {{c.In(0)}, {c.In(1)}, {c.Out()}};
  d.writes = {2};
  d.Push(n);
  Grid1D(d, n);
}

}  // namespace es::vk
