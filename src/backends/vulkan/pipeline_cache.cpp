// Pipeline creation and the on-disk VkPipelineCache (see pipeline_cache.h).
#include "pipeline_cache.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "device.h"
#include "shader_registry.h"

namespace es::vk {
namespace {
// One stderr line per executable of `pipe`: "vulkan pipeline <shader>/<spec...>: Name value, ...".
void PrintStats(VkDevice d, VkPipeline pipe, const std::string& shader,
                const std::vector<uint32_t>& spec) {
  auto props = reinterpret_cast<PFN_vkGetPipelineExecutablePropertiesKHR>(
      vkGetDeviceProcAddr(d, "vkGetPipelineExecutablePropertiesKHR"));
  auto stats = reinterpret_cast<PFN_vkGetPipelineExecutableStatisticsKHR>(
      vkGetDeviceProcAddr(d, "vkGetPipelineExecutableStatisticsKHR"));
  if (!props || !stats) return;
  VkPipelineInfoKHR pi{VK_STRUCTURE_TYPE_PIPELINE_INFO_KHR};
  pi.pipeline = pipe;
  uint32_t ne = 0;
  if (props(d, &pi, &ne, nullptr) != VK_SUCCESS) return;
  std::string name = shader;
  for (uint32_t v : spec) name += "/" + std::to_string(v);
  for (uint32_t e = 0; e < ne; ++e) {
    VkPipelineExecutableInfoKHR ei{VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR};
    ei.pipeline = pipe;
    ei.executableIndex = e;
    uint32_t ns = 0;
    if (stats(d, &ei, &ns, nullptr) != VK_SUCCESS) continue;
    std::vector<VkPipelineExecutableStatisticKHR> st(
        ns, {VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR});
    if (stats(d, &ei, &ns, st.data()) != VK_SUCCESS) continue;
    std::string line;
    for (const auto& s : st) {
      line += line.empty() ? "" : ", ";
      line += s.name;
      switch (s.format) {
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR:
          line += s.value.b32 ? " yes" : " no";
          break;
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR:
          line += " " + std::to_string(s.value.i64);
          break;
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR:
          line += " " + std::to_string(s.value.u64);
          break;
        case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_FLOAT64_KHR:
          line += " " + std::to_string(s.value.f64);
          break;
        default:
          break;
      }
    }
    std::fprintf(stderr, "vulkan pipeline %s: %s\n", name.c_str(), line.c_str());
  }
}
std::string CacheDir(const Tuning& t) {
  if (!t.Text(Knob::kCacheDir).empty()) return t.Text(Knob::kCacheDir);
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/edgeseek";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/edgeseek";
  return "";
}
}  // namespace

PipelineCache::PipelineCache(Device& dev) : dev_(dev) {
  std::vector<char> data;
  const std::string dir = CacheDir(dev.tuning());
  if (!dir.empty()) {
    char name[96];
    std::snprintf(name, sizeof(name), "vk_pipelines_%04x_%04x.bin", dev.info().vendor_id,
                  dev.info().device_id);
    path_ = dir + "/" + name;
    std::ifstream f(path_, std::ios::binary);
    if (f) data.assign(std::istreambuf_iterator<char>(f), {});
  }
  VkPipelineCacheCreateInfo ci{VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO};
  ci.initialDataSize = data.size();
  ci.pInitialData = data.empty() ? nullptr : data.data();
  // The driver checks the header (vendor, device, cache UUID) and ignores stale data; a
  // corrupted file is retried empty.
  if (vkCreatePipelineCache(dev.handle(), &ci, nullptr, &cache_) != VK_SUCCESS) {
    ci.initialDataSize = 0;
    ci.pInitialData = nullptr;
    VK_CHECK(vkCreatePipelineCache(dev.handle(), &ci, nullptr, &cache_));
  } else {
    loaded_bytes_ = data.size();
  }
}

PipelineCache::~PipelineCache() {
  try {
    Save();
  } catch (...) {
    // A cache that cannot be written only costs the next start some time.
  }
  VkDevice d = dev_.handle();
  for (auto& [k, p] : pipelines_) {
    vkDestroyPipeline(d, p->pipeline, nullptr);
    vkDestroyPipelineLayout(d, p->layout, nullptr);
    vkDestroyDescriptorSetLayout(d, p->set_layout, nullptr);
  }
  vkDestroyPipelineCache(d, cache_, nullptr);
}

void PipelineCache::Save() {
  if (!dirty_ || path_.empty()) return;
  size_t n = 0;
  VK_CHECK(vkGetPipelineCacheData(dev_.handle(), cache_, &n, nullptr));
  std::vector<char> data(n);
  VK_CHECK(vkGetPipelineCacheData(dev_.handle(), cache_, &n, data.data()));
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path_).parent_path(), ec);
  const std::string tmp = path_ + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream f(tmp, std::ios::binary);
    if (!f) return;
    f.write(data.data(), std::streamsize(n));
  }
  std::filesystem::rename(tmp, path_, ec);  // atomic replace: concurrent processes are safe
  dirty_ = false;
}

