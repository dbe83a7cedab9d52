// RequestQueue: the waiting requests of one model and the QoS order in which its engines take
// them (edgeseek/internal/runtime/engine.h). A request migrating to an instance (balancer.h) goes
// to that instance first and to no other; then three rules, in order:
//   1. deadline: a request waiting past its class's preempt_after_s goes first (highest class,
//      then oldest) — the engine preempts a lower class to make room for it;
//   2. smooth weighted round robin between backlogged classes (nginx's algorithm: every class
//      gains its weight, the richest is served and pays the total), so weights 4:1 give 4 of
//      every 5 admissions to the first class, interleaved rather than in bursts;
//   3. within a class, the client furthest behind its weighted share of generated tokens
//      (start-time fair queuing over tokens: virtual time = tokens charged / weight; a request is
//      charged max_tokens when it is given out and refunded what it did not generate), FIFO per
//      client. A client is backlogged while it has requests waiting or running, so a queue that
//      runs dry between one response and the client's next request (HTTP turnaround) does not
//      forfeit the share it is owed; a client back from idle starts at the backlog's minimum.
//      (Without the second rule a client weighted 3 whose requests turn around slowly got ~2.3:1,
//      see docs/server.md "QoS".)
#include <algorithm>
#include <chrono>
#include <limits>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/runtime/engine.h"

