// Layer split (pipeline parallelism): a model's decoder layers cut into contiguous ranges, one
// stage per device, run in order for every forward pass with the residual stream handed from
// one stage to the next as host rows (f32 [n_tokens, hidden_size]: downloaded from one device,
// uploaded into the next stage's kInput node, ModelArch::BuildStage).
//
//   stage 0        stage 1              ...  the Runner's own backend (last stage)
//   embed, layers  layers [b1, b2)           layers [bN, n_layers), model.norm, lm_head
//   [0, b1) ──rows──▶ ──rows──▶ ... ──rows──▶ logits / argmax / samples
//
// A stage is local (a Backend and the KV cache of its layers in this process: another Vulkan
// device, the same device opened twice, or the CPU) or remote (the same on another MPI rank,
// mpi_stage.h): the Runner sees one PipelineStage interface for both. Every stage's KV cache has
// the same slots, capacity and block count, so a block table applies to all of them alike.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "edgeseek/internal/backends/backend.h"

namespace es {

class Model;
class Runner;
struct RunnerOptions;

// What a stage holds: layers [layer0, layer1) (KV layers 0 .. layer1 - layer0 of its own cache)
// and the cache's shape, the same for every stage of a runner.
struct StageConfig {
  int layer0 = 0, layer1 = 0;
  int n_slots = 1;
  int64_t context = 0;
  int64_t kv_blocks = 0;  // blocks of the paged pool (Backend::CreatePagedKv)
  DType kv_type = DType::kF32;
};

class PipelineStage {
 public:
  virtual ~PipelineStage() = default;
  // "cpu", "vulkan:0", "rank 1 (cpu)": for messages and bench output.
  virtual std::string description() const = 0;
  // Prepares the stage's weights and makes its KV cache; once, before any Run.
  virtual void Start(const std::shared_ptr<const Model>& model, const StageConfig& cfg) = 0;
  // One forward of the stage's layers for `batch` (Finalize()d): `in` is the residual stream
  // after layer0 - 1 (f32 [n_tokens, D]; ignored by a stage with layer0 == 0, which embeds the
  // batch's tokens), `out` receives the stream after layer1 - 1 ([n_tokens, D]). `stats` (may be
  // null) receives the stage's timing.
  virtual void Run(const Batch& batch, const float* in, float* out, ComputeStats* stats) = 0;
  virtual void SetBlockTable(int slot, const int32_t* blocks, int n) = 0;
  virtual bool kv_paged() const = 0;
  virtual size_t kv_bytes() const = 0;
};

// A stage on `backend` in this process.
std::unique_ptr<PipelineStage> MakeLocalStage(std::unique_ptr<Backend> backend);

// Prepares the weights a graph reads on `backend`: PrepareGraph(g), then PrepareWeight for each of
// its kWeight tensors once (what a Runner does for the whole model, for one stage's graph).
void PrepareGraphWeights(Backend& backend, const Graph& g);

// The KV cache of one stage: the model's KV spec cut to the stage's layers, paged as cfg says.
std::unique_ptr<KvStorage> CreateStageKv(Backend& backend, const Model& model,
                                         const StageConfig& cfg);

// ---- choosing the split -----------------------------------------------------------------------
// Bytes each decoder layer costs a device: its weights (as loaded: quantized types count their
// blocks) plus its KV cache for `kv_tokens` tokens of type `kv_type`.
std::vector<double> LayerBytes(const Model& model, DType kv_type, int64_t kv_tokens);
// Bytes a stage holds besides its layers: the embedding table on the first, model.norm and the
// output matrix on the last (the tied table counted on both: each device keeps a copy).
double EmbedBytes(const Model& model);
double HeadBytes(const Model& model);

// First layer of each of `n_stages` stages (result[0] = 0, strictly increasing, every stage at
// least one layer), chosen so that each stage's bytes (LayerBytes plus EmbedBytes on the first
// and HeadBytes on the last) come as close as contiguous ranges allow to the same share of the
// total. Throws es::Error when the model has fewer layers than stages.
std::vector<int> SplitLayersByBytes(const std::vector<double>& layer_bytes, double first_extra,
                                    double last_extra, int n_stages);
// First layers from explicit counts ("10,18": stage i runs counts[i] layers); throws es::Error
// naming the text when a count is not a positive integer, or they do not sum to n_layers.
std::vector<int> SplitLayersByCounts(const std::string& counts, int n_layers, int n_stages);

// ---- devices -----------------------------------------------------------------------------------
// One entry of `--devices`: "cpu", or a Vulkan device (an index or a name substring). The same
// device may appear twice: it is opened twice, as two logical devices.
struct DeviceSpec {
  std::string backend;  // "cpu" or "vulkan"
  std::string device;   // the Vulkan device ("" for the CPU)
  std::string Label() const { return backend == "cpu" ? "cpu" : "vulkan:" + device; }
};
// "0,1", "cpu,0", "0,0": throws es::Error naming the item when one is empty.
std::vector<DeviceSpec> ParseDevices(const std::string& list);

// How a runner is spread over devices (the CLI's --devices / --split / --split-layers and the
// server's instance keys of the same names).
struct SplitOptions {
  std::string devices;          // "" : one device (the plain Runner)
  std::string split = "layer";  // "layer", or "head" (tensor parallel, head_split.h)
  std::string layer_counts;     // "" : by memory (SplitLayersByBytes), else SplitLayersByCounts
};

// The Runner of `model`: on `backend` (bo.device) alone; or, with split.devices, one stage per
// device in the list's order (the last one runs the head: ComputeArgmax/Sample happen there);
// or, under `mpirun -np N` (mpi_stage.h, rank 0, no --devices), one stage per rank with rank 0
// last. Layers go by memory unless split.layer_counts gives them. With split.split "head" and
// several devices: one head-split stage over every layer (head_split.h), the head on another
// instance of the first device. Throws es::Error for a bad device list, --split-layers with a
// head split, a head split under mpirun, or --devices under mpirun.
std::unique_ptr<Runner> MakeSplitRunner(std::shared_ptr<const Model> model,
                                        const std::string& backend, const BackendOptions& bo,
                                        const RunnerOptions& ro, const SplitOptions& split);

}  // namespace es
