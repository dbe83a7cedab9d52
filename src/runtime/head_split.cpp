// Head split: the tensor-parallel stage (head_split.h).
#include "edgeseek/internal/runtime/head_split.h"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <utility>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/models/arch.h"
#include "edgeseek/internal/models/config.h"
#include "edgeseek/internal/runtime/device_threads.h"
#include "edgeseek/internal/runtime/micro_batch.h"
#include "edgeseek/internal/runtime/model.h"

namespace es {
namespace {

Batch OneRow() {
  Batch b;
  b.Add(0, 0, {0}, true);
  b.Finalize();
  return b;
}

class HeadSplitStage : public PipelineStage {
 public:
  HeadSplitStage(std::vector<std::unique_ptr<Backend>> backends, int chunk_rows)
      : chunk_rows_(chunk_rows) {
    ES_CHECK(backends.size() >= 2, "a head split needs at least two devices");
    for (auto& b : backends) devs_.push_back({std::move(b), nullptr, nullptr, {}, {}});
  }

  std::string description() const override {
    std::string d = "head split:";
    for (size_t i = 0; i < devs_.size(); ++i) {
      const Dev& v = devs_[i];
      d += (i ? " | " : " ");
      if (v.shard)
        d += "heads " + std::to_string(v.shard->head0) + "-" + std::to_string(v.shard->head1 - 1) +
             (v.shard->spec.expert1 > v.shard->spec.expert0
                  ? ", experts " + std::to_string(v.shard->spec.expert0) + "-" +
                        std::to_string(v.shard->spec.expert1 - 1)
                  : std::string()) +
             " on ";
      d += v.backend->description();
    }
    return d;
  }

  void Start(const std::shared_ptr<const Model>& model, const StageConfig& cfg) override {
    model_ = model;
    const ModelConfig& c = model_->config();
    ES_CHECK(cfg.layer0 == 0 && cfg.layer1 == c.n_layers, "a head split runs every layer (got [",
             cfg.layer0, ", ", cfg.layer1, ") of ", c.n_layers, ")");
    const int n = int(devs_.size()), E = c.n_routed_experts;
    try {
      // Experts by range where every device runs a range, else all on the first device.
      MakeShards(E >= n ? E : 0);
      if (E >= n && !AllSupported(/*moe_only=*/true)) MakeShards(0);
    } catch (const Error& e) {
      Fail("model '", model_->name(), "': ", e.what());
    }
    ES_CHECK(AllSupported(false), "head split: ", unsupported_);
    const Batch one = OneRow();
    const ModelArch& a = model_->arch();
    for (size_t d = 0; d < devs_.size(); ++d) {
      Dev& v = devs_[d];
      if (d == 0) PrepareGraphWeights(*v.backend, a.BuildStage(one, 0, 0, false));
      for (int l = 0; l < c.n_layers; ++l)
        for (bool ffn : {false, true})
          PrepareGraphWeights(*v.backend, a.BuildShardBlock(*v.shard, one, l, ffn));
      v.kv = v.backend->CreatePagedKv(a.ShardKvSpec(*v.shard, cfg.kv_type), cfg.n_slots,
                                      cfg.context, cfg.kv_blocks);
    }
  }

  void Run(const Batch& batch, const float* in, float* out, ComputeStats* stats) override {
    ES_ASSERT(devs_[0].kv);
    const size_t n = size_t(batch.n_tokens()) * size_t(model_->config().hidden_size);
    ComputeStats st;
    // x, the residual stream, lives in `out` from the embedding to the last block.
    devs_[0].backend->Compute(*GraphsFor(batch).embed, batch, *devs_[0].kv, out,
                              stats ? &st : nullptr);
    if (stats) stats->Add(st);
    for (auto& v : devs_) v.part.resize(n);
    if (!threads_) threads_ = std::make_unique<DeviceThreads>(devs_.size());
    const int chunks = MicroBatchParts(batch.n_tokens(), chunk_rows_, kMaxChunks);
    if (chunks > 1)
      RunChunks(SplitMicroBatches(batch, chunks), out, stats);
    else
      RunBlocks(batch, out, stats);
  }

