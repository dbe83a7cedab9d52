// The process-wide Vulkan instance (one per process, created on first use and kept until exit).
// With ES_VK_VALIDATION=1 in the environment it enables VK_LAYER_KHRONOS_validation and counts
// every validation message (tests fail when the count is not zero).
#pragma once

#include <string>

#include "vk_api.h"

namespace es::vk {

class Instance {
 public:
  // The shared instance; throws es::Error when there is no loader or no driver.
  static Instance& Get();
  VkInstance handle() const { return instance_; }
  uint32_t api_version() const { return api_version_; }
  bool validation() const { return validation_; }

 private:
  Instance();
  ~Instance();
  VkInstance instance_ = VK_NULL_HANDLE;                 // owned
  VkDebugUtilsMessengerEXT messenger_ = VK_NULL_HANDLE;  // owned
  uint32_t api_version_ = 0;
  bool validation_ = false;
};

// Validation messages (warnings and errors) seen since the process started, and the last one.
int ValidationMessageCount();
std::string LastValidationMessage();

}  // namespace es::vk
