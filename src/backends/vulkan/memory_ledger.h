// What the device's memory pools (memory.h) hold from the driver, per pool name: every
// MemoryPool of a Device reports its blocks and its live allocations here, so the backend can
// tell the whole device's account (BackendMemory, backend.h) — the KV caches' pools and the
// staging ring's included, which the backend does not own.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace es {
struct BackendMemory;
}

namespace es::vk {

class MemoryLedger {
 public:
  // A pool of `name` took (delta > 0) or gave back (delta < 0) block bytes of a memory type.
  void Blocks(const std::string& name, bool device_local, bool host_visible, int64_t delta);
  // Its live allocations grew or shrank by delta bytes.
  void Used(const std::string& name, int64_t delta);
  // Peaks so far, per name (pools of one name summed: every KV cache's "kv") and together;
  // device_type is left to the caller.
  BackendMemory Report() const;

 private:
  struct Entry {
    bool device_local = false, host_visible = false;
    uint64_t held = 0, used = 0, peak_held = 0, peak_used = 0;
  };
  mutable std::mutex mu_;
  std::map<std::string, Entry> pools_;
  uint64_t device_local_ = 0, host_ = 0;  // held now: device-local; host-visible only
  uint64_t device_local_peak_ = 0, host_peak_ = 0;
};

}  // namespace es::vk
