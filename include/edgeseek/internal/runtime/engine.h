// Continuous-batching engine: one thread per model instance drives a StepModel (a Runner, or a
// fake in tests) through small actions behind one Step():
//
//   Step():  sweep cancelled / timed-out  →  preempt (an overdue higher class waits, no room)
//            →  admit from the RequestQueue (QoS order, KV blocks, prefix-cache lookup)
//            →  plan one batch (every decode first, then prefill chunks under the per-step token
//               budget; KV blocks allocated as tokens need them, out of blocks → preempt)
//            →  Forward  →  publish full blocks to the prefix cache  →  sample, emit events,
//               finish (stop id, max_tokens, context full)
//
// Over a layer split (StepModel::pipeline_stages() S >= 2) decode steps overlap: while every
// running request decodes, a step pushes a group of the requests not in flight into the first
// stage, moves every group in flight one stage on (the stages side by side) and emits the
// tokens of the group that leaves the last stage, S - 1 steps after it entered; its requests
// join a later group. A prompt chunk, a preemption, a migration or Stop first drains the
// groups; an instance with a drafter never pushes (docs/scale.md, "Across steps: decode groups in
// flight").
//
// KV is paged (kv_block_pool.h): each running request holds a list of blocks of
// kKvBlockTokens tokens from one pool per instance, handed to the model as the slot's block
// table. A request is admitted when the pool can hold its prompt (minus what the prefix cache
// already has) with a block of headroom per running request; a step that needs a block the
// pool does not have preempts the latest-admitted request of the lowest class (it recomputes
// later, its full blocks likely still cached). Prefix caching: an admitted request first takes
// the cached blocks of the longest prefix of its tokens (same scope, whole blocks, at least
// one token left to compute), so a shared system prompt or the earlier turns of a chat are not
// computed again; the blocks a request fills are published for the next one.
//
// Requests of one model share one RequestQueue (below: QoS classes, fair shares of tokens); every
// instance of that model pulls from it when it has room, so queued work spills to whichever
// instance frees first. A request's tokens never depend on the rest of the batch (the CPU
// backend's rows are batch-invariant and each request samples with its own seeded Sampler), so
// a preempted request that recomputes its KV from prompt + generated tokens resumes unchanged.
// Engines sharing a LoadBalancer (balancer.h) also move running requests this way: an
// overloaded instance preempts one and puts it in the queue for an instance with room.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "edgeseek/internal/backends/backend.h"
#include "edgeseek/internal/graph/graph.h"
#include "edgeseek/internal/runtime/balancer.h"
#include "edgeseek/internal/runtime/kv_block_pool.h"
#include "edgeseek/internal/runtime/micro_batch.h"
#include "edgeseek/internal/runtime/sampler.h"
#include "edgeseek/internal/runtime/speculative.h"

