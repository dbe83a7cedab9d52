// Dispatch lists and the command buffer that replays them. A forward pass is a list of
// Dispatches (pipeline, buffer bindings, push constants, group counts) built once per graph
// shape, ordered by data-flow level (OrderByLevel); Sequence records it into one command buffer
// with only the barriers the data flow needs (a dispatch waits only when it reads or overwrites a
// range written, or read, by a dispatch since the last barrier) and re-submits it for every
// token. With profiling, timestamps follow every dispatch (timer.h).
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "pipeline_cache.h"
#include "timer.h"
#include "vk_api.h"

namespace es::vk {

class Device;

struct BufRange {
  VkBuffer buffer = VK_NULL_HANDLE;
  uint64_t offset = 0, size = 0;
  bool Overlaps(const BufRange& o) const {
    return buffer == o.buffer && offset < o.offset + o.size && o.offset < offset + size;
  }
};

struct Dispatch {
  const Pipeline* pipe = nullptr;
  std::vector<std::vector<BufRange>> bindings;  // per binding: its array elements
  std::vector<int> writes;                      // indices of bindings the shader writes
  uint8_t push[kPushBytes] = {};
  uint32_t groups[3] = {1, 1, 1};
  int node = -1;                         // graph node (profiling)
  VkDescriptorSet set = VK_NULL_HANDLE;  // from DescriptorArena

  template <class T>
  void Push(const T& pc) {
    static_assert(sizeof(T) <= kPushBytes);
    std::memcpy(push, &pc, sizeof(T));
  }
};

// Whether dispatch b, recorded after a, must wait for it: b reads a range a writes, or writes a
// range a reads or writes (the bindings listed in `writes` are the written ones).
bool DependsOn(const Dispatch& b, const Dispatch& a);

// Reorders dispatches by level, stably: a dispatch's level is 0, or one more than the highest
// level of the earlier dispatches it depends on (DependsOn). Each level then runs as one barrier
// step: work that only waits for the same inputs shares a step, however far apart the graph put
// it (MoE's router and routing beside the shared experts' GEMVs, MLA's q beside kv_a and the kv
// store), instead of a step of its own. Reads of buffers that no dispatch writes (weights, the
// batch tables) order nothing.
void OrderByLevel(std::vector<Dispatch>& ds);

struct CopyStep {
  BufRange src, dst;
};

class Sequence {
 public:
  Sequence(Device& dev, bool profile);
  ~Sequence();
  Sequence(const Sequence&) = delete;
  Sequence& operator=(const Sequence&) = delete;

  // Records the dispatches (descriptor sets already written) then the copies; once.
  void Record(const std::vector<Dispatch>& dispatches, const std::vector<CopyStep>& copies);
  // Submits the recorded command buffer and waits. Returns the host seconds spent in submit.
  double SubmitAndWait();
  int barriers() const { return barriers_; }
  // The barrier step each recorded dispatch runs in (0 before the first barrier).
  const std::vector<int>& steps() const { return steps_; }
  int submits() const { return submits_; }
  const Timer* timer() const { return timer_.get(); }

 private:
  Device& dev_;
  VkCommandBuffer cb_ = VK_NULL_HANDLE;  // owned (freed into the device's pool)
  VkFence fence_ = VK_NULL_HANDLE;       // owned
  std::unique_ptr<Timer> timer_;         // with profiling
  bool profile_ = false;
  double spin_s_ = 0;  // SubmitAndWait polls the fence this long before blocking (ES_VK_SPIN_US)
  int barriers_ = 0, submits_ = 0;
  std::vector<int> steps_;
};

}  // namespace es::vk
