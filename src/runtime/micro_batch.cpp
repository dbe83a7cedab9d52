// Micro-batches of a layer-split forward (micro_batch.h).
#include "edgeseek/internal/runtime/micro_batch.h"

#include <algorithm>

#include "edgeseek/internal/core/error.h"

namespace es {

int MicroBatchParts(int rows, int min_rows, int max_parts) {
  if (min_rows <= 0 || max_parts < 2) return 1;
  return std::clamp(rows / min_rows, 1, max_parts);
}

std::vector<MicroBatch> SplitMicroBatches(const Batch& b, int parts) {
  const int R = b.n_tokens();
  ES_ASSERT(parts >= 1 && parts <= R && b.positions.size() == b.tokens.size());
  std::vector<MicroBatch> out(static_cast<size_t>(parts));
  size_t next_out = 0;  // the first of b.out_rows not yet placed
  for (int m = 0; m < parts; ++m) {
    const int r0 = int(int64_t(R) * m / parts), r1 = int(int64_t(R) * (m + 1) / parts);
    MicroBatch& mb = out[size_t(m)];
    mb.row0 = r0;
    Batch& p = mb.batch;
    p.tokens.assign(b.tokens.begin() + r0, b.tokens.begin() + r1);
    for (const BatchSeq& s : b.seqs) {
      const int a = std::max(r0, s.row0), e = std::min(r1, s.row0 + s.n_tokens);
      if (a >= e) continue;
      BatchSeq q;
      q.slot = s.slot;
      q.pos0 = s.pos0 + (a - s.row0);
      q.n_tokens = e - a;
      p.seqs.push_back(q);
    }
    for (; next_out < b.out_rows.size() && b.out_rows[next_out] < r1; ++next_out) {
      p.out_rows.push_back(b.out_rows[next_out] - r0);
      mb.out_of.push_back(int(next_out));
    }
    if (p.out_rows.empty()) {
      p.out_rows.push_back(r1 - r0 - 1);
      mb.out_of.push_back(-1);
    }
    p.Finalize();
  }
  return out;
}

}  // namespace es
