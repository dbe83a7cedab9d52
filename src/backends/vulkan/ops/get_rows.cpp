// kGetRows: the batch rows whose logits are wanted (out_rows from the batch buffer).
#include "ops/ops.h"

namespace es::vk {

void BuildGetRows(OpContext& c) {
  const uint32_t n = uint32_t(c.n.shape[0]), C = uint32_t(c.n.shape[1]);
  Dispatch& d = c.Add("get_rows", {1, 1, 1});
  d.bindings = {{c.In(0)}, {c.batch}, {c.Out()}};
  d.writes = {2};
  struct {
    uint32_t n, C, rows_off;
  } pc{n, C, c.layout->out_rows};
  d.Push(pc);
  Grid1D(d, uint64_t(n) * C);
}

}  // namespace es::vk
