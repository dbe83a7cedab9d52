// Load balancing between the instances of one model: the migration rule and the shared loads
// (edgeseek/internal/runtime/balancer.h has the rule in words).
#include "edgeseek/internal/runtime/balancer.h"

#include <algorithm>
#include <tuple>

#include "edgeseek/internal/backends/backend.h"
#include "edgeseek/internal/core/error.h"

namespace es {

int64_t KvBlocksFor(int64_t tokens) { return (tokens + kKvBlockTokens - 1) / kKvBlockTokens; }

double InstanceLoad::Occupancy() const {
  const double s = slots > 0 ? double(running) / double(slots) : 1.0;
  const double b = blocks > 0 ? double(used_blocks) / double(blocks) : 1.0;
  return std::max(s, b);
}

Migration PlanMigration(const std::vector<InstanceLoad>& loads, int source, size_t queued,
                        const BalancePolicy& policy) {
  Migration best;
  if (!policy.migrate || queued > 0 || source < 0 || source >= int(loads.size())) return best;
  const InstanceLoad& s = loads[size_t(source)];
  const double occ_s = s.Occupancy();
  // A lone request gains no parallelism from moving, only the cost of its recompute.
  if (occ_s < policy.overload || s.running < 2) return best;
  // The preference order of the rule, smallest first.
  using Key = std::tuple<double, double, int, int, int64_t, double>;
  Key best_key{};
  for (int t = 0; t < int(loads.size()); ++t) {
    if (t == source) continue;
    const InstanceLoad& d = loads[size_t(t)];
    if (d.running >= d.slots) continue;
    for (int c = 0; c < int(s.candidates.size()); ++c) {
      const MigrationCandidate& m = s.candidates[size_t(c)];
      if (!m.preemptible || m.migrated || m.left < policy.min_tokens_left) continue;
      // What the target's admission asks: the request fits its context and budget, and its
      // blocks (tokens + the one it generates) leave a block of headroom per running request.
      const int64_t blocks = KvBlocksFor(m.tokens + 1);
      if (m.need > d.max_need || blocks + d.running > d.available_blocks) continue;
      InstanceLoad after = d;
      ++after.running;
      after.used_blocks += blocks;
      const double occ_t = after.Occupancy();
      if (!(occ_t < occ_s)) continue;
      const Key key{occ_t, d.step_s, t, -m.left, m.tokens, -m.admit_time};
      if (best.to < 0 || key < best_key) {
        best = {t, c};
        best_key = key;
      }
    }
  }
  return best;
}

LoadBalancer::LoadBalancer(int n_instances, BalancePolicy policy)
    : policy_(policy), loads_(size_t(std::max(0, n_instances))), incoming_(loads_.size()) {
  ES_CHECK(n_instances >= 1, "load balancer: ", n_instances, " instances");
}

void LoadBalancer::Publish(int instance, InstanceLoad load) {
  ES_ASSERT(instance >= 0 && instance < n_instances());
  load.candidates.clear();
  std::lock_guard<std::mutex> lock(mu_);
  loads_[size_t(instance)] = std::move(load);
}

std::vector<InstanceLoad> LoadBalancer::Loads(int self, const InstanceLoad& own) const {
  std::vector<InstanceLoad> out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    out = loads_;
    if (self >= 0 && self < n_instances()) out[size_t(self)] = own;
    for (size_t i = 0; i < out.size(); ++i) {
      out[i].running += incoming_[i].requests;
      out[i].used_blocks += incoming_[i].blocks;
      out[i].available_blocks = std::max<int64_t>(0, out[i].available_blocks - incoming_[i].blocks);
    }
  }
  return out;
}

std::vector<InstanceLoad> LoadBalancer::Loads() const { return Loads(-1, {}); }

void LoadBalancer::Depart(int from, int to, int64_t blocks) {
  ES_ASSERT(from >= 0 && from < n_instances() && to >= 0 && to < n_instances());
  std::lock_guard<std::mutex> lock(mu_);
  ++incoming_[size_t(to)].requests;
  incoming_[size_t(to)].blocks += blocks;
  ++migrations_[{from, to}];
}

void LoadBalancer::Arrive(int to, int64_t blocks) {
  ES_ASSERT(to >= 0 && to < n_instances());
  std::lock_guard<std::mutex> lock(mu_);
  Incoming& in = incoming_[size_t(to)];
  ES_ASSERT(in.requests > 0 && in.blocks >= blocks);
  --in.requests;
  in.blocks -= blocks;
}

std::map<std::pair<int, int>, int64_t> LoadBalancer::migrations() const {
  std::lock_guard<std::mutex> lock(mu_);
  return migrations_;
}

}  // namespace es
