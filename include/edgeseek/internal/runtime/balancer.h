// Load balancing between the instances of one model: when an instance is overloaded and another
// has room, the overloaded one hands a preemptible running request to it (migration by
// recompute: the request leaves its KV behind and the target computes it again from prompt +
// generated tokens, with the request's own sampler state, so the output does not change).
//
// Queued requests need no balancing: every instance of a model pulls from the model's one
// RequestQueue when it has room. Running requests are what stays put, so the rule below only
// moves running ones, and only while nothing else waits.
//
// The rule (PlanMigration, a plain function over loads so tests can drive it):
//   occupancy(i) = max(running_i / slots_i, used_blocks_i / blocks_i)
//     (the tighter of slots and KV blocks; a migration on its way to i counts as running there)
//   Source S sheds one request to target T when
//     1. the model's queue holds nothing but migrations (else T takes queued work anyway);
//     2. S is overloaded: occupancy(S) >= policy.overload, and it runs two requests or more (a
//        lone request gains no parallelism from moving, only the cost of its recompute);
//     3. the request may move: its class is preemptible, it has not migrated before (so no
//        request ever bounces), and it has at least policy.min_tokens_left tokens to generate
//        (for fewer, recomputing its KV on T costs more than T's parallel decode gains);
//     4. T has room for it, exactly as T's admission will check: a free slot, prompt +
//        max_tokens within T's context and KV budget, and blocks for its tokens + 1 with a
//        block of headroom per request running on T;
//     5. it helps: occupancy(T) after the move < occupancy(S) before it. A move back would
//        need the opposite strict inequality over the same loads, so loads cannot ping-pong.
//   Among the moves that pass: the target of lowest occupancy after the move, then the
//   lowest recent step time (it only breaks ties: it is noisy and depends on the batch), then
//   the lowest index; the request with the most tokens left to generate, then the fewest
//   tokens to recompute, then the latest admitted.
//
// Blocks are not copied between instances (each instance's KV lives on its own device, in
// its own layout and type); the target recomputes them.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

namespace es {

struct BalancePolicy {
  bool migrate = true;       // off: instances only share the queue
  double overload = 0.75;    // occupancy at which an instance sheds running requests
  int min_tokens_left = 16;  // a request closer to its end than this stays
};

// A running request of the source instance, as the rule sees it.
struct MigrationCandidate {
  bool preemptible = true;  // its QoS class may be preempted
  bool migrated = false;    // it moved once already
  int64_t tokens = 0;       // prompt + generated: what the target recomputes
  int64_t need = 0;         // prompt + max_tokens (SeqRequest::need_tokens)
  int left = 0;             // tokens left to generate
  double admit_time = 0;
};

// One instance's load (Engine publishes its own after every step).
struct InstanceLoad {
  int slots = 0, running = 0;
  int64_t blocks = 0;                          // the KV pool (or its quota)
  int64_t used_blocks = 0;                     // held by running requests
  int64_t available_blocks = 0;                // free or evictable (KvBlockPool::available)
  int64_t max_need = 0;                        // the largest prompt + max_tokens it can hold
  double step_s = 0;                           // recent forward time per step (moving average)
  std::vector<MigrationCandidate> candidates;  // the source's running requests, in order

  double Occupancy() const;
};

struct Migration {
  int to = -1;         // target instance; -1: no migration
  int candidate = -1;  // index into loads[source].candidates
};

int64_t KvBlocksFor(int64_t tokens);  // blocks of kKvBlockTokens covering `tokens`

// Which of `source`'s running requests to move, and where (see the rule above). `queued`:
// requests waiting in the model's queue, migrations on their way not counted.
Migration PlanMigration(const std::vector<InstanceLoad>& loads, int source, size_t queued,
                        const BalancePolicy& policy);

// The loads of one model's instances, shared by their engines (thread-safe). Between a
// request leaving its source and reaching its target it counts as running on the target, so
// a busy source does not move a second request on the strength of a stale load.
class LoadBalancer {
 public:
  LoadBalancer(int n_instances, BalancePolicy policy);
  const BalancePolicy& policy() const { return policy_; }
  int n_instances() const { return int(loads_.size()); }

  void Publish(int instance, InstanceLoad load);  // its candidates are not kept
  // Every instance's published load with migrations on their way added; `self`'s replaced by
  // `own` (an engine's exact view of itself).
  std::vector<InstanceLoad> Loads(int self, const InstanceLoad& own) const;
  std::vector<InstanceLoad> Loads() const;
  // A request of `blocks` blocks left `from` for `to`; then reached `to`, or gave up waiting
  // for it (cancelled, or `to` could not admit it after all).
  void Depart(int from, int to, int64_t blocks);
  void Arrive(int to, int64_t blocks);
  // Migrations so far: (from, to) -> count.
  std::map<std::pair<int, int>, int64_t> migrations() const;

 private:
  struct Incoming {
    int requests = 0;
    int64_t blocks = 0;
  };
  BalancePolicy policy_;
  mutable std::mutex mu_;
  std::vector<InstanceLoad> loads_;                    // guarded by mu_
  std::vector<Incoming> incoming_;                     // guarded by mu_
  std::map<std::pair<int, int>, int64_t> migrations_;  // guarded by mu_
};

}  // namespace es
