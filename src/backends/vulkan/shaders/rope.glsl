// Rotary embedding of one element, shared by rope.comp, kv_store.comp (ROPE) and
// attention_decode.comp (FUSED). A head's dims [off, off + 2 half) rotate in pairs: NEOX pairs
// (i, i + half), otherwise DeepSeek's interleaved pairs (2i, 2i + 1); the per-row cos/sin tables
// come from the host (rope.cpp).
// RopePair: for dim d of the head, whether it rotates; if so the dim of its partner, the pair's
// frequency index i and whether d is the pair's first element.
bool RopePair(uint d, uint off, uint half_, bool neox, out uint partner, out uint i, out bool first) {
  partner = d;
  i = 0u;
  first = true;
  if (d < off || d >= off + 2u * half_) return false;
  const uint e = d - off;
  if (neox) {
    i = e % half_;
    first = e < half_;
    partner = first ? d + half_ : d - half_;
  } else {
    i = e / 2u;
    first = (e & 1u) == 0u;
    partner = first ? d + 1u : d - 1u;
  }
  return true;
}
// The rotated value of an element x whose pair partner is y (cos c, sin s).
float RopeRotate(float x, float y, float c, float s, bool first) {
  return first ? x * c - y * s : x * c + y * s;
}
