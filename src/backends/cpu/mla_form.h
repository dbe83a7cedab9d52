// Which form the CPU backend's MLA attention (kMlaAttention) takes for one sequence's rows of a
// step. Absorbed (decode, short chunks): each query head is projected into the latent space
// (q_lat = q_nope Wuk[h]) and attends over the latent cache, then o_lat Wuv[h]ᵀ. Non-absorbed
// (long prefills): K_nope and V of every key of the sequence are expanded from the latent cache
// by one GEMM with kv_b, then plain attention with dk = dn + dr, dv. Per head, a row of context c
// costs (dn + dv) r + (2r + dr) c multiply-adds absorbed and (dn + dr + dv) c non-absorbed, plus
// (dn + dv) r per key expanded; the sequence takes the form with fewer (a single row always
// absorbed). The choice depends on the sequence's own rows only (never on other sequences in the
// batch), so a decode row is absorbed whatever it is batched with.
#pragma once

#include <cstdint>

namespace es::cpu {

// The most the expanded keys and values of one sequence may take ([keys, H (dn + dv)] f32);
// beyond it (very long contexts) the rows stay absorbed, whose scratch grows with the rows only.
constexpr int64_t kMlaExpandMaxBytes = int64_t(512) << 20;

// Whether `n_rows` rows of one sequence at positions pos0, pos0 + 1, … take the non-absorbed form
// (their keys are positions 0 .. pos0 + n_rows - 1). H heads, head dims dn (nope), dr (rope), dv,
// latent width r.
inline bool MlaSeqExpands(int64_t H, int64_t dn, int64_t dr, int64_t dv, int64_t r, int64_t pos0,
                          int64_t n_rows) {
  if (n_rows < 2) return false;  // a decode row: absorbed
  const int64_t keys = pos0 + n_rows;
  if (keys * H * (dn + dv) * 4 > kMlaExpandMaxBytes) return false;
  // Σ c over the rows: c = pos0 + 1 … pos0 + n_rows.
  const double sum_c = double(n_rows) * double(pos0) + double(n_rows) * double(n_rows + 1) / 2;
  const double absorbed = double(n_rows) * double((dn + dv) * r) + double(2 * r + dr) * sum_c;
  const double expanded = double(dn + dr + dv) * sum_c + double((dn + dv) * r) * double(keys);
  return expanded < absorbed;
}

}  // namespace es::cpu
