// Engine: the continuous-batching loop of one model instance (edgeseek/internal/runtime/engine.h).
// Each Step() runs small actions in order — sweep, preempt, admit, migrate, plan, forward,
// sample/emit — so requests join and leave the running batch at token boundaries.
#include "edgeseek/internal/runtime/engine.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <string>

#include "edgeseek/internal/core/error.h"

namespace es {

namespace {
constexpr size_t kMaxTraceEvents = 8192;  // per request; decode spans beyond are dropped
}

double SteadySeconds() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

const char* FinishReasonName(FinishReason r) {
  switch (r) {
    case FinishReason::kNone:
      return "none";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kTimeout:
      return "timeout";
    case FinishReason::kError:
      return "error";
  }
  return "?";
}

Engine::Engine(std::unique_ptr<StepModel> model, std::shared_ptr<RequestQueue> queue,
               const EngineOptions& opts)
    : model_(std::move(model)), queue_(std::move(queue)), opts_(opts) {
  ES_ASSERT(model_ && queue_);
  n_slots_ = model_->n_slots();
  vocab_ = model_->vocab_size();
  context_ = model_->context();
  ES_CHECK(n_slots_ > 0 && context_ > 0 && vocab_ > 0, "engine: model instance has ", n_slots_,
           " slots of ", context_, " tokens and vocabulary ", vocab_, " (all must be > 0)");
  ES_CHECK(opts_.max_batch_tokens >= 0, "engine: max_batch_tokens must be >= 1 (0: the model's)");
  if (opts_.max_batch_tokens == 0) opts_.max_batch_tokens = std::max(1, model_->step_tokens());
  if (opts_.max_batch_seqs <= 0) opts_.max_batch_seqs = n_slots_;
  if (opts_.prefill_chunk <= 0 || opts_.prefill_chunk > opts_.max_batch_tokens)
    opts_.prefill_chunk = opts_.max_batch_tokens;
  serial_ = opts_.deterministic && !model_->batch_invariant();
  invariant_ = model_->batch_invariant() || serial_;
  local_.serial = serial_;
  paged_ = model_->paged_kv();
  pipe_stages_ = model_->pipeline_stages();
  int64_t blocks = model_->kv_blocks();
  ES_CHECK(blocks >= 1, "engine: the model instance's KV pool has ", blocks, " blocks");
  if (opts_.kv_token_budget > 0)
    blocks = std::min(blocks, std::max<int64_t>(1, opts_.kv_token_budget / kKvBlockTokens));
  // The prefix cache needs blocks that any slot can map, and in serial (deterministic) mode a
  // request's rows must be computed as when it runs alone, which cached blocks of another
  // chunking would not be on a backend that is not batch-invariant.
  pool_ = std::make_unique<KvBlockPool>(blocks, opts_.prefix_cache && paged_ && !serial_);
  kv_budget_ = blocks * kKvBlockTokens;
  local_.kv_token_capacity = kv_budget_;
  local_.prefix_cache = pool_->prefix_cache();
  PublishStats();
}

Engine::~Engine() { Stop(); }

bool Engine::CanEverFit(int64_t need) const { return need <= context_ && need <= kv_budget_; }

int64_t StepModel::kv_blocks() const {
  return int64_t(n_slots()) * ((context() + kKvBlockTokens - 1) / kKvBlockTokens);
}

void Engine::Start() {
  if (thread_.joinable()) return;
  stop_ = false;
  thread_ = std::thread([this] { RunLoop(); });
}

int Engine::Warm() {
  if (!model_->warm_up()) return 0;
  ES_ASSERT(flight_.empty());  // before Start()
  const int max_rows = std::min(opts_.max_batch_seqs, n_slots_);
  std::vector<int> slots;
  for (int s = 0; int(slots.size()) < max_rows && (s = model_->AcquireSlot()) >= 0;)
    slots.push_back(s);
  // Scratch context: `len` tokens written by a prefill, read by the decode rows at position len
  // with every slot mapping the same blocks when paged; unpaged, the decode rows sit at position
  // 0 (another slot's region holds no written keys).
  int64_t len = std::min<int64_t>({opts_.max_batch_tokens, context_ - 1, kv_budget_ - 1});
  std::vector<int32_t> blocks;
  if (paged_) {
    while (int64_t(blocks.size()) * kKvBlockTokens < len + 1) {
      const int32_t b = pool_->Allocate();
      if (b < 0) break;
      blocks.push_back(b);
    }
    len = std::min<int64_t>(len, int64_t(blocks.size()) * kKvBlockTokens - 1);
    for (int s : slots) model_->SetBlockTable(s, blocks);
  }
  int forwards = 0;
  auto run = [&](const Batch& b) {
    model_->Forward(b, &logits_, nullptr);
    model_->ForwardArgmax(b, &ids_, nullptr);
    if (model_->device_sampling()) {
      rows_.assign(b.out_rows.size(), RowSampling{});
      model_->ForwardSample(b, rows_, &ids_, nullptr);
    }
    forwards += model_->device_sampling() ? 3 : 2;
  };
  // `decode` one-token rows at position len, then a prompt of `prompt` tokens from position 0.
  auto step = [&](int decode, int64_t prompt) {
    Batch b;
    for (int i = 0; i < decode; ++i) b.Add(slots[size_t(i)], paged_ ? len : 0, {0});
    if (prompt > 0)
      b.Add(slots[size_t(std::min<int>(decode, int(slots.size()) - 1))], 0,
            std::vector<int32_t>(size_t(prompt), 0));
    b.Finalize();
    run(b);
  };
  if (!slots.empty() && len >= 1) {
    // Prompts of the step budget, of 200 and 100 tokens (the tensor-core GEMMs that decode the
    // weights in their tile loads take up to 256 rows, split over K at one tile of 128 rows; an
    // H100's cold server built them under its first load, session 39), 40 and 5.
    for (int64_t p : {int64_t(200), int64_t(100), int64_t(40), int64_t(5)})
      if (p < len) step(0, p);
    step(0, len);
    const int n = int(slots.size());
    std::vector<int> rows = {1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32, 48, 64};
    for (int r = 96; r < n; r = r * 3 / 2) rows.push_back(r);
    rows.push_back(n);
    for (int r : rows)
      if (r <= n && r <= opts_.max_batch_tokens) step(r, 0);
    // Prompts next to decode rows: 1-8 rows and a short prompt (2-9 output rows, whose head
    // GEMV reads rows gathered from the step's, not a decode step's: other variants on an H100),
    // and a full budget.
    if (n >= 2) {
      for (int d = 1; d <= std::min(n - 1, 8); ++d) step(d, std::min<int64_t>(len, 20));
      const int D = std::min(n - 1, opts_.max_batch_tokens / 2);
      if (D >= 1 && opts_.max_batch_tokens - D >= 1)
        step(D, std::min<int64_t>(len, opts_.max_batch_tokens - D));
    }
  }
  for (int32_t b : blocks) pool_->Release(b);
  for (int s : slots) model_->ReleaseSlot(s);
  return forwards;
}

void Engine::Stop() {
  stop_ = true;
  queue_->Notify();
  if (thread_.joinable()) thread_.join();
  // Groups in flight leave first: their stages still hold the requests' slots and blocks.
  try {
    Drain();
  } catch (const std::exception&) {  // dropped: their requests are cancelled below
  }
  while (!running_.empty()) Finish(running_.back(), FinishReason::kCancelled, "server stopping");
  PublishStats();
}

void Engine::RunLoop() {
  while (!stop_) {
    bool worked = false;
    try {
      worked = Step();
    } catch (const std::exception& e) {
      // A failure of the step itself (not of one request): fail what runs and keep serving.
      std::fprintf(stderr, "edgeseek engine %d: step failed: %s\n", opts_.instance, e.what());
      DropFlight(FinishReason::kError, e.what());
      while (!running_.empty()) Finish(running_.back(), FinishReason::kError, e.what());
    }
    if (!worked) queue_->Wait(0.05);
  }
}

void Engine::Emit(SeqRequest& r, SeqEvent e) {
  if (e.time == 0) e.time = SteadySeconds();
  if (r.on_event) r.on_event(e);
}

void Engine::Finish(std::shared_ptr<SeqRequest>& ref, FinishReason why, const std::string& msg) {
  // A copy on purpose: `ref` may be an element of running_, which the erase below destroys.
  std::shared_ptr<SeqRequest> r = ref;  // NOLINT(performance-unnecessary-copy-initialization)
  if (r->slot >= 0) {
    model_->ReleaseSlot(r->slot);
    r->slot = -1;
    ReleaseKv(*r);
    queue_->Release(*r);
    running_.erase(std::remove(running_.begin(), running_.end(), r), running_.end());
    // Before the event: whoever learns of the finish (an HTTP response) sees its KV freed.
    PublishStats();
  }
  SeqEvent e;
  e.kind = SeqEventKind::kFinished;
  e.finish = why;
  e.message = msg;
  Emit(*r, e);
}

void Engine::SweepFinishedRequests(double now) {
  for (auto& r : queue_->TakeDead(now)) {
    if (r->migrate_to >= 0) Arrived(*r);
    Finish(r, r->cancel.load() ? FinishReason::kCancelled : FinishReason::kTimeout,
           r->cancel.load() ? "" : "request timed out while queued");
  }
  for (size_t i = 0; i < running_.size();) {
    auto r = running_[i];
    // In flight, its stages still hold its slot: handled when its group leaves.
    if (!r->in_flight && r->cancel.load()) {
      Finish(r, FinishReason::kCancelled);
    } else if (!r->in_flight && r->deadline > 0 && now >= r->deadline) {
      Finish(r, FinishReason::kTimeout, "request timed out");
    } else {
      ++i;
    }
  }
}

void Engine::Preempt(size_t i, double now, int migrate_to) {
  std::shared_ptr<SeqRequest> r = running_[i];
  running_.erase(running_.begin() + ptrdiff_t(i));
  model_->ReleaseSlot(r->slot);
  r->slot = -1;
  ReleaseKv(*r);  // its full blocks stay cached (evictable): a resume likely finds them
  queue_->Release(*r);
  // Its KV is gone; on resumption prompt + generated tokens are recomputed, and since a row's
  // logits do not depend on the batch and its Sampler keeps its state, the output is unchanged.
  r->n_computed = 0;
  if (r->trace.size() < kMaxTraceEvents)
    r->trace.push_back({migrate_to >= 0 ? "migrated" : "preempted",
                        now,
                        now,
                        int64_t(r->tokens.size()),
                        0,
                        0,
                        opts_.instance,
                        {}});
  if (migrate_to >= 0) {
    // Counted on its way before it is queued, so that the target's arrival finds it.
    ES_ASSERT(balancer_);
    ++r->migrations;
    r->migrate_to = migrate_to;
    balancer_->Depart(opts_.instance, migrate_to, KvBlocksFor(int64_t(r->tokens.size()) + 1));
  } else {
    ++r->preemptions;
    ++local_.preemptions;
    SeqEvent e;
    e.kind = SeqEventKind::kPreempted;
    e.time = now;
    Emit(*r, e);
  }
  queue_->PushFront(std::move(r));
}

void Engine::set_balancer(std::shared_ptr<LoadBalancer> balancer) {
  ES_CHECK(!balancer || (opts_.instance >= 0 && opts_.instance < balancer->n_instances()),
           "engine: instance ", opts_.instance, " is not one of the balancer's ",
           balancer ? balancer->n_instances() : 0);
  balancer_ = std::move(balancer);
  PublishStats();
}

InstanceLoad Engine::Load(bool with_candidates) const {
  InstanceLoad l;
  l.slots = n_slots_;
  l.running = int(running_.size());
  l.blocks = pool_->n_blocks();
  l.used_blocks = pool_->used_blocks();
  l.available_blocks = pool_->available();
  l.max_need = max_need();
  l.step_s = local_.step_s;
  if (!with_candidates) return l;
  const auto& classes = queue_->policy().classes;
  for (const auto& r : running_) {
    MigrationCandidate c;
    c.preemptible = classes[size_t(r->priority)].preemptible;
    c.migrated = r->migrations > 0 || r->pinned_instance >= 0;  // pinned: never moved
    c.tokens = int64_t(r->tokens.size());
    c.need = r->need_tokens();
    c.left = r->max_tokens - r->n_generated;
    c.admit_time = r->admit_time;
    l.candidates.push_back(c);
  }
  return l;
}

void Engine::MaybeMigrate(double now) {
  if (!balancer_ || !balancer_->policy().migrate || running_.empty()) return;
  auto plan = [&] {
    return PlanMigration(balancer_->Loads(opts_.instance, Load(true)), opts_.instance,
                         queue_->size_unassigned(), balancer_->policy());
  };
  Migration m = plan();
  if (m.to >= 0 && !flight_.empty()) {  // the candidate may be in flight: drain, plan again
    Drain();
    m = plan();
  }
  if (m.to >= 0) Preempt(size_t(m.candidate), now, m.to);
}

void Engine::Arrived(SeqRequest& r) {
  if (balancer_) balancer_->Arrive(r.migrate_to, KvBlocksFor(int64_t(r.tokens.size()) + 1));
  r.migrate_to = -1;
}

void Engine::MaybePreempt(double now) {
  // There is room (a slot, and blocks beyond the running requests' headroom): admission serves
  // the overdue one. Full slots or a short pool both make it wait, so both let it preempt.
  if (int(running_.size()) < n_slots_ && pool_->available() > int64_t(running_.size())) return;
  int overdue = queue_->OverdueClass(now);
  if (overdue < 0) return;
  Drain();  // the victim gives up its slot and blocks: no stage may still hold them
  const auto& classes = queue_->policy().classes;
  int victim = -1;
  for (size_t i = 0; i < running_.size(); ++i) {
    const auto& r = *running_[i];
    if (r.priority <= overdue || !classes[size_t(r.priority)].preemptible) continue;
    if (victim < 0) {
      victim = int(i);
      continue;
    }
    const auto& v = *running_[size_t(victim)];
    // The lowest class loses; among equals, the latest admitted (least work lost).
    if (r.priority > v.priority || (r.priority == v.priority && r.admit_time > v.admit_time))
      victim = int(i);
  }
  if (victim >= 0) Preempt(size_t(victim), now);
}

void Engine::MatchPrefix(SeqRequest& r) {
  r.n_computed = 0;
  if (!pool_->prefix_cache()) return;
  uint64_t prev = KvBlockPool::ScopeSeed(r.prefix_scope);
  // At least the last token is computed: its logits give the next token.
  const int64_t max_blocks = (int64_t(r.tokens.size()) - 1) / kKvBlockTokens;
  for (int64_t i = 0; i < max_blocks; ++i) {
    const int32_t* t = r.tokens.data() + i * kKvBlockTokens;
    const uint64_t key = KvBlockPool::ChainHash(prev, t);
    const int32_t b = pool_->Lookup(key, prev, t);
    if (b < 0) break;
    r.kv_blocks.push_back(b);
    r.block_keys.push_back(key);
    prev = key;
  }
  r.n_computed = int64_t(r.kv_blocks.size()) * kKvBlockTokens;
}

bool Engine::GrowKv(SeqRequest& r, int64_t n_tokens) {
  while (int64_t(r.kv_blocks.size()) * kKvBlockTokens < n_tokens) {
    const int32_t b = pool_->Allocate();
    if (b < 0) return false;
    r.kv_blocks.push_back(b);
  }
  return true;
}

void Engine::PublishBlocks(SeqRequest& r) {
  if (!pool_->prefix_cache()) return;
  const size_t full = size_t(r.n_computed / kKvBlockTokens);
  uint64_t prev =
      r.block_keys.empty() ? KvBlockPool::ScopeSeed(r.prefix_scope) : r.block_keys.back();
  for (size_t i = r.block_keys.size(); i < full; ++i) {
    const int32_t* t = r.tokens.data() + i * kKvBlockTokens;
    const uint64_t key = KvBlockPool::ChainHash(prev, t);
    pool_->Publish(r.kv_blocks[i], key, prev, t);
    r.block_keys.push_back(key);
    prev = key;
  }
}

void Engine::ReleaseKv(SeqRequest& r) {
  for (int32_t b : r.kv_blocks) pool_->Release(b);
  r.kv_blocks.clear();
  r.block_keys.clear();
}

bool Engine::ReserveStep(const std::shared_ptr<SeqRequest>& r, int* n,
                         const std::vector<std::shared_ptr<SeqRequest>>& planned, double now) {
  for (;;) {
    if (GrowKv(*r, r->n_computed + *n)) return true;
    // A prefill chunk shrinks to the blocks it got (not in serial mode: its chunks are fixed).
    const int64_t covered = int64_t(r->kv_blocks.size()) * kKvBlockTokens - r->n_computed;
    if (!serial_ && covered > 0) {
      *n = int(std::min<int64_t>(*n, covered));
      return true;
    }
    // Out of blocks: preempt a request of a lower class, or of r's class admitted after r —
    // the lowest class, the latest admitted (least work lost) — or else r itself.
    const auto self = std::find(running_.begin(), running_.end(), r);
    ES_ASSERT(self != running_.end());
    int victim = -1;
    for (size_t i = 0; i < running_.size(); ++i) {
      const auto& c = running_[i];
      if (c == r || std::find(planned.begin(), planned.end(), c) != planned.end()) continue;
      if (c->priority < r->priority ||
          (c->priority == r->priority && i < size_t(self - running_.begin())))
        continue;
      // running_ is in admission order: a later index was admitted later.
      if (victim < 0 || c->priority >= running_[size_t(victim)]->priority) victim = int(i);
    }
    ++local_.kv_preemptions;
    if (victim < 0) {
      Preempt(size_t(self - running_.begin()), now);
      return false;
    }
    Preempt(size_t(victim), now);
  }
}

void Engine::Admit(double now) {
  while (int(running_.size()) < n_slots_) {
    auto r = queue_->PopNext(max_need(), now, opts_.instance);
    if (!r) break;
    // A migration to here: it stops counting as on its way, and should it not be admitted
    // after all (the blocks went meanwhile), any instance may take it.
    if (r->migrate_to >= 0) Arrived(*r);
    if (!r->admitted_once) {
      r->tokens = r->prompt;
      r->sampler = std::make_unique<Sampler>(r->sampling);
      r->admitted_once = true;
    }
    MatchPrefix(*r);
    // Room for the rest of its tokens and the first one it generates, with a block of headroom
    // per running request so that their decodes do not at once preempt it.
    const int64_t need = BlocksFor(int64_t(r->tokens.size()) + 1) - int64_t(r->kv_blocks.size());
    int slot = -1;
    if (need + int64_t(running_.size()) <= pool_->available()) slot = model_->AcquireSlot();
    // Taken now, so that the next admission sees them gone (they fit: need <= available).
    if (slot >= 0 && !GrowKv(*r, int64_t(r->tokens.size()) + 1)) {
      model_->ReleaseSlot(slot);
      slot = -1;
    }
    if (slot < 0) {  // no blocks, or the model disagrees about free slots: put it back untouched
      ReleaseKv(*r);
      r->n_computed = 0;
      queue_->Release(*r);
      queue_->PushFront(std::move(r));
      break;
    }
    r->slot = slot;
    r->instance = opts_.instance;
    r->prefix_hit_tokens = r->n_computed;
    if (pool_->prefix_cache()) {
      local_.prefix_lookup_tokens += int64_t(r->tokens.size());
      local_.prefix_hit_tokens += r->n_computed;
    }
    r->admit_time = now;
    double t0 = r->trace.empty() ? r->submit_time : r->trace.back().t1;
    if (r->trace.size() < kMaxTraceEvents)
      r->trace.push_back({"queue", t0, now, 0, 0, 0, opts_.instance, {}});
    SeqEvent e;
    e.kind = SeqEventKind::kAdmitted;
    e.time = now;
    Emit(*r, e);
    running_.push_back(std::move(r));
  }
}

void Engine::set_drafter(std::unique_ptr<Drafter> drafter, int k) {
  ES_CHECK(!drafter || k >= 1, "engine: speculative decoding needs spec_k >= 1, got ", k);
  drafter_ = std::move(drafter);
  spec_k_ = k;
}

Engine::StepPlan Engine::PlanSerialStep(double now) {
  // Deterministic on a backend whose rows depend on the batch: one sequence a step, taken in
  // turn; its prompt in fixed prefill_chunk pieces from position 0 and every later token alone
  // (also when a preempted request recomputes its KV), so each row is computed exactly as
  // when the request runs by itself.
  StepPlan plan;
  auto r = running_[next_serial_++ % running_.size()];
  int64_t prompt = int64_t(r->prompt.size());
  int n = r->n_computed < prompt
              ? int(std::min<int64_t>(prompt - r->n_computed, opts_.prefill_chunk))
              : 1;
  if (ReserveStep(r, &n, {}, now)) {
    plan.items.push_back({r, n});
    if (int64_t(r->tokens.size()) - r->n_computed == 1)
      ++plan.decodes;
    else
      plan.prefill_tokens += n;
  }
  return plan;
}

Engine::StepPlan Engine::PlanBatchStep(double now) {
  // A request preempted for blocks while planning (its slot is then -1) is skipped.
  StepPlan plan;
  int budget = opts_.max_batch_tokens;
  std::vector<std::shared_ptr<SeqRequest>> planned;  // items' requests (their blocks are held)
  const std::vector<std::shared_ptr<SeqRequest>> order = running_;
  for (auto& r : order) {
    if (int(plan.items.size()) >= opts_.max_batch_seqs || budget <= 0) break;
    if (r->slot < 0 || int64_t(r->tokens.size()) - r->n_computed != 1) continue;
    int n = 1;
    if (!ReserveStep(r, &n, planned, now)) continue;
    plan.items.push_back({r, 1});
    planned.push_back(r);
    --budget;
    ++plan.decodes;
  }
  for (auto& r : order) {
    if (int(plan.items.size()) >= opts_.max_batch_seqs || budget <= 0) break;
    int64_t left = int64_t(r->tokens.size()) - r->n_computed;
    if (r->slot < 0 || left <= 1) continue;
    int n = int(std::min<int64_t>({left, budget, opts_.prefill_chunk}));
    if (!ReserveStep(r, &n, planned, now)) continue;
    plan.items.push_back({r, n});
    planned.push_back(r);
    budget -= n;
    plan.prefill_tokens += n;
  }
  return plan;
}

HeadOutput Engine::ChooseOutput(const std::vector<StepItem>& items) {
  // Every row greedy without penalties nor constraint: only the argmax ids come back from the
  // backend; else, on a backend that samples on the device, only the sampled ids (a constrained
  // row sends its allow-mask, made here before the step); else the logits. A row that wants
  // logprobs needs its logits on the host, so it takes the whole step to the logits path.
  bool greedy = true, logprobs = false;
  for (auto& it : items) {
    greedy = greedy && it.r->sampler->plain_greedy() && !it.r->constraint;
    logprobs = logprobs || it.r->logprobs >= 0;
  }
  greedy = greedy && !logprobs;
  bool sampled = !greedy && !logprobs && model_->device_sampling();
  if (sampled) {
    rows_.assign(items.size(), RowSampling{});
    for (size_t i = 0; i < items.size() && sampled; ++i) {
      const auto& r = items[i].r;
      if (r->n_computed + items[i].n < int64_t(r->tokens.size())) continue;  // not the last chunk
      sampled = r->sampler->DeviceParams(r->tokens, {}, &rows_[i]);
    }
    if (sampled) MakeMasks(items);
  }
  return greedy ? HeadOutput::kArgmax : sampled ? HeadOutput::kSample : HeadOutput::kLogits;
}

bool Engine::ForwardStep(const std::vector<StepItem>& items, const Batch& batch) {
  compute_stats_ = ComputeStats{};
  const HeadOutput out = ChooseOutput(items);
  ComputeStats* stats = opts_.profile ? &compute_stats_ : nullptr;
  if (out == HeadOutput::kArgmax)
    model_->ForwardArgmax(batch, &ids_, stats);
  else if (out == HeadOutput::kSample)
    model_->ForwardSample(batch, rows_, &ids_, stats);
  else
    model_->Forward(batch, &logits_, stats);
  const bool have_ids = out != HeadOutput::kLogits;
  ES_ASSERT(have_ids ? ids_.size() >= items.size()
                     : logits_.size() >= items.size() * size_t(vocab_));
  return have_ids;
}

void Engine::MakeMasks(const std::vector<StepItem>& items) {
  allowed_.assign(items.size(), 0);
  mask_error_.assign(items.size(), std::string());
  for (size_t i = 0; i < items.size(); ++i) {
    const auto& r = items[i].r;
    if (!r->constraint || r->n_computed + items[i].n < int64_t(r->tokens.size())) continue;
    try {
      allowed_[i] = r->constraint->AllowMask(vocab_, &rows_[i].allow);
    } catch (const Error& e) {
      allowed_[i] = -1;  // finished in EmitStep; the row samples unmasked meanwhile
      mask_error_[i] = e.what();
      rows_[i].allow.clear();
    }
  }
}

void Engine::EmitStep(const std::vector<StepItem>& items, const Batch& batch, bool have_ids,
                      double t0, double t1, const StepSplit& split) {
  for (size_t i = 0; i < items.size(); ++i) {
    auto r = items[i].r;
    if (r->slot < 0) continue;  // finished while its group was in flight
    bool decode = int64_t(r->tokens.size()) - r->n_computed == 1 && r->n_generated > 0;
    r->n_computed += items[i].n;
    PublishBlocks(*r);
    if (r->trace.size() < kMaxTraceEvents)
      r->trace.push_back({decode ? "decode" : "prefill", t0, t1, items[i].n, batch.n_tokens(),
                          int64_t(items.size()), opts_.instance, split});
    if (!decode) local_.prompt_tokens += items[i].n;
    if (r->n_computed < int64_t(r->tokens.size())) continue;  // a prefill chunk, not the last
    float* row = have_ids ? nullptr : logits_.data() + i * size_t(vocab_);
    // Constrained: masked on the device (MakeMasks, before the step) or here on the logits.
    if (r->constraint &&
        !(have_ids ? ConstraintAllows(r, allowed_[i], mask_error_[i]) : ApplyConstraint(r, row)))
      continue;
    const int32_t tok = have_ids ? ids_[i] : r->sampler->Sample(row, vocab_, r->tokens);
    EmitToken(r, row, tok, t1);
  }
}

bool Engine::Step() {
  double now = SteadySeconds();
  SweepFinishedRequests(now);
  MaybePreempt(now);
  Admit(now);
  MaybeMigrate(now);
  if (running_.empty()) {
    forward_end_ = 0;  // idle next: the wait is not the engine's time
    PublishStats();
    return false;
  }
  // A layer split whose running requests all decode: groups of them in flight, one a stage.
  if (CanPipeline() && PipeStep()) {
    PublishStats();
    return true;
  }
  // Anything else runs with every request on the host.
  if (!flight_.empty()) {
    Drain();
    if (running_.empty()) {
      PublishStats();
      return true;
    }
  }
  // A lone request that decodes: a speculative step (set_drafter). Batches of several requests
  // keep one row each, where the step's weights are already shared between them.
  // Not in serial mode: there a request's rows must be computed as when it runs alone, one a
  // step, and k + 1 rows of a backend that is not batch-invariant are not.
  if (drafter_ && !serial_ && running_.size() == 1 && running_[0]->n_generated > 0 &&
      int64_t(running_[0]->tokens.size()) - running_[0]->n_computed == 1)
    return SpecStep(running_[0], now);

  const StepPlan plan = serial_ ? PlanSerialStep(now) : PlanBatchStep(now);
  const std::vector<StepItem>& items = plan.items;
  if (items.empty()) {
    forward_end_ = 0;
    PublishStats();
    return false;
  }
  Batch batch;
  for (auto& it : items) {
    if (paged_) model_->SetBlockTable(it.r->slot, it.r->kv_blocks);
    auto first = it.r->tokens.begin() + it.r->n_computed;
    batch.Add(it.r->slot, it.r->n_computed, std::vector<int32_t>(first, first + it.n));
  }
  batch.Finalize();

  double t0 = SteadySeconds();
  bool have_ids = false;
  try {
    have_ids = ForwardStep(items, batch);
  } catch (const Error& e) {
    // Bad input of one of the sequences (e.g. an id outside the vocabulary): fail the batch's
    // sequences with the message, keep the engine running. A lost device (UnavailableError)
    // cancels them: the server is going down (503).
    const FinishReason why =
        dynamic_cast<const UnavailableError*>(&e) ? FinishReason::kCancelled : FinishReason::kError;
    for (auto& it : items) {
      auto r = it.r;
      Finish(r, why, e.what());
    }
    PublishStats();
    return true;
  }
  double t1 = SteadySeconds();
  const StepSplit split = Split();
  EmitStep(items, batch, have_ids, t0, t1, split);
  StepInfo info;
  info.batch_tokens = batch.n_tokens();
  info.batch_seqs = int(items.size());
  info.decode_seqs = plan.decodes;
  info.prefill_tokens = plan.prefill_tokens;
  info.seconds = t1 - t0;
  info.split = split;
  Observe(info, t0);
  PublishStats();
  return true;
}

void Engine::Observe(StepInfo info, double t0) {
  info.host_seconds = forward_end_ > 0 ? std::max(0.0, t0 - forward_end_) : 0;
  forward_end_ = t0 + info.seconds;
  ++local_.steps;
  UpdateStepTime(info.seconds);
  local_.last_batch_tokens = info.batch_tokens;
  local_.last_batch_seqs = info.batch_seqs;
  if (on_step_) on_step_(info);
}

StepSplit Engine::Split() const {
  if (!opts_.profile) return {};
  const ComputeStats& cs = compute_stats_;
  return {cs.upload_s, cs.dispatch_s, cs.shader_s, cs.download_s, cs.total_s, true};
}

// ---- decode groups in flight ------------------------------------------------------------------

bool Engine::CanPipeline() const {
  if (pipe_stages_ < 2 || serial_ || drafter_) return false;
  for (const auto& r : running_)
    if (!r->in_flight && int64_t(r->tokens.size()) - r->n_computed != 1) return false;
  return true;
}

bool Engine::PipeStep() {
  // The requests not in flight make the next group: an equal share of them for each stage no
  // group holds (at least one is free: a group leaves every push once S are in), so that the
  // stages carry groups of about the same rows.
  std::vector<std::shared_ptr<SeqRequest>> ready;
  for (const auto& r : running_)
    if (!r->in_flight) ready.push_back(r);
  const size_t free = std::max<size_t>(1, size_t(pipe_stages_) - flight_.size());
  const size_t take = std::min({(ready.size() + free - 1) / free, size_t(opts_.max_batch_seqs),
                                size_t(opts_.max_batch_tokens)});
  FlightGroup g;
  for (size_t i = 0; i < take; ++i) {
    // Short of blocks: preemption needs every request on the host (the caller drains).
    if (!GrowKv(*ready[i], ready[i]->n_computed + 1)) return false;
    g.items.push_back({ready[i], 1});
  }
  HeadOutput out = HeadOutput::kLogits;
  if (!g.items.empty()) {
    for (auto& it : g.items) {
      // Set before the group enters; a request's table does not change while it is in flight.
      if (paged_) model_->SetBlockTable(it.r->slot, it.r->kv_blocks);
      g.batch.Add(it.r->slot, it.r->n_computed, {it.r->tokens.back()});
      it.r->in_flight = true;
    }
    g.batch.Finalize();
    out = ChooseOutput(g.items);
    g.have_ids = out != HeadOutput::kLogits;
    g.allowed = allowed_;
    g.mask_error = mask_error_;
    g.t0 = SteadySeconds();
    flight_.push_back(std::move(g));
  }
  Advance(take > 0 ? flight_.back().batch : Batch{}, out);
  return true;
}

void Engine::Advance(const Batch& batch, HeadOutput out) {
  const double t0 = SteadySeconds();
  compute_stats_ = ComputeStats{};
  bool left = false;
  try {
    left =
        model_->Push(batch, out, rows_, &logits_, &ids_, opts_.profile ? &compute_stats_ : nullptr);
  } catch (const Error& e) {
    // As a plain step's failure, for every request in flight: the model dropped their groups.
    DropFlight(
        dynamic_cast<const UnavailableError*>(&e) ? FinishReason::kCancelled : FinishReason::kError,
        e.what());
    return;
  } catch (...) {
    DropFlight(FinishReason::kError, "step failed");
    throw;
  }
  const double t1 = SteadySeconds();
  if (!left) return;
  FlightGroup g = std::move(flight_.front());
  flight_.pop_front();
  for (auto& it : g.items) it.r->in_flight = false;
  // Cancelled or past its deadline while in flight: finished now, its token not emitted.
  SweepFinishedRequests(t1);
  allowed_ = std::move(g.allowed);
  mask_error_ = std::move(g.mask_error);
  EmitStep(g.items, g.batch, g.have_ids, g.t0, t1, Split());
  StepInfo info;
  info.batch_tokens = g.batch.n_tokens();
  info.batch_seqs = info.decode_seqs = int(g.items.size());
  info.seconds = t1 - t0;
  info.split = Split();
  Observe(info, t0);
}

void Engine::Drain() {
  while (!flight_.empty()) Advance(Batch{}, HeadOutput::kLogits);
}

void Engine::DropFlight(FinishReason why, const std::string& msg) {
  if (flight_.empty()) return;
  model_->DropInFlight();  // after an error outside Push the model still holds them
  for (FlightGroup& g : flight_)
    for (auto& it : g.items) {
      it.r->in_flight = false;
      if (it.r->slot >= 0) Finish(it.r, why, msg);
    }
  flight_.clear();
}

bool Engine::SpecStep(std::shared_ptr<SeqRequest> r, double now) {
  const int64_t pos = r->n_computed;  // the last token goes here; drafts after it
  const int64_t left = int64_t(r->max_tokens) - r->n_generated;
  // Never past max_tokens (the step's own token is the extra one) nor the context.
  const int k =
      int(std::max<int64_t>(0, std::min<int64_t>({spec_k_, left - 1, context_ - pos - 1})));
  draft_.tokens.clear();
  draft_.probs.clear();
  try {
    if (k > 0) drafter_->Propose(r->tokens, k, r->sampling, &draft_);
  } catch (const Error& e) {
    Finish(r, FinishReason::kError, std::string("draft: ") + e.what());
    PublishStats();
    return true;
  }
  int n = 1 + int(draft_.tokens.size());
  if (!ReserveStep(r, &n, {}, now)) {  // preempted itself: out of KV blocks
    PublishStats();
    return true;
  }
  draft_.tokens.resize(size_t(n - 1));  // the blocks it got may cut the draft
  if (!draft_.probs.empty()) draft_.probs.resize(size_t(n - 1));
  if (paged_) model_->SetBlockTable(r->slot, r->kv_blocks);
  std::vector<int32_t> toks = {r->tokens.back()};
  toks.insert(toks.end(), draft_.tokens.begin(), draft_.tokens.end());
  Batch batch;
  batch.Add(r->slot, pos, toks, /*all_logits=*/true);
  batch.Finalize();
  const bool argmax_only = r->sampler->plain_greedy() && !r->constraint && r->logprobs < 0;
  const double t0 = SteadySeconds();
  compute_stats_ = ComputeStats{};
  try {
    if (argmax_only)
      model_->ForwardArgmax(batch, &ids_, opts_.profile ? &compute_stats_ : nullptr);
    else
      model_->Forward(batch, &logits_, opts_.profile ? &compute_stats_ : nullptr);
  } catch (const Error& e) {
    Finish(
        r,
        dynamic_cast<const UnavailableError*>(&e) ? FinishReason::kCancelled : FinishReason::kError,
        e.what());
    PublishStats();
    return true;
  }
  const double t1 = SteadySeconds();
  const StepSplit split = Split();
  if (r->trace.size() < kMaxTraceEvents)
    r->trace.push_back({"decode", t0, t1, n, n, 1, opts_.instance, split});
  // Rows in order: row i's mask, penalties and logprobs see the tokens emitted before it.
  float* row = nullptr;
  VerifyStep step;
  step.draft = &draft_;
  step.vocab = vocab_;
  step.target = [&](int i, Sampler::Candidates* p) {
    if (argmax_only) {
      p->assign(1, {1.0f, ids_[size_t(i)]});
      return true;
    }
    row = logits_.data() + size_t(i) * size_t(vocab_);
    if (r->constraint && !ApplyConstraint(r, row)) return false;  // finished
    r->sampler->Distribution(row, vocab_, r->tokens, {}, p);
    return true;
  };
  int emitted = 0;
  step.emit = [&](int32_t tok) {
    // The fed tokens before this one are confirmed: the last token and the accepted drafts.
    r->n_computed = pos + (++emitted);
    PublishBlocks(*r);
    return EmitToken(r, row, tok, t1);
  };
  Verify(step, *r->sampler, &dense_, &local_.spec);
  StepInfo info;
  info.batch_tokens = n;
  info.batch_seqs = 1;
  info.decode_seqs = 1;
  info.seconds = t1 - t0;
  info.split = split;
  Observe(info, t0);
  PublishStats();
  return true;
}

bool Engine::EmitToken(std::shared_ptr<SeqRequest>& r, const float* row, int32_t tok, double t) {
  if (r->constraint) r->constraint->Accept(tok);
  SeqEvent e;
  if (r->logprobs >= 0) {
    r->sampler->Processed(row, vocab_, r->tokens, {}, &processed_);
    e.logprobs = std::make_shared<const TokenLogprobs>(
        LogSoftmaxAt(processed_.data(), vocab_, tok, r->logprobs));
  }
  r->tokens.push_back(tok);
  ++r->n_generated;
  ++local_.generated_tokens;
  e.kind = SeqEventKind::kToken;
  e.token = tok;
  e.time = t;
  Emit(*r, e);
  if (std::find(r->stop_ids.begin(), r->stop_ids.end(), tok) != r->stop_ids.end()) {
    Finish(r, FinishReason::kStop);
    return false;
  }
  if (r->n_generated >= r->max_tokens || int64_t(r->tokens.size()) > context_) {
    Finish(r, FinishReason::kLength);
    return false;
  }
  return true;
}

bool Engine::ApplyConstraint(std::shared_ptr<SeqRequest>& r, float* row) {
  int allowed = -1;
  std::string error;
  try {
    allowed = r->constraint->Apply(row, vocab_);
  } catch (const Error& e) {
    error = e.what();
  }
  return ConstraintAllows(r, allowed, error);
}

bool Engine::ConstraintAllows(std::shared_ptr<SeqRequest>& r, int allowed,
                              const std::string& error) {
  if (allowed < 0) {
    Finish(r, FinishReason::kError, error);
    return false;
  }
  if (allowed > 0) return true;
  // Nothing may follow: a complete output without a stop id to emit (ignore_eos) ends here.
  if (r->constraint->complete())
    Finish(r, FinishReason::kStop);
  else
    Finish(r, FinishReason::kError, "no token of the vocabulary can continue the grammar");
  return false;
}

void Engine::PublishStats() {
  local_.running = int(running_.size());
  int64_t used = 0;
  for (auto& r : running_) used += r->n_computed;
  local_.kv_tokens_used = used;
  local_.kv_blocks_total = pool_->n_blocks();
  local_.kv_blocks_used = pool_->used_blocks();
  local_.kv_blocks_cached = pool_->evictable_blocks();
  local_.kv_blocks_free = pool_->free_blocks();
  local_.kv_tokens_reserved = pool_->used_blocks() * kKvBlockTokens;
  if (balancer_) balancer_->Publish(opts_.instance, Load(false));
  std::lock_guard<std::mutex> lock(stats_mu_);
  stats_ = local_;
}

void Engine::UpdateStepTime(double seconds) {
  // An exponential moving average with weight 1/8 (as TCP's smoothed round-trip time): it
  // follows a change of load within a few steps and ignores a single slow one.
  local_.step_s = local_.step_s == 0 ? seconds : local_.step_s + (seconds - local_.step_s) / 8;
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return stats_;
}

}  // namespace es
