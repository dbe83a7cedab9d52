// Metrics registry rendered as Prometheus text exposition format (version 0.0.4): counters,
// gauges and histograms with labels. Thread-safe; the server adds collectors that refresh
// gauges (queue lengths, KV usage) at scrape time.
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace es::server {

using Labels = std::vector<std::pair<std::string, std::string>>;

class Metrics {
 public:
  enum class Type { kCounter, kGauge, kHistogram };
  // Declares a family; histograms need ascending upper bounds (+Inf is implicit). Names must
  // match [a-zA-Z_:][a-zA-Z0-9_:]*; counters should end in _total.
  void Define(const std::string& name, Type type, const std::string& help,
              std::vector<double> buckets = {});
  void Add(const std::string& name, const Labels& labels, double v = 1);  // counter
  void Set(const std::string& name, const Labels& labels, double v);      // gauge
  // A counter whose running total is kept elsewhere (an engine's statistics), set at scrape time.
  void SetTotal(const std::string& name, const Labels& labels, double v);
  void Observe(const std::string& name, const Labels& labels, double v);  // histogram
  double Value(const std::string& name, const Labels& labels) const;      // counter/gauge
  // Called (outside the lock) before every Render.
  void AddCollector(std::function<void(Metrics&)> fn);
  // `keep`, when given, chooses the series shown (by their labels); a family keeps its HELP and
  // TYPE lines either way.
  std::string Render(const std::function<bool(const Labels&)>& keep = {});

  static std::vector<double> LatencyBuckets();  // 1 ms .. 60 s
  static std::string EscapeLabel(const std::string& v);

 private:
  struct Series {
    double value = 0;
    std::vector<uint64_t> counts;  // histogram: per bucket (not cumulative), last = +Inf
    double sum = 0;
    uint64_t count = 0;
  };
  struct Family {
    Type type;
    std::string help;
    std::vector<double> buckets;
    std::map<Labels, Series> series;
  };
  Series& Get(const std::string& name, const Labels& labels, Type type);

  mutable std::mutex mu_;
  std::map<std::string, Family> families_;
  std::vector<std::function<void(Metrics&)>> collectors_;
};

}  // namespace es::server
