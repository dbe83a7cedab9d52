// First-fit interval packing (see plan.h).
#include "plan.h"

#include <algorithm>
#include <numeric>

#include "edgeseek/internal/core/error.h"

namespace es::vk {

ArenaPlan PlanArena(const std::vector<Interval>& items, uint64_t align, uint64_t capacity) {
  ArenaPlan plan;
  plan.arena.assign(items.size(), -1);
  plan.offset.assign(items.size(), 0);
  std::vector<size_t> order(items.size());
  std::iota(order.begin(), order.end(), 0);
  // Larger first among equal starts packs tighter.
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (items[a].start != items[b].start) return items[a].start < items[b].start;
    return items[a].bytes > items[b].bytes;
  });
  auto up = [&](uint64_t v) { return (v + align - 1) / align * align; };
  std::vector<std::vector<size_t>> live;  // per arena: placed intervals still alive
  for (size_t idx : order) {
    const Interval& it = items[idx];
    const uint64_t bytes = up(std::max<uint64_t>(it.bytes, 1));
    if (bytes > capacity)
      Fail("vulkan: one activation needs ", bytes,
           " bytes, more than the device's largest buffer range (", capacity, ")");
    bool placed = false;
    for (size_t a = 0; a < live.size() && !placed; ++a) {
      auto& l = live[a];
      l.erase(std::remove_if(l.begin(), l.end(), [&](size_t j) { return items[j].end < it.start; }),
              l.end());
      std::sort(l.begin(), l.end(),
                [&](size_t x, size_t y) { return plan.offset[x] < plan.offset[y]; });
      uint64_t cur = 0;
      for (size_t j : l) {
        if (cur + bytes <= plan.offset[j]) break;
        cur = std::max(cur, up(plan.offset[j] + up(std::max<uint64_t>(items[j].bytes, 1))));
      }
      if (cur + bytes <= capacity) {
        plan.arena[idx] = int(a);
        plan.offset[idx] = cur;
        plan.arena_bytes[a] = std::max(plan.arena_bytes[a], cur + bytes);
        l.push_back(idx);
        placed = true;
      }
    }
    if (!placed) {
      live.push_back({idx});
      plan.arena_bytes.push_back(bytes);
      plan.arena[idx] = int(live.size()) - 1;
      plan.offset[idx] = 0;
    }
  }
  return plan;
}

}  // namespace es::vk
