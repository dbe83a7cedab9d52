// Compute pipelines, created once per (shader variant, specialization constants) and kept for
// the backend's life, over a VkPipelineCache stored on disk ($ES_VK_CACHE_DIR, else
// $XDG_CACHE_HOME/edgeseek, else ~/.cache/edgeseek) so that the driver's compiled code survives
// restarts. Every pipeline uses storage buffers only (binding i has counts[i] descriptors) and
// 128 bytes of push constants.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "edgeseek/internal/core/progress.h"
#include "vk_api.h"

namespace es::vk {

class Device;

struct Pipeline {
  std::string name;
  VkPipeline pipeline = VK_NULL_HANDLE;
  VkPipelineLayout layout = VK_NULL_HANDLE;
  VkDescriptorSetLayout set_layout = VK_NULL_HANDLE;
  std::vector<uint32_t> binding_counts;  // descriptors per binding
};

constexpr uint32_t kPushBytes = 128;

class PipelineCache {
 public:
  explicit PipelineCache(Device& dev);
  ~PipelineCache();  // saves the cache file
  // The pipeline of `shader` with these bindings and specialization constants (ids 0..n-1).
  const Pipeline& Get(const std::string& shader, const std::vector<uint32_t>& binding_counts,
                      const std::vector<uint32_t>& spec = {});
  void Save();
  // While one lives, each pipeline created counts on one progress line ("compiling pipelines",
  // core/progress.h): a backend holds one over a program's recording, where the first run on a
  // device (an empty cache file) compiles dozens, seconds on a phone-class GPU. An inner scope
  // adds to the outer one's line.
  class CompileScope {
   public:
    explicit CompileScope(PipelineCache& cache);
    ~CompileScope();
    CompileScope(const CompileScope&) = delete;
    CompileScope& operator=(const CompileScope&) = delete;

   private:
    PipelineCache& cache_;
    std::unique_ptr<Progress> progress_;  // null in an inner scope
  };
  int created() const { return created_; }               // pipelines built in this process
  size_t loaded_bytes() const { return loaded_bytes_; }  // cache data read from disk at start
  const std::string& path() const { return path_; }

 private:
  Device& dev_;
  VkPipelineCache cache_ = VK_NULL_HANDLE;                      // owned
  std::map<std::string, std::unique_ptr<Pipeline>> pipelines_;  // owned; key: name + spec
  std::string path_;
  size_t loaded_bytes_ = 0;
  int created_ = 0;
  bool dirty_ = false;
  Progress* compiling_ = nullptr;  // the outermost CompileScope's line, not owned
};

}  // namespace es::vk