  int64_t chunked_forwards() const { return chunked_forwards_; }
  int64_t reduces() const { return reduces_; }
  int64_t overlapped_reduces() const { return overlapped_reduces_; }

  void SetBlockTable(int slot, const int32_t* blocks, int n) override {
    for (auto& v : devs_) v.kv->SetBlockTable(slot, blocks, n);
  }
  bool kv_paged() const override {
    bool paged = true;
    for (const auto& v : devs_) paged = paged && v.kv->paged();
    return paged;
  }
  size_t kv_bytes() const override {
    size_t b = 0;
    for (const auto& v : devs_) b += v.kv->bytes();
    return b;
  }

 private:
  struct Dev {
    std::unique_ptr<Backend> backend;
    std::unique_ptr<ArchShard> shard;  // its weights (views and copies of the model's)
    std::unique_ptr<KvStorage> kv;     // its kv heads of every layer (MLA: the whole latent)
    std::vector<float> part;           // [n_tokens, D]: its last block's output
    ComputeStats stats;                // its last block's
  };
  // The graphs of one row count: the embedding (device 0), then per device the blocks of every
  // layer in order (attention, FFN).
  struct RowGraphs {
    int rows = 0;
    std::unique_ptr<const Graph> embed;
    std::vector<std::vector<std::unique_ptr<const Graph>>> blocks;  // [device][2 * layer + ffn]
  };

  // The all-reduce of elements [begin, end) of x: shard 0's part (which carries x), then the
  // others' partial sums added in device order (the same sums in the same order every run).
  void Reduce(float* out, size_t begin, size_t end) const {
    std::copy_n(devs_[0].part.data() + begin, end - begin, out + begin);
    for (size_t d = 1; d < devs_.size(); ++d) {
      const float* p = devs_[d].part.data();
      for (size_t i = begin; i < end; ++i) out[i] += p[i];
    }
  }

  // The whole batch block by block: the devices' shards of block b side by side, each into its
  // own part, then the host sums them (small steps: decode, short prompts).
  void RunBlocks(const Batch& batch, float* out, ComputeStats* stats) {
    const RowGraphs& s = GraphsFor(batch);
    staged_ = batch;  // reuses its vectors' capacity after the first step
    staged_.input = out;
    staged_.input_cols = model_->config().hidden_size;
    const size_t n = devs_[0].part.size();
    for (size_t b = 0; b < s.blocks[0].size(); ++b) {
      threads_->Run([&](size_t d) {
        Dev& v = devs_[d];
        v.stats = {};
        v.backend->Compute(*s.blocks[d][b], staged_, *v.kv, v.part.data(),
                           stats ? &v.stats : nullptr);
      });
      if (stats)
        for (const Dev& v : devs_) stats->Add(v.stats);
      Reduce(out, 0, n);
    }
  }

  // Where a chunked forward stands (RunChunks), guarded by mu.
  struct Flow {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<int> summed;  // [chunk]: its blocks whose sum is in x
    std::vector<int> parts;   // [chunk]: device parts computed, over all its blocks
    int computing = 0;        // devices inside Compute now
    bool failed = false;      // a thread threw: the others stop waiting
  };

