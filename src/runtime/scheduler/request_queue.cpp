// RequestQueue: the waiting requests of one model and the QoS order in which its engines take
// them (edgeseek/runtime/engine.h). Three rules, in order:
//   1. deadline: a request waiting past its class's preempt_after_s goes first (highest class,
//      then oldest) — the engine preempts a lower class to make room for it;
//   2. smooth weighted round robin between backlogged classes (nginx's algorithm: every class
//      gains its weight, the richest is served and pays the total), so weights 4:1 give 4 of
//      every 5 admissions to the first class, interleaved rather than in bursts;
//   3. within a class, the client furthest behind its weighted share of tokens (start-time fair
//      queuing: virtual time = tokens / weight, charged max_tokens at admission and refunded
//      what was not generated), FIFO per client.
#include <algorithm>
#include <chrono>
#include <limits>

#include "edgeseek/core/error.h"
#include "edgeseek/runtime/engine.h"

namespace es {

RequestQueue::RequestQueue(QosPolicy policy) : policy_(std::move(policy)) {
  ES_CHECK(!policy_.classes.empty(), "QoS policy: at least one priority class is needed");
  for (auto& c : policy_.classes)
    ES_CHECK(c.weight > 0, "QoS policy: class '", c.name, "' weight must be > 0");
  classes_.resize(policy_.classes.size());
}

std::vector<std::shared_ptr<SeqRequest>>& RequestQueue::FifoOf(Class& c, const std::string& client) {
  for (auto& [name, fifo] : c.clients)
    if (name == client) return fifo;
  c.clients.emplace_back(client, std::vector<std::shared_ptr<SeqRequest>>{});
  return c.clients.back().second;
}

int RequestQueue::WeightOf(const std::string& client) const {
  for (auto& [name, w] : policy_.client_weights)
    if (name == client) return std::max(1, w);
  return std::max(1, policy_.default_client_weight);
}

double& RequestQueue::VtimeOf(const std::string& client) {
  for (auto& [name, v] : vtime_)
    if (name == client) return v;
  vtime_.emplace_back(client, 0.0);
  return vtime_.back().second;
}

void RequestQueue::Activate(const std::string& client) {
  // A client that comes back after idling starts at the backlog's virtual time, not at its old
  // (lower) one: idling does not bank credit.
  bool waiting = false;
  double min_active = std::numeric_limits<double>::infinity();
  for (auto& c : classes_)
    for (auto& [name, fifo] : c.clients) {
      if (fifo.empty()) continue;
      if (name == client) waiting = true;
      min_active = std::min(min_active, VtimeOf(name));
    }
  if (waiting || min_active == std::numeric_limits<double>::infinity()) return;
  double& v = VtimeOf(client);
  v = std::max(v, min_active);
}

void RequestQueue::Push(std::shared_ptr<SeqRequest> r) {
  ES_ASSERT(r && r->priority >= 0 && r->priority < int(classes_.size()));
  if (r->submit_time == 0) r->submit_time = SteadySeconds();
  {
    std::lock_guard<std::mutex> lock(mu_);
    Activate(r->client);
    Class& c = classes_[size_t(r->priority)];
    FifoOf(c, r->client).push_back(std::move(r));
    ++c.waiting;
    ++wake_seq_;
  }
  cv_.notify_all();
}

void RequestQueue::PushFront(std::shared_ptr<SeqRequest> r) {
  ES_ASSERT(r && r->priority >= 0 && r->priority < int(classes_.size()));
  {
    std::lock_guard<std::mutex> lock(mu_);
    Class& c = classes_[size_t(r->priority)];
    auto& fifo = FifoOf(c, r->client);
    fifo.insert(fifo.begin(), std::move(r));
    ++c.waiting;
    ++wake_seq_;
  }
  cv_.notify_all();
}

std::shared_ptr<SeqRequest> RequestQueue::PopFromClass(Class& c, int64_t max_need) {
  int best = -1;
  double best_v = 0;
  for (size_t i = 0; i < c.clients.size(); ++i) {
    auto& [name, fifo] = c.clients[i];
    if (fifo.empty() || fifo.front()->need_tokens() > max_need) continue;
    double v = VtimeOf(name);
    if (best < 0 || v < best_v) best = int(i), best_v = v;
  }
  if (best < 0) return nullptr;
  auto& [name, fifo] = c.clients[size_t(best)];
  auto r = fifo.front();
  fifo.erase(fifo.begin());
  --c.waiting;
  // Charged up front for what it may generate; the engine refunds what it did not.
  VtimeOf(name) += double(r->max_tokens - r->n_generated) / WeightOf(name);
  return r;
}

std::shared_ptr<SeqRequest> RequestQueue::PopNext(int64_t max_need, double now) {
  std::lock_guard<std::mutex> lock(mu_);
  // 1. Overdue requests, highest class first, oldest first.
  for (size_t ci = 0; ci < classes_.size(); ++ci) {
    double after = policy_.classes[ci].preempt_after_s;
    if (after <= 0 || classes_[ci].waiting == 0) continue;
    std::vector<std::shared_ptr<SeqRequest>>* best_fifo = nullptr;
    for (auto& [name, fifo] : classes_[ci].clients) {
      if (fifo.empty() || fifo.front()->need_tokens() > max_need) continue;
      if (now - fifo.front()->submit_time < after) continue;
      if (!best_fifo || fifo.front()->submit_time < best_fifo->front()->submit_time) best_fifo = &fifo;
    }
    if (best_fifo) {
      auto r = best_fifo->front();
      best_fifo->erase(best_fifo->begin());
      --classes_[ci].waiting;
      VtimeOf(r->client) += double(r->max_tokens - r->n_generated) / WeightOf(r->client);
      return r;
    }
  }
  // 2. Smooth weighted round robin among classes that have a request that fits.
  auto fits = [&](const Class& c) {
    for (auto& [name, fifo] : c.clients)
      if (!fifo.empty() && fifo.front()->need_tokens() <= max_need) return true;
    return false;
  };
  int64_t total = 0;
  int chosen = -1;
  for (size_t ci = 0; ci < classes_.size(); ++ci) {
    Class& c = classes_[ci];
    if (c.waiting == 0 || !fits(c)) continue;
    int w = policy_.classes[ci].weight;
    c.current += w;
    total += w;
    if (chosen < 0 || c.current > classes_[size_t(chosen)].current) chosen = int(ci);
  }
  if (chosen < 0) return nullptr;
  classes_[size_t(chosen)].current -= total;
  return PopFromClass(classes_[size_t(chosen)], max_need);
}

std::vector<std::shared_ptr<SeqRequest>> RequestQueue::TakeDead(double now) {
  std::vector<std::shared_ptr<SeqRequest>> dead;
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& c : classes_)
    for (auto& [name, fifo] : c.clients)
      for (size_t i = 0; i < fifo.size();) {
        auto& r = fifo[i];
        if (r->cancel.load() || (r->deadline > 0 && now >= r->deadline)) {
          dead.push_back(r);
          fifo.erase(fifo.begin() + ptrdiff_t(i));
          --c.waiting;
        } else {
          ++i;
        }
      }
  return dead;
}

int RequestQueue::OverdueClass(double now) {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t ci = 0; ci < classes_.size(); ++ci) {
    double after = policy_.classes[ci].preempt_after_s;
    if (after <= 0 || classes_[ci].waiting == 0) continue;
    for (auto& [name, fifo] : classes_[ci].clients)
      if (!fifo.empty() && now - fifo.front()->submit_time >= after) return int(ci);
  }
  return -1;
}

void RequestQueue::Charge(const std::string& client, int64_t tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  VtimeOf(client) += double(tokens) / WeightOf(client);
}

size_t RequestQueue::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (auto& c : classes_) n += c.waiting;
  return n;
}

std::vector<size_t> RequestQueue::size_per_class() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<size_t> n;
  for (auto& c : classes_) n.push_back(c.waiting);
  return n;
}

void RequestQueue::Wait(double seconds) {
  std::unique_lock<std::mutex> lock(mu_);
  uint64_t seen = wake_seq_;
  cv_.wait_for(lock, std::chrono::duration<double>(seconds), [&] { return wake_seq_ != seen; });
}

void RequestQueue::Notify() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++wake_seq_;
  }
  cv_.notify_all();
}

}  // namespace es
