// Command-buffer recording with data-flow barriers (see command.h).
#include "command.h"

#include <algorithm>
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
  vkDestroyFence(dev_.handle(), fence_, nullptr);
  vkFreeCommandBuffers(dev_.handle(), dev_.command_pool(), 1, &cb_);
}

namespace {
// Whether dispatch d writes its binding b.
bool Writes(const Dispatch& d, size_t b) {
  return std::find(d.writes.begin(), d.writes.end(), int(b)) != d.writes.end();
}
}  // namespace

void Sequence::Record(const std::vector<Dispatch>& ds, const std::vector<CopyStep>& copies) {
  if (profile_) timer_ = std::make_unique<Timer>(dev_, uint32_t(ds.size() + 1));
  VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  VK_CHECK(vkBeginCommandBuffer(cb_, &bi));
  if (timer_) {
    timer_->Reset(cb_);
    timer_->Stamp(cb_, 0);
  }
  std::vector<BufRange> pending_reads, pending_writes;
  steps_.clear();
  auto barrier = [&](VkPipelineStageFlags dst_stage, VkAccessFlags dst_access) {
    VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
    mb.dstAccessMask = dst_access;
    vkCmdPipelineBarrier(cb_, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, dst_stage, 0, 1, &mb, 0,
                         nullptr, 0, nullptr);
    pending_reads.clear();
    pending_writes.clear();
    ++barriers_;
  };
  auto conflicts = [](const std::vector<BufRange>& a, const BufRange& r) {
    for (auto& x : a)
      if (x.Overlaps(r)) return true;
    return false;
  };
  for (size_t i = 0; i < ds.size(); ++i) {
    const Dispatch& d = ds[i];
    bool need = timer_ != nullptr && i > 0;  // per-op times need serialised dispatches
    for (size_t b = 0; b < d.bindings.size() && !need; ++b) {
      const bool w = Writes(d, b);
      for (auto& r : d.bindings[b]) {
        if (conflicts(pending_writes, r) || (w && conflicts(pending_reads, r))) {
          need = true;
          break;
        }
      }
    }
    if (need)
      barrier(VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
              VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
    for (size_t b = 0; b < d.bindings.size(); ++b) {
      const bool w = Writes(d, b);
      for (auto& r : d.bindings[b]) (w ? pending_writes : pending_reads).push_back(r);
    }
    steps_.push_back(barriers_);
    vkCmdBindPipeline(cb_, VK_PIPELINE_BIND_POINT_COMPUTE, d.pipe->pipeline);
    vkCmdBindDescriptorSets(cb_, VK_PIPELINE_BIND_POINT_COMPUTE, d.pipe->layout, 0, 1, &d.set, 0,
                            nullptr);
    vkCmdPushConstants(cb_, d.pipe->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, kPushBytes, d.push);
    vkCmdDispatch(cb_, d.groups[0], d.groups[1], d.groups[2]);
    if (timer_) timer_->Stamp(cb_, uint32_t(i + 1));
  }
  if (!copies.empty()) {
    barrier(VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_READ_BIT);
    for (auto& c : copies) {
      VkBufferCopy bc{c.src.offset, c.dst.offset, c.src.size};
      vkCmdCopyBuffer(cb_, c.src.buffer, c.dst.buffer, 1, &bc);
    }
    VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    mb.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
    mb.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
    vkCmdPipelineBarrier(cb_, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb,
                         0, nullptr, 0, nullptr);
  }
  VK_CHECK(vkEndCommandBuffer(cb_));
}

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
