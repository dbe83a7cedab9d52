// Micro-batches of a layer-split forward (runner.cpp): the batch's rows cut into contiguous
// parts that the stages compute as a wavefront — stage s on part m while stage s + 1 is on part
// m - 1 — so that the devices of a split work side by side within one step instead of in turn
// (S stages, M parts: M + S - 1 waves of one part's time against S whole-batch stage times).
// A sequence may be cut: its later rows run after its earlier ones on every stage, so each
// stage's KV cache holds the earlier rows when the later ones attend to them.
#pragma once

#include <cstdint>
#include <vector>

#include "edgeseek/internal/graph/graph.h"

namespace es {

// Rows a micro-batch keeps at least (RunnerOptions::micro_batch_rows' default, plan's model of
// it): below ~64 rows a step is bound by reading the weights, which each part reads again.
constexpr int kMicroBatchRows = 64;

struct MicroBatch {
  Batch batch;   // finalized, no input rows (the caller sets them per stage)
  int row0 = 0;  // its first row in the whole batch
  // For each of batch.out_rows: its index in the whole batch's out_rows, or -1 for the stand-in
  // a part without a wanted row gets (its last row: a graph has at least one output row).
  std::vector<int> out_of;
};

// How many parts a batch of `rows` is cut into: as many as keep at least `min_rows` rows in
// each, at most `max_parts`; 1 (no cut) when min_rows <= 0 or the batch is smaller than two.
int MicroBatchParts(int rows, int min_rows, int max_parts);

// `b` (finalized) cut into `parts` contiguous ranges of near-equal rows, in order.
std::vector<MicroBatch> SplitMicroBatches(const Batch& b, int parts);

// What a group pushed through the stages across steps (Runner::Push: decode groups in flight)
// returns from the last stage: the logits of its output rows, their argmax ids, or ids sampled
// by each row's RowSampling (on the device where the backend can).
enum class HeadOutput : uint8_t { kLogits, kArgmax, kSample };

}  // namespace es