const Pipeline& PipelineCache::Get(const std::string& shader, const std::vector<uint32_t>& counts,
                                   const std::vector<uint32_t>& spec) {
  std::string key = shader;
  for (uint32_t s : spec) key += "/" + std::to_string(s);
  auto it = pipelines_.find(key);
  if (it != pipelines_.end()) return *it->second;

  const EmbeddedShader* es = FindShader(shader);
  if (!es) Fail("vulkan: shader variant '", shader, "' is not in this build");
  VkDevice d = dev_.handle();
  auto p = std::make_unique<Pipeline>();
  p->name = key;
  p->binding_counts = counts;

  std::vector<VkDescriptorSetLayoutBinding> bindings(counts.size());
  for (size_t i = 0; i < counts.size(); ++i) {
    bindings[i].binding = uint32_t(i);
    bindings[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    bindings[i].descriptorCount = counts[i];
    bindings[i].stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
  }
  VkDescriptorSetLayoutCreateInfo dl{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
  dl.bindingCount = uint32_t(bindings.size());
  dl.pBindings = bindings.data();
  VK_CHECK(vkCreateDescriptorSetLayout(d, &dl, nullptr, &p->set_layout));
  VkPushConstantRange pc{VK_SHADER_STAGE_COMPUTE_BIT, 0, kPushBytes};
  VkPipelineLayoutCreateInfo pl{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
  pl.setLayoutCount = 1;
  pl.pSetLayouts = &p->set_layout;
  pl.pushConstantRangeCount = 1;
  pl.pPushConstantRanges = &pc;
  VK_CHECK(vkCreatePipelineLayout(d, &pl, nullptr, &p->layout));

  VkShaderModuleCreateInfo sm{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
  sm.codeSize = es->count * 4;
  sm.pCode = es->words;
  VkShaderModule module;
  VK_CHECK(vkCreateShaderModule(d, &sm, nullptr, &module), " for ", shader);
  std::vector<VkSpecializationMapEntry> entries(spec.size());
  for (size_t i = 0; i < spec.size(); ++i) entries[i] = {uint32_t(i), uint32_t(4 * i), 4};
  VkSpecializationInfo si{uint32_t(entries.size()), entries.data(), spec.size() * 4, spec.data()};
  VkComputePipelineCreateInfo ci{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
  ci.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
  ci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  ci.stage.module = module;
  ci.stage.pName = "main";
  ci.stage.pSpecializationInfo = spec.empty() ? nullptr : &si;
  ci.layout = p->layout;
  if (dev_.pipeline_stats()) ci.flags |= VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR;
  const VkResult r = vkCreateComputePipelines(d, cache_, 1, &ci, nullptr, &p->pipeline);
  vkDestroyShaderModule(d, module, nullptr);
  VK_CHECK(r, " for shader ", shader);
  if (dev_.pipeline_stats()) PrintStats(d, p->pipeline, shader, spec);
  ++created_;
  dirty_ = true;
  if (compiling_) compiling_->Add(1);
  return *(pipelines_[key] = std::move(p));
}

PipelineCache::CompileScope::CompileScope(PipelineCache& cache) : cache_(cache) {
  if (cache_.compiling_) return;
  progress_ = std::make_unique<Progress>("compiling pipelines", 0);
  cache_.compiling_ = progress_.get();
}

PipelineCache::CompileScope::~CompileScope() {
  if (progress_) cache_.compiling_ = nullptr;
}

}  // namespace es::vk
