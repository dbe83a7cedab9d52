// OpenTelemetry traces of finished requests, exported as OTLP/HTTP JSON to a collector
// (docs/server.md "OpenTelemetry"). Each request is one trace (or joins the caller's, from a W3C
// `traceparent` header): a SERVER span for the HTTP request and INTERNAL child spans for what
// its Chrome trace holds — receive+tokenize, queue, each prefill chunk and decode step (with the
// batch and, when profiling, the backend's split), preemptions and migrations.
//
// Encoding (opentelemetry-proto's JSON mapping, OTLP spec "JSON Protobuf Encoding"): trace and
// span ids are lowercase hex (32 and 16 digits), 64-bit integers and nanosecond times are decimal
// strings, enums are numbers (kind 2 SERVER, 1 INTERNAL; status 1 OK, 2 ERROR).
//
// The exporter never blocks a request: finished requests' spans go into a bounded queue that one
// thread sends in batches (POST <endpoint>, Content-Type: application/json); a full queue drops
// (counted), a failed POST is counted and logged, and the server serves on.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>

namespace httplib {
class ClientImpl;
}
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "edgeseek/internal/runtime/engine.h"
#include "edgeseek/internal/server/server.h"

namespace es::server {

// A W3C trace context (traceparent "00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>").
struct TraceContext {
  std::string trace_id, parent_span_id;  // lowercase hex; empty when absent or invalid
  bool valid() const { return !trace_id.empty(); }
};
// Parses a traceparent header; an invalid one (version ff, all-zero ids, bad hex or lengths)
// gives an empty context, as the W3C spec says a receiver must then start a new trace.
TraceContext ParseTraceparent(const std::string& header);

// Random ids: 16 bytes (trace) or 8 bytes (span) as lowercase hex, never all zero.
std::string RandomHexId(int bytes);

// What the exporter needs of a finished request besides its SeqRequest.
struct RequestSpanInfo {
  std::string name;  // "POST /v1/chat/completions"
  std::string model, client, priority, finish_reason;
  int prompt_tokens = 0, completion_tokens = 0;
  bool error = false;   // finished with an error (status ERROR)
  TraceContext parent;  // the caller's, if it sent one
  // Server-side spans (name, t0, t1 in steady seconds), e.g. receive+tokenize.
  std::vector<std::pair<std::string, std::pair<double, double>>> extra;
  double t_start = 0, t_end = 0;  // the SERVER span (steady seconds)
};

// One instant on both clocks, to turn the engine's steady seconds into Unix nanoseconds.
struct ClockPair {
  int64_t unix_ns = 0;
  double steady_s = 0;
  static ClockPair Now();
  int64_t UnixNanos(double steady) const;
};

// The request's spans (a JSON array of OTLP Span objects).
nlohmann::json RequestSpans(const SeqRequest& r, const RequestSpanInfo& info,
                            const ClockPair& clock);
// An ExportTraceServiceRequest of `spans` for service `service_name`.
nlohmann::json ExportRequest(const nlohmann::json& spans, const std::string& service_name,
                             const std::string& version);

class OtlpExporter {
 public:
  // `on_result(outcome, spans, message)`: outcome "ok", "error" (message says why) or "dropped".
  using ResultFn =
      std::function<void(const char* outcome, size_t spans, const std::string& message)>;
  // Throws es::Error naming the endpoint when it is not http://host[:port]/path.
  OtlpExporter(OtlpConfig cfg, std::string version, ResultFn on_result);
  ~OtlpExporter();  // Stop()
  OtlpExporter(const OtlpExporter&) = delete;
  OtlpExporter& operator=(const OtlpExporter&) = delete;

  // Queues one request's spans (RequestSpans); never blocks on the network.
  void Export(nlohmann::json spans);
  // Sends what is queued (up to the timeout), then ends the thread.
  void Stop();

 private:
  void Run();
  bool Post(const nlohmann::json& spans, std::string* error);

  OtlpConfig cfg_;
  std::string version_, host_, path_;
  std::unique_ptr<httplib::ClientImpl> client_;  // the sender thread's only
  ResultFn on_result_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<nlohmann::json> queue_;  // guarded by mu_
  bool stop_ = false;                 // guarded by mu_
  std::thread thread_;
};

}  // namespace es::server
