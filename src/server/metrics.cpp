// Prometheus text exposition (metrics.h). Format: "# HELP name text", "# TYPE name type", then
// one line per series `name{k="v",...} value`; histograms as cumulative name_bucket{le=...},
// name_sum and name_count. Label values escape \, " and newline.
#include "metrics.h"

#include <cmath>
#include <cstdio>
#include <sstream>

#include "edgeseek/internal/core/error.h"

namespace es::server {

namespace {
bool ValidName(const std::string& n) {
  if (n.empty()) return false;
  for (size_t i = 0; i < n.size(); ++i) {
    char c = n[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
              (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.0f", v);
    return buf;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

std::string LabelText(const Labels& labels, const std::string& extra_key = {},
                      const std::string& extra_val = {}) {
  if (labels.empty() && extra_key.empty()) return {};
  std::string s = "{";
  bool first = true;
  for (auto& [k, v] : labels) {
    if (!first) s += ",";
    s += k + "=\"" + Metrics::EscapeLabel(v) + "\"";
    first = false;
  }
  if (!extra_key.empty()) {
    if (!first) s += ",";
    s += extra_key + "=\"" + extra_val + "\"";
  }
  return s + "}";
}
}  // namespace

std::string Metrics::EscapeLabel(const std::string& v) {
  std::string o;
  for (char c : v) {
    if (c == '\\')
      o += "\\\\";
    else if (c == '"')
      o += "\\\"";
    else if (c == '\n')
      o += "\\n";
    else
      o += c;
  }
  return o;
}

std::vector<double> Metrics::LatencyBuckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
}

void Metrics::Define(const std::string& name, Type type, const std::string& help,
                     std::vector<double> buckets) {
  ES_ASSERT(ValidName(name));
  for (size_t i = 1; i < buckets.size(); ++i) ES_ASSERT(buckets[i] > buckets[i - 1]);
  std::lock_guard<std::mutex> lock(mu_);
  Family& f = families_[name];
  f.type = type;
  f.help = help;
  f.buckets = std::move(buckets);
}

Metrics::Series& Metrics::Get(const std::string& name, const Labels& labels, Type type) {
  auto it = families_.find(name);
  ES_ASSERT(it != families_.end() && it->second.type == type);
  for (auto& [k, v] : labels) ES_ASSERT(ValidName(k));
  Series& s = it->second.series[labels];
  if (type == Type::kHistogram && s.counts.empty())
    s.counts.assign(it->second.buckets.size() + 1, 0);
  return s;
}

void Metrics::Add(const std::string& name, const Labels& labels, double v) {
  std::lock_guard<std::mutex> lock(mu_);
  Get(name, labels, Type::kCounter).value += v;
}

void Metrics::Set(const std::string& name, const Labels& labels, double v) {
  std::lock_guard<std::mutex> lock(mu_);
  Get(name, labels, Type::kGauge).value = v;
}

void Metrics::SetTotal(const std::string& name, const Labels& labels, double v) {
  std::lock_guard<std::mutex> lock(mu_);
  Get(name, labels, Type::kCounter).value = v;
}

void Metrics::Observe(const std::string& name, const Labels& labels, double v) {
  std::lock_guard<std::mutex> lock(mu_);
  Series& s = Get(name, labels, Type::kHistogram);
  const auto& b = families_[name].buckets;
  size_t i = 0;
  while (i < b.size() && v > b[i]) ++i;
  ++s.counts[i];
  s.sum += v;
  ++s.count;
}

double Metrics::Value(const std::string& name, const Labels& labels) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = families_.find(name);
  if (it == families_.end()) return 0;
  auto s = it->second.series.find(labels);
  return s == it->second.series.end() ? 0 : s->second.value;
}

void Metrics::AddCollector(std::function<void(Metrics&)> fn) {
  std::lock_guard<std::mutex> lock(mu_);
  collectors_.push_back(std::move(fn));
}

std::string Metrics::Render(const std::function<bool(const Labels&)>& keep) {
  std::vector<std::function<void(Metrics&)>> collectors;
  {
    std::lock_guard<std::mutex> lock(mu_);
    collectors = collectors_;
  }
  for (auto& c : collectors) c(*this);
  std::lock_guard<std::mutex> lock(mu_);
  std::ostringstream os;
  for (auto& [name, f] : families_) {
    const char* type = f.type == Type::kCounter ? "counter"
                       : f.type == Type::kGauge ? "gauge"
                                                : "histogram";
    std::string help;
    for (char c : f.help)
      help += c == '\n' ? std::string("\\n") : c == '\\' ? std::string("\\\\") : std::string(1, c);
    os << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n";
    for (auto& [labels, s] : f.series) {
      if (keep && !keep(labels)) continue;
      if (f.type != Type::kHistogram) {
        os << name << LabelText(labels) << " " << FormatValue(s.value) << "\n";
        continue;
      }
      uint64_t cum = 0;
      for (size_t i = 0; i < f.buckets.size(); ++i) {
        cum += s.counts[i];
        os << name << "_bucket" << LabelText(labels, "le", FormatValue(f.buckets[i])) << " " << cum
           << "\n";
      }
      cum += s.counts.back();
      os << name << "_bucket" << LabelText(labels, "le", "+Inf") << " " << cum << "\n";
      os << name << "_sum" << LabelText(labels) << " " << FormatValue(s.sum) << "\n";
      os << name << "_count" << LabelText(labels) << " " << s.count << "\n";
    }
  }
  return os.str();
}

}  // namespace es::server
