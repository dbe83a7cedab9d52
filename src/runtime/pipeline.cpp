// Layer split: local stages, the choice of layer ranges, device lists, and the Runner factory that
// puts them (and MPI ranks, mpi_stage.cpp) together.
#include "edgeseek/internal/runtime/pipeline.h"

#include <algorithm>
#include <cmath>
#include <unordered_set>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/models/arch.h"
#include "edgeseek/internal/models/config.h"
#include "edgeseek/internal/runtime/head_split.h"
#include "edgeseek/internal/runtime/model.h"
#include "edgeseek/internal/runtime/mpi_stage.h"
#include "edgeseek/internal/runtime/runner.h"

namespace es {

// ---- local stage -------------------------------------------------------------------------------

void PrepareGraphWeights(Backend& backend, const Graph& g) {
  backend.PrepareGraph(g);
  std::unordered_set<const Tensor*> seen;
  for (const Node& n : g.nodes())
    if (n.op == Op::kWeight && seen.insert(n.weight).second) backend.PrepareWeight(*n.weight);
}

std::unique_ptr<KvStorage> CreateStageKv(Backend& backend, const Model& model,
                                         const StageConfig& cfg) {
  KvSpec spec = model.config().MakeKvSpec(cfg.kv_type);
  spec.n_layers = cfg.layer1 - cfg.layer0;
  return backend.CreatePagedKv(spec, cfg.n_slots, cfg.context, cfg.kv_blocks);
}

namespace {

class LocalStage : public PipelineStage {
 public:
  explicit LocalStage(std::unique_ptr<Backend> b) : backend_(std::move(b)) {}

  std::string description() const override { return backend_->description(); }

  void Start(const std::shared_ptr<const Model>& model, const StageConfig& cfg) override {
    ES_CHECK(cfg.layer0 < cfg.layer1, "a pipeline stage needs at least one layer (stage [",
             cfg.layer0, ", ", cfg.layer1, "))");
    model_ = model;
    cfg_ = cfg;
    Batch one;
    one.Add(0, 0, {0}, true);
    one.Finalize();
    PrepareGraphWeights(*backend_, GraphFor(one));
    kv_ = CreateStageKv(*backend_, *model_, cfg_);
  }

  void Run(const Batch& batch, const float* in, float* out, ComputeStats* stats) override {
    ES_ASSERT(kv_);
    const Graph& g = GraphFor(batch);
    if (cfg_.layer0 == 0) {
      backend_->Compute(g, batch, *kv_, out, stats);
      return;
    }
    staged_ = batch;  // reuses its vectors' capacity after the first step
    staged_.input = in;
    staged_.input_cols = model_->config().hidden_size;
    backend_->Compute(g, staged_, *kv_, out, stats);
  }

  void SetBlockTable(int slot, const int32_t* blocks, int n) override {
    kv_->SetBlockTable(slot, blocks, n);
  }
  bool kv_paged() const override { return kv_->paged(); }
  size_t kv_bytes() const override { return kv_->bytes(); }

 private:
  // One graph per row count (a stage's output is every row: out_rows do not shape it), most
  // recently used first, as Runner keeps its own.
  const Graph& GraphFor(const Batch& batch) {
    const int rows = batch.n_tokens();
    auto it = std::find_if(graphs_.begin(), graphs_.end(),
                           [&](const auto& s) { return s.first == rows; });
    if (it == graphs_.end()) {
      if (graphs_.size() == kMaxGraphs) graphs_.pop_back();
      graphs_.emplace_back(rows, std::make_unique<const Graph>(model_->arch().BuildStage(
                                     batch, cfg_.layer0, cfg_.layer1, /*head=*/false)));
      it = graphs_.end() - 1;
    }
    std::rotate(graphs_.begin(), it, it + 1);
    return *graphs_.front().second;
  }
  static constexpr size_t kMaxGraphs = 8;