  // The rows cut into chunks (micro_batch.h) and run as a wavefront: each device computes its
  // shard of block b for chunk 0, 1, ..., M - 1, then block b + 1 for chunk 0, ..., never
  // waiting for the other devices except where chunk m's block b needs the sum of its block
  // b - 1; the host (a thread beside the devices) sums chunk m's parts of block b as soon as
  // every device has computed it, while the devices go on with chunk m + 1. Chunks are row
  // ranges in causal order: chunk m's attention at layer l reads the keys that chunks before it
  // wrote at layer l on the same device, which it computed first. Chunk m's rows of a part are
  // written by its block b, read by its sum, and written again by its block b + 1 only after
  // that sum is in; chunk m's rows of x likewise. The sums are RunBlocks' element by element.
  void RunChunks(std::vector<MicroBatch> mbs, float* out, ComputeStats* stats) {
    const size_t M = mbs.size(), N = devs_.size(), D = size_t(model_->config().hidden_size);
    const size_t B = 2 * size_t(model_->config().n_layers);
    // Each chunk's block graphs [device][block] (the graphs themselves outlive GraphsFor's
    // reordering of shapes_: at most two row counts here, fewer than kMaxShapes).
    std::vector<std::vector<const Graph*>> g(M);
    for (size_t m = 0; m < M; ++m) {
      mbs[m].batch.input = out + size_t(mbs[m].row0) * D;
      mbs[m].batch.input_cols = int64_t(D);
      const RowGraphs& s = GraphsFor(mbs[m].batch);
      for (size_t d = 0; d < N; ++d)
        for (size_t b = 0; b < B; ++b) g[m].push_back(s.blocks[d][b].get());
    }
    Flow f;
    f.summed.assign(M, 0);
    f.parts.assign(M, 0);
    for (Dev& v : devs_) v.stats = {};
    if (!host_) host_ = std::make_unique<DeviceThreads>(2);
    ++chunked_forwards_;
    // Slot 0 (this thread) runs the devices, slot 1 sums.
    host_->Run([&](size_t k) {
      if (k == 1) return SumChunks(mbs, f, out);
      threads_->Run([&](size_t d) {
        Guarded(f, [&] {
          Dev& v = devs_[d];
          std::unique_lock<std::mutex> lock(f.mu);
          for (size_t b = 0; b < B; ++b)
            for (size_t m = 0; m < M; ++m) {
              f.cv.wait(lock, [&] { return f.failed || f.summed[m] >= int(b); });
              if (f.failed) return;
              ++f.computing;
              lock.unlock();
              ComputeStats one;
              v.backend->Compute(*g[m][d * B + b], mbs[m].batch, *v.kv,
                                 v.part.data() + size_t(mbs[m].row0) * D, stats ? &one : nullptr);
              if (stats) v.stats.Add(one);
              lock.lock();
              --f.computing;
              ++f.parts[m];
              f.cv.notify_all();
            }
        });
      });
    });
    if (stats)
      for (const Dev& v : devs_) stats->Add(v.stats);
  }

  // The host's side of RunChunks: chunk m's sum of block b once every device's part is in.
  void SumChunks(const std::vector<MicroBatch>& mbs, Flow& f, float* out) {
    const size_t M = mbs.size(), N = devs_.size(), D = size_t(model_->config().hidden_size);
    const int B = 2 * model_->config().n_layers;
    Guarded(f, [&] {
      std::unique_lock<std::mutex> lock(f.mu);
      for (int b = 0; b < B; ++b)
        for (size_t m = 0; m < M; ++m) {
          f.cv.wait(lock, [&] { return f.failed || f.parts[m] >= int(N) * (b + 1); });
          if (f.failed) return;
          ++reduces_;
          if (f.computing > 0) ++overlapped_reduces_;
          lock.unlock();
          Reduce(out, size_t(mbs[m].row0) * D, size_t(mbs[m].row0 + mbs[m].batch.n_tokens()) * D);
          lock.lock();
          f.summed[m] = b + 1;
          f.cv.notify_all();
        }
    });
  }

  // fn(), and on an exception the flow marked failed (so that no thread waits for one that
  // stopped) before it is rethrown.
  template <typename Fn>
  static void Guarded(Flow& f, const Fn& fn) {
    try {
      fn();
    } catch (...) {
      {
        std::lock_guard<std::mutex> lock(f.mu);
        f.failed = true;
      }
      f.cv.notify_all();
      throw;
    }
  }

