// Runner: a model on a backend with a KV cache of `n_slots` sequences. The one primitive the
// generator, the benchmark and the server's continuous batching all build on: a forward pass
// over a Batch that may mix prefill chunks and decode steps of different sequences.
//
//   Runner r(model, CreateBackend("cpu", {}), {.n_slots = 8, .context = 4096});
//   int s = r.AcquireSlot();
//   Batch b; b.Add(s, /*pos0=*/0, prompt_ids); b.Finalize();
//   std::vector<float> logits;   // [b.out_rows.size(), vocab]
//   r.Forward(b, &logits);
//
// Thread-compatibility: one thread drives a Runner at a time (the server's engine loop).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "edgeseek/internal/backends/backend.h"
#include "edgeseek/internal/runtime/micro_batch.h"
#include "edgeseek/internal/runtime/model.h"

namespace es {

class PipelineStage;  // edgeseek/internal/runtime/pipeline.h
class DeviceThreads;  // edgeseek/internal/runtime/device_threads.h

struct RunnerOptions {
  int n_slots = 1;      // sequences whose KV caches live at once
  int64_t context = 0;  // tokens per slot (0: min(model max, 4096))
  // KV cache type: f32, f16, q8_0 or q4_0 (ParseKvType); unset: the backend's default
  // (Backend::default_kv_type: f16 on GPUs).
  std::optional<DType> kv_dtype;
  // Bytes of the KV pool (whole blocks of kKvBlockTokens tokens, at least one); 0: n_slots x
  // context. A pool smaller than that is shared: a caller maps blocks to slots (SetBlockTable,
  // the engine does) — slots left on their initial blocks beyond the pool have none.
  size_t kv_memory_bytes = 0;
  // Layer split: a forward of at least twice this many rows runs as micro-batches of at least
  // this many (micro_batch.h), so the stages compute side by side; head split with a GPU among its
  // devices: one of at least four times this many in chunks of at least twice this many, so the
  // host sums one chunk while the devices compute the next (head_split.h); 0: never.
  int micro_batch_rows = kMicroBatchRows;
};

// The one parser of a KV cache type (--kv-type, the server's kv_type): "f32", "f16", "q8_0" or
// "q4_0" (case-insensitive); throws es::Error naming the text and the choices otherwise.
DType ParseKvType(std::string_view s);
// Throws es::Error, naming the model and the type, unless every row of the model's cache splits
// into whole blocks of `type` per head (q8_0 / q4_0: head dims, or MLA's latent and rope
// widths, multiples of 32).
void CheckKvType(const ModelConfig& config, const std::string& model_name, DType type);

class Runner {
 public:
  Runner(std::shared_ptr<const Model> model, std::unique_ptr<Backend> backend,
         const RunnerOptions& opts);
  // A layer-split runner (pipeline.h): stage front[i] runs layers [first_layers[i],
  // first_layers[i + 1]) (the first one embeds the tokens), in order, and `backend` runs layers
  // [first_layers.back(), n_layers), the final norm and lm_head over the rows they hand over;
  // first_layers has front.size() + 1 entries, first_layers[0] = 0, strictly increasing. Every
  // stage gets a cache of the same slots, context and blocks. Logits are those of the plain
  // runner (bit for bit on the CPU: the rows cross in f32).
  Runner(std::shared_ptr<const Model> model, std::vector<std::unique_ptr<PipelineStage>> front,
         std::vector<int> first_layers, std::unique_ptr<Backend> backend,
         const RunnerOptions& opts);
  ~Runner();

  // The stages before this runner's backend (none unless split), and the first layer of each
  // stage, this runner's last (pipeline.h).
  const std::vector<std::unique_ptr<PipelineStage>>& stages() const { return front_; }
  const std::vector<int>& stage_first_layers() const { return first_layers_; }
  // Forwards run as micro-batches (RunnerOptions::micro_batch_rows), since the runner was made.
  int64_t micro_batched_forwards() const { return micro_forwards_; }

