// KvRow: the row of a KV cache part holding token `pos` of `slot` — the one place where a
// shader turns (slot, position) into cache memory (docs/kv_cache.md). Parts are laid out
// [n_blocks * 16][width]; the batch buffer `bt` (declared by the includer) starts with two
// words, the offset of the block tables and the blocks per slot, and slot s's table is
// bt[tables + s * blocks_per_slot ..]: token pos lives in block table[pos / 16], row pos % 16.
// Rows j and j + 1 are adjacent only inside a block (j % 16 != 15).
const uint kKvBlockTokens = 16u;
uint KvRow(uint slot, uint pos) {
  const uint tables = uint(bt[0]), per_slot = uint(bt[1]);
  return uint(bt[tables + slot * per_slot + pos / kKvBlockTokens]) * kKvBlockTokens + pos % kKvBlockTokens;
}
