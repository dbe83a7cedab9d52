// Backend factory.
#include "edgeseek/backends/backend.h"

#include "edgeseek/core/error.h"

namespace es {

#if !defined(ES_HAVE_VULKAN)
bool VulkanBackendBuilt() { return false; }
std::unique_ptr<Backend> CreateVulkanBackend(const BackendOptions&) {
  Fail("backend 'vulkan' is not available: this build has no Vulkan support (install "
       "libvulkan-dev and glslc, then rebuild)");
}
#endif

std::unique_ptr<Backend> CreateBackend(const std::string& name, const BackendOptions& opts) {
  if (name == "cpu") return CreateCpuBackend(opts);
  if (name == "vulkan") return CreateVulkanBackend(opts);
  Fail("unknown backend '", name, "' (expected cpu or vulkan)");
}

}  // namespace es
