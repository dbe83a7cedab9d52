// Device enumeration, feature detection, choice and logical-device creation.
#include "device.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "command.h"
#include "descriptors.h"
#include "instance.h"
#include "memory.h"
#include "pipeline_cache.h"
#include "timer.h"

namespace es {

std::string VulkanVersionString(uint32_t v) {
  std::ostringstream os;
  os << VK_API_VERSION_MAJOR(v) << "." << VK_API_VERSION_MINOR(v) << "." << VK_API_VERSION_PATCH(v);
  return os.str();
}

// Device copy bandwidth (for bandwidth fractions of decode): the better of repeated
// vkCmdCopyBuffer and repeated compute copies (bandwidth_copy.comp: 16-byte loads and stores, as
// the kernels stream weights) between two device-local buffers, timed with timestamps; bytes
// read + written per second. On the H200 the transfer copy on the compute queue reached 851 GB/s,
// a third of what the GEMVs read; the shader copy is the figure decode should be held to. It lives
// in this file on purpose: the declaration is weak (edgeseek/internal/backends/vulkan.h), and a
// weak reference does not pull an archive member into the link, so in a file of its own it was left
// out of the CLI and `edgeseek devices --bandwidth` called a null function (the segfault seen on
// the H200).
double MeasureVulkanCopyBandwidth(const std::string& device, uint64_t bytes) {
  vk::Device dev(device, vk::Tuning::FromEnvironment());
  vk::MemoryPool pool(dev, vk::MemoryPool::Kind::kDevice, "bandwidth", vk::PoolLimits{});
  bytes = std::min<uint64_t>(bytes, pool.max_range()) & ~uint64_t(255);
  vk::Allocation a = pool.Alloc(bytes, "bandwidth src"), b = pool.Alloc(bytes, "bandwidth dst");
  constexpr int kReps = 10;
  vk::Timer timer(dev, 2);
  dev.RunOnce([&](VkCommandBuffer cb) {
    vk::vkCmdFillBuffer(cb, a.buffer, a.offset, a.size, 0x3f800000u);
  });
  dev.RunOnce([&](VkCommandBuffer cb) {
    timer.Reset(cb);
    timer.Stamp(cb, 0);
    for (int i = 0; i < kReps; ++i) {
      VkBufferCopy c{(i % 2 ? b : a).offset, (i % 2 ? a : b).offset, bytes};
      vk::vkCmdCopyBuffer(cb, (i % 2 ? b : a).buffer, (i % 2 ? a : b).buffer, 1, &c);
      VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
      mb.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
      mb.dstAccessMask = VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
      vk::vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT,
                               0, 1, &mb, 0, nullptr, 0, nullptr);
    }
    timer.Stamp(cb, 1);
  });
  const double s = timer.Intervals().at(0);
  const double transfer = s > 0 ? 2.0 * double(bytes) * kReps / s : 0.0;
  double shader = 0.0;
  {
    // The same traffic through a compute kernel; the first dispatch warms up and is not counted.
    vk::PipelineCache pipes(dev);
    std::vector<vk::Dispatch> ds(kReps + 1);
    const uint32_t n = uint32_t(std::min<uint64_t>(bytes / 16, 0xffffffffu));
    for (int i = 0; i <= kReps; ++i) {
      vk::Dispatch& d = ds[size_t(i)];
      d.pipe = &pipes.Get("bandwidth_copy", {1, 1});
      const vk::Allocation& from = i % 2 ? b : a;
      const vk::Allocation& to = i % 2 ? a : b;
      d.bindings = {{vk::BufRange{from.buffer, from.offset, uint64_t(n) * 16}},
                    {vk::BufRange{to.buffer, to.offset, uint64_t(n) * 16}}};
      d.writes = {1};
      d.Push(n);
      d.groups[0] = std::max(1u, std::min(65535u, (n + 255u) / 256u / 4u));
    }
    vk::DescriptorArena sets(dev, ds);
    vk::Sequence seq(dev, /*profile=*/true);
    seq.Record(ds, {});
    seq.SubmitAndWait();
    const auto iv = seq.timer()->Intervals();
    double t = 0;
    for (size_t i = 1; i < iv.size() && i <= size_t(kReps); ++i) t += iv[i];
    if (t > 0) shader = 2.0 * double(n) * 16.0 * kReps / t;
  }
  pool.Free(a);
  pool.Free(b);
  return std::max(transfer, shader);
}

std::vector<VulkanDeviceInfo> ListVulkanDevices() {
  auto pds = vk::PhysicalDevices();
  std::vector<VulkanDeviceInfo> out;
  for (size_t i = 0; i < pds.size(); ++i) out.push_back(vk::Describe(pds[i], int(i)));
  return out;
}

}  // namespace es

