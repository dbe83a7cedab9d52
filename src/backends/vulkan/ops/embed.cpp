// kEmbed: rows of the embedding table at the batch's token ids, one dispatch per row chunk of
// the table (a 152064-row f16 table exceeds one buffer range on many devices).
#include "ops/ops.h"

namespace es::vk {

void BuildEmbed(OpContext& c) {
  const DeviceWeight& w = c.weights.Get(c.W(0));
  const uint32_t T = uint32_t(c.n.shape[0]), D = uint32_t(c.n.shape[1]);
  struct {
    uint32_t T, D, row0, nrows, tok_off;
  } pc{};
  for (const auto& ch : w.chunks) {
    Dispatch& d = c.Add(std::string("embed_") + TypeSuffix(w.dtype), {1, 1, 1});
    d.bindings = {{Range(ch.alloc)}, {c.batch}, {c.Out()}};
    d.writes = {2};
    pc = {T, D, uint32_t(ch.row0), uint32_t(ch.rows), c.layout->tokens};
    d.Push(pc);
    Grid1D(d, uint64_t(T) * D);
  }
}

}  // namespace es::vk
