// Head split (tensor parallel): every decoder layer sharded over several devices of this process
// (ModelArch::MakeShard: kv heads with their KV cache, FFN columns, routed experts by range, MLA
// by head with the latent replicated), run as one PipelineStage over all the layers:
//
//   x = embed(tokens)                                        device 0, [n_tokens, D] f32
//   for each layer, for its attention block, then its FFN block:
//     part_d = BuildShardBlock(shard d, layer, block)(x)    each device d in turn (x uploaded)
//     x = part_0 + part_1 + ... + part_{n-1}                the all-reduce: host f32, this order
//
// A forward of at least 2 x chunk_rows rows (prompts, large batches) runs in chunks of at least
// chunk_rows rows (micro_batch.h's cut, at most 4) as a wavefront: the host sums chunk m's parts
// of a block while the devices compute chunk m + 1's (head_split.cpp, RunChunks); the sums, and
// so the results, are the same bit for bit.
//
// Two all-reduces a layer, each a download of [n_tokens, D] from every device and an upload of
// the sum to every device: worth it only where the devices' links are fast (docs/scale.md). The
// Runner's own backend (another instance of the first device) runs the final norm and lm_head
// over the stream the stage hands over (a layer split's last stage with no layers:
// MakeSplitRunner, pipeline.h).
//
// Experts: split by range where every device runs a kMoE node over a range (Backend::Supports;
// the CPU does, Vulkan's routing kernel does not yet); otherwise the routed experts run whole on
// the first device and the others run their share of the shared experts only.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "edgeseek/internal/backends/backend.h"
#include "edgeseek/internal/runtime/pipeline.h"

namespace es {

// A stage of layers [0, n_layers) sharded over `devices` (at least two), shard i on devices[i];
// chunk_rows: the least rows a chunk keeps (0: never in chunks; MakeSplitRunner: 2 x
// RunnerOptions::micro_batch_rows where a device is a GPU, 0 over CPU devices alone).
std::unique_ptr<PipelineStage> MakeHeadSplitStage(std::vector<std::unique_ptr<Backend>> devices,
                                                  int chunk_rows);

// What a head-split stage counted since it was made (all 0 for another stage): forwards run in
// chunks, the chunks' sums, and those sums that began while a device was computing.
struct HeadSplitCounts {
  int64_t chunked_forwards = 0, reduces = 0, overlapped_reduces = 0;
};
HeadSplitCounts GetHeadSplitCounts(const PipelineStage& stage);

}  // namespace es