namespace es {

class Runner;

// ---- what the engine drives ------------------------------------------------------------------
// The slice of es::Runner the engine needs; WrapRunner adapts a Runner, tests pass a fake.
class StepModel {
 public:
  virtual ~StepModel() = default;
  virtual int vocab_size() const = 0;
  virtual int n_slots() const = 0;
  virtual int64_t context() const = 0;  // tokens per slot
  virtual size_t kv_bytes_per_token() const = 0;
  virtual int AcquireSlot() = 0;  // -1 when none is free
  virtual void ReleaseSlot(int slot) = 0;
  // ---- paged KV (backend.h, KvStorage) ----
  // Blocks of kKvBlockTokens tokens in the model's KV pool. Default: n_slots x context.
  virtual int64_t kv_blocks() const;
  // Whether a slot's block table may name any block of the pool (SetBlockTable is honoured).
  // When not, each slot keeps its own fixed region: the engine's blocks then only count memory
  // and the prefix cache is off.
  virtual bool paged_kv() const { return false; }
  // The blocks of the slot's positions [0, blocks.size() * kKvBlockTokens), for the next
  // Forward calls. Paged models only.
  virtual void SetBlockTable(int slot, const std::vector<int32_t>& blocks) {
    (void)slot, (void)blocks;
  }
  // Whether a row's logits are bitwise the same whatever else shares its batch and however its
  // prompt was chunked. The CPU backend's are (one reduction order per row); the Vulkan
  // backend's are not (GEMV for <= 8 rows, tiled GEMM above).
  virtual bool batch_invariant() const { return true; }
  // logits: [batch.out_rows.size(), vocab] row-major. `stats` (may be null): the backend's
  // upload / dispatch / shader / download split of this pass.
  virtual void Forward(const Batch& batch, std::vector<float>* logits, ComputeStats* stats) = 0;
  // The argmax of each output row (lowest index on ties), for steps whose rows all decode
  // greedily: GPU backends compute it on the device so only the ids come back. Default: Forward,
  // then the argmax here.
  virtual void ForwardArgmax(const Batch& batch, std::vector<int32_t>* ids, ComputeStats* stats);
  // Whether ForwardSample samples on the device; the engine then uses it for sampled steps.
  virtual bool device_sampling() const { return false; }
  // Whether running the step shapes of serving once before the first request saves first-use
  // work later (GPU backends build pipelines and record programs on a shape's first use).
  virtual bool warm_up() const { return false; }
  // The step token budget when the engine's options leave it open. GPU backends take 1,024:
  // H200, 7B Q4_0, 32 clients of ~900-token prompts, budgets 512 / 1,024 / 2,048 served 752 /
  // 803 / 847 tokens/s with ITL P99 121 / 196 / 356 ms
  // (docs/log/2026-12-03-session21-h200-serving.md). The CPU keeps 256: a CPU step of 1,024
  // prompt tokens would hold its decode rows for seconds.
  virtual int step_tokens() const { return 256; }
  // Output row r sampled by rows[r] (sampling.h). Default: Forward, then SampleRowHost.
  virtual void ForwardSample(const Batch& batch, const std::vector<RowSampling>& rows,
                             std::vector<int32_t>* ids, ComputeStats* stats);
  // ---- decode groups in flight (Runner::Push: a layer split of >= 2 stages) ----
  // The stages a pushed group passes before its outputs come back; 1: Push is not offered.
  virtual int pipeline_stages() const { return 1; }
  // Pushes a decode group (no rows: nothing enters) and moves those in flight one stage on;
  // true when the oldest left the last stage, its logits or ids (as it was pushed) in *logits /
  // *ids. On an error every group in flight is dropped.
  virtual bool Push(const Batch& batch, HeadOutput out, const std::vector<RowSampling>& rows,
                    std::vector<float>* logits, std::vector<int32_t>* ids, ComputeStats* stats);
  // Forgets the groups in flight (the engine failed their requests after an error elsewhere).
  virtual void DropInFlight() {}
};

std::unique_ptr<StepModel> WrapRunner(std::unique_ptr<Runner> runner);

// ---- requests and their events --------------------------------------------------------------
enum class FinishReason : uint8_t { kNone, kStop, kLength, kCancelled, kTimeout, kError };
const char* FinishReasonName(FinishReason r);  // "stop", "length", "cancelled", ...

enum class SeqEventKind : uint8_t { kAdmitted, kToken, kPreempted, kFinished };

struct SeqEvent {
  SeqEventKind kind = SeqEventKind::kToken;
  int32_t token = -1;                         // kToken
  FinishReason finish = FinishReason::kNone;  // kFinished
  std::string message;                        // kFinished with kError
  // kToken of a request with logprobs >= 0: the token's log-probability and the top ones.
  std::shared_ptr<const TokenLogprobs> logprobs;
  double time = 0;  // steady seconds (SteadySeconds())
};

// The backend's time split of one engine step (ComputeStats of the forward pass), in seconds;
// all zero unless the instance profiles (EngineOptions::profile).
struct StepSplit {
  double upload_s = 0, dispatch_s = 0, shader_s = 0, download_s = 0, total_s = 0;
  bool valid = false;
};

// One span of a request's life, for Chrome/Perfetto traces (server::ChromeTrace writes them).
struct SeqTraceEvent {
  const char* name;       // "queue", "prefill", "decode", "preempted", "migrated"
  double t0 = 0, t1 = 0;  // steady seconds
  int64_t tokens = 0;     // tokens this request had in the step
  int64_t batch_tokens = 0, batch_seqs = 0;
  int instance = -1;
  StepSplit split;  // prefill / decode steps of a profiling instance
};

struct SeqRequest {
  // ---- set by the submitter, then read-only ----
  std::string id;
  std::vector<int32_t> prompt;  // non-empty
  SamplingParams sampling;
  int max_tokens = 16;            // > 0
  std::vector<int32_t> stop_ids;  // e.g. EOS; the stop id itself is emitted, then finish
  int priority = 0;               // QoS class index (0 = highest)
  std::string client;             // WRR identity (API key name)
  // Prefix-cache scope: requests share cached KV blocks only within one scope ("" = shared by
  // every request of the model; the server puts the client's name for per-tenant isolation).
  std::string prefix_scope;
  // Constrained decoding (sampler.h); null when the output is free. Used on the engine thread.
  std::shared_ptr<TokenConstraint> constraint;
  // Log-probabilities of each generated token (log-softmax of Sampler::Processed, after the
  // constraint's mask) with this many top alternatives; -1: none.
  int logprobs = -1;
  // Only this engine instance may run it (a plugin constraint's route, plugin_host.h); -1: any.
  // A pinned request is not migrated between instances.
  int pinned_instance = -1;
  // Request metadata for plugins (the server: the body's "metadata" object).
  std::vector<std::pair<std::string, std::string>> metadata;
  double deadline = 0;     // steady seconds; 0 = none
  double submit_time = 0;  // steady seconds (set by RequestQueue::Push)
  // Called on the engine thread for every event; must be quick and must not block.
  std::function<void(const SeqEvent&)> on_event;

