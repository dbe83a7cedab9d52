// Admission of generation requests against the in-flight limits (admission.h).
#include "admission.h"

namespace es::server {

Admission::Ticket& Admission::Ticket::operator=(Ticket&& o) noexcept {
  if (this != &o) {
    Release();
    owner_ = o.owner_;
    client_ = std::move(o.client_);
    o.owner_ = nullptr;
  }
  return *this;
}

void Admission::Ticket::Release() {
  if (!owner_) return;
  owner_->Release(client_);
  owner_ = nullptr;
}

Admission::Ticket Admission::TryAdmit(const std::string& client, int client_limit, int cap,
                                      Refusal* why, int* in_flight) {
  std::lock_guard<std::mutex> lock(mu_);
  const int total = total_.load();
  if (in_flight) *in_flight = total;
  auto it = per_client_.find(client);
  const int mine = it == per_client_.end() ? 0 : it->second;
  Refusal r = mine >= client_limit ? Refusal::kClientLimit
              : total >= cap       ? Refusal::kInFlightCap
                                   : Refusal::kNone;
  if (why) *why = r;
  if (r != Refusal::kNone) return {};
  ++per_client_[client];
  ++total_;
  return Ticket(this, client);
}

int Admission::in_flight(const std::string& client) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = per_client_.find(client);
  return it == per_client_.end() ? 0 : it->second;
}

void Admission::Release(const std::string& client) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = per_client_.find(client);
  if (it != per_client_.end() && --it->second <= 0) per_client_.erase(it);
  --total_;
}

}  // namespace es::server
