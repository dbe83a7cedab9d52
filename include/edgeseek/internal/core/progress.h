// Progress of long waits (generating or loading weights, converting, compiling pipelines) as one
// line on a terminal, updated in place. Off unless a front end turns it on: the CLI calls
// EnableTerminalProgress(), which writes to stderr only when stderr is a TTY, so tests, logs and
// pipes stay clean. A task draws only once it has lasted `delay_s` (a second by default), at most
// ten times a second, and erases its line when it ends.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>

namespace es {

// Where progress lines go; null (the default) turns them off.
void SetProgressOutput(std::FILE* out, double delay_s = 1.0);
// SetProgressOutput(stderr) when stderr is a terminal; returns whether it did.
bool EnableTerminalProgress();

class Progress {
 public:
  enum class Unit { kCount, kBytes };
  // `what`: the wait ("generating weights"); `total`: units of work (0: unknown).
  Progress(std::string what, uint64_t total, Unit unit = Unit::kCount);
  ~Progress();  // erases the line it drew
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // `n` more units done; from any thread.
  void Add(uint64_t n);
  // `done` units done; `detail` (a tensor's name…) shown after the count.
  void Set(uint64_t done, const std::string& detail = "");

 private:
  void MaybeDraw(uint64_t done, const std::string* detail);

  std::FILE* out_;  // not owned; null: silent
  double delay_s_;
  std::string what_, detail_;
  uint64_t total_;
  Unit unit_;
  std::chrono::steady_clock::time_point start_, last_draw_;
  std::atomic<uint64_t> done_{0};
  std::mutex mu_;  // guards detail_, last_draw_, drawn_ and the writes
  bool drawn_ = false;
};

}  // namespace es
