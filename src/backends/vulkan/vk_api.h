// The Vulkan entry points edgeseek uses, loaded at run time from the loader library (dlopen), so
// that a machine without any Vulkan loader or driver still runs edgeseek on the CPU: only
// CreateVulkanBackend and `edgeseek devices` report the missing driver, as an es::Error.
//
// Every function is a pointer in namespace es::vk with the Vulkan name; code of this backend
// lives in es::vk and calls them unqualified. VK_CHECK turns a VkResult into an es::Error naming
// the call and the result.
#pragma once

#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

#include <string>

#include "edgeseek/internal/core/error.h"

#define ES_VK_GLOBAL_FUNCS(X)               \
  X(vkCreateInstance)                       \
  X(vkEnumerateInstanceExtensionProperties) \
  X(vkEnumerateInstanceLayerProperties)     \
  X(vkEnumerateInstanceVersion)

#define ES_VK_INSTANCE_FUNCS(X)               \
  X(vkDestroyInstance)                        \
  X(vkEnumeratePhysicalDevices)               \
  X(vkGetPhysicalDeviceProperties)            \
  X(vkGetPhysicalDeviceProperties2)           \
  X(vkGetPhysicalDeviceFeatures2)             \
  X(vkGetPhysicalDeviceMemoryProperties)      \
  X(vkGetPhysicalDeviceQueueFamilyProperties) \
  X(vkEnumerateDeviceExtensionProperties)     \
  X(vkCreateDevice)                           \
  X(vkDestroyDevice)                          \
  X(vkGetDeviceQueue)                         \
  X(vkCreateBuffer)                           \
  X(vkDestroyBuffer)                          \
  X(vkGetBufferMemoryRequirements)            \
  X(vkAllocateMemory)                         \
  X(vkFreeMemory)                             \
  X(vkBindBufferMemory)                       \
  X(vkMapMemory)                              \
  X(vkUnmapMemory)                            \
  X(vkFlushMappedMemoryRanges)                \
  X(vkInvalidateMappedMemoryRanges)           \
  X(vkCreateShaderModule)                     \
  X(vkDestroyShaderModule)                    \
  X(vkCreateDescriptorSetLayout)              \
  X(vkDestroyDescriptorSetLayout)             \
  X(vkCreatePipelineLayout)                   \
  X(vkDestroyPipelineLayout)                  \
  X(vkCreateComputePipelines)                 \
  X(vkDestroyPipeline)                        \
  X(vkCreatePipelineCache)                    \
  X(vkDestroyPipelineCache)                   \
  X(vkGetPipelineCacheData)                   \
  X(vkCreateDescriptorPool)                   \
  X(vkDestroyDescriptorPool)                  \
  X(vkAllocateDescriptorSets)                 \
  X(vkUpdateDescriptorSets)                   \
  X(vkCreateCommandPool)                      \
  X(vkGetDeviceProcAddr)                      \
  X(vkDestroyCommandPool)                     \
  X(vkAllocateCommandBuffers)                 \
  X(vkFreeCommandBuffers)                     \
  X(vkBeginCommandBuffer)                     \
  X(vkEndCommandBuffer)                       \
  X(vkCmdBindPipeline)                        \
  X(vkCmdBindDescriptorSets)                  \
  X(vkCmdPushConstants)                       \
  X(vkCmdDispatch)                            \
  X(vkCmdPipelineBarrier)                     \
  X(vkCmdCopyBuffer)                          \
  X(vkCmdFillBuffer)                          \
  X(vkCmdWriteTimestamp)                      \
  X(vkCmdResetQueryPool)                      \
  X(vkCreateQueryPool)                        \
  X(vkDestroyQueryPool)                       \
  X(vkGetQueryPoolResults)                    \
  X(vkQueueSubmit)                            \
  X(vkQueueWaitIdle)                          \
  X(vkCreateFence)                            \
  X(vkDestroyFence)                           \
  X(vkWaitForFences)                          \
  X(vkGetFenceStatus)                         \
  X(vkResetFences)                            \
  X(vkDeviceWaitIdle)

namespace es::vk {

extern PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr;
#define ES_VK_DECLARE(name) extern PFN_##name name;
ES_VK_GLOBAL_FUNCS(ES_VK_DECLARE)
ES_VK_INSTANCE_FUNCS(ES_VK_DECLARE)
#undef ES_VK_DECLARE
// Optional (debug utils): null when the extension is absent.
extern PFN_vkCreateDebugUtilsMessengerEXT vkCreateDebugUtilsMessengerEXT;
extern PFN_vkDestroyDebugUtilsMessengerEXT vkDestroyDebugUtilsMessengerEXT;
// Optional (VK_NV_cooperative_matrix): null when the loader/driver lacks it.
extern PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV
    vkGetPhysicalDeviceCooperativeMatrixPropertiesNV;

// Opens the loader (libvulkan.so.1, or $ES_VK_LOADER) and resolves the global functions; throws
// es::Error saying that no Vulkan loader is installed. Idempotent.
void LoadGlobalFunctions();
// Resolves the instance-level (and, through them, device-level) functions.
void LoadInstanceFunctions(VkInstance instance);

const char* ResultName(VkResult r);

}  // namespace es::vk

#define VK_CHECK(call, ...)                                                               \
  do {                                                                                    \
    const VkResult es_vk_r_ = (call);                                                     \
    if (es_vk_r_ != VK_SUCCESS)                                                           \
      ::es::Fail("vulkan: ", #call,                                                       \
                 " failed: ", ::es::vk::ResultName(es_vk_r_) __VA_OPT__(, ) __VA_ARGS__); \
  } while (0)
