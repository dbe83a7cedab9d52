// Head split (tensor parallel): every decoder layer sharded over several devices of this process
// (ModelArch::MakeShard: kv heads with their KV cache, FFN columns, routed experts by range, MLA
// by head with the latent replicated), run as one PipelineStage over all the layers:
//
//   x = embed(tokens)                                        device 0, [n_tokens, D] f32
//   for each layer, for its attention block, then its FFN block:
//     part_d = BuildShardBlock(shard d, layer, block)(x)    each device d in turn (x uploaded)
//     x = part_0 + part_1 + ... + part_{n-1}                the all-reduce: host f32, this order
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

#include <memory>
#include <vector>

#include "edgeseek/internal/backends/backend.h"
#include "edgeseek/internal/runtime/pipeline.h"

namespace es {

// A stage of layers [0, n_layers) sharded over `devices` (at least two), shard i on devices[i].
std::unique_ptr<PipelineStage> MakeHeadSplitStage(std::vector<std::unique_ptr<Backend>> devices);

}  // namespace es
