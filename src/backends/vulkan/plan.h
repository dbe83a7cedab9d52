// Activation memory planning: every activation (and each op's scratch) is an interval
// [first node, last node] of the graph (from Graph::LastUse) with a size; intervals whose
// lifetimes do not overlap share bytes. First-fit by start order into arenas no larger than
// `capacity` (the device's largest bindable range): usually one arena, several when a prefill's
// activations exceed the range.
#pragma once

#include <cstdint>
#include <vector>

namespace es::vk {

struct Interval {
  int start = 0, end = 0;  // inclusive node indices
  uint64_t bytes = 0;
};

struct ArenaPlan {
  std::vector<int> arena;             // per interval: which arena
  std::vector<uint64_t> offset;       // per interval: byte offset inside it
  std::vector<uint64_t> arena_bytes;  // size of each arena
};

// Throws es::Error when one interval alone exceeds `capacity`.
ArenaPlan PlanArena(const std::vector<Interval>& items, uint64_t align, uint64_t capacity);

}  // namespace es::vk