namespace es::vk {
namespace {
bool HasExtension(const std::vector<VkExtensionProperties>& exts, const char* name) {
  for (auto& e : exts)
    if (std::strcmp(e.extensionName, name) == 0) return true;
  return false;
}
std::vector<VkExtensionProperties> DeviceExtensions(VkPhysicalDevice pd) {
  uint32_t n = 0;
  vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, nullptr);
  std::vector<VkExtensionProperties> exts(n);
  vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, exts.data());
  return exts;
}
const char* TypeName(VkPhysicalDeviceType t) {
  switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU:
      return "discrete";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU:
      return "integrated";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU:
      return "virtual";
    case VK_PHYSICAL_DEVICE_TYPE_CPU:
      return "cpu";
    default:
      return "other";
  }
}
int ComputeQueueFamily(VkPhysicalDevice pd) {
  uint32_t n = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, nullptr);
  std::vector<VkQueueFamilyProperties> qf(n);
  vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, qf.data());
  // Prefer a compute queue that also does graphics (the "universal" queue has timestamps
  // everywhere); any compute queue otherwise.
  int any = -1;
  for (uint32_t i = 0; i < n; ++i) {
    if (!(qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT)) continue;
    if (qf[i].queueFlags & VK_QUEUE_GRAPHICS_BIT) return int(i);
    if (any < 0) any = int(i);
  }
  return any;
}
std::string Lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// N of a usable NV coopmat shape (see Device::coopmat_n), 0 if none. ES_VK_COOPMAT=0 disables.
uint32_t CoopmatShapeN(VkPhysicalDevice pd, const VulkanDeviceInfo& info, const Tuning& tune) {
#ifndef ES_GLSLC_NV_COOPMAT
  (void)pd;
  (void)info;
  (void)tune;
  return 0;
#else
  if (tune.Text(Knob::kCoopmat) == "0") return 0;
  if (!info.coopmat_nv || !info.fp16 || info.api_version < VK_API_VERSION_1_2 ||
      !vkGetPhysicalDeviceCooperativeMatrixPropertiesNV)
    return 0;
  if (info.subgroup_size != 32) return 0;
  VkPhysicalDeviceFeatures2 f2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
  VkPhysicalDeviceVulkan12Features f12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  VkPhysicalDeviceCooperativeMatrixFeaturesNV cmf{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV};
  f2.pNext = &f12;
  f12.pNext = &cmf;
  vkGetPhysicalDeviceFeatures2(pd, &f2);
  if (!cmf.cooperativeMatrix || !f12.vulkanMemoryModel || !f12.vulkanMemoryModelDeviceScope ||
      !f12.shaderFloat16)
    return 0;
  uint32_t n = 0;
  if (vkGetPhysicalDeviceCooperativeMatrixPropertiesNV(pd, &n, nullptr) != VK_SUCCESS) return 0;
  std::vector<VkCooperativeMatrixPropertiesNV> props(
      n, {VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_NV});
  if (vkGetPhysicalDeviceCooperativeMatrixPropertiesNV(pd, &n, props.data()) != VK_SUCCESS)
    return 0;
  uint32_t best = 0;
  for (const auto& c : props) {
    if (c.scope != VK_SCOPE_SUBGROUP_NV || c.MSize != 16 || c.KSize != 16) continue;
    if (c.AType != VK_COMPONENT_TYPE_FLOAT16_NV || c.BType != VK_COMPONENT_TYPE_FLOAT16_NV ||
        c.CType != VK_COMPONENT_TYPE_FLOAT32_NV || c.DType != VK_COMPONENT_TYPE_FLOAT32_NV)
      continue;
    if (c.NSize == 16 || (c.NSize == 8 && best == 0)) best = c.NSize;
  }
  return best;
#endif
}

// VK_KHR_cooperative_matrix and VK_NV_cooperative_matrix2 are newer than Debian 12's Vulkan
// headers (1.3.239): their structures and enum values as the Vulkan registry defines them.
struct CoopmatKhrFeatures {
  VkStructureType sType;
  void* pNext;
  VkBool32 cooperative_matrix, robust_buffer_access;
};
struct Coopmat2Features {
  VkStructureType sType;
  void* pNext;
  VkBool32 workgroup_scope, flexible_dimensions, reductions, conversions, per_element_operations,
      tensor_addressing, block_loads;
};
struct Coopmat2Properties {
  VkStructureType sType;
  void* pNext;
  uint32_t workgroup_scope_max_workgroup_size, flexible_dimensions_max_dimension,
      workgroup_scope_reserved_shared_memory;
};
struct CoopmatFlexibleDimensions {
  VkStructureType sType;
  void* pNext;
  uint32_t m_granularity, n_granularity, k_granularity;
  uint32_t a_type, b_type, c_type, result_type;  // VkComponentTypeKHR
  VkBool32 saturating_accumulation;
  uint32_t scope;  // VkScopeKHR
  uint32_t workgroup_invocations;
};
constexpr auto kSTypeCoopmatKhrFeatures = VkStructureType(1000506000);
constexpr auto kSTypeCoopmat2Features = VkStructureType(1000593000);
constexpr auto kSTypeCoopmatFlexibleDimensions = VkStructureType(1000593001);
constexpr auto kSTypeCoopmat2Properties = VkStructureType(1000593002);
constexpr uint32_t kComponentF16 = 0, kComponentF32 = 1, kScopeWorkgroup = 2;
using PfnFlexibleDimensions = VkResult(VKAPI_PTR*)(VkPhysicalDevice, uint32_t*,
                                                   CoopmatFlexibleDimensions*);