namespace es {

namespace {
// Whether engine `instance` may take r: it fits, and it is not on its way to another instance.
bool Eligible(const SeqRequest& r, int64_t max_need, int instance) {
  return r.need_tokens() <= max_need && (r.migrate_to < 0 || r.migrate_to == instance) &&
         (r.pinned_instance < 0 || instance < 0 || r.pinned_instance == instance);
}
}  // namespace

RequestQueue::RequestQueue(QosPolicy policy) : policy_(std::move(policy)) {
  ES_CHECK(!policy_.classes.empty(), "QoS policy: at least one priority class is needed");
  for (auto& c : policy_.classes)
    ES_CHECK(c.weight > 0, "QoS policy: class '", c.name, "' weight must be > 0");
  classes_.resize(policy_.classes.size());
}

std::vector<std::shared_ptr<SeqRequest>>& RequestQueue::FifoOf(Class& c,
                                                               const std::string& client) {
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

RequestQueue::Client& RequestQueue::ClientOf(const std::string& client) {
  for (auto& c : clients_)
    if (c.name == client) return c;
  clients_.push_back(Client{client, WeightOf(client)});
  return clients_.back();
}

void RequestQueue::Activate(Client& c, const SeqRequest& r) {
  if (c.waiting > 0) return;  // still backlogged: keeps its place
  double min_backlog = std::numeric_limits<double>::infinity();  // waiting or running
  double min_waiting = std::numeric_limits<double>::infinity();
  for (auto& o : clients_) {
    if (&o == &c) continue;
    if (o.waiting > 0) min_waiting = std::min(min_waiting, o.vtime);
    if (o.waiting > 0 || o.running > 0) min_backlog = std::min(min_backlog, o.vtime);
  }
  if (c.running == 0) {
    // Back from idle: no credit for the time it asked for nothing.
    if (min_backlog != std::numeric_limits<double>::infinity())
      c.vtime = std::max(c.vtime, min_backlog);
    return;
  }
  // Its queue ran dry while its requests were served (the next one was on its way): it keeps
  // the credit it is owed, bounded by what its running requests and this one are charged, so a
  // client that trickles requests cannot bank an unbounded lead.
  if (min_waiting == std::numeric_limits<double>::infinity()) return;
  double bound = c.running_charge + double(r.max_tokens - r.n_generated) / c.weight;
  c.vtime = std::max(c.vtime, min_waiting - bound);
}

void RequestQueue::Push(std::shared_ptr<SeqRequest> r) {
  ES_ASSERT(r && r->priority >= 0 && r->priority < int(classes_.size()));
  if (r->submit_time == 0) r->submit_time = SteadySeconds();
  {
    std::lock_guard<std::mutex> lock(mu_);
    Client& cl = ClientOf(r->client);
    Activate(cl, *r);
    ++cl.waiting;
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
    ++ClientOf(r->client).waiting;  // keeps its virtual time: it was backlogged all along
    Class& c = classes_[size_t(r->priority)];
    if (r->migrate_to >= 0) ++migrating_;
    auto& fifo = FifoOf(c, r->client);
    fifo.insert(fifo.begin(), std::move(r));
    ++c.waiting;
    ++wake_seq_;
  }
  cv_.notify_all();
}

std::shared_ptr<SeqRequest> RequestQueue::Take(Class& c,
                                               std::vector<std::shared_ptr<SeqRequest>>& fifo,
                                               size_t i) {
  auto r = fifo[i];
  fifo.erase(fifo.begin() + ptrdiff_t(i));
  --c.waiting;
  if (r->migrate_to >= 0) --migrating_;
  Client& cl = ClientOf(r->client);
  --cl.waiting;
  ++cl.running;
  r->admit_generated = r->n_generated;
  // Charged up front for what it may generate; Release refunds what it did not.
  double charge = double(r->max_tokens - r->n_generated) / cl.weight;
  cl.vtime += charge;
  cl.running_charge += charge;
  return r;
}

std::shared_ptr<SeqRequest> RequestQueue::PopFromClass(Class& c, int64_t max_need, int instance,
                                                       double now) {
  if (priority_fn_) {
    // The policy's order over every waiting request of the class that may run here.
    std::vector<std::shared_ptr<SeqRequest>>* best = nullptr;
    size_t best_i = 0;
    double best_score = 0;
    for (auto& [name, fifo] : c.clients)
      for (size_t i = 0; i < fifo.size(); ++i) {
        if (!Eligible(*fifo[i], max_need, instance)) continue;
        const double score = priority_fn_(*fifo[i], now);
        if (!best || score > best_score) best = &fifo, best_i = i, best_score = score;
      }
    return best ? Take(c, *best, best_i) : nullptr;
  }
  std::vector<std::shared_ptr<SeqRequest>>* best = nullptr;
  double best_v = 0;
  for (auto& [name, fifo] : c.clients) {
    if (fifo.empty() || !Eligible(*fifo.front(), max_need, instance)) continue;
    double v = ClientOf(name).vtime;
    if (!best || v < best_v) best = &fifo, best_v = v;  // ties: the first-seen client
  }
  return best ? Take(c, *best, 0) : nullptr;
}

std::shared_ptr<SeqRequest> RequestQueue::PopNext(int64_t max_need, double now, int instance) {
  std::lock_guard<std::mutex> lock(mu_);
  // 0. A request migrated to this instance: it was moved because this one had room for it.
  if (migrating_ > 0 && instance >= 0)
    for (auto& c : classes_)
      for (auto& [name, fifo] : c.clients)
        for (size_t i = 0; i < fifo.size(); ++i)
          if (fifo[i]->migrate_to == instance && fifo[i]->need_tokens() <= max_need)
            return Take(c, fifo, i);
  // 1. Overdue requests, highest class first, oldest first.
  for (size_t ci = 0; ci < classes_.size(); ++ci) {
    double after = policy_.classes[ci].preempt_after_s;
    if (after <= 0 || classes_[ci].waiting == 0) continue;
    std::vector<std::shared_ptr<SeqRequest>>* best_fifo = nullptr;
    for (auto& [name, fifo] : classes_[ci].clients) {
      if (fifo.empty() || !Eligible(*fifo.front(), max_need, instance)) continue;
      if (now - fifo.front()->submit_time < after) continue;
      if (!best_fifo || fifo.front()->submit_time < best_fifo->front()->submit_time)
        best_fifo = &fifo;
    }
    if (best_fifo) return Take(classes_[ci], *best_fifo, 0);
  }
  // 2. Smooth weighted round robin among classes that have a request that fits.
  auto fits = [&](const Class& c) {
    for (auto& [name, fifo] : c.clients) {
      if (!fifo.empty() && Eligible(*fifo.front(), max_need, instance)) return true;
      if (priority_fn_)  // the policy may pick any of the client's requests
        for (const auto& r : fifo)
          if (Eligible(*r, max_need, instance)) return true;
    }
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
  return PopFromClass(classes_[size_t(chosen)], max_need, instance, now);
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
          --ClientOf(r->client).waiting;
          if (r->migrate_to >= 0) --migrating_;
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
    // A migration is not waiting for room: its target has it.
    for (auto& [name, fifo] : classes_[ci].clients)
      if (!fifo.empty() && fifo.front()->migrate_to < 0 && now - fifo.front()->submit_time >= after)
        return int(ci);
  }
  return -1;
}

void RequestQueue::Release(const SeqRequest& r) {
  std::lock_guard<std::mutex> lock(mu_);
  Client& cl = ClientOf(r.client);
  ES_ASSERT(cl.running > 0);
  --cl.running;
  double charged = double(r.max_tokens - r.admit_generated) / cl.weight;
  cl.running_charge = cl.running > 0 ? std::max(0.0, cl.running_charge - charged) : 0.0;
  cl.vtime -= double(r.max_tokens - r.n_generated) / cl.weight;  // refund: pays what it got
}

void RequestQueue::Charge(const std::string& client, int64_t tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  Client& cl = ClientOf(client);
  cl.vtime += double(tokens) / cl.weight;
}

std::vector<RequestQueue::ClientLoad> RequestQueue::clients() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ClientLoad> out;
  for (auto& c : clients_) out.push_back({c.name, c.waiting, c.running, c.vtime});
  return out;
}

size_t RequestQueue::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (auto& c : classes_) n += c.waiting;
  return n;
}

size_t RequestQueue::size_unassigned() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (auto& c : classes_) n += c.waiting;
  return n - migrating_;
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