  std::unique_ptr<Backend> backend_;
  std::shared_ptr<const Model> model_;
  StageConfig cfg_;
  std::unique_ptr<KvStorage> kv_;
  std::vector<std::pair<int, std::unique_ptr<const Graph>>> graphs_;
  Batch staged_;
};

// Weight bytes a graph reads, each tensor once, without `skip`.
double GraphWeightBytes(const Graph& g, const std::unordered_set<const Tensor*>& skip) {
  std::unordered_set<const Tensor*> seen;
  double s = 0;
  for (const Node& n : g.nodes())
    if (n.op == Op::kWeight && !skip.count(n.weight) && seen.insert(n.weight).second)
      s += double(n.weight->nbytes);
  return s;
}

Batch OneRow() {
  Batch b;
  b.Add(0, 0, {0}, true);
  b.Finalize();
  return b;
}

}  // namespace

std::unique_ptr<PipelineStage> MakeLocalStage(std::unique_ptr<Backend> backend) {
  return std::make_unique<LocalStage>(std::move(backend));
}

// ---- choosing the split ------------------------------------------------------------------------

std::vector<double> LayerBytes(const Model& model, DType kv_type, int64_t kv_tokens) {
  const ModelArch& a = model.arch();
  const int n = model.config().n_layers;
  KvSpec one = model.config().MakeKvSpec(kv_type);
  one.n_layers = 1;
  const double kv = double(one.BytesPerToken()) * double(kv_tokens);
  const Batch b = OneRow();
  const std::unordered_set<const Tensor*> skip{a.embedding()};
  std::vector<double> out(static_cast<size_t>(n));
  for (int l = 0; l < n; ++l)
    out[size_t(l)] = GraphWeightBytes(a.BuildStage(b, l, l + 1, false), skip) + kv;
  return out;
}

double EmbedBytes(const Model& model) { return double(model.arch().embedding()->nbytes); }

double HeadBytes(const Model& model) {
  const ModelArch& a = model.arch();
  const int n = model.config().n_layers;
  // The head stage's graph over no layers: model.norm and lm_head (the table, when tied).
  return GraphWeightBytes(a.BuildStage(OneRow(), n, n, true), {});
}

std::vector<int> SplitLayersByBytes(const std::vector<double>& layer_bytes, double first_extra,
                                    double last_extra, int n_stages) {
  const int n = int(layer_bytes.size());
  ES_CHECK(n_stages >= 1, "a split needs at least one device");
  ES_CHECK(n >= n_stages, "cannot split a model of ", n, " layers over ", n_stages,
           " devices: each needs at least one layer");
  // Cuts chosen one after another: stage s ends where its running total comes closest to
  // s + 1 shares of the total, leaving at least one layer for each stage after it.
  double total = first_extra + last_extra;
  for (double b : layer_bytes) total += b;
  const double share = total / n_stages;
  std::vector<int> first{0};
  double acc = first_extra;
  int l = 0;
  for (int s = 0; s + 1 < n_stages; ++s) {
    const double target = share * (s + 1);
    const int max_end = n - (n_stages - 1 - s);  // layers left for the stages after s
    int end = l + 1;
    acc += layer_bytes[size_t(l)];
    while (end < max_end &&
           std::abs(acc + layer_bytes[size_t(end)] - target) <= std::abs(acc - target)) {
      acc += layer_bytes[size_t(end)];
      ++end;
    }
    first.push_back(end);
    l = end;
  }
  return first;
}

std::vector<int> SplitLayersByCounts(const std::string& counts, int n_layers, int n_stages) {
  std::vector<int> first{0};
  size_t i = 0;
  int sum = 0;
  while (i <= counts.size()) {
    size_t j = counts.find(',', i);
    if (j == std::string::npos) j = counts.size();
    const std::string item = counts.substr(i, j - i);
    size_t used = 0;
    int v = 0;
    try {
      v = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    ES_CHECK(used == item.size() && !item.empty() && v > 0, "--split-layers '", counts, "': '",
             item, "' is not a positive layer count");
    sum += v;
    first.push_back(sum);
    i = j + 1;
  }
  first.pop_back();  // the last stage's end is n_layers
  ES_CHECK(int(first.size()) == n_stages, "--split-layers '", counts, "' gives ", first.size(),
           " stages for ", n_stages, " devices");
  ES_CHECK(sum == n_layers, "--split-layers '", counts, "' covers ", sum,
           " layers, but the model has ", n_layers);
  return first;
}

// ---- devices -----------------------------------------------------------------------------------

std::vector<DeviceSpec> ParseDevices(const std::string& list) {
  std::vector<DeviceSpec> out;
  size_t i = 0;
  while (i <= list.size()) {
    size_t j = list.find(',', i);
    if (j == std::string::npos) j = list.size();
    std::string item = list.substr(i, j - i);
    while (!item.empty() && item.back() == ' ') item.pop_back();
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    ES_CHECK(!item.empty(), "--devices '", list,
             "': an empty device (expected a list like cpu,0 or 0,1)");
    if (item == "cpu")
      out.push_back({"cpu", ""});
    else
      out.push_back({"vulkan", item});
    i = j + 1;
  }
  return out;
}

// ---- the runner factory ------------------------------------------------------------------------

std::unique_ptr<Runner> MakeSplitRunner(std::shared_ptr<const Model> model,
                                        const std::string& backend, const BackendOptions& bo,
                                        const RunnerOptions& ro, const SplitOptions& split) {
  ES_CHECK(split.split == "layer" || split.split == "head", "--split '", split.split,
           "': expected layer or head");
  std::vector<std::unique_ptr<PipelineStage>> front = ClaimMpiStages();
  std::unique_ptr<Backend> last;
  if (!front.empty()) {
    ES_CHECK(split.devices.empty(), "--devices ", split.devices,
             " under mpirun: each rank runs on its own --backend/--device; split over ranks or "
             "over devices, not both");
    ES_CHECK(split.split == "layer",
             "--split head over MPI ranks is not built: ranks split the model by layer");
    last = CreateBackend(backend, bo);
  } else if (!split.devices.empty()) {
    const std::vector<DeviceSpec> devs = ParseDevices(split.devices);
    if (devs.size() == 1) {  // one device: the plain runner on it
      BackendOptions o = bo;
      o.device = devs[0].device;
      return std::make_unique<Runner>(std::move(model), CreateBackend(devs[0].backend, o), ro);
    }
    if (split.split == "head") {
      // One tensor-parallel stage over every layer; the head on another instance of the first
      // device (head_split.h).
      ES_CHECK(split.layer_counts.empty(), "--split-layers ", split.layer_counts,
               " goes with --split layer (a head split runs every layer on every device)");
      std::vector<std::unique_ptr<Backend>> shards;
      for (const DeviceSpec& d : devs) {
        BackendOptions o = bo;
        o.device = d.device;
        shards.push_back(CreateBackend(d.backend, o));
      }
      BackendOptions o = bo;
      o.device = devs[0].device;
      auto head = CreateBackend(devs[0].backend, o);
      // Chunks of twice a micro-batch's rows where a device is a GPU, whose thread idles while
      // it computes; CPU devices share the host's cores with the sum, and every chunk reads and
      // unpacks every weight again: there chunks lost 4-22% (docs/scale.md).
      const bool gpu = std::any_of(devs.begin(), devs.end(),
                                   [](const DeviceSpec& d) { return d.backend != "cpu"; });
      front.push_back(MakeHeadSplitStage(std::move(shards), gpu ? 2 * ro.micro_batch_rows : 0));
      const int n_layers = model->config().n_layers;
      return std::make_unique<Runner>(std::move(model), std::move(front),
                                      std::vector<int>{0, n_layers}, std::move(head), ro);
    }
    for (size_t i = 0; i < devs.size(); ++i) {
      BackendOptions o = bo;
      o.device = devs[i].device;
      auto b = CreateBackend(devs[i].backend, o);
      if (i + 1 < devs.size())
        front.push_back(MakeLocalStage(std::move(b)));
      else
        last = std::move(b);
    }
  } else {
    if (!split.layer_counts.empty())
      Fail("--split-layers ", split.layer_counts, " needs --devices (or mpirun -np N)");
    return std::make_unique<Runner>(std::move(model), CreateBackend(backend, bo), ro);
  }
  const int n_stages = int(front.size()) + 1, n_layers = model->config().n_layers;
  std::vector<int> first;
  if (!split.layer_counts.empty()) {
    first = SplitLayersByCounts(split.layer_counts, n_layers, n_stages);
  } else {
    const int64_t ctx = ro.context > 0
                            ? ro.context
                            : std::min<int64_t>(model->config().max_position_embeddings, 4096);
    const DType kv = ro.kv_dtype.value_or(last->default_kv_type());
    first = SplitLayersByBytes(LayerBytes(*model, kv, int64_t(ro.n_slots) * ctx),
                               EmbedBytes(*model), HeadBytes(*model), n_stages);
  }
  return std::make_unique<Runner>(std::move(model), std::move(front), std::move(first),
                                  std::move(last), ro);
}

}  // namespace es
