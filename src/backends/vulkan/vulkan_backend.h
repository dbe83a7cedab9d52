// The Vulkan backend (Backend implementation). A graph shape is compiled once into a Program:
// activations planned into arenas from tensor lifetimes, a batch buffer for the per-token
// tables (token ids, positions, slots, out rows, rope cos/sin), one descriptor set per dispatch,
// and one command buffer recorded once and re-submitted for every later token of that shape.
// Internal header: tests use it for the tuning knobs and counters.
#pragma once

#include <list>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "command.h"
#include "descriptors.h"
#include "device.h"
#include "edgeseek/internal/backends/backend.h"
#include "kv_storage.h"
#include "memory.h"
#include "ops/op_context.h"
#include "pipeline_cache.h"
#include "weights.h"

namespace es::vk {

struct VulkanTuning {
  PoolLimits weights, activations, kv;
  // Recorded graph shapes kept: at least max_programs (most recently used), more while their
  // activation arenas fit the program budget (VulkanBackend: min(2 GiB, device-local heap / 16))
  // up to kMaxPrograms: a head split records two graphs a layer for every row count.
  size_t max_programs = 8;
  uint64_t program_budget = 0;  // bytes; 0: min(2 GiB, the largest device-local heap / 16)
  // The knobs (tuning.h): those set here (Tuning::Set) win over the environment, which the
  // backend parses once when it is created; the rest keep their defaults.
  Tuning knobs;
};

struct VulkanCounters {
  int programs_built = 0;     // graph shapes compiled (descriptors allocated, command recorded)
  int submits = 0;            // command-buffer submissions
  int pipelines_created = 0;  // pipelines built by this process (the rest came from the map)
  int barriers = 0;           // barriers in the last recorded program
  int dispatches = 0;         // dispatches in the last recorded program
  std::vector<std::string> shaders;  // its dispatches' shader variants, in order
  std::vector<int> steps;            // the barrier step each of them runs in
};

class VulkanBackend final : public Backend {
 public:
  VulkanBackend(const BackendOptions& opts, const VulkanTuning& tuning);
  ~VulkanBackend() override;
  std::string name() const override { return "vulkan"; }
  // f16 on every GPU: half the bytes of f32 per token, read at the same speed (issue 17).
  DType default_kv_type() const override { return DType::kF16; }
  std::string description() const override;
  bool Supports(const Graph& g, const Node& n) const override;
  void PrepareWeight(const Tensor& w) override;
  void PrepareGraph(const Graph& g) override;
  std::unique_ptr<KvStorage> CreateKv(const KvSpec& spec, int n_slots, int64_t capacity) override;
  std::unique_ptr<KvStorage> CreatePagedKv(const KvSpec& spec, int n_slots, int64_t capacity,
                                           int64_t n_blocks) override;
  void Compute(const Graph& g, const Batch& batch, KvStorage& kv, float* out,
               ComputeStats* stats = nullptr) override;
  size_t peak_bytes() const override;
  BackendMemory memory() const override;

  // Runs the graph; the argmax of each output row is computed on the device (only the ids come
  // back).
  void ComputeArgmax(const Graph& g, const Batch& batch, KvStorage& kv, int32_t* ids,
                     ComputeStats* stats = nullptr) override;
  // Sampling on the device (sample.comp): only the ids come back.
  bool device_sampling() const override { return true; }
  void ComputeSample(const Graph& g, const Batch& batch, KvStorage& kv, const RowSampling* rows,
                     int32_t* ids, ComputeStats* stats = nullptr) override;
  VulkanCounters counters() const;
  // The last recorded program's dispatches, in their recorded order (tests check the order).
  const std::vector<Dispatch>& last_dispatches() const;
  // The effective knobs (environment and VulkanTuning::knobs over the defaults).
  const Tuning& tuning() const { return dev_->tuning(); }
  // Replaces the knobs read at graph build (Device::Retune) and drops the recorded programs, so
  // that the next step records with them; a knob read at device creation that differs throws.
  void Retune(const Tuning& t);
  Device& device() { return *dev_; }
  PipelineCache& pipelines() { return *pipes_; }

 private:
  struct Program;
  Program& GetProgram(const Graph& g, const Batch& batch, VkKv& kv, int mode);
  void ClearPrograms();  // every recorded program (a stale weight, new knobs)
  // Build's phases: the batch buffer's layout, the result's dispatches (argmax, sampling).
  void LayoutBatch(Program* p, const Graph& g, const Batch& b, VkKv& kv, bool mla_expand);
  BufRange RecordResult(Program* p, OpContext& c, BufRange last, int mode);
  std::unique_ptr<Program> Build(const Graph& g, const Batch& batch, VkKv& kv, int mode,
                                 uint64_t key);
  void Run(Program& p, const Batch& batch, VkKv& kv, void* out, ComputeStats* stats,
           const RowSampling* rows = nullptr);

  BackendOptions opts_;
  VulkanTuning tuning_;
  std::shared_ptr<Device> dev_;  // shared with KV caches; destroyed last
  std::unique_ptr<PipelineCache> pipes_;
  std::unique_ptr<MemoryPool> weight_pool_, act_pool_, host_pool_, readback_pool_;
  std::shared_ptr<StagingRing> staging_;  // shared with KV caches
  std::unique_ptr<WeightStore> weights_;
  std::list<std::unique_ptr<Program>> programs_;  // most recently used first
  uint64_t program_bytes_ = 0;   // the kept programs' activation arenas and buffers
  uint64_t program_budget_ = 0;  // keep more than max_programs while program_bytes_ fits it
  static constexpr size_t kMaxPrograms = 1024;
  // Graphs (version, and the data pointers of their weights then) whose weights were checked
  // against stale device copies (WeightStore::DropStale), with their nodes' hash: most recent
  // first.
  struct SeenGraph {
    uint64_t version = 0, nodes_hash = 0;
    std::vector<const void*> weight_data;
  };
  std::vector<SeenGraph> seen_graphs_;
  static constexpr size_t kMaxSeenGraphs = 1024;  // as many as programs can be kept
  std::vector<const void*> weight_data_;          // GetProgram's scratch (no allocation per step)
  int programs_built_ = 0, submits_ = 0;
  double build_s_ = 0;  // time spent in Build (programs_built_ of them)
  // With BackendOptions::profile: the split of every Run, summed per phase (0 = decode, T == 1;
  // 1 = prefill) and printed to stderr when the backend goes away.
  struct PhaseProfile {
    int runs = 0;
    int64_t tokens = 0;
    double upload_s = 0, submit_s = 0, gpu_span_s = 0, idle_s = 0, download_s = 0;
    int dispatches = 0, barriers = 0;
    std::map<std::string, double> family_s;  // shader time per op family
    // Per dispatch kind (node name with its layer number as '*', and the shader): shader time,
    // dispatches, and the bytes of a GEMV's weights (binding 0), for its bandwidth.
    struct Kind {
      double s = 0, weight_bytes = 0;
      int count = 0;
    };
    std::map<std::string, Kind> kinds;
  };
  PhaseProfile profile_[2];
  void PrintProfile() const;
  uint64_t kv_peak_ = 0;
};

std::unique_ptr<Backend> CreateVulkanBackendTuned(const BackendOptions& opts,
                                                  const VulkanTuning& tuning);

}  // namespace es::vk