struct CoopmatKhrProperties {
  VkStructureType sType;
  void* pNext;
  uint32_t m, n, k;
  uint32_t a_type, b_type, c_type, result_type;  // VkComponentTypeKHR
  VkBool32 saturating_accumulation;
  uint32_t scope;  // VkScopeKHR
};
constexpr auto kSTypeCoopmatKhrProperties = VkStructureType(1000506001);
constexpr uint32_t kScopeSubgroup = 3;
using PfnCoopmatKhrProperties = VkResult(VKAPI_PTR*)(VkPhysicalDevice, uint32_t*,
                                                     CoopmatKhrProperties*);

// Whether matmul_gemm_cm.comp's KHR variants ("_khr") run here: the build compiled them (a glslc
// with GL_KHR_cooperative_matrix), and the device has VK_KHR_cooperative_matrix with a
// subgroup-scope 16 x 16 x 16 f16 x f16 -> f32 shape, a 32-wide subgroup, f16 arithmetic and
// the Vulkan memory model. Taken where the NV extension is missing, or with ES_VK_COOPMAT=khr.
bool CoopmatKhr16(VkPhysicalDevice pd, const VulkanDeviceInfo& info, const Tuning& tune) {
#ifndef ES_GLSLC_KHR_COOPMAT
  (void)pd;
  (void)info;
  (void)tune;
  return false;
#else
  if (tune.Text(Knob::kCoopmat) == "0") return false;
  if (!info.coopmat_khr || !info.fp16 || info.api_version < VK_API_VERSION_1_2 ||
      info.subgroup_size != 32)
    return false;
  auto props_fn = reinterpret_cast<PfnCoopmatKhrProperties>(vkGetInstanceProcAddr(
      Instance::Get().handle(), "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR"));
  if (!props_fn) return false;
  VkPhysicalDeviceFeatures2 f2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
  VkPhysicalDeviceVulkan12Features f12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  CoopmatKhrFeatures khr{kSTypeCoopmatKhrFeatures, nullptr, 0, 0};
  f2.pNext = &f12;
  f12.pNext = &khr;
  vkGetPhysicalDeviceFeatures2(pd, &f2);
  if (!khr.cooperative_matrix || !f12.vulkanMemoryModel || !f12.vulkanMemoryModelDeviceScope ||
      !f12.shaderFloat16)
    return false;
  uint32_t n = 0;
  if (props_fn(pd, &n, nullptr) != VK_SUCCESS || n == 0) return false;
  std::vector<CoopmatKhrProperties> props(n);
  for (auto& c : props) c = CoopmatKhrProperties{kSTypeCoopmatKhrProperties, nullptr};
  if (props_fn(pd, &n, props.data()) != VK_SUCCESS) return false;
  for (const auto& c : props)
    if (c.scope == kScopeSubgroup && c.m == 16 && c.n == 16 && c.k == 16 &&
        c.a_type == kComponentF16 && c.b_type == kComponentF16 && c.c_type == kComponentF32 &&
        c.result_type == kComponentF32 && !c.saturating_accumulation)
      return true;
  return false;
#endif
}

// The workgroup-scope GEMM of matmul_gemm_cm2.comp: whether the build compiled it and the device
// has everything it uses (VK_NV_cooperative_matrix2 with workgroup scope, flexible dimensions,
// tensor addressing, conversions and per-element operations; VK_KHR_cooperative_matrix; the
// Vulkan memory model; f16 arithmetic and 16-bit storage), and an f16 x f16 -> f32
// workgroup-scope shape whose granularity divides the tile; then the prefill attention of
// attention_cm2.comp where the device also has reductions. On by default; ES_VK_CM2=0 disables
// both.
// matmul_gemm_cm2.comp's variant flags (its specialization constant 4): the unclamped loop for
// whole tiles (bit 0) without a K-loop hint (bits 2-3 = 1): H200 pp512 1.5B 17,582 t/s, 7B 7,117
// (docs/vulkan.md); 16-byte strides, f16 accumulators and activation tiles fastest lost.
constexpr uint32_t kCm2Flags = 1u | (1u << 2);

