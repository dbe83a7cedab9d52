// Command-buffer recording with data-flow barriers (see command.h).
#include "command.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>

#include "device.h"

namespace es::vk {

Sequence::Sequence(Device& dev, bool profile) : dev_(dev) {
  // Decode steps last a few ms: polling the fence for up to ES_VK_SPIN_US microseconds before
  // blocking spares the blocked thread's wake-up after the GPU signals it (default 3000 on GPUs;
  // 0 on CPU devices such as lavapipe, whose own threads need the cores). H200, same job, tg128
  // Q4_0: 1.5B 405 -> 445 t/s, 7B 290 -> 297-306 (docs/log/2026-11-30-sessions2-9-h200-dense.md,
  // "Session 7").
  const Tuning& tune = dev.tuning();
  spin_s_ = !tune.IsAuto(Knob::kSpinUs) ? tune.Uint(Knob::kSpinUs) * 1e-6
            : dev.info().type == "cpu"  ? 0.0
                                        : 3000e-6;
  VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  ai.commandPool = dev.command_pool();
  ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  ai.commandBufferCount = 1;
  VK_CHECK(vkAllocateCommandBuffers(dev.handle(), &ai, &cb_));
  VkFenceCreateInfo fci{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  VK_CHECK(vkCreateFence(dev.handle(), &fci, nullptr, &fence_));
  if (profile) timer_ = nullptr;  // sized in Record
  profile_ = profile;
}

Sequence::~Sequence() {
  timer_.reset();
  if (chain_pool_) vkDestroyDescriptorPool(dev_.handle(), chain_pool_, nullptr);
  vkDestroyFence(dev_.handle(), fence_, nullptr);
  vkFreeCommandBuffers(dev_.handle(), dev_.command_pool(), 1, &cb_);
}

namespace {
// Whether dispatch d writes its binding b.
bool Writes(const Dispatch& d, size_t b) {
  return std::find(d.writes.begin(), d.writes.end(), int(b)) != d.writes.end();
}
}  // namespace

std::vector<int> BarrierSteps(const std::vector<Dispatch>& ds, bool serial) {
  std::vector<BufRange> pending_reads, pending_writes;
  auto conflicts = [](const std::vector<BufRange>& a, const BufRange& r) {
    for (auto& x : a)
      if (x.Overlaps(r)) return true;
    return false;
  };
  std::vector<int> steps;
  int step = 0;
  for (size_t i = 0; i < ds.size(); ++i) {
    const Dispatch& d = ds[i];
    bool need = serial && i > 0;
    for (size_t b = 0; b < d.bindings.size() && !need; ++b) {
      const bool w = Writes(d, b);
      for (auto& r : d.bindings[b]) {
        if (conflicts(pending_writes, r) || (w && conflicts(pending_reads, r))) {
          need = true;
          break;
        }
      }
    }
    if (need) {
      ++step;
      pending_reads.clear();
      pending_writes.clear();
    }
    for (size_t b = 0; b < d.bindings.size(); ++b) {
      const bool w = Writes(d, b);
      for (auto& r : d.bindings[b]) (w ? pending_writes : pending_reads).push_back(r);
    }
    steps.push_back(step);
  }
  return steps;
}

ChainPlan PlanChain(const std::vector<Dispatch>& ds, const std::vector<int>& steps,
                    const ChainSetup* chain) {
  constexpr uint32_t kNone = 0xffffffffu;
  const int n_steps = ds.empty() ? 0 : steps.back() + 1;
  ChainPlan plan;
  plan.barrier_before.assign(size_t(n_steps), 1);
  plan.pipe.resize(ds.size());
  plan.push.assign(ds.size(), {kNone, 0, kNone});
  for (size_t i = 0; i < ds.size(); ++i) plan.pipe[i] = ds[i].pipe;
  if (!chain) return plan;
  // A step takes part when every dispatch of it has a chained twin and its workgroups count fits.
  std::vector<char> ok(size_t(n_steps), 1);
  std::vector<uint64_t> groups(size_t(n_steps), 0);
  std::vector<const Pipeline*> twin(ds.size(), nullptr);
  for (size_t i = 0; i < ds.size(); ++i) {
    const size_t s = size_t(steps[i]);
    twin[i] = chain->pipes->Chained(*ds[i].pipe);
    const uint64_t g = uint64_t(ds[i].groups[0]) * ds[i].groups[1] * ds[i].groups[2];
    groups[s] += g;
    if (!twin[i] || g == 0 || groups[s] >= kNone) ok[s] = 0;
  }
  for (int s = 1; s < n_steps; ++s)
    if (ok[size_t(s - 1)] && ok[size_t(s)]) {
      plan.barrier_before[size_t(s)] = 0;
      ++plan.chained;
    }
  for (size_t i = 0; i < ds.size(); ++i) {
    const int s = steps[i];
    auto& pc = plan.push[i];
    if (s > 0 && !plan.barrier_before[size_t(s)]) {
      pc[0] = uint32_t(s);  // counter 1 + (s - 1)
      pc[1] = uint32_t(groups[size_t(s - 1)]) + chain->target_bias;
    }
    if (s + 1 < n_steps && !plan.barrier_before[size_t(s) + 1]) pc[2] = uint32_t(s + 1);
    if (pc[0] != kNone || pc[2] != kNone) plan.pipe[i] = twin[i];
  }
  return plan;
}

void Sequence::Record(const std::vector<Dispatch>& ds, const std::vector<CopyStep>& copies,
                      const ChainSetup* chain) {
  if (profile_) timer_ = std::make_unique<Timer>(dev_, uint32_t(ds.size() + 1));
  steps_ = BarrierSteps(ds, timer_ != nullptr);  // per-op times need serialised dispatches
  const ChainPlan plan = PlanChain(ds, steps_, timer_ ? nullptr : chain);
  chained_levels_ = plan.chained;
  VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  VK_CHECK(vkBeginCommandBuffer(cb_, &bi));
  if (timer_) {
    timer_->Reset(cb_);
    timer_->Stamp(cb_, 0);
  }
  auto barrier = [&](VkPipelineStageFlags src_stage, VkAccessFlags src_access,
                     VkPipelineStageFlags dst_stage, VkAccessFlags dst_access) {
    VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    mb.srcAccessMask = src_access;
    mb.dstAccessMask = dst_access;
    vkCmdPipelineBarrier(cb_, src_stage, dst_stage, 0, 1, &mb, 0, nullptr, 0, nullptr);
  };
  if (plan.chained) StartChain(*chain, barrier);
  for (size_t i = 0; i < ds.size(); ++i) {
    const Dispatch& d = ds[i];
    const int s = steps_[i];
    if (s > 0 && steps_[i - 1] != s && plan.barrier_before[size_t(s)]) {
      barrier(VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT,
              VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
              VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
      ++barriers_;
    }
    const Pipeline& pipe = *plan.pipe[i];
    vkCmdBindPipeline(cb_, VK_PIPELINE_BIND_POINT_COMPUTE, pipe.pipeline);
    if (pipe.chained) {
      const VkDescriptorSet sets[2] = {d.set, chain_set_};
      vkCmdBindDescriptorSets(cb_, VK_PIPELINE_BIND_POINT_COMPUTE, pipe.layout, 0, 2, sets, 0,
                              nullptr);
      uint8_t push[kPushBytes];
      std::memcpy(push, d.push, kChainPushOffset);
      std::memcpy(push + kChainPushOffset, plan.push[i].data(), kPushBytes - kChainPushOffset);
      vkCmdPushConstants(cb_, pipe.layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, kPushBytes, push);
    } else {
      vkCmdBindDescriptorSets(cb_, VK_PIPELINE_BIND_POINT_COMPUTE, pipe.layout, 0, 1, &d.set, 0,
                              nullptr);
      vkCmdPushConstants(cb_, pipe.layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, kPushBytes, d.push);
    }
    vkCmdDispatch(cb_, d.groups[0], d.groups[1], d.groups[2]);
    if (timer_) timer_->Stamp(cb_, uint32_t(i + 1));
  }
  if (!copies.empty() || plan.chained) {
    barrier(VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT,
            VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_READ_BIT);
    ++barriers_;
    for (auto& c : copies) {
      VkBufferCopy bc{c.src.offset, c.dst.offset, c.src.size};
      vkCmdCopyBuffer(cb_, c.src.buffer, c.dst.buffer, 1, &bc);
    }
    if (plan.chained) {  // the error word, next to the readback
      VkBufferCopy bc{chain->counters.offset, chain->error.offset, 4};
      vkCmdCopyBuffer(cb_, chain->counters.buffer, chain->error.buffer, 1, &bc);
      chain_error_ = chain->error_host;
    }
    barrier(VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT,
            VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_READ_BIT);
  }
  VK_CHECK(vkEndCommandBuffer(cb_));
}

// The counters' descriptor set, and the fill of the counters to 0 at the command buffer's start
// (after the previous submission's shaders, before this one's).
void Sequence::StartChain(const ChainSetup& chain, const BarrierFn& barrier) {
  const uint64_t words = steps_.empty() ? 1 : uint64_t(steps_.back()) + 2;  // error, a level
  ES_CHECK(chain.counters.size >= 4 * words && chain.error_host, "vulkan: chained recording with ",
           chain.counters.size, " bytes of counters for ", words, " words, or no error word");
  if (!chain_pool_) {
    VkDescriptorPoolSize ps{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1};
    VkDescriptorPoolCreateInfo pci{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
    pci.maxSets = 1;
    pci.poolSizeCount = 1;
    pci.pPoolSizes = &ps;
    VK_CHECK(vkCreateDescriptorPool(dev_.handle(), &pci, nullptr, &chain_pool_));
    VkDescriptorSetLayout layout = chain.pipes->chain_set_layout();
    VkDescriptorSetAllocateInfo ai{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
    ai.descriptorPool = chain_pool_;
    ai.descriptorSetCount = 1;
    ai.pSetLayouts = &layout;
    VK_CHECK(vkAllocateDescriptorSets(dev_.handle(), &ai, &chain_set_));
  }
  VkDescriptorBufferInfo bi{chain.counters.buffer, chain.counters.offset, chain.counters.size};
  VkWriteDescriptorSet w{VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
  w.dstSet = chain_set_;
  w.dstBinding = 0;
  w.descriptorCount = 1;
  w.descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
  w.pBufferInfo = &bi;
  vkUpdateDescriptorSets(dev_.handle(), 1, &w, 0, nullptr);
  barrier(VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
          VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT,
          VK_ACCESS_TRANSFER_WRITE_BIT);
  vkCmdFillBuffer(cb_, chain.counters.buffer, chain.counters.offset, chain.counters.size, 0);
  barrier(VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT,
          VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
          VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
}

bool Sequence::chain_error() const { return chain_error_ && *chain_error_ != 0; }

namespace {
// A dispatch's ranges in buffers that some dispatch writes: read (only) and written.
struct Access {
  std::vector<BufRange> reads, writes;
};
bool AnyOverlap(const std::vector<BufRange>& a, const std::vector<BufRange>& b) {
  for (const BufRange& x : a)
    for (const BufRange& y : b)
      if (x.Overlaps(y)) return true;
  return false;
}
bool Conflicts(const Access& later, const Access& earlier) {
  return AnyOverlap(later.reads, earlier.writes) || AnyOverlap(later.writes, earlier.writes) ||
         AnyOverlap(later.writes, earlier.reads);
}
Access AccessOf(const Dispatch& d, const std::vector<VkBuffer>* written) {
  Access a;
  for (size_t b = 0; b < d.bindings.size(); ++b) {
    const bool w = Writes(d, b);
    for (const BufRange& r : d.bindings[b])
      if (w || !written || std::binary_search(written->begin(), written->end(), r.buffer))
        (w ? a.writes : a.reads).push_back(r);
  }
  return a;
}
}  // namespace

bool DependsOn(const Dispatch& b, const Dispatch& a) {
  return Conflicts(AccessOf(b, nullptr), AccessOf(a, nullptr));
}

void OrderByLevel(std::vector<Dispatch>& ds) {
  std::vector<VkBuffer> written;
  for (const Dispatch& d : ds)
    for (int b : d.writes)
      for (const BufRange& r : d.bindings[size_t(b)]) written.push_back(r.buffer);
  std::sort(written.begin(), written.end());
  written.erase(std::unique(written.begin(), written.end()), written.end());
  std::vector<Access> acc;
  acc.reserve(ds.size());
  for (const Dispatch& d : ds) acc.push_back(AccessOf(d, &written));
  std::vector<int> level(ds.size(), 0);
  for (size_t i = 0; i < ds.size(); ++i)
    for (size_t j = i; j-- > 0;)  // only a dependency that raises the level needs the test
      if (level[j] >= level[i] && Conflicts(acc[i], acc[j])) level[i] = level[j] + 1;
  std::vector<size_t> order(ds.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return level[a] < level[b]; });
  std::vector<Dispatch> out;
  out.reserve(ds.size());
  for (size_t i : order) out.push_back(std::move(ds[i]));
  ds = std::move(out);
}

double Sequence::SubmitAndWait() {
  const auto t0 = std::chrono::steady_clock::now();
  VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  si.commandBufferCount = 1;
  si.pCommandBuffers = &cb_;
  VK_CHECK(vkResetFences(dev_.handle(), 1, &fence_));
  VK_CHECK(vkQueueSubmit(dev_.queue(), 1, &si, fence_));
  const double submit_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  VkResult st = VK_NOT_READY;
  while (spin_s_ > 0 && st == VK_NOT_READY &&
         std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < spin_s_)
    st = vkGetFenceStatus(dev_.handle(), fence_);
  if (st != VK_SUCCESS) VK_CHECK(vkWaitForFences(dev_.handle(), 1, &fence_, VK_TRUE, UINT64_MAX));
  ++submits_;
  return submit_s;
}

}  // namespace es::vk
