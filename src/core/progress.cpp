// Progress lines on a terminal (progress.h).
#include "edgeseek/internal/core/progress.h"

#include <unistd.h>

namespace es {

namespace {
std::atomic<std::FILE*> g_out{nullptr};
std::atomic<double> g_delay_s{1.0};

std::string Amount(uint64_t n, Progress::Unit unit) {
  char buf[32];
  if (unit == Progress::Unit::kBytes)
    std::snprintf(buf, sizeof(buf), "%.2f GB", double(n) / 1e9);
  else
    std::snprintf(buf, sizeof(buf), "%llu", (unsigned long long)n);
  return buf;
}
}  // namespace

void SetProgressOutput(std::FILE* out, double delay_s) {
  g_delay_s.store(delay_s);
  g_out.store(out);
}

bool EnableTerminalProgress() {
  if (::isatty(STDERR_FILENO) == 0) return false;
  SetProgressOutput(stderr);
  return true;
}

Progress::Progress(std::string what, uint64_t total, Unit unit)
    : out_(g_out.load()),
      delay_s_(g_delay_s.load()),
      what_(std::move(what)),
      total_(total),
      unit_(unit),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

Progress::~Progress() {
  std::lock_guard<std::mutex> lock(mu_);
  if (drawn_) {
    std::fprintf(out_, "\r\033[K");
    std::fflush(out_);
  }
}

void Progress::Add(uint64_t n) {
  if (!out_) return;
  MaybeDraw(done_.fetch_add(n, std::memory_order_relaxed) + n, nullptr);
}

void Progress::Set(uint64_t done, const std::string& detail) {
  if (!out_) return;
  done_.store(done, std::memory_order_relaxed);
  MaybeDraw(done, &detail);
}

void Progress::MaybeDraw(uint64_t done, const std::string* detail) {
  const auto now = std::chrono::steady_clock::now();
  if (std::chrono::duration<double>(now - start_).count() < delay_s_) return;
  std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
  if (!lock.owns_lock()) return;  // another thread is drawing
  if (detail) detail_ = *detail;
  if (drawn_ && now - last_draw_ < std::chrono::milliseconds(100) && done < total_) return;
  last_draw_ = now;
  drawn_ = true;
  const double s = std::chrono::duration<double>(now - start_).count();
  std::string line = what_ + ": " + Amount(done, unit_);
  if (total_) {
    char pct[16];
    std::snprintf(pct, sizeof(pct), " (%d%%)", int(100.0 * double(done) / double(total_)));
    line += " of " + Amount(total_, unit_) + pct;
  }
  char el[24];
  std::snprintf(el, sizeof(el), "  %.1f s", s);
  line += el;
  if (!detail_.empty())
    line += "  " + (detail_.size() > 40 ? detail_.substr(0, 37) + "..." : detail_);
  std::fprintf(out_, "\r%s\033[K", line.c_str());
  std::fflush(out_);
}

}  // namespace es
