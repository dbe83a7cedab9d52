// Dispatch lists and the command buffer that replays them. A forward pass is a list of
// Dispatches (pipeline, buffer bindings, push constants, group counts) built once per graph
// shape, ordered by data-flow level (OrderByLevel); Sequence records it into one command buffer
// with only the barriers the data flow needs (a dispatch waits only when it reads or overwrites a
// range written, or read, by a dispatch since the last barrier) and re-submits it for every
// token. With profiling, timestamps follow every dispatch (timer.h).
//
// Chained recording (ES_VK_CHAIN, an experiment; Record's ChainSetup): where a barrier would go
// between two data-flow levels whose dispatches all have chained pipelines
// (PipelineCache::Chained, shaders/chain.glsl), there is none; instead every workgroup of level
// L waits until counter L - 1 holds the number of workgroups of all dispatches of level L - 1,
// and every workgroup of level L - 1 adds 1 to it after all its writes. Waiting for the whole
// previous level gives what the barrier gave (RAW, WAR and WAW with anything earlier: level L - 1
// finishing implies L - 2 finished, since its workgroups waited for it). The command buffer
// starts with a fill of the counters to 0 (and a transfer -> compute barrier); a level with a
// dispatch that has no chained pipeline keeps real barriers before and after it; the final
// compute -> transfer barrier and the readback stay; the error word (counters word 0, set by a
// wait that timed out) is copied next to the readback for the host to check (chain_error).
// Assumption: a later dispatch's workgroups launch only after every workgroup of the earlier
// dispatches has launched (NVIDIA; lavapipe runs dispatches one after another); else a waiting
// workgroup could hold the place of one it waits for, and the timeout ends the wait.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <functional>
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
    static_assert(sizeof(T) <= kChainPushOffset);  // the rest: a chained pipeline's (chain.glsl)
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

// What a chained recording needs (Sequence::Record): the pipelines (their chained twins), the
// counters buffer (device memory, 4 * (1 + dispatches) bytes at least) and where the error word
// goes (host-readable memory, 4 bytes).
struct ChainSetup {
  PipelineCache* pipes = nullptr;
  BufRange counters, error;
  const uint32_t* error_host = nullptr;  // `error` mapped
  uint32_t target_bias = 0;  // tests only: added to every wait's target (which then times out)
};

// The barrier step of each dispatch (the barriers before it, in this order): a dispatch waits
// when it reads or overwrites a range written, or overwrites one read, since the last barrier;
// with `serial` (profiling) every dispatch after the first does.
std::vector<int> BarrierSteps(const std::vector<Dispatch>& ds, bool serial);

// Per dispatch of a recording: the pipeline to bind (the chained twin where it waits or signals)
// and its chain push constants (the counter to wait on, its target, the counter to signal; ~0:
// none); per step, whether a real barrier goes before it. Without `chain`, every step boundary is
// a barrier and every dispatch keeps its pipeline.
struct ChainPlan {
  std::vector<const Pipeline*> pipe;
  std::vector<std::array<uint32_t, 3>> push;
  std::vector<char> barrier_before;  // per step (step 0's unused)
  int chained = 0;                   // step boundaries chained
};
ChainPlan PlanChain(const std::vector<Dispatch>& ds, const std::vector<int>& steps,
                    const ChainSetup* chain);

class Sequence {
 public:
  Sequence(Device& dev, bool profile);
  ~Sequence();
  Sequence(const Sequence&) = delete;
  Sequence& operator=(const Sequence&) = delete;

  // Records the dispatches (descriptor sets already written) then the copies; once. With
  // `chain`, levels are chained where their shaders allow (see the header).
  void Record(const std::vector<Dispatch>& dispatches, const std::vector<CopyStep>& copies,
              const ChainSetup* chain = nullptr);
  // Submits the recorded command buffer and waits. Returns the host seconds spent in submit.
  double SubmitAndWait();
  int barriers() const { return barriers_; }
  // The barrier step each recorded dispatch runs in (0 before the first barrier).
  const std::vector<int>& steps() const { return steps_; }
  int submits() const { return submits_; }
  // Level boundaries recorded as counters rather than barriers (0 without a ChainSetup).
  int chained_levels() const { return chained_levels_; }
  // After SubmitAndWait of a chained recording: whether a wait timed out (the error word).
  bool chain_error() const;
  const Timer* timer() const { return timer_.get(); }

 private:
  using BarrierFn =
      std::function<void(VkPipelineStageFlags, VkAccessFlags, VkPipelineStageFlags, VkAccessFlags)>;
  void StartChain(const ChainSetup& chain, const BarrierFn& barrier);

  Device& dev_;
  VkCommandBuffer cb_ = VK_NULL_HANDLE;  // owned (freed into the device's pool)
  VkFence fence_ = VK_NULL_HANDLE;       // owned
  std::unique_ptr<Timer> timer_;         // with profiling
  bool profile_ = false;
  double spin_s_ = 0;  // SubmitAndWait polls the fence this long before blocking (ES_VK_SPIN_US)
  int barriers_ = 0, submits_ = 0, chained_levels_ = 0;
  std::vector<int> steps_;
  VkDescriptorPool chain_pool_ = VK_NULL_HANDLE;  // owned: the counters' set
  VkDescriptorSet chain_set_ = VK_NULL_HANDLE;
  const uint32_t* chain_error_ = nullptr;  // the error word's host copy (not owned)
};

}  // namespace es::vk