  // ---- set from any thread ----
  std::atomic<bool> cancel{false};

  // ---- owned by whichever engine holds the request (or the queue while it waits) ----
  std::vector<int32_t> tokens;  // prompt + generated
  int64_t n_computed = 0;       // tokens already in the KV slot
  int n_generated = 0;
  int admit_generated = 0;  // n_generated when last given out (RequestQueue's charge)
  int slot = -1;
  int instance = -1;
  std::vector<int32_t> kv_blocks;    // pool blocks of positions [0, size * kKvBlockTokens)
  std::vector<uint64_t> block_keys;  // prefix-cache keys of the leading full blocks
  int64_t prefix_hit_tokens = 0;     // tokens taken from the prefix cache at the last admission
  int preemptions = 0;
  int migrations = 0;      // moves to another instance (balancer.h): at most one
  bool in_flight = false;  // in a decode group pushed through a layer split's stages
  // While it waits in the queue on its way to another instance: that instance's index (no
  // other takes it); -1 otherwise.
  int migrate_to = -1;
  double admit_time = 0;
  std::unique_ptr<Sampler> sampler;
  bool admitted_once = false;
  // Read by the submitter only after kFinished (happens-after through on_event's sync).
  std::vector<SeqTraceEvent> trace;

  int64_t need_tokens() const { return int64_t(prompt.size()) + max_tokens; }
};

double SteadySeconds();

// ---- the queue: QoS classes and clients ---------------------------------------------------
struct QosClass {
  std::string name;
  int weight = 1;              // share of admissions among backlogged classes
  double preempt_after_s = 0;  // > 0: waiting this long lets it preempt a lower class
  bool preemptible = true;     // may be preempted by a higher class
};

struct QosPolicy {
  std::vector<QosClass> classes = {QosClass{"default", 1, 0, true}};  // [0] = highest
  // Fair shares of generated tokens between clients of a class (start-time fair queuing over
  // tokens, see RequestQueue): the backlogged client with the least tokens / weight goes next.
  std::vector<std::pair<std::string, int>> client_weights;
  int default_client_weight = 1;
};

// Waiting requests of one model (all its instances), thread-safe. Order: a request waiting past
// its class's preempt deadline first (highest class, oldest), else smooth weighted round robin
// between backlogged classes, then within the class the client furthest behind its weighted
// share of tokens, FIFO per client.
//
// Client shares: each client has a virtual time (tokens charged / weight). Admission charges a
// request's max_tokens; Release refunds what it did not generate, so a client pays for exactly
// the tokens it got. A client counts as backlogged while it has requests waiting *or running*:
// one whose queue runs dry for a moment while its requests are being served (a client's next
// request is in flight over HTTP) keeps the credit it is owed, up to what its running requests
// plus the new one were charged. A client that comes back from idle (nothing waiting, nothing
// running) starts at the backlog's minimum virtual time: idling banks no credit.
class RequestQueue {
 public:
  explicit RequestQueue(QosPolicy policy);
  const QosPolicy& policy() const { return policy_; }

