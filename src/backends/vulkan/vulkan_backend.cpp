// Placeholder until the Vulkan backend lands (issue 4): reports it is not implemented.
#include "edgeseek/backends/backend.h"
#include "edgeseek/core/error.h"

namespace es {
bool VulkanBackendBuilt() { return false; }
std::unique_ptr<Backend> CreateVulkanBackend(const BackendOptions&) {
  Fail("backend 'vulkan' is not implemented yet");
}
}  // namespace es
