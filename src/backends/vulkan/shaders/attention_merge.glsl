// The merge of split-key attention partials for one (head, row), shared by attention_combine.comp
// and attention.comp's SPLIT FOLD (the chunk's last workgroup merges). The including shader
// declares part[] and o[]:
//   part[base + s*(dv + 2) + d] = Σ_{j in chunk s} exp(score_j - m_s) value_j[d], then m_s, l_s
//   o[ob + d] = Σ_s exp(m_s - M) acc_s[d] / Σ_s exp(m_s - M) l_s,  M = max_s m_s
// Chunks without keys carry m_s = -inf and contribute nothing. Invocation tid of nt writes
// dims tid, tid + nt, ...
void MergeSplits(uint base, uint S, uint dv, uint ob, uint tid, uint nt) {
  const uint w = dv + 2u;
  float M = -1.0 / 0.0;
  for (uint s = 0; s < S; ++s) M = max(M, part[base + s * w + dv]);
  float L = 0.0;
  for (uint s = 0; s < S; ++s) {
    const float ms = part[base + s * w + dv];
    if (ms > -1.0 / 0.0) L += exp(ms - M) * part[base + s * w + dv + 1u];
  }
  for (uint d = tid; d < dv; d += nt) {
    float a = 0.0;
    for (uint s = 0; s < S; ++s) {
      const float ms = part[base + s * w + dv];
      if (ms > -1.0 / 0.0) a += exp(ms - M) * part[base + s * w + d];
    }
    o[ob + d] = a / L;
  }
}