  void Push(std::shared_ptr<SeqRequest> r);  // sets submit_time if 0
  // A preempted request: first of its client. With migrate_to set, a migration: only that
  // instance takes it, before anything else.
  void PushFront(std::shared_ptr<SeqRequest> r);
  // The next request for engine `instance` whose need fits `max_need` tokens; null when none.
  // A request migrating to `instance` goes first; one migrating elsewhere is not given out.
  std::shared_ptr<SeqRequest> PopNext(int64_t max_need, double now, int instance = -1);
  // Removes waiting requests that are cancelled or past their deadline.
  std::vector<std::shared_ptr<SeqRequest>> TakeDead(double now);
  // The highest class with a request waiting past its preempt deadline, or -1.
  int OverdueClass(double now);
  // A request PopNext gave out leaves its engine (finished or preempted): refunds the tokens it
  // was charged for and did not generate, and stops counting it as running for its client.
  void Release(const SeqRequest& r);
  // Adds tokens to a client's account (advances its virtual time); tests and external charges.
  void Charge(const std::string& client, int64_t tokens);
  // A scheduling policy (a plugin's, plugin_host.h): within the class chosen above, the waiting
  // request with the highest score goes next (ties: clients in first-seen order, FIFO), in place
  // of the clients' fair shares. Called under the queue's lock: it must be quick and must not
  // call back into the queue. Set before the engines start; null: fair shares.
  using PriorityFn = std::function<double(const SeqRequest& r, double now)>;
  void set_priority_fn(PriorityFn fn) { priority_fn_ = std::move(fn); }

  size_t size() const;
  size_t size_unassigned() const;  // waiting, less the migrations on their way to an instance
  std::vector<size_t> size_per_class() const;
  struct ClientLoad {
    std::string client;
    size_t waiting = 0;
    int running = 0;
    double vtime = 0;  // tokens charged / weight
  };
  std::vector<ClientLoad> clients() const;  // every client seen, first-seen order
  // Blocks until work may be there (a push, a cancel, Notify) or `seconds` pass.
  void Wait(double seconds);
  void Notify();

 private:
  struct Class {
    // Per client, FIFO (front = next); clients in first-seen order.
    std::vector<std::pair<std::string, std::vector<std::shared_ptr<SeqRequest>>>> clients;
    int64_t current = 0;  // smooth WRR credit
    size_t waiting = 0;
  };
  struct Client {
    std::string name;
    int weight = 1;
    double vtime = 0;           // tokens charged / weight (kept across idle periods)
    size_t waiting = 0;         // in any class
    int running = 0;            // given out by PopNext, not yet Released
    double running_charge = 0;  // what those running requests were charged / weight
  };
  std::vector<std::shared_ptr<SeqRequest>>& FifoOf(Class& c, const std::string& client);
  int WeightOf(const std::string& client) const;
  Client& ClientOf(const std::string& client);
  void Activate(Client& c, const SeqRequest& r);  // before a push; needs mu_
  std::shared_ptr<SeqRequest> Take(Class& c, std::vector<std::shared_ptr<SeqRequest>>& fifo,
                                   size_t i);
  std::shared_ptr<SeqRequest> PopFromClass(Class& c, int64_t max_need, int instance, double now);