  const Model& model() const { return *model_; }
  Backend& backend() { return *backend_; }
  int n_slots() const;
  int64_t context() const;
  DType kv_type() const { return kv_->spec().dtype; }
  size_t kv_bytes_per_token() const;
  size_t kv_bytes_total() const;
  // Paged KV (backend.h, KvStorage): blocks in the pool, whether tables may name any block.
  int64_t kv_blocks() const;
  bool kv_paged() const;
  void SetBlockTable(int slot, const std::vector<int32_t>& blocks);
  // Commits the cache memory of the slot's positions [0, tokens) (capped at the context) before
  // they are written (KvStorage::Reserve): Generate reserves prompt + max_new_tokens, so its
  // decode steps take no page faults for new cache pages. Split runners: this runner's own cache.
  void ReserveKv(int slot, int64_t tokens);
  const KvStorage& kv() const { return *kv_; }

  // Slots: a free slot id, or -1 when none is free. Releasing forgets the slot's cache.
  int AcquireSlot();
  void ReleaseSlot(int slot);
  int free_slots() const;

  // One forward pass. Each sequence's tokens go at positions [pos0, pos0+n) of its slot; the
  // cache must already hold positions [0, pos0). Writes logits of batch.out_rows (row-major
  // [out_rows, vocab]). Throws es::Error on an id outside the vocabulary or a slot overflow.
  void Forward(const Batch& batch, std::vector<float>* logits, ComputeStats* stats = nullptr);
  // Greedy step: like Forward, but only the argmax id of each output row comes back (computed on
  // the device by backends that can).
  void ForwardArgmax(const Batch& batch, std::vector<int32_t>* ids, ComputeStats* stats = nullptr);
  // Sampling step: output row r sampled by rows[r] (on the device where the backend can).
  void ForwardSample(const Batch& batch, const std::vector<RowSampling>& rows,
                     std::vector<int32_t>* ids, ComputeStats* stats = nullptr);

  // ---- decode groups in flight: micro-batches across steps (docs/scale.md) ----
  // A layer split whose last stage holds layers (not a head split), without a hidden sink:
  // Push may keep groups of disjoint sequences in flight, one a stage.
  bool pipelined() const;
  int pipeline_stages() const { return int(front_.size()) + 1; }
  int in_flight() const { return int(groups_.size()); }
  // Pushes `batch` (Finalize()d; no rows: nothing enters) into the first stage and runs every
  // group in flight one stage further, the stages side by side (one thread each, as
  // micro-batches do). The group that was on the last stage runs the head as `out` says
  // (`rows`: one RowSampling per output row for kSample) and leaves: then true, with its
  // logits ([out_rows, vocab]) in *logits or its ids in *ids. A group leaves S - 1 pushes after
  // it entered, in the order they entered. Groups hold disjoint sequences (their KV writes do
  // not meet) whose block tables stay set until they leave; Forward and its siblings refuse to
  // run while a group is in flight (push empty batches to drain). On an error every group in
  // flight is dropped.
  bool Push(const Batch& batch, HeadOutput out, const std::vector<RowSampling>& rows,
            std::vector<float>* logits, std::vector<int32_t>* ids, ComputeStats* stats = nullptr);
  // Forgets the groups in flight (their sequences are failed by the caller; what they wrote to
  // the caches is never read).
  void DropInFlight() { groups_.clear(); }
  // Pushes that ran two or more groups side by side, since the runner was made.
  int64_t overlapped_pushes() const { return overlapped_pushes_; }

  // Hidden states for a drafter that reads them (MtpDrafter). With a sink set, every forward
  // runs as two graphs, the model up to its final norm (ModelArch::BuildHidden) and the head over
  // those rows (BuildHead), and `sink(batch, hidden)` sees the normalized hidden state of every
  // batch row (hidden: [n_tokens, hidden_size]) in between. Logits, ids and the KV cache are
  // those of a plain forward. The rows re-enter the head graph as its input (Batch::input),
  // uploaded each step on a GPU. Null: plain.
  using HiddenSink = std::function<void(const Batch& batch, const float* hidden)>;
  void SetHiddenSink(HiddenSink sink);

