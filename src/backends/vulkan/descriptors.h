// Descriptor sets for one recorded forward pass: one pool sized exactly for its dispatches, one
// set per dispatch, allocated and written once when the graph shape is first seen and reused by
// every later token (the bindings never change: activations live at fixed arena offsets and the
// per-token data sits in the batch buffer).
#pragma once

#include <vector>

#include "command.h"

namespace es::vk {

class DescriptorArena {
 public:
  // Allocates and writes a set for every dispatch (fills Dispatch::set).
  DescriptorArena(Device& dev, std::vector<Dispatch>& dispatches);
  ~DescriptorArena();
  DescriptorArena(const DescriptorArena&) = delete;
  DescriptorArena& operator=(const DescriptorArena&) = delete;
  size_t sets() const { return n_sets_; }

 private:
  Device& dev_;
  VkDescriptorPool pool_ = VK_NULL_HANDLE;  // owned; frees its sets
  size_t n_sets_ = 0;
};

}  // namespace es::vk