  QosPolicy policy_;
  PriorityFn priority_fn_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Class> classes_;
  std::vector<Client> clients_;  // first-seen order
  size_t migrating_ = 0;         // waiting requests with migrate_to set
  uint64_t wake_seq_ = 0;
};

// ---- the engine ------------------------------------------------------------------------------
struct EngineOptions {
  // Per-step token budget (decodes + prefill chunks); 0: the model's (StepModel::step_tokens).
  int max_batch_tokens = 0;
  int max_batch_seqs = 0;  // sequences per step (0: n_slots)
  int prefill_chunk = 0;   // largest prefill piece of one sequence per step (0: budget)
  // Only this many tokens of KV (rounded down to whole blocks) may be held at once; 0: the
  // model's whole pool. A memory quota of Q bytes gives Q / kv_bytes_per_token.
  int64_t kv_token_budget = 0;
  // Share full KV blocks between requests of one prefix scope (paged models only).
  bool prefix_cache = true;
  int instance = 0;  // index for traces and metrics
  // Batch invariance on a backend that is not invariant by itself (StepModel::batch_invariant):
  // one sequence per forward pass and prompts prefilled in fixed prefill_chunk pieces, so a
  // request's logits never depend on the load. A no-op on invariant backends (the CPU's).
  bool deterministic = false;
  bool profile = false;  // ask the backend for its time split; traces carry it
};

struct EngineStats {
  int running = 0;                 // sequences holding a slot
  int64_t kv_tokens_used = 0;      // tokens in KV slots now
  int64_t kv_tokens_reserved = 0;  // tokens of the blocks held (used_blocks x block size)
  int64_t kv_token_capacity = 0;   // tokens of the pool (blocks x block size)
  // KV blocks: the pool's = used (referenced by running requests, shared prefix blocks once) +
  // cached (kept only by the prefix cache, evictable) + free.
  int64_t kv_blocks_total = 0, kv_blocks_used = 0, kv_blocks_cached = 0, kv_blocks_free = 0;
  bool prefix_cache = false;
  // Prefix cache: tokens looked up at admission (prompt, or prompt + generated on a resume) and
  // those found cached; hit rate = hit / lookup.
  int64_t prefix_lookup_tokens = 0, prefix_hit_tokens = 0;
  int64_t kv_preemptions = 0;  // preemptions for want of KV blocks (also in preemptions)
  int64_t steps = 0, preemptions = 0;
  double step_s = 0;  // recent forward time per step (moving average over ~8 steps)
  int64_t prompt_tokens = 0, generated_tokens = 0;  // computed prefill tokens, sampled tokens
  int last_batch_tokens = 0, last_batch_seqs = 0;
  bool serial = false;  // deterministic on a non-invariant backend: one sequence a step
  // Speculative decoding (Engine::set_drafter): steps that verified drafts, drafted tokens,
  // accepted ones, and the tokens those steps emitted.
  SpecStats spec;
};

// Observer of every step (for metrics); called on the engine thread.
struct StepInfo {
  int batch_tokens = 0, batch_seqs = 0, decode_seqs = 0, prefill_tokens = 0;
  double seconds = 0;  // the forward pass
  // The engine's own time between the previous step's forward and this one's (emitting tokens,
  // sweeping, admitting, planning, building the batch): the device idles through it. 0 for a
  // step after an idle wait.
  double host_seconds = 0;
  StepSplit split;  // with EngineOptions::profile
};

class Engine {
 public:
  Engine(std::unique_ptr<StepModel> model, std::shared_ptr<RequestQueue> queue,
         const EngineOptions& opts);
  ~Engine();  // Stop()s
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // The engine thread: Step() in a loop, sleeping on the queue when idle.
  void Start();
  // Stops the thread; sequences still running are finished as kCancelled.
  void Stop();

  // One scheduling step; returns false when there was nothing to do. Tests call it directly.
  bool Step();

  // Before Start(), on a model that asks for it (StepModel::warm_up): runs the step shapes
  // serving meets (decode steps of 1-8 rows and buckets up to the slots, prefills of the step
  // budget and of 200, 100, 40 and 5 tokens, a short prompt next to 1-8 decode rows, a full
  // budget of prompt and decode rows) through every output tail
  // (logits, argmax, device sampling) on scratch KV of free slots, then frees them. On the
  // H200 a fresh server otherwise built the tensor-core pipelines of a row count the first time
  // it met one, stalling every running request for seconds. Returns the forwards run.
  int Warm();