 private:
  void Init(const RunnerOptions& opts);
  void CheckBatch(const Batch& batch) const;  // token ids, slots and context
  // What the last stage returns for the output rows: their logits, else their argmax ids
  // (rows null) or the ids sampled by rows.
  struct HeadOut {
    float* logits = nullptr;
    int32_t* ids = nullptr;
    const RowSampling* rows = nullptr;
  };
  void ComputeHead(const Graph& g, const Batch& run, const HeadOut& o, ComputeStats* stats);
  // One forward of a checked batch: as micro-batches (RunMicro) where MicroParts says so.
  void Run(const Batch& batch, const HeadOut& o, ComputeStats* stats);
  int MicroParts(const Batch& batch) const;  // 1: not cut
  // The stages as a wavefront over the batch's micro-batches, one thread a stage
  // (stage_threads_); the parts' outputs gathered into `o`.
  void RunMicro(const Batch& batch, int parts, const HeadOut& o, ComputeStats* stats);
  // Stage s of a layer split over `b` (the rows of stage s - 1 in `in`, null for the first): a
  // front stage writes its rows into *out, the last one runs its layers and the head into `o`
  // (b.input set to `in`); its timing is added to *stats (may be null). RunMicro and Push.
  void RunStage(size_t s, Batch& b, const float* in, std::vector<float>* out, const HeadOut& o,
                ComputeStats* stats);
  // Runs the front stages for `batch`; returns the batch for the last stage (the batch, with
  // the last stage's input rows when split).
  const Batch& RunFront(const Batch& batch, ComputeStats* stats);
  // The forward graph of a batch of this shape, built once per shape (ModelArch::Build depends
  // on a batch only through its row and output-row counts): a decode step no longer rebuilds
  // its ~800 nodes, ~320 us a step for a 28-layer model on this repository's CI machine
  // (bench/micro/graph_bench.cpp).
  // kind: 0 the whole forward (Build; split: BuildStage of the last stage's layers and the
  // head), 1 up to the final norm (BuildHidden), 2 the head over the batch's input rows
  // (BuildHead).
  const Graph& GraphFor(const Batch& batch, int kind = 0);
  // With a sink: runs the hidden graph, hands the rows to the sink and returns the head graph
  // with the batch to run it with (head_batch_: the batch, hidden_ as its input); else
  // GraphFor(batch).
  // With `stats`, the hidden graph's timing goes to hidden_stats_ (added after the head's).
  const Graph& Prepare(const Batch& batch, const Batch** run, ComputeStats* stats);
  struct ShapeGraph {
    int rows = 0, out_rows = 0, kind = 0;
    std::unique_ptr<const Graph> graph;
  };
  std::vector<ShapeGraph> graphs_;  // most recently used first, at most kMaxGraphs
  static constexpr size_t kMaxGraphs = 8;

  std::shared_ptr<const Model> model_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<KvStorage> kv_;
  std::vector<std::unique_ptr<PipelineStage>> front_;  // layer split: stages before backend_
  std::vector<int> first_layers_{0};                   // first layer of each stage, backend_'s last
  std::vector<float> stage_rows_[2];                   // [n_tokens, D]: rows between stages
  Batch last_batch_;                                   // the batch with the rows handed to backend_
  std::vector<bool> slot_used_;
  HiddenSink sink_;
  std::vector<float> hidden_;  // [n_tokens, hidden_size]: the last hidden graph's output
  Batch head_batch_;
  ComputeStats hidden_stats_;
  int micro_batch_rows_ = 0;
  int64_t micro_forwards_ = 0;
  // Micro-batched forwards: rows between stages, [stage][part % 2] (a stage writes part m while
  // the next reads part m - 1), and one thread a stage.
  std::vector<std::vector<float>> micro_rows_;
  std::unique_ptr<DeviceThreads> stage_threads_;
  // Push: the groups in flight, oldest (furthest along) first; a group's rows between its
  // stages ([n_tokens, D]: `in` read by its next stage, `out` written by it).
  struct Group {
    Batch batch;
    HeadOutput out = HeadOutput::kLogits;
    std::vector<RowSampling> rows;
    int stage = 0;  // the stage it runs next
    std::vector<float> in, out_rows;
  };
  std::vector<Group> groups_;
  int64_t overlapped_pushes_ = 0;
};

}  // namespace es
