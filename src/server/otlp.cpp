// OTLP/HTTP JSON export of request traces (otlp.h).
#include "otlp.h"

#include <httplib.h>

#include <chrono>
#include <cmath>
#include <random>

#include "edgeseek/internal/core/error.h"

namespace es::server {

using json = nlohmann::json;

namespace {

bool IsLowerHex(const std::string& s) {
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

bool AllZero(const std::string& s) { return s.find_first_not_of('0') == std::string::npos; }

json Str(const std::string& key, const std::string& v) {
  return {{"key", key}, {"value", {{"stringValue", v}}}};
}
json Int(const std::string& key, int64_t v) {
  return {{"key", key}, {"value", {{"intValue", std::to_string(v)}}}};  // int64 as a string
}
json Dbl(const std::string& key, double v) {
  return {{"key", key}, {"value", {{"doubleValue", v}}}};
}

constexpr int kKindInternal = 1, kKindServer = 2;
constexpr int kStatusOk = 1, kStatusError = 2;

json Span(const std::string& trace_id, const std::string& span_id, const std::string& parent,
          const std::string& name, int kind, int64_t t0, int64_t t1, json attributes) {
  json s = {{"traceId", trace_id},
            {"spanId", span_id},
            {"name", name},
            {"kind", kind},
            {"startTimeUnixNano", std::to_string(t0)},
            {"endTimeUnixNano", std::to_string(std::max(t0, t1))},
            {"attributes", std::move(attributes)}};
  if (!parent.empty()) s["parentSpanId"] = parent;
  return s;
}

}  // namespace

TraceContext ParseTraceparent(const std::string& h) {
  // version "-" trace-id "-" parent-id "-" flags: 2 + 1 + 32 + 1 + 16 + 1 + 2 = 55 characters
  // (a later version may append fields after another '-').
  TraceContext c;
  if (h.size() < 55 || h[2] != '-' || h[35] != '-' || h[52] != '-') return c;
  if (h.size() > 55 && h[55] != '-') return c;
  const std::string version = h.substr(0, 2), trace = h.substr(3, 32), parent = h.substr(36, 16),
                    flags = h.substr(53, 2);
  if (!IsLowerHex(version) || version == "ff" || !IsLowerHex(trace) || !IsLowerHex(parent) ||
      !IsLowerHex(flags))
    return c;
  if (version == "00" && h.size() != 55) return c;
  if (AllZero(trace) || AllZero(parent)) return c;
  c.trace_id = trace;
  c.parent_span_id = parent;
  return c;
}

std::string RandomHexId(int bytes) {
  thread_local std::mt19937_64 rng{std::random_device{}() ^
                                   (uint64_t(std::random_device{}()) << 32)};
  static const char* kHex = "0123456789abcdef";
  std::string s;
  do {
    s.clear();
    for (int i = 0; i < bytes; ++i) {
      const unsigned b = unsigned(rng() & 0xff);
      s += kHex[b >> 4];
      s += kHex[b & 15];
    }
  } while (AllZero(s));
  return s;
}

ClockPair ClockPair::Now() {
  ClockPair c;
  c.steady_s = SteadySeconds();
  c.unix_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                  std::chrono::system_clock::now().time_since_epoch())
                  .count();
  return c;
}

int64_t ClockPair::UnixNanos(double steady) const {
  return unix_ns + int64_t(std::llround((steady - steady_s) * 1e9));
}

json RequestSpans(const SeqRequest& r, const RequestSpanInfo& info, const ClockPair& clock) {
  const std::string trace_id = info.parent.valid() ? info.parent.trace_id : RandomHexId(16);
  const std::string root_id = RandomHexId(8);
  json spans = json::array();
  json attrs = json::array(
      {Str("edgeseek.request_id", r.id), Str("gen_ai.request.model", info.model),
       Int("gen_ai.usage.input_tokens", info.prompt_tokens),
       Int("gen_ai.usage.output_tokens", info.completion_tokens),
       Str("gen_ai.response.finish_reason", info.finish_reason),
       Str("edgeseek.priority", info.priority), Int("edgeseek.preemptions", r.preemptions),
       Int("edgeseek.migrations", r.migrations)});
  if (!info.client.empty()) attrs.push_back(Str("edgeseek.client", info.client));
  json root = Span(trace_id, root_id, info.parent.parent_span_id, info.name, kKindServer,
                   clock.UnixNanos(info.t_start), clock.UnixNanos(info.t_end), std::move(attrs));
  root["status"] = {{"code", info.error ? kStatusError : kStatusOk}};
  spans.push_back(std::move(root));
  for (const auto& [name, t] : info.extra)
    spans.push_back(Span(trace_id, RandomHexId(8), root_id, name, kKindInternal,
                         clock.UnixNanos(t.first), clock.UnixNanos(t.second), json::array()));
  for (const SeqTraceEvent& e : r.trace) {
    json a = json::array({Int("edgeseek.instance", e.instance)});
    if (e.tokens) a.push_back(Int("edgeseek.tokens", e.tokens));
    if (e.batch_tokens) {
      a.push_back(Int("edgeseek.batch_tokens", e.batch_tokens));
      a.push_back(Int("edgeseek.batch_sequences", e.batch_seqs));
    }
    if (e.split.valid) {
      a.push_back(Dbl("edgeseek.upload_ms", e.split.upload_s * 1e3));
      a.push_back(Dbl("edgeseek.dispatch_ms", e.split.dispatch_s * 1e3));
      a.push_back(Dbl("edgeseek.shader_ms", e.split.shader_s * 1e3));
      a.push_back(Dbl("edgeseek.download_ms", e.split.download_s * 1e3));
    }
    spans.push_back(Span(trace_id, RandomHexId(8), root_id, e.name, kKindInternal,
                         clock.UnixNanos(e.t0), clock.UnixNanos(e.t1), std::move(a)));
  }
  return spans;
}

json ExportRequest(const json& spans, const std::string& service_name, const std::string& version) {
  return {{"resourceSpans",
           json::array({{{"resource",
                          {{"attributes", json::array({Str("service.name", service_name),
                                                       Str("service.version", version)})}}},
                         {"scopeSpans",
                          json::array({{{"scope", {{"name", "edgeseek"}, {"version", version}}},
                                        {"spans", spans}}})}}})}};
}

// ---- the exporter -------------------------------------------------------------------------------
OtlpExporter::OtlpExporter(OtlpConfig cfg, std::string version, ResultFn on_result)
    : cfg_(std::move(cfg)), version_(std::move(version)), on_result_(std::move(on_result)) {
  const std::string& e = cfg_.endpoint;
  const size_t scheme_end = e.find("://");
  const std::string scheme = scheme_end == std::string::npos ? "" : e.substr(0, scheme_end);
  ES_CHECK(scheme == "http" || scheme == "https", "otlp endpoint '", e,
           "': expected http://HOST[:PORT]/PATH (OTLP/HTTP, e.g. http://127.0.0.1:4318/v1/traces)");
  const size_t host_start = scheme_end + 3, slash = e.find('/', host_start);
  const std::string authority =
      e.substr(host_start, slash == std::string::npos ? std::string::npos : slash - host_start);
  ES_CHECK(!authority.empty(), "otlp endpoint '", e, "': no host");
  host_ = scheme + "://" + authority;
  path_ = slash == std::string::npos ? "/v1/traces" : e.substr(slash);
  ES_CHECK(cfg_.max_queued > 0 && cfg_.timeout_s > 0, "otlp: max_queued and timeout_s must be > 0");
  // host[:port] (an IPv6 literal in brackets keeps its colons).
  std::string host = authority;
  int port = scheme == "https" ? 443 : 80;
  const size_t colon = authority.rfind(':');
  if (colon != std::string::npos && authority.find(']', colon) == std::string::npos) {
    host = authority.substr(0, colon);
    try {
      size_t used = 0;
      port = std::stoi(authority.substr(colon + 1), &used);
      ES_CHECK(used == authority.size() - colon - 1 && port > 0 && port < 65536, "bad port");
    } catch (const std::exception&) {
      Fail("otlp endpoint '", e, "': bad port '", authority.substr(colon + 1), "'");
    }
  }
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  // Made here, once, by host and port: httplib's "scheme://host:port" constructor compiles a
  // std::regex, whose first use fills libstdc++'s ctype cache, a write TSan sees racing with
  // the HTTP threads' own first regex.
  if (scheme == "https") {
    client_ = std::make_unique<httplib::SSLClient>(host, port);
  } else {
    client_ = std::make_unique<httplib::ClientImpl>(host, port);
  }
  const auto timeout = std::chrono::duration_cast<std::chrono::microseconds>(
      std::chrono::duration<double>(cfg_.timeout_s));
  client_->set_connection_timeout(timeout);
  client_->set_read_timeout(timeout);
  client_->set_write_timeout(timeout);
  thread_ = std::thread([this] { Run(); });
}

OtlpExporter::~OtlpExporter() { Stop(); }

void OtlpExporter::Export(json spans) {
  size_t n = spans.size();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stop_ && queue_.size() < size_t(cfg_.max_queued)) {
      queue_.push_back(std::move(spans));
      n = 0;
    }
  }
  if (n) {
    if (on_result_) on_result_("dropped", n, "the export queue is full");
  } else {
    cv_.notify_one();
  }
}