  // Whether a request of `need` tokens (prompt + max_tokens) could ever run here.
  bool CanEverFit(int64_t need) const;
  int64_t max_need() const { return std::min(context_, kv_budget_); }
  int64_t context() const { return context_; }
  int n_slots() const { return n_slots_; }
  int vocab_size() const { return vocab_; }
  bool batch_invariant() const { return invariant_; }  // the model's, or forced (deterministic)
  EngineStats stats() const;
  void set_step_observer(std::function<void(const StepInfo&)> fn) { on_step_ = std::move(fn); }
  // Speculative decoding for single-sequence decode: a step whose only running request is
  // decoding drafts up to k tokens with `drafter` and verifies them in one forward of k + 1
  // rows (speculative.h); with two or more running requests the batch decodes one token each as
  // before. Set before Start(); the drafter is used on the engine thread only. Null: off.
  void set_drafter(std::unique_ptr<Drafter> drafter, int k);
  // Load balancing with the model's other instances (balancer.h): this engine publishes its
  // load there after every step, and when it is overloaded hands a running request to an
  // instance with room. Set before Start(); opts.instance is its index there. Null: off.
  void set_balancer(std::shared_ptr<LoadBalancer> balancer);

 private:
  void SweepFinishedRequests(double now);
  void MaybePreempt(double now);
  void Admit(double now);
  void Finish(std::shared_ptr<SeqRequest>& r, FinishReason why, const std::string& msg = {});
  // A new token of r sampled from logits `row` (null when only ids came back): the constraint
  // and logprobs see it, it is emitted, and a stop id or the length ends r (then false).
  bool EmitToken(std::shared_ptr<SeqRequest>& r, const float* row, int32_t tok, double t);
  // Back to the queue, its KV released (recomputed when admitted again). migrate_to >= 0: a
  // migration to that instance (not counted as a preemption, no kPreempted event).
  void Preempt(size_t running_index, double now, int migrate_to = -1);
  // ---- balancing (balancer.h) ----
  InstanceLoad Load(bool with_candidates) const;
  void MaybeMigrate(double now);
  // A migration left the queue (taken here, or dead): it no longer counts for its target.
  void Arrived(SeqRequest& r);
  // ---- KV blocks ----
  // Takes the cached blocks of the longest prefix of r's tokens (whole blocks, at least one token
  // left); sets r.n_computed to the tokens they hold.
  void MatchPrefix(SeqRequest& r);
  // Blocks to cover r's positions [0, n_tokens), allocated as needed; false when the pool is
  // out of them (what r already got is kept).
  bool GrowKv(SeqRequest& r, int64_t n_tokens);
  // Publishes r's full, computed blocks not yet in the prefix cache.
  void PublishBlocks(SeqRequest& r);
  void ReleaseKv(SeqRequest& r);
  // Gets blocks for `*n` more tokens of r this step, preempting the latest-admitted request of
  // the lowest class (not r, not in `planned`) while the pool is short; a prefill chunk may
  // shrink to what fits. false: r itself had to be preempted (it is then no longer running).
  bool ReserveStep(const std::shared_ptr<SeqRequest>& r, int* n,
                   const std::vector<std::shared_ptr<SeqRequest>>& planned, double now);
  int64_t BlocksFor(int64_t tokens) const { return (tokens + kKvBlockTokens - 1) / kKvBlockTokens; }
  void Emit(SeqRequest& r, SeqEvent e);
  void RunLoop();
  void PublishStats();
  void UpdateStepTime(double seconds);  // local_.step_s
  // The speculative step of a lone decoding request (set_drafter).
  bool SpecStep(std::shared_ptr<SeqRequest> r, double now);
  // ---- one plain step (Step): plan, forward, sample and emit ----
  // A request's share of the step: its tokens [n_computed, n_computed + n).
  struct StepItem {
    std::shared_ptr<SeqRequest> r;
    int n = 0;
  };
  struct StepPlan {
    std::vector<StepItem> items;
    int prefill_tokens = 0, decodes = 0;
  };
  // Serial mode: the request whose turn it is, its next prefill chunk or its one decode row.
  StepPlan PlanSerialStep(double now);
  // Every decode first (one row each), then prefill chunks under the step's token budget.
  StepPlan PlanBatchStep(double now);
  // The step's forward: into ids_ (every row greedy, or sampled on the device; then true) or
  // into logits_ (false). Throws what the model throws.
  bool ForwardStep(const std::vector<StepItem>& items, const Batch& batch);
  // After the forward: each item's rows count as computed (and traced); a request whose
  // tokens are all computed gets its next token, sampled here from logits_ unless have_ids.
  void EmitStep(const std::vector<StepItem>& items, const Batch& batch, bool have_ids, double t0,
                double t1, const StepSplit& split);
  // What the step's head returns: argmax ids (every row greedy), ids sampled on the device
  // (rows_ set, and the masks of constrained rows: MakeMasks) or logits.
  HeadOutput ChooseOutput(const std::vector<StepItem>& items);
  // A step's bookkeeping: counts, the moving step time, the observer.
  void Observe(StepInfo info, double t0);  // t0: when the step's forward began
  StepSplit Split() const;                 // compute_stats_ as a StepSplit (profiling only)
  // ---- decode groups in flight (StepModel::pipeline_stages() >= 2; docs/scale.md) ----
  // A layer split keeps groups of disjoint decoding requests in flight, one a stage: each step
  // pushes a group of the requests not in flight into the first stage, every group moves one
  // stage on, the stages side by side, and the one leaving the last stage has its tokens
  // emitted; its requests then join a later group. Anything that needs every request on the
  // host (a prompt chunk, preemption, migration, Stop) drains first; a drafter turns it off.
  struct FlightGroup {
    std::vector<StepItem> items;
    Batch batch;
    bool have_ids = false;
    std::vector<int> allowed;  // MakeMasks' (device-sampled groups)
    std::vector<std::string> mask_error;
    double t0 = 0;  // when it entered
  };
  // Pipelined model, not serial, no drafter, and every request not in flight decodes.
  bool CanPipeline() const;
  // Pushes the next group (none when every request is in flight); false, before any push,
  // when a request of the group could not get its next block (the caller drains, then plans
  // a plain step that may preempt).
  bool PipeStep();
  // One push; emits the group that leaves. On the model's error fails every request in flight.
  void Advance(const Batch& batch, HeadOutput out);
  void Drain();  // pushes nothing until no group is in flight
  void DropFlight(FinishReason why, const std::string& msg);
  // Device-sampled steps: the allow-mask of each constrained row that samples this step, made
  // before the forward (rows_[i].allow; allowed_[i] its count, -1 with mask_error_[i] when the
  // constraint failed).
  void MakeMasks(const std::vector<StepItem>& items);
  // Masks a constrained row; false (and the request finished) when nothing may follow.
  bool ApplyConstraint(std::shared_ptr<SeqRequest>& r, float* row);
  // After a constraint allowed `allowed` ids (-1: it failed with `error`): false (and the
  // request finished) when nothing may follow.
  bool ConstraintAllows(std::shared_ptr<SeqRequest>& r, int allowed, const std::string& error);

