// Runner: model + backend + KV cache slots; one forward pass per Batch.
#include "edgeseek/internal/runtime/runner.h"

#include <algorithm>
#include <cctype>
#include <string>
#include <utility>

#include "edgeseek/internal/core/dtype.h"
#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/core/progress.h"
#include "edgeseek/internal/models/arch.h"
#include "edgeseek/internal/models/config.h"
#include "edgeseek/internal/runtime/device_threads.h"
#include "edgeseek/internal/runtime/micro_batch.h"
#include "edgeseek/internal/runtime/pipeline.h"

namespace es {

DType ParseKvType(std::string_view s) {
  std::string l(s);
  for (char& ch : l) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  for (DType t : {DType::kF32, DType::kF16, DType::kQ8_0, DType::kQ4_0})
    if (l == Name(t)) return t;
  Fail("unknown KV cache type '", s, "' (f32, f16, q8_0 or q4_0)");
}

void CheckKvType(const ModelConfig& c, const std::string& model_name, DType type) {
  ES_CHECK(
      type == DType::kF32 || type == DType::kF16 || type == DType::kQ8_0 || type == DType::kQ4_0,
      "KV cache type ", Name(type), " is not one of f32, f16, q8_0, q4_0");
  const int64_t blk = BlockElems(type);
  if (blk == 1) return;
  // Rows are quantized per head along their width: each head must be whole blocks.
  const auto check = [&](const char* what, int64_t w) {
    ES_CHECK(w % blk == 0, "model '", model_name, "': a ", Name(type), " KV cache needs ", what,
             " to be a multiple of ", blk, ", but it is ", w, " (use --kv-type f16 or f32)");
  };
  if (c.is_mla()) {
    check("the latent width (kv_lora_rank)", c.kv_lora_rank);
    check("the rope width (qk_rope_head_dim)", c.qk_rope_head_dim);
  } else {
    check("the head dim", c.head_dim);
  }
}

Runner::Runner(std::shared_ptr<const Model> model, std::unique_ptr<Backend> backend,
               const RunnerOptions& opts)
    : model_(std::move(model)), backend_(std::move(backend)) {
  Init(opts);
}

Runner::Runner(std::shared_ptr<const Model> model,
               std::vector<std::unique_ptr<PipelineStage>> front, std::vector<int> first_layers,
               std::unique_ptr<Backend> backend, const RunnerOptions& opts)
    : model_(std::move(model)),
      backend_(std::move(backend)),
      front_(std::move(front)),
      first_layers_(std::move(first_layers)) {
  Init(opts);
}

void Runner::Init(const RunnerOptions& opts) {
  const ModelConfig& c = model_->config();
  ES_CHECK(first_layers_.size() == front_.size() + 1 && first_layers_[0] == 0,
           "layer split: ", first_layers_.size(), " first layers for ", front_.size() + 1,
           " stages");
  for (size_t i = 0; i < front_.size(); ++i)
    ES_CHECK(first_layers_[i] < first_layers_[i + 1] && first_layers_[i + 1] <= c.n_layers,
             "layer split: stage ", i, " would run layers [", first_layers_[i], ", ",
             first_layers_[i + 1], ") of the model's ", c.n_layers);
  int64_t ctx =
      opts.context > 0 ? opts.context : std::min<int64_t>(c.max_position_embeddings, 4096);
  ES_CHECK(opts.n_slots >= 1, "runner needs at least one sequence slot");
  // The cache type first: a model whose rows do not split into its blocks fails before any
  // weight is prepared.
  const DType kv_type = opts.kv_dtype.value_or(backend_->default_kv_type());
  CheckKvType(c, model_->name(), kv_type);
  const KvSpec spec = c.MakeKvSpec(kv_type);
  const int64_t per_slot = (ctx + kKvBlockTokens - 1) / kKvBlockTokens;
  int64_t blocks = int64_t(opts.n_slots) * per_slot;
  if (opts.kv_memory_bytes > 0)
    blocks = std::max<int64_t>(
        1, int64_t(opts.kv_memory_bytes / (spec.BytesPerToken() * kKvBlockTokens)));
  Batch one;
  one.Add(0, 0, {0}, true);
  one.Finalize();
  if (front_.empty()) {
    // The one-row decode graph first (kept for the first step): it lets the backend prepare
    // weights that ops read together (stacked experts) before the tensors one by one.
    // Uploads (GPU), repacks or prefaults (CPU) every weight: a wait of seconds on a real model,
    // shown on a terminal (core/progress.h).
    uint64_t total = 0, done = 0;
    for (const Tensor* w : model_->weights()) total += w->nbytes;
    Progress progress("preparing weights (" + backend_->name() + ")", total,
                      Progress::Unit::kBytes);
    backend_->PrepareGraph(GraphFor(one));
    for (const Tensor* w : model_->weights()) {
      backend_->PrepareWeight(*w);
      progress.Set(done += w->nbytes, w->name);
    }
    kv_ = backend_->CreatePagedKv(spec, opts.n_slots, ctx, blocks);
  } else {
    // Each stage prepares only the weights of its own layers; all take the same cache shape.
    StageConfig sc;
    sc.n_slots = opts.n_slots, sc.context = ctx, sc.kv_blocks = blocks, sc.kv_type = kv_type;
    for (size_t i = 0; i < front_.size(); ++i) {
      sc.layer0 = first_layers_[i], sc.layer1 = first_layers_[i + 1];
      front_[i]->Start(model_, sc);
    }
    sc.layer0 = first_layers_.back(), sc.layer1 = c.n_layers;
    PrepareGraphWeights(*backend_, GraphFor(one));
    kv_ = CreateStageKv(*backend_, *model_, sc);
  }
  slot_used_.assign(size_t(opts.n_slots), false);
  micro_batch_rows_ = opts.micro_batch_rows;
}

Runner::~Runner() = default;

int Runner::n_slots() const { return kv_->n_slots(); }
int64_t Runner::context() const { return kv_->capacity(); }
size_t Runner::kv_bytes_per_token() const {
  return model_->config().MakeKvSpec(kv_type()).BytesPerToken();  // every stage's layers
}
size_t Runner::kv_bytes_total() const {
  size_t s = kv_->bytes();
  for (const auto& st : front_) s += st->kv_bytes();
  return s;
}

int64_t Runner::kv_blocks() const { return kv_->n_blocks(); }
bool Runner::kv_paged() const {
  bool paged = kv_->paged();
  for (const auto& st : front_) paged = paged && st->kv_paged();
  return paged;
}
void Runner::SetBlockTable(int slot, const std::vector<int32_t>& blocks) {
  for (const auto& st : front_) st->SetBlockTable(slot, blocks.data(), int(blocks.size()));
  kv_->SetBlockTable(slot, blocks.data(), int(blocks.size()));
}

void Runner::ReserveKv(int slot, int64_t tokens) {
  ES_CHECK(slot >= 0 && slot < n_slots(), "KV reserve: slot ", slot, " outside [0, ", n_slots(),
           ")");
  kv_->Reserve(slot, std::min(tokens, context()));
}

int Runner::AcquireSlot() {
  for (size_t i = 0; i < slot_used_.size(); ++i)
    if (!slot_used_[i]) {
      slot_used_[i] = true;
      return int(i);
    }
  return -1;
}

void Runner::ReleaseSlot(int slot) {
  ES_ASSERT(slot >= 0 && size_t(slot) < slot_used_.size());
  slot_used_[size_t(slot)] = false;
}

int Runner::free_slots() const {
  return int(std::count(slot_used_.begin(), slot_used_.end(), false));
}

void Runner::CheckBatch(const Batch& batch) const {
  const int64_t V = model_->vocab_size();
  for (int32_t id : batch.tokens)
    ES_CHECK(id >= 0 && id < V, "token id ", id, " is outside the vocabulary (", V, " tokens)");
  for (const BatchSeq& s : batch.seqs) {
    ES_CHECK(s.slot >= 0 && s.slot < n_slots(), "invalid sequence slot ", s.slot);
    ES_CHECK(s.pos0 + s.n_tokens <= context(), "sequence in slot ", s.slot, " needs ",
             s.pos0 + s.n_tokens, " tokens of context but the cache holds ", context());
  }
}

const Graph& Runner::GraphFor(const Batch& batch, int kind) {
  const int rows = batch.n_tokens(), out_rows = kind == 1 ? 0 : int(batch.out_rows.size());
  auto it = std::find_if(graphs_.begin(), graphs_.end(), [&](const ShapeGraph& s) {
    return s.rows == rows && s.out_rows == out_rows && s.kind == kind;
  });
  if (it == graphs_.end()) {
    if (graphs_.size() == kMaxGraphs) graphs_.pop_back();
    const ModelArch& a = model_->arch();
    const int l0 = first_layers_.back();
    Graph g = kind == 0   ? (l0 == 0 ? a.Build(batch)
                                     : a.BuildStage(batch, l0, model_->config().n_layers, true))
              : kind == 1 ? a.BuildHidden(batch)
                          : a.BuildHead(batch, /*mtp=*/false);
    graphs_.push_back({rows, out_rows, kind, std::make_unique<const Graph>(std::move(g))});
    it = graphs_.end() - 1;
  }
  std::rotate(graphs_.begin(), it, it + 1);
  return *graphs_.front().graph;
}

void Runner::SetHiddenSink(HiddenSink sink) {
  ES_CHECK(!sink || front_.empty(),
           "a layer-split runner cannot hand hidden states to a drafter (MTP drafts): run the "
           "model on one device, or draft with --spec ngram or --draft MODEL");
  sink_ = std::move(sink);
}

const Graph& Runner::Prepare(const Batch& batch, const Batch** run, ComputeStats* stats) {
  *run = &batch;
  if (!sink_) {
    *run = &RunFront(batch, stats);
    return GraphFor(batch);
  }
  const int64_t T = batch.n_tokens(), D = model_->config().hidden_size;
  hidden_.resize(size_t(T * D));
  hidden_stats_ = {};
  backend_->Compute(GraphFor(batch, 1), batch, *kv_, hidden_.data(),
                    stats ? &hidden_stats_ : nullptr);
  sink_(batch, hidden_.data());
  // The head reads hidden_ as its input rows.
  head_batch_ = batch;
  head_batch_.input = hidden_.data();
  head_batch_.input_cols = D;
  *run = &head_batch_;
  return GraphFor(batch, 2);
}

namespace {

// The hidden graph's timing folded into the head's (a split forward reports as one).
void AddHiddenStats(const ComputeStats& h, ComputeStats* s) {
  if (!s) return;
  ComputeStats all = h;  // its ops before the head's
  all.Add(*s);
  *s = std::move(all);
}

}  // namespace

const Batch& Runner::RunFront(const Batch& batch, ComputeStats* stats) {
  if (front_.empty()) return batch;
  const size_t n = size_t(batch.n_tokens()) * size_t(model_->config().hidden_size);
  const float* in = nullptr;
  // The stages' timing goes to hidden_stats_, folded into the last stage's after it runs.
  hidden_stats_ = {};
  for (size_t i = 0; i < front_.size(); ++i) {
    std::vector<float>& out = stage_rows_[i % 2];
    out.resize(n);
    ComputeStats st;
    front_[i]->Run(batch, in, out.data(), stats ? &st : nullptr);
    if (stats) hidden_stats_.Add(st);
    in = out.data();
  }
  last_batch_ = batch;  // reuses its vectors' capacity after the first step
  last_batch_.input = in;
  last_batch_.input_cols = model_->config().hidden_size;
  return last_batch_;
}

void Runner::ComputeHead(const Graph& g, const Batch& run, const HeadOut& o, ComputeStats* stats) {
  if (o.logits)
    backend_->Compute(g, run, *kv_, o.logits, stats);
  else if (o.rows)
    backend_->ComputeSample(g, run, *kv_, o.rows, o.ids, stats);
  else
    backend_->ComputeArgmax(g, run, *kv_, o.ids, stats);
}

int Runner::MicroParts(const Batch& batch) const {
  // Not with a hidden sink (never split) nor where the last stage holds no layer (a head split:
  // its front stage runs every layer, the head alone would overlap nothing).
  if (front_.empty() || sink_ || first_layers_.back() >= model_->config().n_layers) return 1;
  return MicroBatchParts(batch.n_tokens(), micro_batch_rows_, 2 * int(front_.size() + 1));
}

void Runner::Run(const Batch& batch, const HeadOut& o, ComputeStats* stats) {
  ES_CHECK(groups_.empty(), "a forward while ", groups_.size(),
           " decode groups are in flight (push empty batches to drain them first)");
  if (const int parts = MicroParts(batch); parts > 1) return RunMicro(batch, parts, o, stats);
  const Batch* run = nullptr;
  const Graph& g = Prepare(batch, &run, stats);
  ComputeHead(g, *run, o, stats);
  if (run != &batch) AddHiddenStats(hidden_stats_, stats);
}

void Runner::RunStage(size_t s, Batch& b, const float* in, std::vector<float>* out,
                      const HeadOut& o, ComputeStats* stats) {
  const size_t D = size_t(model_->config().hidden_size);
  ComputeStats one;
  ComputeStats* cs = stats ? &one : nullptr;
  if (s < front_.size()) {
    out->resize(size_t(b.n_tokens()) * D);
    front_[s]->Run(b, in, out->data(), cs);
  } else {
    b.input = in;  // the last stage's rows (front stages take them as an argument)
    b.input_cols = int64_t(D);
    ComputeHead(GraphFor(b), b, o, cs);
  }
  if (cs) stats->Add(one);
}

void Runner::RunMicro(const Batch& batch, int parts, const HeadOut& o, ComputeStats* stats) {
  std::vector<MicroBatch> mbs = SplitMicroBatches(batch, parts);
  const size_t S = front_.size() + 1, M = mbs.size();
  const size_t V = size_t(model_->vocab_size());
  if (!stage_threads_) stage_threads_ = std::make_unique<DeviceThreads>(S);
  ++micro_forwards_;
  micro_rows_.resize(2 * (S - 1));
  // Each part's output rows: logits or ids, and the sampling rows (a stand-in row greedy).
  std::vector<std::vector<float>> logits(M);
  std::vector<std::vector<int32_t>> ids(M);
  std::vector<std::vector<RowSampling>> rows(M);
  for (size_t m = 0; m < M; ++m) {
    const size_t n = mbs[m].out_of.size();
    if (o.logits) {
      logits[m].resize(n * V);
      continue;
    }
    ids[m].resize(n);
    if (!o.rows) continue;
    rows[m].resize(n);
    for (size_t j = 0; j < n; ++j)
      if (mbs[m].out_of[j] >= 0)
        rows[m][j] = o.rows[mbs[m].out_of[j]];
      else
        rows[m][j].temperature = 0;
  }
  std::vector<ComputeStats> st(S);  // per stage, over the parts
  // Wave w: stage s computes part w - s, reading what stage s - 1 wrote for it in wave w - 1.
  for (size_t w = 0; w + 1 < M + S; ++w)
    stage_threads_->Run([&](size_t s) {
      if (w < s || w - s >= M) return;
      const size_t m = w - s;
      RunStage(s, mbs[m].batch, s == 0 ? nullptr : micro_rows_[2 * (s - 1) + m % 2].data(),
               s + 1 < S ? &micro_rows_[2 * s + m % 2] : nullptr,
               {o.logits ? logits[m].data() : nullptr, o.logits ? nullptr : ids[m].data(),
                o.rows ? rows[m].data() : nullptr},
               stats ? &st[s] : nullptr);
    });
  for (size_t m = 0; m < M; ++m)
    for (size_t j = 0; j < mbs[m].out_of.size(); ++j) {
      const int k = mbs[m].out_of[j];
      if (k < 0) continue;
      if (o.logits)
        std::copy_n(logits[m].data() + j * V, V, o.logits + size_t(k) * V);
      else
        o.ids[k] = ids[m][j];
    }
  if (stats) {
    *stats = {};
    for (const ComputeStats& s : st) stats->Add(s);
  }
}

bool Runner::pipelined() const {
  return !front_.empty() && !sink_ && first_layers_.back() < model_->config().n_layers;
}

bool Runner::Push(const Batch& batch, HeadOutput out, const std::vector<RowSampling>& rows,
                  std::vector<float>* logits, std::vector<int32_t>* ids, ComputeStats* stats) {
  ES_CHECK(pipelined(), "decode groups in flight need a layer split of at least two stages");
  if (batch.n_tokens() > 0) {
    CheckBatch(batch);
    ES_CHECK(out != HeadOutput::kSample || rows.size() == batch.out_rows.size(),
             "sampling: ", rows.size(), " parameter rows for ", batch.out_rows.size(),
             " output rows");
    Group g;
    g.batch = batch;
    g.out = out;
    if (out == HeadOutput::kSample) g.rows = rows;
    groups_.push_back(std::move(g));
  }
  if (groups_.empty()) return false;
  const size_t S = front_.size() + 1;
  if (!stage_threads_) stage_threads_ = std::make_unique<DeviceThreads>(S);
  if (groups_.size() >= 2) ++overlapped_pushes_;
  // Oldest first, one group a stage: the front one is the furthest along.
  Group& last = groups_.front();
  const bool exits = size_t(last.stage) + 1 == S;
  const size_t n_out = last.batch.out_rows.size();
  if (exits && last.out == HeadOutput::kLogits)
    logits->resize(n_out * size_t(model_->vocab_size()));
  else if (exits)
    ids->resize(n_out);
  std::vector<ComputeStats> st(S);
  const auto run_stage = [&](size_t s) {
    Group* g = nullptr;
    for (Group& x : groups_)
      if (size_t(x.stage) == s) g = &x;
    if (!g) return;
    const bool l = g->out == HeadOutput::kLogits;
    RunStage(s, g->batch, s == 0 ? nullptr : g->in.data(), &g->out_rows,
             {l ? logits->data() : nullptr, l ? nullptr : ids->data(),
              g->out == HeadOutput::kSample ? g->rows.data() : nullptr},
             stats ? &st[s] : nullptr);
  };
  try {
    // A lone group (one request decoding, or a drain's last) runs on this thread: handing its
    // one stage to a sleeping worker would only add the hand-over.
    if (groups_.size() == 1)
      run_stage(size_t(last.stage));
    else
      stage_threads_->Run(run_stage);
  } catch (...) {
    groups_.clear();  // their stages' state is unknown: the caller fails their sequences
    throw;
  }
  for (Group& g : groups_) {
    std::swap(g.in, g.out_rows);
    ++g.stage;
  }
  if (stats) {
    *stats = {};
    for (const ComputeStats& one : st) stats->Add(one);
  }
  if (!exits) return false;
  const bool with_logits = last.out == HeadOutput::kLogits;
  groups_.erase(groups_.begin());
  if (!with_logits) return true;
  try {
    CheckFiniteLogits(logits->data(), int64_t(n_out), model_->vocab_size());
  } catch (...) {
    groups_.clear();
    throw;
  }
  return true;
}

void Runner::Forward(const Batch& batch, std::vector<float>* logits, ComputeStats* stats) {
  CheckBatch(batch);
  logits->resize(batch.out_rows.size() * size_t(model_->vocab_size()));
  Run(batch, {logits->data(), nullptr, nullptr}, stats);
  CheckFiniteLogits(logits->data(), int64_t(batch.out_rows.size()), model_->vocab_size());
}

void Runner::ForwardArgmax(const Batch& batch, std::vector<int32_t>* ids, ComputeStats* stats) {
  CheckBatch(batch);
  ids->resize(batch.out_rows.size());
  Run(batch, {nullptr, ids->data(), nullptr}, stats);
}

void Runner::ForwardSample(const Batch& batch, const std::vector<RowSampling>& rows,
                           std::vector<int32_t>* ids, ComputeStats* stats) {
  CheckBatch(batch);
  ES_CHECK(rows.size() == batch.out_rows.size(), "sampling: ", rows.size(), " parameter rows for ",
           batch.out_rows.size(), " output rows");
  ids->resize(batch.out_rows.size());
  Run(batch, {nullptr, ids->data(), rows.data()}, stats);
}

}  // namespace es
