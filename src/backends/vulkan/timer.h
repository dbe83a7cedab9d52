// GPU timestamps: one query pool per recorded forward pass, a timestamp before the first
// dispatch and after each one, read back after the submit completes.
#pragma once

#include <cstdint>
#include <vector>

#include "vk_api.h"

namespace es::vk {

class Device;

class Timer {
 public:
  Timer(Device& dev, uint32_t n_stamps);
  ~Timer();
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;
  void Reset(VkCommandBuffer cb);
  void Stamp(VkCommandBuffer cb, uint32_t i);
  // Seconds between consecutive stamps (n - 1 values) after the work completed.
  std::vector<double> Intervals() const;
  uint32_t size() const { return n_; }

 private:
  Device& dev_;
  VkQueryPool pool_ = VK_NULL_HANDLE;  // owned
  uint32_t n_ = 0;
  double period_ns_ = 1.0;
};

}  // namespace es::vk
