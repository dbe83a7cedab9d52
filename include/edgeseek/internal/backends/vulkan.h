// Public view of the Vulkan devices edgeseek can use (for `edgeseek devices` and diagnostics).
// The backend itself is created through CreateBackend("vulkan", opts) (backend.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace es {

struct VulkanMemoryHeap {
  uint64_t bytes = 0;
  bool device_local = false;
};

struct VulkanDeviceInfo {
  int index = 0;
  std::string name;
  std::string type;          // "discrete", "integrated", "virtual", "cpu", "other"
  std::string driver;        // driver name and info, e.g. "NVIDIA 580.159.04"
  uint32_t api_version = 0;  // VK_MAKE_API_VERSION
  uint32_t vendor_id = 0, device_id = 0;
  std::vector<VulkanMemoryHeap> heaps;
  uint32_t subgroup_size = 0;
  uint32_t min_subgroup_size = 0, max_subgroup_size = 0;
  bool subgroup_arithmetic = false;  // subgroupAdd/Max in compute shaders (required)
  bool subgroup_shuffle = false;
  bool subgroup_clustered = false;  // subgroupClusteredAdd in compute shaders (small-TPR GEMV)
  bool fp16 = false;                // shaderFloat16
  bool int8 = false;                // shaderInt8
  bool storage16 = false;           // storageBuffer16BitAccess
  bool storage8 = false;            // storageBuffer8BitAccess
  bool int_dot = false;        // shaderIntegerDotProduct (VK_KHR_shader_integer_dot_product or 1.3)
  bool int_dot_accel = false;  // ... with signed 4x8-bit packed dot products in hardware
  bool int_dot_mixed_accel = false;  // ... and signed x unsigned ones (Q8_0's int16 x)
  bool coopmat_khr = false;          // VK_KHR_cooperative_matrix
  bool coopmat_nv = false;           // VK_NV_cooperative_matrix
  bool coopmat2_nv = false;          // VK_NV_cooperative_matrix2
  bool bf16 = false;                 // VK_KHR_shader_bfloat16
  uint64_t max_storage_buffer_range = 0;
  uint64_t max_memory_allocation = 0;
  uint32_t max_shared_memory = 0;
  uint32_t max_push_constants = 0;
  float timestamp_period_ns = 0;
  std::vector<std::string> missing_required;  // why the backend cannot use it (empty: usable)
};

// Enumerates the Vulkan devices; throws es::Error with a clear message when there is no Vulkan
// loader or driver. Declared weak: in a build without the Vulkan backend (ES_VULKAN=OFF) the
// symbols are null and callers check VulkanBackendBuilt() (backend.h) first.
__attribute__((weak)) std::vector<VulkanDeviceInfo> ListVulkanDevices();
// Copy bandwidth of a device in bytes/s (read + written), over `bytes`-sized buffers.
__attribute__((weak)) double MeasureVulkanCopyBandwidth(const std::string& device, uint64_t bytes);
// "1.3.230"
__attribute__((weak)) std::string VulkanVersionString(uint32_t v);

}  // namespace es
