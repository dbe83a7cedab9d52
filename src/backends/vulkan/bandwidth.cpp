// Device copy bandwidth (for bandwidth fractions of decode): repeated vkCmdCopyBuffer between two
// device-local buffers, timed with timestamps; bytes read + written per second.
#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "device.h"
#include "edgeseek/backends/vulkan.h"
#include "memory.h"
#include "timer.h"

namespace es {
using namespace es::vk;  // the loaded entry points

double MeasureVulkanCopyBandwidth(const std::string& device, uint64_t bytes) {
  // ES_VK_TRACE=1 prints each step (the NVIDIA driver crashed here once; this says where).
  const bool trace = std::getenv("ES_VK_TRACE") != nullptr;
  auto step = [&](const char* what) {
    if (trace) std::fprintf(stderr, "bandwidth: %s\n", what), std::fflush(stderr);
  };
  step("device");
  vk::Device dev(device);
  step("pool");
  vk::MemoryPool pool(dev, vk::MemoryPool::Kind::kDevice, "bandwidth", vk::PoolLimits{});
  bytes = std::min<uint64_t>(bytes, pool.max_range()) & ~uint64_t(255);
  step("buffers");
  vk::Allocation a = pool.Alloc(bytes, "bandwidth src"), b = pool.Alloc(bytes, "bandwidth dst");
  constexpr int kReps = 10;
  step("timer");
  vk::Timer timer(dev, 2);
  step("fill");
  dev.RunOnce([&](VkCommandBuffer cb) { vkCmdFillBuffer(cb, a.buffer, a.offset, a.size, 0x3f800000u); });
  step("copies");
  dev.RunOnce([&](VkCommandBuffer cb) {
    timer.Reset(cb);
    timer.Stamp(cb, 0);
    for (int i = 0; i < kReps; ++i) {
      VkBufferCopy c{(i % 2 ? b : a).offset, (i % 2 ? a : b).offset, bytes};
      vkCmdCopyBuffer(cb, (i % 2 ? b : a).buffer, (i % 2 ? a : b).buffer, 1, &c);
      VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
      mb.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
      mb.dstAccessMask = VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
      vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 1,
                           &mb, 0, nullptr, 0, nullptr);
    }
    timer.Stamp(cb, 1);
  });
  step("read timestamps");
  const double s = timer.Intervals().at(0);
  step("done");
  pool.Free(a);
  pool.Free(b);
  return s > 0 ? 2.0 * double(bytes) * kReps / s : 0.0;
}

}  // namespace es