  std::unique_ptr<StepModel> model_;
  std::shared_ptr<RequestQueue> queue_;
  EngineOptions opts_;
  int n_slots_ = 0, vocab_ = 0;
  bool serial_ = false;     // deterministic on a non-invariant model
  size_t next_serial_ = 0;  // serial mode: whose turn it is
  bool invariant_ = true;
  int64_t context_ = 0, kv_budget_ = 0;  // kv_budget_: tokens of the pool's blocks
  std::unique_ptr<KvBlockPool> pool_;
  bool paged_ = false;
  std::vector<std::shared_ptr<SeqRequest>> running_;  // admission order
  std::vector<float> logits_;
  std::vector<float> processed_;   // a row after penalties, for logprobs
  std::vector<int32_t> ids_;       // greedy / device-sampled steps: the id per output row
  std::vector<RowSampling> rows_;  // device-sampled steps: each output row's parameters
  std::vector<int> allowed_;       // MakeMasks: per item, the ids its mask allows
  std::vector<std::string> mask_error_;
  ComputeStats compute_stats_;
  double forward_end_ = 0;  // SteadySeconds() at the last forward's end; 0 after an idle wait
  std::function<void(const StepInfo&)> on_step_;
  std::unique_ptr<Drafter> drafter_;
  int spec_k_ = 0;
  std::shared_ptr<LoadBalancer> balancer_;
  Draft draft_;
  std::vector<float> dense_;  // AcceptDraftToken's scratch
  int pipe_stages_ = 1;
  std::deque<FlightGroup> flight_;  // oldest (next to leave) first

  mutable std::mutex stats_mu_;
  EngineStats stats_;  // guarded by stats_mu_
  EngineStats local_;  // engine thread only

  std::thread thread_;
  std::atomic<bool> stop_{false};
};

}  // namespace es
