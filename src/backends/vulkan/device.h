// Vulkan device: enumeration with feature detection (physical devices -> VulkanDeviceInfo),
// choice by BackendOptions::device (index or name substring), and the logical device with its
// one compute queue and a command pool. Owns VkDevice; every other object of the backend is
// created from it and destroyed before it.
#pragma once

#include <string>
#include <vector>

#include "edgeseek/internal/backends/vulkan.h"
#include "memory_ledger.h"
#include "tuning.h"
#include "vk_api.h"

namespace es::vk {

// All physical devices with their features (index = enumeration order).
std::vector<VkPhysicalDevice> PhysicalDevices();
VulkanDeviceInfo Describe(VkPhysicalDevice pd, int index);
// Picks a device: `want` empty = the first usable GPU (discrete, then integrated, then any);
// a number = that index; otherwise the first whose name contains `want` (case-insensitive).
// Throws es::Error listing the devices when nothing matches or the match lacks a required
// feature.
int ChooseDevice(const std::vector<VulkanDeviceInfo>& devices, const std::string& want);

// Tile (BM activation rows x BN weight rows x BK) and workgroup size of the workgroup-scope
// cooperative-matrix GEMM; bm == 0: not available. x32: x is loaded as f32 tiles converted to
// f16 in the shader even where an f16 copy could be made first (ES_VK_CM2_X32=1, for A/B).
struct Coopmat2Config {
  uint32_t bm = 0, bn = 0, bk = 0, wg = 0;
  bool x32 = false;
  bool swap = false;  // yᵀ = W xᵀ (weights as the A operand), ES_VK_CM2_SWAP=1
  // matmul_gemm_cm2.comp's specialization constant 4: bit 0 unclamped whole-tile loop, bits 2-3
  // K-loop hint (1: none); the other bits (16-byte strides, f16 accumulators, activation tiles
  // fastest) lost their A/B and are never set (kCm2Flags in device.cpp; tuning.cpp RetiredKnobs).
  uint32_t flags = 0;
  // Split-K (the "_sk" shader variants + matmul_gemm_cm2_reduce): at most `splitk` slices of K
  // (ES_VK_CM2_SPLITK=2|4|8; 0 = off) for products with K >= splitk_min_k
  // (ES_VK_CM2_SPLITK_MINK, default 2048) whose tiles fill less than half of the `sms`
  // multiprocessors (VK_NV_shader_sm_builtins, or ES_VK_CM2_SMS).
  uint32_t splitk = 0, splitk_min_k = 2048, sms = 0;
  // Slices for an R x N x K product: the largest power of two <= splitk and <= sms / tiles, and
  // at most one per BK step; 1 = no split.
  uint32_t SplitK(uint64_t R, uint64_t N, uint64_t K) const {
    if (splitk < 2 || !sms || !bm || K < splitk_min_k) return 1;
    const uint64_t tiles = ((R + bm - 1) / bm) * ((N + bn - 1) / bn);
    if (tiles * 2 > sms) return 1;
    uint64_t s = 1;
    while (s * 2 <= splitk && s * 2 * tiles <= sms && s * 2 * bk <= K) s *= 2;
    return uint32_t(s);
  }
  // Prefill attention on tensor cores (attention_cm2.comp): tiles of fa_br query rows x fa_bc
  // keys, workgroup size fa_wg; fa_br == 0: not available (no GEMM config, no row reductions, no
  // fitting shape, or ES_VK_FA_CM2=0).
  uint32_t fa_br = 0, fa_bc = 0, fa_wg = 0;
  // Quantized weights decoded in the GEMM's tile loads (matmul_gemm_cm2.comp's "_q4_0" / "_q8_0"
  // variants; cooperativeMatrixBlockLoads and bufferDeviceAddress): false where the device lacks
  // them. dec[i]: the tile of products of at most 16 << i activation rows (bm = 16, 32, 64; the
  // weights are the A operand, bn of their rows a tile); bm == 0 where no shape fits, then the
  // tile above is used.
  bool block_loads = false;
  struct Tile {
    uint32_t bm = 0, bn = 0, bk = 0, wg = 0;
  };
  Tile dec[3];
};

class Device {
 public:
  // `tuning`: the backend's knobs (tuning.h), the device-creation ones applied here.
  Device(const std::string& want, const Tuning& tuning);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  VkDevice handle() const { return device_; }
  VkPhysicalDevice physical() const { return physical_; }
  VkQueue queue() const { return queue_; }
  uint32_t queue_family() const { return queue_family_; }
  VkCommandPool command_pool() const { return pool_; }
  const VulkanDeviceInfo& info() const { return info_; }
  const VkPhysicalDeviceMemoryProperties& memory_properties() const { return mem_props_; }
  uint64_t min_storage_alignment() const { return min_storage_alignment_; }
  bool timestamps() const { return timestamp_valid_bits_ > 0; }
  // N of the NV cooperative-matrix shape 16 x N x 16 (f16 A/B, f32 C) enabled on this device
  // with a 32-wide subgroup, for matmul_gemm_cm.comp (16 or 8); 0 when there is none (or the
  // build's glslc could not compile the shader).
  uint32_t coopmat_n() const { return coopmat_n_; }
  // Whether that GEMM runs on VK_KHR_cooperative_matrix (matmul_gemm_cm.comp's "_khr" variants:
  // 16 x 16 x 16) rather than the NV extension.
  bool coopmat_khr() const { return coopmat_khr_; }
  // The workgroup-scope cooperative-matrix GEMM (matmul_gemm_cm2.comp, VK_NV_cooperative_matrix2)
  // enabled on this device, with its tile and workgroup size; bm == 0 when it is not.
  const Coopmat2Config& coopmat2() const { return coopmat2_; }
  // VK_KHR_workgroup_memory_explicit_layout (with 16-bit access) enabled next to the NV
  // cooperative matrices: the coopmat GEMM then writes its f16 shared tiles 8 halves at a time
  // (its "_sb" variants). ES_VK_SHARED_BLOCK=0 leaves it off.
  bool shared_blocks() const { return shared_blocks_; }
  // ES_VK_PIPELINE_STATS=1 on a device with VK_KHR_pipeline_executable_properties: every
  // pipeline is created capturing its statistics, printed to stderr (registers, ...).
  bool pipeline_stats() const { return pipeline_stats_; }
  // f16 math: prefill GEMMs round activations to f16 and run on the cooperative-matrix path
  // where the device has one. ES_VK_F16_ACT: auto = on where a coopmat GEMM exists; 0 / 1.
  bool f16_math() const { return f16_math_; }
  // The knobs (tuning.h), read by the ops when a graph is recorded.
  const Tuning& tuning() const { return tuning_; }
  // Every memory pool's blocks and live bytes on this device (MemoryPool keeps it).
  MemoryLedger& ledger() { return ledger_; }
  const MemoryLedger& ledger() const { return ledger_; }
  // Replaces the knobs read at graph build; those read at device creation (and the process
  // ones) must be unchanged, else es::Error naming the first that differs.
  void Retune(const Tuning& t);

