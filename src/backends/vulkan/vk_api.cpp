// Run-time loading of the Vulkan loader library (see vk_api.h).
#include "vk_api.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

#include "tuning.h"

namespace es::vk {

PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr = nullptr;
#define ES_VK_DEFINE(name) PFN_##name name = nullptr;
ES_VK_GLOBAL_FUNCS(ES_VK_DEFINE)
ES_VK_INSTANCE_FUNCS(ES_VK_DEFINE)
#undef ES_VK_DEFINE
PFN_vkCreateDebugUtilsMessengerEXT vkCreateDebugUtilsMessengerEXT = nullptr;
PFN_vkDestroyDebugUtilsMessengerEXT vkDestroyDebugUtilsMessengerEXT = nullptr;
PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV
    vkGetPhysicalDeviceCooperativeMatrixPropertiesNV = nullptr;

void LoadGlobalFunctions() {
  static std::once_flag once;
  static std::string error;
  std::call_once(once, [] {
    const std::string& loader = Tuning::Process().Text(Knob::kLoader);
    const char* override_path = loader.empty() ? nullptr : loader.c_str();
    const char* names[] = {"libvulkan.so.1", "libvulkan.so"};
    void* lib = nullptr;
    if (override_path) {
      lib = dlopen(override_path, RTLD_NOW | RTLD_LOCAL);
    } else {
      for (const char* n : names)
        if ((lib = dlopen(n, RTLD_NOW | RTLD_LOCAL))) break;
    }
    if (!lib) {
      error = std::string("no Vulkan loader found (") +
              (override_path ? override_path : "libvulkan.so.1") + ": " + dlerror() +
              "); install libvulkan1 and a Vulkan driver, or use --backend cpu";
      return;
    }
    vkGetInstanceProcAddr =
        reinterpret_cast<PFN_vkGetInstanceProcAddr>(dlsym(lib, "vkGetInstanceProcAddr"));
    if (!vkGetInstanceProcAddr) {
      error = "the Vulkan loader has no vkGetInstanceProcAddr";
      return;
    }
#define ES_VK_LOAD_GLOBAL(name) \
  name = reinterpret_cast<PFN_##name>(vkGetInstanceProcAddr(nullptr, #name));
    ES_VK_GLOBAL_FUNCS(ES_VK_LOAD_GLOBAL)
#undef ES_VK_LOAD_GLOBAL
    if (!vkCreateInstance || !vkEnumerateInstanceVersion)
      error = "the Vulkan loader is older than Vulkan 1.1 (no vkEnumerateInstanceVersion)";
  });
  if (!error.empty()) Fail("vulkan: ", error);
}

void LoadInstanceFunctions(VkInstance instance) {
#define ES_VK_LOAD_INSTANCE(name)                                              \
  name = reinterpret_cast<PFN_##name>(vkGetInstanceProcAddr(instance, #name)); \
  if (!name) Fail("vulkan: the driver does not provide ", #name);
  ES_VK_INSTANCE_FUNCS(ES_VK_LOAD_INSTANCE)
#undef ES_VK_LOAD_INSTANCE
  vkCreateDebugUtilsMessengerEXT = reinterpret_cast<PFN_vkCreateDebugUtilsMessengerEXT>(
      vkGetInstanceProcAddr(instance, "vkCreateDebugUtilsMessengerEXT"));
  vkDestroyDebugUtilsMessengerEXT = reinterpret_cast<PFN_vkDestroyDebugUtilsMessengerEXT>(
      vkGetInstanceProcAddr(instance, "vkDestroyDebugUtilsMessengerEXT"));
  vkGetPhysicalDeviceCooperativeMatrixPropertiesNV =
      reinterpret_cast<PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV>(
          vkGetInstanceProcAddr(instance, "vkGetPhysicalDeviceCooperativeMatrixPropertiesNV"));
}

const char* ResultName(VkResult r) {
  switch (r) {
    case VK_SUCCESS:
      return "VK_SUCCESS";
    case VK_NOT_READY:
      return "VK_NOT_READY";
    case VK_TIMEOUT:
      return "VK_TIMEOUT";
    case VK_INCOMPLETE:
      return "VK_INCOMPLETE";
    case VK_ERROR_OUT_OF_HOST_MEMORY:
      return "VK_ERROR_OUT_OF_HOST_MEMORY";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY:
      return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
    case VK_ERROR_INITIALIZATION_FAILED:
      return "VK_ERROR_INITIALIZATION_FAILED";
    case VK_ERROR_DEVICE_LOST:
      return "VK_ERROR_DEVICE_LOST";
    case VK_ERROR_MEMORY_MAP_FAILED:
      return "VK_ERROR_MEMORY_MAP_FAILED";
    case VK_ERROR_LAYER_NOT_PRESENT:
      return "VK_ERROR_LAYER_NOT_PRESENT";
    case VK_ERROR_EXTENSION_NOT_PRESENT:
      return "VK_ERROR_EXTENSION_NOT_PRESENT";
    case VK_ERROR_FEATURE_NOT_PRESENT:
      return "VK_ERROR_FEATURE_NOT_PRESENT";
    case VK_ERROR_INCOMPATIBLE_DRIVER:
      return "VK_ERROR_INCOMPATIBLE_DRIVER (no Vulkan driver found)";
    case VK_ERROR_TOO_MANY_OBJECTS:
      return "VK_ERROR_TOO_MANY_OBJECTS";
    case VK_ERROR_FORMAT_NOT_SUPPORTED:
      return "VK_ERROR_FORMAT_NOT_SUPPORTED";
    case VK_ERROR_FRAGMENTED_POOL:
      return "VK_ERROR_FRAGMENTED_POOL";
    case VK_ERROR_OUT_OF_POOL_MEMORY:
      return "VK_ERROR_OUT_OF_POOL_MEMORY";
    default:
      return "VkResult(other)";
  }
}

}  // namespace es::vk
