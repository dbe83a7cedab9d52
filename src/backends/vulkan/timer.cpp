// Timestamp queries (see timer.h).
#include "timer.h"

#include "device.h"

namespace es::vk {

Timer::Timer(Device& dev, uint32_t n) : dev_(dev), n_(n) {
  if (!dev.timestamps())
    Fail("vulkan: device ", dev.info().name, " has no timestamp queries; --profile is unavailable");
  VkQueryPoolCreateInfo ci{VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
  ci.queryType = VK_QUERY_TYPE_TIMESTAMP;
  ci.queryCount = n;
  VK_CHECK(vkCreateQueryPool(dev.handle(), &ci, nullptr, &pool_));
  period_ns_ = dev.info().timestamp_period_ns;
}

Timer::~Timer() { vkDestroyQueryPool(dev_.handle(), pool_, nullptr); }

void Timer::Reset(VkCommandBuffer cb) { vkCmdResetQueryPool(cb, pool_, 0, n_); }

void Timer::Stamp(VkCommandBuffer cb, uint32_t i) {
  vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, pool_, i);
}

std::vector<double> Timer::Intervals() const {
  std::vector<uint64_t> ticks(n_);
  VK_CHECK(vkGetQueryPoolResults(dev_.handle(), pool_, 0, n_, n_ * 8, ticks.data(), 8,
                                 VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT));
  std::vector<double> out;
  for (uint32_t i = 1; i < n_; ++i)
    out.push_back(double(ticks[i] - ticks[i - 1]) * period_ns_ * 1e-9);
  return out;
}

}  // namespace es::vk