  // Records with `fn` into a one-time command buffer, submits and waits.
  template <class Fn>
  void RunOnce(Fn&& fn) {
    VkCommandBuffer cb = BeginOnce();
    fn(cb);
    EndOnceAndWait(cb);
  }
  // Submits `cb` and waits on its completion.
  void SubmitAndWait(VkCommandBuffer cb);

 private:
  VkCommandBuffer BeginOnce();
  void EndOnceAndWait(VkCommandBuffer cb);
  // ---- creation, in the order the constructor runs them ----
  // The feature structures and extensions vkCreateDevice gets, chained through pNext
  // (device.cpp; built in place, never copied).
  struct Features;
  // The cooperative-matrix GEMMs (NV subgroup scope, KHR, NV workgroup scope) the device and
  // the knobs allow: sets coopmat_n_, coopmat_khr_, coopmat2_ and their features.
  void EnableCoopmat(Features& f);
  // Integer dot products (the int8 GEMV of block-quantized weights, matmul_gemv.comp IDOT).
  void EnableIntDot(Features& f);
  // Explicit shared-memory layout for the coopmat GEMM's f16 tiles: sets shared_blocks_.
  void EnableSharedBlocks(Features& f);
  // Pipeline statistics (ES_VK_PIPELINE_STATS=1): sets pipeline_stats_.
  void EnablePipelineStats(Features& f);
  // The device with those features, its queue, command pool and fence.
  void CreateDevice(Features& f);

  VkPhysicalDevice physical_ = VK_NULL_HANDLE;
  VkDevice device_ = VK_NULL_HANDLE;  // owned
  VkQueue queue_ = VK_NULL_HANDLE;
  uint32_t queue_family_ = 0;
  VkCommandPool pool_ = VK_NULL_HANDLE;  // owned
  VkFence fence_ = VK_NULL_HANDLE;       // owned; for SubmitAndWait
  VulkanDeviceInfo info_;
  VkPhysicalDeviceMemoryProperties mem_props_{};
  uint64_t min_storage_alignment_ = 16;
  uint32_t timestamp_valid_bits_ = 0;
  uint32_t coopmat_n_ = 0;
  bool coopmat_khr_ = false;
  Coopmat2Config coopmat2_;
  bool shared_blocks_ = false;
  bool pipeline_stats_ = false;
  bool f16_math_ = false;
  Tuning tuning_;
  MemoryLedger ledger_;
};

}  // namespace es::vk