Coopmat2Config QueryCoopmat2(VkPhysicalDevice pd, const VulkanDeviceInfo& info,
                             const Tuning& tune) {
  Coopmat2Config c;
#ifndef ES_GLSLC_NV_COOPMAT2
  (void)pd;
  (void)info;
  (void)tune;
  return c;
#else
  // On by default where the device has it (ES_VK_CM2=0: off, matmul_gemm_cm.comp instead): with
  // the unclamped whole-tile loop without a loop hint and split-K (the defaults below) it measured
  // on the H200 at pp512 7B 7,117 t/s (FAST+LOOP, no split-K) against 5,494 for the subgroup-scope
  // GEMM and 1.5B 17,582 against 16,731 (docs/vulkan.md).
  if (!tune.On(Knob::kCm2)) return c;
  if (!info.coopmat2_nv || !info.coopmat_khr || info.api_version < VK_API_VERSION_1_3) return c;
  auto flex = reinterpret_cast<PfnFlexibleDimensions>(
      vkGetInstanceProcAddr(Instance::Get().handle(),
                            "vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV"));
  if (!flex) return c;
  VkPhysicalDeviceFeatures2 f2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
  VkPhysicalDeviceVulkan11Features f11{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
  VkPhysicalDeviceVulkan12Features f12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  CoopmatKhrFeatures khr{kSTypeCoopmatKhrFeatures, nullptr, 0, 0};
  Coopmat2Features cm2{kSTypeCoopmat2Features, nullptr, 0, 0, 0, 0, 0, 0, 0};
  f2.pNext = &f11;
  f11.pNext = &f12;
  f12.pNext = &khr;
  khr.pNext = &cm2;
  vkGetPhysicalDeviceFeatures2(pd, &f2);
  if (!khr.cooperative_matrix || !cm2.workgroup_scope || !cm2.flexible_dimensions ||
      !cm2.tensor_addressing || !cm2.conversions || !cm2.per_element_operations ||
      !f12.vulkanMemoryModel || !f12.vulkanMemoryModelDeviceScope || !f12.shaderFloat16 ||
      !f11.storageBuffer16BitAccess)
    return c;
  VkPhysicalDeviceProperties2 p2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
  Coopmat2Properties props{kSTypeCoopmat2Properties, nullptr, 0, 0, 0};
  p2.pNext = &props;
  vkGetPhysicalDeviceProperties2(pd, &p2);
  uint32_t n = 0;
  if (flex(pd, &n, nullptr) != VK_SUCCESS || n == 0) return c;
  std::vector<CoopmatFlexibleDimensions> dims(n);
  for (auto& d : dims) d = CoopmatFlexibleDimensions{kSTypeCoopmatFlexibleDimensions, nullptr};
  if (flex(pd, &n, dims.data()) != VK_SUCCESS) return c;
  // A workgroup-scope f16 x f16 -> acc shape whose granularity divides m x n x k at workgroup
  // size wg.
  auto fits = [&](uint32_t acc, uint32_t m, uint32_t n, uint32_t k, uint32_t wg) {
    for (const auto& d : dims) {
      if (d.scope != kScopeWorkgroup || d.a_type != kComponentF16 || d.b_type != kComponentF16 ||
          d.c_type != acc || d.result_type != acc || d.saturating_accumulation)
        continue;
      if (!d.m_granularity || !d.n_granularity || !d.k_granularity) continue;
      if (m % d.m_granularity || n % d.n_granularity || k % d.k_granularity) continue;
      if (d.workgroup_invocations && d.workgroup_invocations != wg) continue;
      return true;
    }
    return false;
  };
  // GEMM tile BM x BN x BK and workgroup size: ES_VK_CM2_TILE=BMxBNxBK, ES_VK_CM2_WG.
  const auto [bm, bn, bk] = tune.Tile(Knob::kCm2Tile);
  const uint32_t wg = tune.Uint(Knob::kCm2Wg);
  if (wg == 0 || wg > props.workgroup_scope_max_workgroup_size) return c;
  if (!fits(kComponentF32, bm, bn, bk, wg)) return c;
  c.bm = bm, c.bn = bn, c.bk = bk, c.wg = wg;
  // Decode-shaped tiles of the block-load variants (weights as A: an accumulator of bn weight rows
  // x bm activation rows): the first shape that fits, 128 weight rows a tile where it can.
  c.block_loads = cm2.block_loads && f12.bufferDeviceAddress;
  for (uint32_t i = 0; i < 3 && c.block_loads; ++i) {
    const uint32_t dbm = 16u << i;
    for (const Coopmat2Config::Tile t :
         {Coopmat2Config::Tile{dbm, 128, 64, 256}, Coopmat2Config::Tile{dbm, 128, 64, 128},
          Coopmat2Config::Tile{dbm, 64, 64, 128}})
      if (t.wg <= props.workgroup_scope_max_workgroup_size &&
          fits(kComponentF32, t.bn, t.bm, t.bk, t.wg)) {
        c.dec[i] = t;
        break;
      }
  }
  c.x32 = tune.On(Knob::kCm2X32);
  c.swap = tune.On(Knob::kCm2Swap);
  c.flags = kCm2Flags;
  // Split-K (default up to 4 slices): the multiprocessor count from VK_NV_shader_sm_builtins
  // (ES_VK_CM2_SMS overrides).
  c.splitk = tune.Uint(Knob::kCm2Splitk);
  c.splitk_min_k = tune.Uint(Knob::kCm2SplitkMinK);
  if (!tune.IsAuto(Knob::kCm2Sms)) {
    c.sms = tune.Uint(Knob::kCm2Sms);
  } else if (c.splitk > 1 &&
             HasExtension(DeviceExtensions(pd), VK_NV_SHADER_SM_BUILTINS_EXTENSION_NAME)) {
    VkPhysicalDeviceShaderSMBuiltinsPropertiesNV sm{
        VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_SM_BUILTINS_PROPERTIES_NV};
    VkPhysicalDeviceProperties2 q{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
    q.pNext = &sm;
    vkGetPhysicalDeviceProperties2(pd, &q);
    c.sms = sm.shaderSMCount;
  }
  // Prefill attention (attention_cm2.comp, on unless ES_VK_FA_CM2=0): BR query rows x BC keys
  // per tile at a workgroup size; it also needs row reductions. 32 x 32 at 128 invocations (H200
  // pp512, two rounds in one job: 1.5B 26.5k/26.4k t/s against 25.3k/25.2k at 64 x 64, 7B
  // 8.9k/9.7k against 7.0k/9.4k; docs/vulkan.md; the tile's knobs are retired).
  // Head dims pad to multiples of 16, so the shape must divide BR x BC x 16 and BR x 16 x BC.
  if (cm2.reductions && tune.On(Knob::kFaCm2)) {
    constexpr uint32_t br = 32, bc = 32, fwg = 128;
    if (fwg && fwg <= props.workgroup_scope_max_workgroup_size &&
        fits(kComponentF32, br, bc, 16, fwg) && fits(kComponentF32, br, 16, bc, fwg)) {
      c.fa_br = br, c.fa_bc = bc, c.fa_wg = fwg;
    }
  }
  return c;
#endif
}
}  // namespace

std::vector<VkPhysicalDevice> PhysicalDevices() {
  VkInstance inst = Instance::Get().handle();
  uint32_t n = 0;
  VK_CHECK(vkEnumeratePhysicalDevices(inst, &n, nullptr));
  std::vector<VkPhysicalDevice> pds(n);
  VK_CHECK(vkEnumeratePhysicalDevices(inst, &n, pds.data()));
  pds.resize(n);
  return pds;
}

VulkanDeviceInfo Describe(VkPhysicalDevice pd, int index) {
  VulkanDeviceInfo d;
  d.index = index;
  const auto exts = DeviceExtensions(pd);

  VkPhysicalDeviceProperties props;
  vkGetPhysicalDeviceProperties(pd, &props);
  VkPhysicalDeviceSubgroupProperties sg{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
  VkPhysicalDeviceSubgroupSizeControlProperties sgc{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_PROPERTIES};
  VkPhysicalDeviceMaintenance3Properties m3{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES};
  VkPhysicalDeviceDriverProperties drv{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
  VkPhysicalDeviceShaderIntegerDotProductProperties idp{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_PROPERTIES};
  VkPhysicalDeviceProperties2 p2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
  p2.pNext = &sg;
  sg.pNext = &m3;
  const bool v12 = props.apiVersion >= VK_API_VERSION_1_2;
  const bool v13 = props.apiVersion >= VK_API_VERSION_1_3;
  const bool idot_ext = v13 || HasExtension(exts, VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME);
  if (v12 || HasExtension(exts, VK_KHR_DRIVER_PROPERTIES_EXTENSION_NAME)) m3.pNext = &drv;
  if (v13 || HasExtension(exts, VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME)) drv.pNext = &sgc;
  if (idot_ext) {
    idp.pNext = p2.pNext;
    p2.pNext = &idp;
  }
  vkGetPhysicalDeviceProperties2(pd, &p2);

  d.name = props.deviceName;
  d.type = TypeName(props.deviceType);
  d.api_version = props.apiVersion;
  d.vendor_id = props.vendorID;
  d.device_id = props.deviceID;
  d.driver = std::string(drv.driverName[0] ? drv.driverName : "?") +
             (drv.driverInfo[0] ? std::string(" ") + drv.driverInfo : std::string());
  d.subgroup_size = sg.subgroupSize;
  d.min_subgroup_size = sgc.minSubgroupSize ? sgc.minSubgroupSize : sg.subgroupSize;
  d.max_subgroup_size = sgc.maxSubgroupSize ? sgc.maxSubgroupSize : sg.subgroupSize;
  const bool sg_compute = sg.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT;
  d.subgroup_arithmetic = sg_compute &&
                          (sg.supportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT) &&
                          (sg.supportedOperations & VK_SUBGROUP_FEATURE_BASIC_BIT);
  d.subgroup_shuffle = sg_compute && (sg.supportedOperations & VK_SUBGROUP_FEATURE_SHUFFLE_BIT);
  d.subgroup_clustered = sg_compute && (sg.supportedOperations & VK_SUBGROUP_FEATURE_CLUSTERED_BIT);
  d.max_storage_buffer_range = props.limits.maxStorageBufferRange;
  d.max_memory_allocation = m3.maxMemoryAllocationSize;
  d.max_shared_memory = props.limits.maxComputeSharedMemorySize;
  d.max_push_constants = props.limits.maxPushConstantsSize;
  d.timestamp_period_ns = props.limits.timestampPeriod;

  VkPhysicalDeviceFeatures2 f2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
  VkPhysicalDeviceVulkan11Features f11{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
  VkPhysicalDeviceVulkan12Features f12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  VkPhysicalDeviceShaderIntegerDotProductFeatures idf{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES};
  if (v12) {
    f2.pNext = &f11;
    f11.pNext = &f12;
  }
  if (idot_ext) {
    idf.pNext = f2.pNext;
    f2.pNext = &idf;
  }
  vkGetPhysicalDeviceFeatures2(pd, &f2);
  d.fp16 = f12.shaderFloat16;
  d.int8 = f12.shaderInt8;
  d.storage16 = f11.storageBuffer16BitAccess;
  d.storage8 = f12.storageBuffer8BitAccess;
  d.int_dot = idot_ext && idf.shaderIntegerDotProduct;
  d.int_dot_accel = d.int_dot && idp.integerDotProduct4x8BitPackedSignedAccelerated;
  d.int_dot_mixed_accel =
      d.int_dot_accel && idp.integerDotProduct4x8BitPackedMixedSignednessAccelerated;
  d.coopmat_khr = HasExtension(exts, "VK_KHR_cooperative_matrix");
  d.coopmat_nv = HasExtension(exts, "VK_NV_cooperative_matrix");
  d.coopmat2_nv = HasExtension(exts, "VK_NV_cooperative_matrix2");
  d.bf16 = HasExtension(exts, "VK_KHR_shader_bfloat16");

  VkPhysicalDeviceMemoryProperties mp;
  vkGetPhysicalDeviceMemoryProperties(pd, &mp);
  for (uint32_t i = 0; i < mp.memoryHeapCount; ++i)
    d.heaps.push_back(
        {mp.memoryHeaps[i].size, bool(mp.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT)});

  if (props.apiVersion < VK_API_VERSION_1_1) d.missing_required.push_back("Vulkan 1.1");
  if (!d.subgroup_arithmetic)
    d.missing_required.push_back("subgroup arithmetic in compute shaders");
  if (ComputeQueueFamily(pd) < 0) d.missing_required.push_back("a compute queue");
  if (props.limits.maxComputeWorkGroupInvocations < 256)
    d.missing_required.push_back("256 invocations per workgroup");
  if (props.limits.maxComputeSharedMemorySize < 16384)
    d.missing_required.push_back("16 KiB of shared memory");
  if (!f2.features.shaderStorageBufferArrayDynamicIndexing)
    d.missing_required.push_back("shaderStorageBufferArrayDynamicIndexing");
  return d;
}

int ChooseDevice(const std::vector<VulkanDeviceInfo>& devices, const std::string& want) {
  auto list = [&] {
    std::ostringstream os;
    for (auto& d : devices) os << " [" << d.index << "] " << d.name << " (" << d.type << ")";
    return os.str();
  };
  if (devices.empty())
    Fail(
        "vulkan: no Vulkan device found (the loader found no driver; install one, e.g. "
        "mesa-vulkan-drivers, or use --backend cpu)");
  int pick = -1;
  if (want.empty()) {
    for (const char* t : {"discrete", "integrated", "virtual", "other", "cpu"}) {
      for (auto& d : devices)
        if (d.type == t && d.missing_required.empty()) {
          pick = d.index;
          break;
        }
      if (pick >= 0) break;
    }
    if (pick < 0) pick = 0;  // reported below with what it lacks
  } else if (std::all_of(want.begin(), want.end(),
                         [](char c) { return std::isdigit(uint8_t(c)); })) {
    pick = std::stoi(want);
    if (pick >= int(devices.size()))
      Fail("vulkan: --device ", want, " is out of range; devices:", list());
  } else {
    for (auto& d : devices)
      if (Lower(d.name).find(Lower(want)) != std::string::npos) {
        pick = d.index;
        break;
      }
    if (pick < 0) Fail("vulkan: no device name contains '", want, "'; devices:", list());
  }
  const auto& d = devices[size_t(pick)];
  if (!d.missing_required.empty()) {
    std::ostringstream os;
    for (size_t i = 0; i < d.missing_required.size(); ++i)
      os << (i ? ", " : "") << d.missing_required[i];
    Fail("vulkan: device [", d.index, "] ", d.name, " lacks required features: ", os.str());
  }
  return pick;
}

struct Device::Features {
  Features() = default;
  Features(const Features&) = delete;
  Features& operator=(const Features&) = delete;

  std::vector<const char*> extensions;
  VkPhysicalDeviceFeatures2 f2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
  VkPhysicalDeviceVulkan11Features f11{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
  VkPhysicalDeviceVulkan12Features f12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  VkPhysicalDeviceCooperativeMatrixFeaturesNV cmf{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV};
  CoopmatKhrFeatures khr{kSTypeCoopmatKhrFeatures, nullptr, VK_TRUE, VK_FALSE};
  Coopmat2Features cm2{kSTypeCoopmat2Features,
                       nullptr,
                       VK_TRUE,
                       VK_TRUE,
                       VK_FALSE,
                       VK_TRUE,
                       VK_TRUE,
                       VK_TRUE,
                       VK_FALSE};
  VkPhysicalDeviceShaderIntegerDotProductFeatures idf{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES};
  VkPhysicalDeviceWorkgroupMemoryExplicitLayoutFeaturesKHR wml{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_WORKGROUP_MEMORY_EXPLICIT_LAYOUT_FEATURES_KHR};
  VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR pef{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR};
};

Device::Device(const std::string& want, const Tuning& tuning) : tuning_(tuning) {
  auto pds = PhysicalDevices();
  std::vector<VulkanDeviceInfo> infos;
  for (size_t i = 0; i < pds.size(); ++i) infos.push_back(Describe(pds[i], int(i)));
  const int pick = ChooseDevice(infos, want);
  physical_ = pds[size_t(pick)];
  info_ = infos[size_t(pick)];
  vkGetPhysicalDeviceMemoryProperties(physical_, &mem_props_);
  VkPhysicalDeviceProperties props;
  vkGetPhysicalDeviceProperties(physical_, &props);
  min_storage_alignment_ = std::max<uint64_t>(props.limits.minStorageBufferOffsetAlignment, 16);

  queue_family_ = uint32_t(ComputeQueueFamily(physical_));
  {
    uint32_t n = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(physical_, &n, nullptr);
    std::vector<VkQueueFamilyProperties> qf(n);
    vkGetPhysicalDeviceQueueFamilyProperties(physical_, &n, qf.data());
    timestamp_valid_bits_ = qf[queue_family_].timestampValidBits;
  }

  // Features the shaders may use, enabled where present (fallback shaders otherwise).
  Features f;
  f.f2.features.shaderStorageBufferArrayDynamicIndexing = VK_TRUE;
  if (info_.api_version >= VK_API_VERSION_1_2) {
    f.f2.pNext = &f.f11;
    f.f11.pNext = &f.f12;
    f.f11.storageBuffer16BitAccess = info_.storage16;
    f.f12.shaderFloat16 = info_.fp16;
    f.f12.shaderInt8 = info_.int8;
    f.f12.storageBuffer8BitAccess = info_.storage8;
  }
  EnableCoopmat(f);
  EnableIntDot(f);
  EnableSharedBlocks(f);
  EnablePipelineStats(f);
  // f16 math by default where the prefill GEMM can use tensor cores (a coopmat GEMM).
  f16_math_ = tuning_.IsAuto(Knob::kF16Act) ? coopmat_n_ != 0 || coopmat2_.bm != 0
                                            : tuning_.Uint(Knob::kF16Act) == 1;
  CreateDevice(f);
}

void Device::EnableCoopmat(Features& f) {
  // NV cooperative matrix for the prefill GEMM: the extension, its feature, f16 arithmetic, the
  // Vulkan memory model (glslang emits it for coopmat shaders), a 32-wide subgroup and a
  // 16 x {16|8} x 16 f16 -> f32 shape at subgroup scope.
  // The subgroup-scope coopmat GEMM: NV's where the device has it, else KHR's (16 x 16 x 16);
  // ES_VK_COOPMAT=khr tries KHR's first, =0 neither.
  const bool prefer_khr = tuning_.Text(Knob::kCoopmat) == "khr";
  const bool khr_ok = CoopmatKhr16(physical_, info_, tuning_);
  const uint32_t nv_n = prefer_khr && khr_ok ? 0 : CoopmatShapeN(physical_, info_, tuning_);
  coopmat_khr_ = khr_ok && nv_n == 0;
  coopmat_n_ = coopmat_khr_ ? 16 : nv_n;
  if (coopmat_n_ && !coopmat_khr_) {
    f.extensions.push_back("VK_NV_cooperative_matrix");
    f.cmf.cooperativeMatrix = VK_TRUE;
    f.f12.vulkanMemoryModel = VK_TRUE;
    f.f12.vulkanMemoryModelDeviceScope = VK_TRUE;
    f.f12.pNext = &f.cmf;
  }
  // Workgroup-scope cooperative matrices (matmul_gemm_cm2.comp), next to the NV ones.
  coopmat2_ = QueryCoopmat2(physical_, info_, tuning_);
  if (coopmat2_.fa_br) f.cm2.reductions = VK_TRUE;  // the attention's row max and smears
  if (coopmat2_.bm && coopmat2_.block_loads) {      // decode functions take buffer references
    f.cm2.block_loads = VK_TRUE;
    f.f12.bufferDeviceAddress = VK_TRUE;
  }
  if (coopmat_khr_ || coopmat2_.bm) f.extensions.push_back("VK_KHR_cooperative_matrix");
  if (coopmat_khr_ && !coopmat2_.bm) {
    f.f12.vulkanMemoryModel = VK_TRUE;
    f.f12.vulkanMemoryModelDeviceScope = VK_TRUE;
    f.khr.pNext = f.f12.pNext;
    f.f12.pNext = &f.khr;
  }
  if (coopmat2_.bm) {
    f.extensions.push_back("VK_NV_cooperative_matrix2");
    f.f12.vulkanMemoryModel = VK_TRUE;
    f.f12.vulkanMemoryModelDeviceScope = VK_TRUE;
    f.f11.storageBuffer16BitAccess = VK_TRUE;
    f.cm2.pNext = f.f12.pNext;
    f.khr.pNext = &f.cm2;
    f.f12.pNext = &f.khr;
  }
}

void Device::EnableIntDot(Features& f) {
  if (!info_.int_dot) return;
  if (info_.api_version < VK_API_VERSION_1_3)
    f.extensions.push_back(VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME);
  f.idf.shaderIntegerDotProduct = VK_TRUE;
  f.idf.pNext = f.f2.pNext;
  f.f2.pNext = &f.idf;
}

void Device::EnableSharedBlocks(Features& f) {
  if (!coopmat_n_ || !tuning_.On(Knob::kSharedBlock) ||
      !HasExtension(DeviceExtensions(physical_),
                    VK_KHR_WORKGROUP_MEMORY_EXPLICIT_LAYOUT_EXTENSION_NAME))
    return;
  VkPhysicalDeviceWorkgroupMemoryExplicitLayoutFeaturesKHR have{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_WORKGROUP_MEMORY_EXPLICIT_LAYOUT_FEATURES_KHR};
  VkPhysicalDeviceFeatures2 q{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
  q.pNext = &have;
  vkGetPhysicalDeviceFeatures2(physical_, &q);
  if (!have.workgroupMemoryExplicitLayout || !have.workgroupMemoryExplicitLayout16BitAccess) return;
  f.extensions.push_back(VK_KHR_WORKGROUP_MEMORY_EXPLICIT_LAYOUT_EXTENSION_NAME);
  f.wml.workgroupMemoryExplicitLayout = VK_TRUE;
  f.wml.workgroupMemoryExplicitLayout16BitAccess = VK_TRUE;
  f.wml.pNext = f.f12.pNext;
  f.f12.pNext = &f.wml;
  shared_blocks_ = true;
}

void Device::EnablePipelineStats(Features& f) {
  if (!tuning_.On(Knob::kPipelineStats)) return;
  if (!HasExtension(DeviceExtensions(physical_),
                    VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME)) {
    std::fprintf(stderr, "vulkan: ES_VK_PIPELINE_STATS=1, but %s has no %s: no statistics\n",
                 info_.name.c_str(), VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME);
    return;
  }
  f.extensions.push_back(VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME);
  f.pef.pipelineExecutableInfo = VK_TRUE;
  f.pef.pNext = f.f2.pNext;
  f.f2.pNext = &f.pef;
  pipeline_stats_ = true;
}

void Device::CreateDevice(Features& f) {
  const float priority = 1.0f;
  VkDeviceQueueCreateInfo qci{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
  qci.queueFamilyIndex = queue_family_;
  qci.queueCount = 1;
  qci.pQueuePriorities = &priority;
  VkDeviceCreateInfo dci{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
  dci.pNext = &f.f2;
  dci.queueCreateInfoCount = 1;
  dci.pQueueCreateInfos = &qci;
  dci.enabledExtensionCount = uint32_t(f.extensions.size());
  dci.ppEnabledExtensionNames = f.extensions.data();
  VK_CHECK(vkCreateDevice(physical_, &dci, nullptr, &device_), " on device ", info_.name);
  vkGetDeviceQueue(device_, queue_family_, 0, &queue_);

  VkCommandPoolCreateInfo pci{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  pci.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  pci.queueFamilyIndex = queue_family_;
  VK_CHECK(vkCreateCommandPool(device_, &pci, nullptr, &pool_));
  VkFenceCreateInfo fci{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  VK_CHECK(vkCreateFence(device_, &fci, nullptr, &fence_));
}

void Device::Retune(const Tuning& t) {
  for (const KnobSpec& s : TuningTable())
    ES_CHECK(s.when == KnobWhen::kGraph || t.Text(s.id) == tuning_.Text(s.id), "vulkan: ", s.name,
             " is read when the ", KnobWhenName(s.when),
             " is created: set it on the backend's VulkanTuning, not on a running backend");
  tuning_ = t;
}

Device::~Device() {
  if (!device_) return;
  vkDeviceWaitIdle(device_);
  vkDestroyFence(device_, fence_, nullptr);
  vkDestroyCommandPool(device_, pool_, nullptr);
  vkDestroyDevice(device_, nullptr);
}

VkCommandBuffer Device::BeginOnce() {
  VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  ai.commandPool = pool_;
  ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  ai.commandBufferCount = 1;
  VkCommandBuffer cb;
  VK_CHECK(vkAllocateCommandBuffers(device_, &ai, &cb));
  VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  VK_CHECK(vkBeginCommandBuffer(cb, &bi));
  return cb;
}

void Device::EndOnceAndWait(VkCommandBuffer cb) {
  VK_CHECK(vkEndCommandBuffer(cb));
  SubmitAndWait(cb);
  vkFreeCommandBuffers(device_, pool_, 1, &cb);
}

void Device::SubmitAndWait(VkCommandBuffer cb) {
  VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  si.commandBufferCount = 1;
  si.pCommandBuffers = &cb;
  VK_CHECK(vkResetFences(device_, 1, &fence_));
  VK_CHECK(vkQueueSubmit(queue_, 1, &si, fence_));
  VK_CHECK(vkWaitForFences(device_, 1, &fence_, VK_TRUE, UINT64_MAX));
}

}  // namespace es::vk
