// Admission of generation requests against the in-flight limits (docs/server.md "HTTP threads,
// in-flight requests and keep-alive"): a request is admitted when its client has fewer than its
// limit in flight and fewer than the cap of its priority class are in flight in all. The checks
// and the counting happen in one critical section, so a burst of requests never has more than
// either limit admitted at once; an admitted request holds a Ticket, which gives its place back
// when destroyed, whatever path the handler leaves by.
#pragma once

#include <atomic>
#include <map>
#include <mutex>
#include <string>

namespace es::server {

class Admission {
 public:
  enum class Refusal { kNone, kClientLimit, kInFlightCap };

  // An admitted request's place. Move-only; destroying it (or Release()) gives the place back.
  class Ticket {
   public:
    Ticket() = default;
    Ticket(Ticket&& o) noexcept : owner_(o.owner_), client_(std::move(o.client_)) {
      o.owner_ = nullptr;
    }
    Ticket& operator=(Ticket&& o) noexcept;
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;
    ~Ticket() { Release(); }

    explicit operator bool() const { return owner_ != nullptr; }
    void Release();  // no-op on an empty (refused, moved-from or released) ticket

   private:
    friend class Admission;
    Ticket(Admission* owner, std::string client) : owner_(owner), client_(std::move(client)) {}
    Admission* owner_ = nullptr;  // not owned; outlives its tickets
    std::string client_;
  };

  Admission() = default;
  Admission(const Admission&) = delete;
  Admission& operator=(const Admission&) = delete;

  // Admits one request of `client` when fewer than `client_limit` of its requests and fewer than
  // `cap` requests in all are in flight; the client limit is checked first. A refusal returns an
  // empty ticket. *why (if given) says which limit refused; *in_flight (if given) is the number
  // of requests in flight that the decision saw, this one not counted.
  Ticket TryAdmit(const std::string& client, int client_limit, int cap, Refusal* why = nullptr,
                  int* in_flight = nullptr);

  // Requests in flight, all clients; read without the lock (metrics, drain).
  int in_flight() const { return total_.load(); }
  // Requests of one client in flight.
  int in_flight(const std::string& client) const;

 private:
  void Release(const std::string& client);

  mutable std::mutex mu_;
  std::map<std::string, int> per_client_;  // guarded by mu_; clients with requests in flight
  std::atomic<int> total_{0};              // written under mu_, read without it
};

}  // namespace es::server