  // Shards with routed experts spread evenly over the devices (experts > 0), or all on the
  // first device (experts == 0).
  void MakeShards(int experts) {
    const int n = int(devs_.size()), E = model_->config().n_routed_experts;
    for (int i = 0; i < n; ++i) {
      ShardSpec s;
      s.index = i, s.count = n;
      s.expert0 = experts ? E * i / n : 0;
      s.expert1 = experts ? E * (i + 1) / n : (i == 0 ? E : 0);
      devs_[size_t(i)].shard = model_->arch().MakeShard(s);
    }
  }

  // Whether every device runs every node of its blocks (moe_only: its kMoE nodes); the first
  // refusal is kept in unsupported_.
  bool AllSupported(bool moe_only) {
    const Batch one = OneRow();
    const ModelArch& a = model_->arch();
    for (const Dev& v : devs_)
      for (int l = 0; l < model_->config().n_layers; ++l)
        for (bool ffn : {false, true}) {
          if (moe_only && (!ffn || !v.shard->layers[size_t(l)].moe)) continue;
          const Graph g = a.BuildShardBlock(*v.shard, one, l, ffn);
          for (const Node& nd : g.nodes())
            if (nd.op != Op::kWeight && !v.backend->Supports(g, nd)) {
              unsupported_ = v.backend->description() + " cannot run '" + nd.name + "' (" +
                             OpName(nd.op) + (nd.op == Op::kMoE ? " over an expert range" : "") +
                             ")";
              return false;
            }
        }
    return true;
  }

  // One set of graphs per row count, most recently used first (as LocalStage keeps its own).
  const RowGraphs& GraphsFor(const Batch& batch) {
    const int rows = batch.n_tokens();
    auto it = std::find_if(shapes_.begin(), shapes_.end(),
                           [&](const RowGraphs& s) { return s.rows == rows; });
    if (it == shapes_.end()) {
      if (shapes_.size() == kMaxShapes) shapes_.pop_back();
      const ModelArch& a = model_->arch();
      RowGraphs s;
      s.rows = rows;
      s.embed = std::make_unique<const Graph>(a.BuildStage(batch, 0, 0, false));
      for (const Dev& v : devs_) {
        auto& list = s.blocks.emplace_back();
        for (int l = 0; l < model_->config().n_layers; ++l)
          for (bool ffn : {false, true})
            list.push_back(
                std::make_unique<const Graph>(a.BuildShardBlock(*v.shard, batch, l, ffn)));
      }
      shapes_.push_back(std::move(s));
      it = shapes_.end() - 1;
    }
    std::rotate(shapes_.begin(), it, it + 1);
    return shapes_.front();
  }
  static constexpr size_t kMaxShapes = 8;

  std::shared_ptr<const Model> model_;
  std::vector<Dev> devs_;
  std::unique_ptr<DeviceThreads> threads_;  // made by the first Run; joined before devs_ go
  std::unique_ptr<DeviceThreads> host_;     // RunChunks: the devices (slot 0) beside the sums
  int chunk_rows_ = 0;                      // rows a chunk keeps at least (0: never in chunks)
  static constexpr int kMaxChunks = 4;
  int64_t chunked_forwards_ = 0, reduces_ = 0, overlapped_reduces_ = 0;
  std::vector<RowGraphs> shapes_;
  Batch staged_;
  std::string unsupported_;
};

}  // namespace

std::unique_ptr<PipelineStage> MakeHeadSplitStage(std::vector<std::unique_ptr<Backend>> devices,
                                                  int chunk_rows) {
  return std::make_unique<HeadSplitStage>(std::move(devices), chunk_rows);
}

HeadSplitCounts GetHeadSplitCounts(const PipelineStage& stage) {
  const auto* s = dynamic_cast<const HeadSplitStage*>(&stage);
  if (!s) return {};
  return {s->chunked_forwards(), s->reduces(), s->overlapped_reduces()};
}

}  // namespace es
