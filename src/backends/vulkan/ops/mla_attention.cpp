// kMlaAttention, absorbed form over the latent cache (C: [ctx, r], PE: [ctx, dr]):
//   1. q_lat[t, h] = WukT[h] · q_nope[t, h]         per-head GEMV into qcat[:, h, 0:r]
//   2. qcat[t, h, r:r+dr] = q_pe[t, h]               strided copy
//   3. o_lat[t, h] = Σ_j softmax(scale · qcat·[C_j | PE_j]) C_j   the attention kernel, with
//      one shared kv head whose key is the latent row plus its rope part and whose value is
//      the latent row
//   4. out[t, h] = Wuv[h] · o_lat[t, h]              per-head GEMV
// Scratch: qcat [T, H*(r+dr)], o_lat [T, H*r] (f32).
#include "ops/ops.h"

namespace es::vk {

struct CopyPush {
  uint32_t R, H, W, is, ihs, ioff, os, ohs, ooff;
};

std::vector<uint64_t> MlaScratch(const Graph& g, const Node& n, int64_t T) {
  const uint64_t H = uint64_t(n.i[0]), dr = uint64_t(n.i[2]), r = uint64_t(n.i[4]);
  return {uint64_t(T) * H * (r + dr) * 4, uint64_t(T) * H * r * 4};
}

void BuildMla(OpContext& c) {
  const auto& n = c.n;
  const int64_t T = c.T, H = n.i[0], dn = n.i[1], dr = n.i[2], dv = n.i[3], r = n.i[4];
  const KvSpec& spec = c.kv.spec();
  ES_CHECK(spec.width[0] == r && spec.width[1] == dr, "vulkan: mla '", n.name,
           "' does not match the latent cache widths (", spec.width[0], ", ", spec.width[1], ")");
  const DeviceWeight& wuk = c.weights.Get(c.W(3));
  const DeviceWeight& wuv = c.weights.Get(c.W(4));
  ES_CHECK(wuk.rows == H * r && wuk.cols == dn, "vulkan: mla '", n.name, "': WukT must be [H*r, dn]");
  ES_CHECK(wuv.rows == H * dv && wuv.cols == r, "vulkan: mla '", n.name, "': Wuv must be [H*dv, r]");
  const BufRange qcat = c.scratch[0], olat = c.scratch[1];
  const int64_t qw = H * (dn + dr), cw = H * (r + dr);
  RecordHeadGemv(c, c.In(0), T, H, r, dn, wuk, qw, dn + dr, 0, qcat, cw, r + dr, 0);
  {
    Dispatch& d = c.Add("copy", {1, 1});
    d.bindings = {{c.In(0)}, {qcat}};
    d.writes = {1};
    d.Push(CopyPush{uint32_t(T), uint32_t(H), uint32_t(dr), uint32_t(qw), uint32_t(dn + dr),
                    uint32_t(dn), uint32_t(cw), uint32_t(r + dr), uint32_t(r)});
    Grid1D(d, uint64_t(T * H * dr));
  }
  AttentionArgs a{};
  a.q = qcat;
  a.ka = a.v = Range(c.kv.part(n.layer, 0));
  a.kb = Range(c.kv.part(n.layer, 1));
  a.out = olat;
  a.Hq = uint32_t(H);
  a.Hkv = 1;
  a.wa = uint32_t(r);
  a.wb = uint32_t(dr);
  a.dv = uint32_t(r);
  a.q_rs = uint32_t(cw);
  a.q_hs = uint32_t(r + dr);
  a.a_w = uint32_t(r);
  a.b_w = uint32_t(dr);
  a.v_w = uint32_t(r);
  a.o_rs = uint32_t(H * r);
  a.o_hs = uint32_t(r);
  a.scale = n.f0;
  RecordAttention(c, a);
  RecordHeadGemv(c, olat, T, H, dv, r, wuv, H * r, r, 0, c.Out(), H * dv, dv, 0);
}

}  // namespace es::vk