void OtlpExporter::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ && !thread_.joinable()) return;
    stop_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

bool OtlpExporter::Post(const json& spans, std::string* error) {
  const std::string body = ExportRequest(spans, cfg_.service_name, version_)
                               .dump(-1, ' ', false, json::error_handler_t::replace);
  auto res = client_->Post(path_.c_str(), body, "application/json");
  if (!res) {
    *error = "POST " + host_ + path_ + ": " + httplib::to_string(res.error());
    return false;
  }
  if (res->status < 200 || res->status >= 300) {
    *error = "POST " + host_ + path_ + ": HTTP " + std::to_string(res->status) + " " +
             res->body.substr(0, 200);
    return false;
  }
  return true;
}

void OtlpExporter::Run() {
  for (;;) {
    std::deque<json> batch;
    bool stopping;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      batch.swap(queue_);
      stopping = stop_;
    }
    if (!batch.empty()) {
      // One POST for everything that waited: a batch, as the SDKs' batch span processor does.
      json spans = json::array();
      for (auto& s : batch)
        for (auto& one : s) spans.push_back(std::move(one));
      std::string error;
      const bool ok = Post(spans, &error);
      if (on_result_) on_result_(ok ? "ok" : "error", spans.size(), error);
    }
    if (stopping) {
      std::lock_guard<std::mutex> lock(mu_);
      if (queue_.empty()) return;
    }
  }
}

}  // namespace es::server
