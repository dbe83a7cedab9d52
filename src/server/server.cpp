// The HTTP server (edgeseek/internal/server/server.h): routes, authentication, limits, routing by
// model, streaming with server-sent events, metrics and traces. Handlers never let an exception
// out: every failure becomes an OpenAI error object with its status.
#include "edgeseek/internal/server/server.h"

#include <httplib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>

#include "admission.h"
#include "connection_gate.h"
#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/runtime/plugin_host.h"
#include "generation.h"
#include "grammar_constraint.h"
#include "metrics.h"
#include "otlp.h"
#include "protocol.h"
#include "tool_calls.h"
#include "web_assets.h"

namespace es {

using json = nlohmann::json;
using server::ApiError;
using server::BadRequest;
using server::GatedServer;
using server::Labels;
using server::Metrics;

namespace {

enum class State { kLoading, kReady, kDraining, kStopped };

struct Instance {
  std::unique_ptr<Engine> engine;
  std::string name;
  size_t kv_bytes_per_token = 0;
};

struct ModelGroup {
  ModelEntry entry;
  std::shared_ptr<const TextModel> text;
  std::shared_ptr<RequestQueue> queue;
  std::vector<Instance> instances;
  std::shared_ptr<LoadBalancer> balancer;  // two or more instances with balance.migrate
  int64_t max_fit = 0;                     // the largest prompt + max_tokens any instance can hold
  bool reasoning = false;
  int64_t created = 0;
  int vocab = 0;
};

struct ClientInfo {
  std::string name;
  int max_concurrent = 0;
  int priority = -1;
  bool shared_prefix = false;  // prefix_scope "shared"
};

ApiError MakeError(int status, const std::string& msg, const std::string& type,
                   const std::string& code = {}, const std::string& param = {}) {
  ApiError e;
  e.status = status;
  e.message = msg;
  e.type = type;
  e.code = code;
  e.param = param;
  return e;
}

void SendError(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  // The client reconnects for its next request, so a refused keep-alive client gives its HTTP
  // thread back instead of holding it with retries; a refusal before the body was read must
  // close too (the unread body would be taken for the next request).
  if (e.close_connection) {
    res.set_header("Connection", "close");
    GatedServer::CloseAfterResponse();
  }
  if (e.retry_after_s > 0)
    res.set_header("Retry-After", std::to_string(int(std::ceil(e.retry_after_s))));
  res.set_content(server::ErrorBody(e).dump(-1, ' ', false, json::error_handler_t::replace),
                  "application/json");
}

std::string Sse(const json& j) {
  return "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

// 128 random bits from the OS: request ids name traces, so they must not be computable from
// another tenant's id (issue 23: they were a counter mixed with the start time).
std::string RandomId(const char* prefix) {
  thread_local std::random_device rd;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s%08x%08x%08x%08x", prefix, unsigned(rd()), unsigned(rd()),
                unsigned(rd()), unsigned(rd()));
  return buf;
}

// The server's endpoints. Paths are matched by comparison, never by a regex: std::regex
// recursed once per character of "/v1/models/<id>", 4.6 MB of stack for an 8 KB path, which a
// worker never gave back (issue 23).
enum class Endpoint {
  kNone,
  kChat,
  kCompletions,
  kModels,
  kModel,
  kHealth,
  kMetrics,
  kTrace,
  kWeb
};

struct PathMatch {
  Endpoint ep = Endpoint::kNone;
  std::string id;  // kModel, kTrace
  bool post() const { return ep == Endpoint::kChat || ep == Endpoint::kCompletions; }
  const char* allow() const { return post() ? "POST" : "GET, HEAD"; }
};

PathMatch MatchPath(const std::string& path) {
  PathMatch m;
  auto tail = [&](const char* prefix) {
    size_t n = std::strlen(prefix);
    if (path.size() <= n || path.compare(0, n, prefix) != 0 ||
        path.find('/', n) != std::string::npos)
      return false;
    m.id = path.substr(n);
    return true;
  };
  if (path == "/v1/chat/completions")
    m.ep = Endpoint::kChat;
  else if (path == "/v1/completions")
    m.ep = Endpoint::kCompletions;
  else if (path == "/v1/models")
    m.ep = Endpoint::kModels;
  else if (path == "/health")
    m.ep = Endpoint::kHealth;
  else if (path == "/metrics")
    m.ep = Endpoint::kMetrics;
  else if (tail("/v1/models/"))
    m.ep = Endpoint::kModel;
  else if (tail("/v1/traces/"))
    m.ep = Endpoint::kTrace;
  else if (path == "/" || tail("/web/"))
    m.ep = Endpoint::kWeb;  // the page (web_assets.h)
  return m;
}

bool HasBody(const httplib::Request& req) {
  return req.has_header("Transfer-Encoding") ||
         (req.has_header("Content-Length") && req.get_header_value("Content-Length") != "0");
}

bool IsJsonType(std::string t) {
  std::transform(t.begin(), t.end(), t.begin(),
                 [](unsigned char c) { return char(std::tolower(c)); });
  size_t semi = t.find(';');
  std::string media = t.substr(0, semi);
  while (!media.empty() && (media.back() == ' ' || media.back() == '\t')) media.pop_back();
  return media == "application/json";
}

std::string Clip(const std::string& s, size_t n = 120) {
  return s.size() <= n ? s : s.substr(0, n) + "...";
}

// ---- generation requests: what passes between the steps, and the one error map ---------------
// A generation request as Parse reads it and Validate completes it. Not copyable: `gp` points
// into creq or preq.
struct GenRequest {
  GenRequest() = default;
  GenRequest(const GenRequest&) = delete;
  GenRequest& operator=(const GenRequest&) = delete;

  // Parse
  bool chat = true;  // /v1/chat/completions (else /v1/completions)
  double t_receive = 0;
  const ClientInfo* client = nullptr;
  server::ChatRequest creq;         // chat
  server::CompletionRequest preq;   // !chat
  server::GenParams* gp = nullptr;  // creq.gen or preq.gen
  ModelGroup* group = nullptr;
  int priority = 0;
  // Validate
  std::vector<int32_t> prompt;
  bool start_in_reasoning = false;  // the template opened the reasoning block
  int max_tokens = 0;
  server::ToolFormat tool_format = server::ToolFormat::kNone;
  bool parse_tools = false;
  std::shared_ptr<TokenConstraint> constraint;
};

struct RequestState;

// Every way a generation request is refused or fails after its body parsed (a bad body is a
// BadRequest, a bad head CheckPost's refusal).
enum class GenFailure {
  kLoading,       // not ready yet: the models are loading
  kShuttingDown,  // not ready any more
  kClientLimit,   // the client's concurrent requests are at its limit
  kInFlightCap,   // every HTTP thread that requests may hold is held
  kQueueFull,     // the model's queue is at max_queue
  kPluginReject,  // a plugin's constraint refused the request
  kPluginError,   // a plugin failed while deciding
  kTimeout,       // the run passed request_timeout_s
  kCancelled,     // the run was cancelled: the server is shutting down
  kClientGone,    // the run was cancelled: the client hung up (a waiting answer notices)
  kEngineError,   // the engine failed the run
  // The last three as a stream's final event: shorter messages, the finish reason as code.
  kStreamTimeout,
  kStreamCancelled,
  kStreamEngineError,
};

// The one map from a failure to the OpenAI error it is answered with. `detail`: the message of
// the refusals that carry numbers or a plugin's words, the seconds of kTimeout, the engine's
// message of the engine errors. Refusals under load close the connection and say when to retry.
ApiError GenerationError(GenFailure f, const std::string& detail = {}) {
  auto refusal = [&](int status, const char* type, const char* code, double retry_after_s) {
    ApiError e = MakeError(status, detail, type, code);
    e.retry_after_s = retry_after_s;
    e.close_connection = true;
    return e;
  };
  ApiError e;
  switch (f) {
    case GenFailure::kLoading:
    case GenFailure::kShuttingDown:
      e = MakeError(503,
                    f == GenFailure::kLoading ? "the server is loading models"
                                              : "the server is shutting down",
                    "server_error", "service_unavailable");
      e.retry_after_s = 5;
      return e;
    case GenFailure::kClientLimit:
      return refusal(429, "rate_limit_error", "rate_limit_exceeded", 1);
    case GenFailure::kInFlightCap:
      return refusal(503, "server_error", "server_busy", 1);
    case GenFailure::kQueueFull:
      return refusal(429, "rate_limit_error", "overloaded", 2);
    case GenFailure::kPluginReject:
      return MakeError(403, detail, "invalid_request_error", "rejected_by_plugin");
    case GenFailure::kPluginError:
      return MakeError(500, detail, "server_error", "plugin_error");
    case GenFailure::kTimeout:
      return MakeError(408, "request timed out after " + detail + " s", "timeout_error", "timeout");
    case GenFailure::kCancelled:
      return MakeError(503, "request cancelled: the server is shutting down", "server_error",
                       "cancelled");
    case GenFailure::kClientGone:
      return MakeError(503, "request cancelled: the client disconnected", "server_error",
                       "cancelled");
    case GenFailure::kEngineError:
      return MakeError(500, "generation failed: " + detail, "server_error", "internal_error");
    case GenFailure::kStreamTimeout:
      return MakeError(408, "request timed out", "server_error",
                       FinishReasonName(FinishReason::kTimeout));
    case GenFailure::kStreamCancelled:
      return MakeError(503, "request cancelled: the server is shutting down", "server_error",
                       FinishReasonName(FinishReason::kCancelled));
    case GenFailure::kStreamEngineError:
      return MakeError(500, "generation failed: " + detail, "server_error",
                       FinishReasonName(FinishReason::kError));
  }
  return MakeError(500, "unknown failure", "server_error", "internal_error");
}

// How a finished run failed; none when it answered (a stop string that ended it early counts
// as an answer, whatever the engine said after).
std::optional<GenFailure> RunFailure(const server::Generation& gen, bool client_gone, bool stream) {
  if (gen.stop_string_hit()) return std::nullopt;
  switch (gen.engine_finish()) {
    case FinishReason::kTimeout:
      return stream ? GenFailure::kStreamTimeout : GenFailure::kTimeout;
    case FinishReason::kCancelled:
      return stream        ? GenFailure::kStreamCancelled
             : client_gone ? GenFailure::kClientGone
                           : GenFailure::kCancelled;
    case FinishReason::kError:
      return stream ? GenFailure::kStreamEngineError : GenFailure::kEngineError;
    default:
      return std::nullopt;
  }
}

}  // namespace

// ==== Impl ====================================================================================
struct Server::Impl {
  ServerConfig cfg;
  ModelBuilder loader;
  GatedServer http;
  std::thread http_thread;
  std::atomic<bool> listen_returned{false};  // listen_after_bind came back (failed or stopped)
  std::atomic<State> state{State::kLoading};
  std::vector<std::unique_ptr<ModelGroup>> groups;
  Metrics metrics;
  PluginHost plugins;                          // loaded before the models; read-only while serving
  std::unique_ptr<server::OtlpExporter> otlp;  // cfg.otlp.endpoint set
  std::map<std::string, ClientInfo> keys;      // api key -> client
  bool auth = false;
  int default_priority = 0;

  server::Admission admission;  // generation requests in flight, per client and in all
  std::mutex mu;                // guards live, traces
  std::map<std::string, std::weak_ptr<SeqRequest>> live;
  struct StoredTrace {
    std::string id, owner, json;  // owner: the client whose request it was
  };
  std::deque<StoredTrace> traces;  // newest last

  std::mutex shut_mu;
  std::condition_variable shut_cv;
  bool shut_requested = false;
  int shut_pipe[2] = {-1, -1};
  std::thread shut_watch;
  std::once_flag shutdown_once;

  Impl(ServerConfig c, ModelBuilder l)
      : cfg(std::move(c)), loader(std::move(l)), http(ReceiveLimitsOf(cfg), cfg.http_threads) {}
  static server::ReceiveLimits ReceiveLimitsOf(const ServerConfig& c) {
    server::ReceiveLimits r;
    r.header_timeout_s = c.limits.header_timeout_s;
    r.body_timeout_s = c.limits.body_timeout_s;
    r.idle_timeout_s = c.limits.idle_timeout_s;
    r.max_connections = size_t(c.limits.max_connections);
    r.max_connections_per_ip = size_t(c.limits.max_connections_per_ip);
    r.gate_body_bytes = std::min<size_t>(r.gate_body_bytes, c.limits.max_body_bytes);
    return r;
  }

  // ---- setup ----
  void DefineMetrics();
  void CollectMetrics(Metrics& m) const;
  void CollectGroupMetrics(Metrics& m, const ModelGroup& g) const;
  void CollectInstanceMetrics(Metrics& m, const ModelGroup& g, size_t i) const;
  void Routes();
  std::string Labelled(const char* base) const { return std::string("edgeseek_") + base; }
  // What /v1/models says about a model beyond OpenAI's fields: how it runs and whether its
  // outputs are batch-invariant.
  json ModelMeta(const ModelGroup& g) const;

  // ---- request helpers ----
  const ClientInfo* Authenticate(const httplib::Request& req, ApiError* err) const;
  ModelGroup* Route(const std::string& model, ApiError* err);
  // Generation requests in flight (waiting or running) hold one HTTP thread each. Of the
  // http_threads, `reserve` are never held by them, so new connections are always read (and
  // answered, if only with 503); the highest class may use `reserve` more than the others, so a
  // high-priority request is still admitted when lower ones fill the server.
  int HttpReserve() const { return std::max(1, cfg.http_threads / 8); }
  int InFlightCap(int priority) const {
    int top = std::max(1, cfg.http_threads - HttpReserve());
    return priority == 0 ? top : std::max(1, top - HttpReserve());
  }
  int PriorityOf(const std::optional<json>& field, const httplib::Request& req,
                 const ClientInfo& client, ApiError* err) const;
  // Checks that need only the head (method, authentication, Content-Type, body framing and
  // size), so a refused request is answered before its body is read. false: `err` says why.
  bool CheckPost(const httplib::Request& req, ApiError* err) const;
  // Routes every request; answers all but the generation endpoints, whose bodies httplib then
  // reads through ReadBody.
  httplib::Server::HandlerResponse PreRoute(const httplib::Request& req, httplib::Response& res);
  std::string ReadBody(const httplib::ContentReader& reader) const;
  void ServeGet(const PathMatch& m, const httplib::Request& req, httplib::Response& res);
  // The generation endpoints: Handle parses, validates, admits and responds (server.cpp's
  // "generation requests"); every refusal is an ApiError thrown to the route's guard.
  void Handle(const httplib::Request& req, const std::string& body, httplib::Response& res,
              bool chat);
  void Parse(const httplib::Request& req, const std::string& body, GenRequest& g);
  void Validate(GenRequest& g);
  void Tokenize(GenRequest& g) const;
  int MaxTokens(const GenRequest& g) const;
  void ToolsAndConstraint(GenRequest& g) const;
  std::shared_ptr<RequestState> Admit(const httplib::Request& req, GenRequest& g);
  server::Admission::Ticket TakeTicket(const GenRequest& g);
  std::shared_ptr<RequestState> NewRequestState(const httplib::Request& req, const GenRequest& g);
  std::shared_ptr<SeqRequest> NewSeqRequest(GenRequest& g, const RequestState& st);
  void ApplyPlugins(const GenRequest& g, const RequestState& st, SeqRequest& seq);
  void RespondWhole(const std::shared_ptr<RequestState>& st, httplib::Response& res);
  void RespondStream(const std::shared_ptr<RequestState>& st, httplib::Response& res);
  void StoreTrace(const std::string& id, const std::string& owner, const std::string& trace);
  void Shutdown();
};

json Server::Impl::ModelMeta(const ModelGroup& g) const {
  json inst = json::array();
  bool invariant = true;
  for (auto& in : g.instances) {
    EngineStats st = in.engine->stats();
    inst.push_back({{"name", in.name},
                    {"slots", in.engine->n_slots()},
                    {"context", in.engine->context()},
                    {"batch_invariant", in.engine->batch_invariant()},
                    {"serial", st.serial}});
    invariant = invariant && in.engine->batch_invariant();
  }
  return {{"deterministic", cfg.scheduler.deterministic},
          {"batch_invariant", invariant},
          {"profile", cfg.scheduler.profile},
          {"reasoning", g.reasoning},
          {"instances", inst}};
}

void Server::Impl::DefineMetrics() {
  using T = Metrics::Type;
  auto lat = Metrics::LatencyBuckets();
  metrics.Define("edgeseek_requests_total", T::kCounter, "HTTP requests by endpoint and status.");
  metrics.Define("edgeseek_request_finish_total", T::kCounter,
                 "Finished generations by model and finish reason.");
  metrics.Define("edgeseek_prompt_tokens_total", T::kCounter,
                 "Prompt tokens of admitted requests.");
  metrics.Define("edgeseek_generation_tokens_total", T::kCounter, "Generated tokens.");
  metrics.Define("edgeseek_client_generation_tokens_total", T::kCounter,
                 "Generated tokens by client.");
  metrics.Define("edgeseek_preemptions_total", T::kCounter,
                 "Sequences preempted by a higher priority.");
  metrics.Define("edgeseek_queue_length", T::kGauge,
                 "Requests waiting, by model and priority class.");
  metrics.Define("edgeseek_running_sequences", T::kGauge,
                 "Sequences holding a KV slot, by instance.");
  metrics.Define("edgeseek_waiting_sequences", T::kGauge,
                 "Sequences waiting for admission, by model.");
  metrics.Define("edgeseek_kv_cache_used_tokens", T::kGauge,
                 "Tokens held in KV caches, by instance.");
  metrics.Define("edgeseek_kv_cache_reserved_tokens", T::kGauge,
                 "Tokens of the KV blocks held by running requests, by instance.");
  metrics.Define("edgeseek_kv_cache_capacity_tokens", T::kGauge,
                 "KV capacity in tokens, by instance.");
  metrics.Define("edgeseek_kv_cache_usage_ratio", T::kGauge,
                 "Used over capacity of the KV caches, by instance.");
  metrics.Define("edgeseek_kv_cache_used_bytes", T::kGauge,
                 "Bytes of KV cache holding tokens, by instance.");
  metrics.Define("edgeseek_kv_blocks", T::kGauge,
                 "KV blocks by instance and state: used (held by running requests), cached (only "
                 "in the prefix cache, evictable), free.");
  metrics.Define("edgeseek_kv_block_tokens", T::kGauge, "Tokens per KV block.");
  metrics.Define("edgeseek_kv_bytes_per_token", T::kGauge,
                 "KV cache bytes per token of the instance's KV type (all layers), by instance.");
  metrics.Define(
      "edgeseek_kv_block_pool_bytes", T::kGauge,
      "Bytes of the KV block pool (all blocks, of the instance's KV type), by instance.");
  metrics.Define("edgeseek_kv_preemptions_total", T::kCounter,
                 "Sequences preempted for want of KV blocks, by instance.");
  metrics.Define("edgeseek_prefix_cache_lookup_tokens_total", T::kCounter,
                 "Tokens of admitted requests looked up in the prefix cache, by instance.");
  metrics.Define("edgeseek_prefix_cache_hit_tokens_total", T::kCounter,
                 "Tokens taken from the prefix cache instead of computed, by instance.");
  metrics.Define("edgeseek_prefix_cache_hit_ratio", T::kGauge,
                 "Prefix-cache hit tokens over lookup tokens since start, by instance.");
  metrics.Define("edgeseek_engine_steps_total", T::kCounter,
                 "Engine steps (forward passes), by instance.");
  metrics.Define(
      "edgeseek_otlp_spans_total", T::kCounter,
      "Spans given to the OTLP exporter, by outcome: ok (the collector took them), error "
      "(the POST failed), dropped (the export queue was full).");
  metrics.Define("edgeseek_plugin_errors_total", T::kCounter,
                 "Plugin callbacks that failed: an error status, a result out of range or an "
                 "exception.");
  metrics.Define(
      "edgeseek_instance_occupancy", T::kGauge,
      "Larger of running/slots and used/total KV blocks, by instance (the balancing rule's load).");
  metrics.Define("edgeseek_recent_step_seconds", T::kGauge,
                 "Forward time per step, moving average over ~8 steps, by instance.");
  metrics.Define("edgeseek_migrations_total", T::kCounter,
                 "Running requests moved from one instance to another (recomputed there), by "
                 "model, from and to.");
  metrics.Define("edgeseek_spec_steps_total", T::kCounter,
                 "Speculative steps (one forward verifying drafted tokens), by instance.");
  metrics.Define("edgeseek_spec_drafted_tokens_total", T::kCounter,
                 "Tokens proposed by the drafter, by instance.");
  metrics.Define(
      "edgeseek_spec_accepted_tokens_total", T::kCounter,
      "Drafted tokens the target accepted, by instance (acceptance rate = accepted / drafted).");
  metrics.Define(
      "edgeseek_spec_emitted_tokens_total", T::kCounter,
      "Tokens the speculative steps emitted, by instance (tokens per step = emitted / steps).");
  metrics.Define("edgeseek_backend_seconds_total", T::kCounter,
                 "Backend time of the forward passes by phase (upload, dispatch, shader, "
                 "download), with profiling on.");
  metrics.Define("edgeseek_client_queue_length", T::kGauge, "Requests waiting, by client.");
  metrics.Define("edgeseek_client_running_sequences", T::kGauge, "Sequences running, by client.");
  metrics.Define("edgeseek_requests_in_flight", T::kGauge,
                 "Generation requests waiting or running; each holds an HTTP thread.");
  metrics.Define("edgeseek_http_threads", T::kGauge, "HTTP worker threads (http_threads).");
  metrics.Define("edgeseek_ready", T::kGauge,
                 "1 when every model is loaded and the server accepts requests.");
  metrics.Define("edgeseek_batch_tokens", T::kHistogram, "Tokens per engine step.",
                 {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048});
  metrics.Define("edgeseek_batch_sequences", T::kHistogram, "Sequences per engine step.",
                 {1, 2, 4, 8, 16, 32, 64, 128, 256});
  metrics.Define("edgeseek_step_seconds", T::kHistogram, "Forward pass time per engine step.", lat);
  // A served decode step beside the bench's (docs/performance.md "Serving"): finer buckets.
  metrics.Define("edgeseek_decode_step_seconds", T::kHistogram,
                 "Forward pass time of the engine steps whose rows all decode (no prompt chunk).",
                 {0.0005, 0.001, 0.002, 0.003, 0.004, 0.005, 0.0075, 0.01, 0.0125, 0.015, 0.0175,
                  0.02, 0.025, 0.05, 0.1, 0.25});
  metrics.Define("edgeseek_step_host_seconds", T::kHistogram,
                 "Engine time between two forward passes (emitting tokens, scheduling, building "
                 "the batch), while the device waits.",
                 {0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1});
  metrics.Define("edgeseek_time_to_first_token_seconds", T::kHistogram, "Submit to first token.",
                 lat);
  metrics.Define("edgeseek_inter_token_latency_seconds", T::kHistogram,
                 "Time between generated tokens.", lat);
  metrics.Define("edgeseek_e2e_request_latency_seconds", T::kHistogram, "Submit to finish.", lat);
  metrics.Define("edgeseek_queue_time_seconds", T::kHistogram,
                 "Submit to admission, by model and priority.", lat);
  metrics.Set("edgeseek_ready", {}, 0);
  metrics.AddCollector([this](Metrics& m) { CollectMetrics(m); });
}

// The gauges and totals read at each scrape, by model and by instance.
void Server::Impl::CollectMetrics(Metrics& m) const {
  m.Set("edgeseek_ready", {}, state.load() == State::kReady ? 1 : 0);
  m.Set("edgeseek_requests_in_flight", {}, admission.in_flight());
  m.Set("edgeseek_http_threads", {}, cfg.http_threads);
  if (state.load() == State::kLoading) return;
  for (const auto& g : groups) CollectGroupMetrics(m, *g);
}

void Server::Impl::CollectGroupMetrics(Metrics& m, const ModelGroup& g) const {
  auto sizes = g.queue->size_per_class();
  size_t total = 0;
  for (size_t c = 0; c < sizes.size(); ++c) {
    m.Set("edgeseek_queue_length", {{"model", g.entry.name}, {"priority", cfg.qos.classes[c].name}},
          double(sizes[c]));
    total += sizes[c];
  }
  m.Set("edgeseek_waiting_sequences", {{"model", g.entry.name}}, double(total));
  for (auto& c : g.queue->clients()) {
    m.Set("edgeseek_client_queue_length", {{"model", g.entry.name}, {"client", c.client}},
          double(c.waiting));
    m.Set("edgeseek_client_running_sequences", {{"model", g.entry.name}, {"client", c.client}},
          double(c.running));
  }
  for (size_t i = 0; i < g.instances.size(); ++i) CollectInstanceMetrics(m, g, i);
  if (g.balancer) {
    // Every pair, zeros included, so that a rate over the series is defined from the start.
    const auto moved = g.balancer->migrations();
    for (int from = 0; from < g.balancer->n_instances(); ++from)
      for (int to = 0; to < g.balancer->n_instances(); ++to) {
        if (from == to) continue;
        const auto it = moved.find({from, to});
        const Labels ml = {
            {"model", g.entry.name}, {"from", std::to_string(from)}, {"to", std::to_string(to)}};
        m.SetTotal("edgeseek_migrations_total", ml, it == moved.end() ? 0.0 : double(it->second));
      }
  }
}

void Server::Impl::CollectInstanceMetrics(Metrics& m, const ModelGroup& g, size_t i) const {
  EngineStats s = g.instances[i].engine->stats();
  Labels l = {{"model", g.entry.name}, {"instance", std::to_string(i)}};
  m.Set("edgeseek_running_sequences", l, s.running);
  m.Set("edgeseek_kv_cache_used_tokens", l, double(s.kv_tokens_used));
  m.Set("edgeseek_kv_cache_reserved_tokens", l, double(s.kv_tokens_reserved));
  m.Set("edgeseek_kv_cache_capacity_tokens", l, double(s.kv_token_capacity));
  m.Set("edgeseek_kv_cache_usage_ratio", l,
        s.kv_token_capacity ? double(s.kv_tokens_used) / double(s.kv_token_capacity) : 0);
  m.Set("edgeseek_kv_cache_used_bytes", l,
        double(s.kv_tokens_used) * double(g.instances[i].kv_bytes_per_token));
  auto blocks = [&](const char* st, int64_t v) {
    Labels ls = l;
    ls.emplace_back("state", st);
    m.Set("edgeseek_kv_blocks", ls, double(v));
  };
  blocks("used", s.kv_blocks_used);
  blocks("cached", s.kv_blocks_cached);
  blocks("free", s.kv_blocks_free);
  m.Set("edgeseek_kv_block_tokens", l, kKvBlockTokens);
  const double per_token = double(g.instances[i].kv_bytes_per_token);
  m.Set("edgeseek_kv_bytes_per_token", l, per_token);
  m.Set("edgeseek_kv_block_pool_bytes", l,
        double(s.kv_blocks_used + s.kv_blocks_cached + s.kv_blocks_free) * kKvBlockTokens *
            per_token);
  m.SetTotal("edgeseek_kv_preemptions_total", l, double(s.kv_preemptions));
  m.SetTotal("edgeseek_prefix_cache_lookup_tokens_total", l, double(s.prefix_lookup_tokens));
  m.SetTotal("edgeseek_prefix_cache_hit_tokens_total", l, double(s.prefix_hit_tokens));
  m.Set("edgeseek_prefix_cache_hit_ratio", l,
        s.prefix_lookup_tokens ? double(s.prefix_hit_tokens) / double(s.prefix_lookup_tokens) : 0);
  InstanceLoad load;
  load.slots = g.instances[i].engine->n_slots();
  load.running = s.running;
  load.blocks = s.kv_blocks_total;
  load.used_blocks = s.kv_blocks_used;
  m.Set("edgeseek_instance_occupancy", l, load.Occupancy());
  m.Set("edgeseek_recent_step_seconds", l, s.step_s);
  if (!g.entry.draft.empty()) {
    m.SetTotal("edgeseek_spec_steps_total", l, double(s.spec.steps));
    m.SetTotal("edgeseek_spec_drafted_tokens_total", l, double(s.spec.drafted));
    m.SetTotal("edgeseek_spec_accepted_tokens_total", l, double(s.spec.accepted));
    m.SetTotal("edgeseek_spec_emitted_tokens_total", l, double(s.spec.emitted));
  }
}

namespace {
// The key of "Authorization: Bearer <key>", the one header that carries it (OpenAI's).
std::string BearerKey(const httplib::Request& req) {
  std::string h = req.get_header_value("Authorization");
  const std::string bearer = "Bearer ";
  return h.rfind(bearer, 0) == 0 ? h.substr(bearer.size()) : std::string();
}
}  // namespace

const ClientInfo* Server::Impl::Authenticate(const httplib::Request& req, ApiError* err) const {
  static const ClientInfo kAnonymous{"anonymous", 0, -1};
  if (!auth) return &kAnonymous;
  std::string key = BearerKey(req);
  auto it = keys.find(key);
  if (key.empty() || it == keys.end()) {
    *err = MakeError(
        401,
        key.empty() ? "missing API key: send 'Authorization: Bearer <key>'" : "invalid API key",
        "authentication_error", "invalid_api_key");
    return nullptr;
  }
  return &it->second;
}

ModelGroup* Server::Impl::Route(const std::string& model, ApiError* err) {
  if (model.empty()) {
    if (groups.size() == 1) return groups.front().get();
    *err = BadRequest(
        "'model' is required: this server has " + std::to_string(groups.size()) + " models",
        "model");
    return nullptr;
  }
  for (auto& g : groups)
    if (g->entry.name == model) return g.get();
  *err = MakeError(404, "the model '" + model + "' does not exist", "invalid_request_error",
                   "model_not_found", "model");
  return nullptr;
}

int Server::Impl::PriorityOf(const std::optional<json>& field, const httplib::Request& req,
                             const ClientInfo& client, ApiError* err) const {
  json p;
  if (field) {
    p = *field;
  } else if (req.has_header("X-Priority")) {
    std::string h = req.get_header_value("X-Priority");
    bool digits = !h.empty() && h.size() < 10 && std::all_of(h.begin(), h.end(), ::isdigit);
    p = digits ? json(std::stoi(h)) : json(h);
  } else {
    return client.priority >= 0 ? client.priority : default_priority;
  }
  const auto& classes = cfg.qos.classes;
  if (p.is_number_integer()) {
    int64_t i = p.get<int64_t>();
    if (i >= 0 && i < int64_t(classes.size())) return int(i);
  } else if (p.is_string()) {
    for (size_t i = 0; i < classes.size(); ++i)
      if (classes[i].name == p.get<std::string>()) return int(i);
  }
  std::string names;
  for (auto& c : classes) names += (names.empty() ? "" : ", ") + c.name;
  *err = BadRequest("unknown priority " + p.dump() + "; classes are " + names + " (or 0.." +
                        std::to_string(classes.size() - 1) + ")",
                    "priority");
  return -1;
}

void Server::Impl::StoreTrace(const std::string& id, const std::string& owner,
                              const std::string& trace) {
  if (!cfg.trace_dir.empty()) {
    std::ofstream f(cfg.trace_dir + "/" + id + ".json");
    f << trace;
  }
  std::lock_guard<std::mutex> lock(mu);
  traces.push_back({id, owner, trace});
  while (traces.size() > 256) traces.pop_front();
}

// ---- the generation endpoints -----------------------------------------------------------------
namespace {

// Everything a request holds while it runs; gives its place in flight back when destroyed.
struct RequestState {
  Server::Impl* impl = nullptr;
  server::Admission::Ticket ticket;
  ModelGroup* group = nullptr;
  std::shared_ptr<SeqRequest> seq;
  std::shared_ptr<server::EventChannel> channel;
  std::unique_ptr<server::Generation> gen;
  std::string id, client, model, object;
  bool chat = true, include_usage = false;
  int64_t created = 0;
  int prompt_tokens = 0;
  double t_receive = 0, t_tokenized = 0;
  server::TraceContext trace_parent;  // the caller's W3C traceparent (OTLP export)
  bool engine_finished = false;
  bool sent_role = false, sent_finish = false, metrics_done = false;
  int logprobs = -1;                               // GenParams::logprobs
  std::shared_ptr<const grammar::TokenTrie> trie;  // token bytes for logprobs
  size_t text_offset = 0;                          // completions' logprobs text_offset
  // Tool calls (chat with tools, tool_choice not none): the format, the known names, and while
  // streaming the parser that turns the text into tool_calls deltas as it comes.
  bool parse_tools = false;
  server::ToolFormat tool_format = server::ToolFormat::kNone;
  std::set<std::string> tool_names;
  std::unique_ptr<server::ToolCallStream> tool_stream;
  // OpenAI's tool_calls entries for parsed calls (ids fresh per call).
  json ToolCallsJson(const std::vector<server::ToolCall>& calls) const {
    json out = json::array();
    for (const auto& c : calls)
      out.push_back({{"id", RandomId("call_")},
                     {"type", "function"},
                     {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
    return out;
  }

  // A streamed tool_calls delta: a call's first piece has its id, type and name, the others a
  // fragment of its arguments (OpenAI's shape).
  json ToolPieceJson(const server::ToolCallPiece& p) const {
    if (p.name.empty()) return {{"index", p.index}, {"function", {{"arguments", p.arguments}}}};
    return {{"index", p.index},
            {"id", RandomId("call_")},
            {"type", "function"},
            {"function", {{"name", p.name}, {"arguments", p.arguments}}}};
  }

  ~RequestState();
  // Drains events into `d`; returns true when the output is complete.
  bool Pump(server::Delta* d, double wait_s);
  void WaitEngine(double max_s);
  void Finish();  // metrics, trace
  json WholeResponse(const server::Delta& all) const;
  bool StreamStep(httplib::DataSink& sink);
  json Usage() const {
    int c = gen->completion_tokens();
    // cached_tokens (OpenAI's field): prompt tokens whose KV came from the prefix cache.
    return {{"prompt_tokens", prompt_tokens},
            {"completion_tokens", c},
            {"total_tokens", prompt_tokens + c},
            {"prompt_tokens_details", {{"cached_tokens", seq ? seq->prefix_hit_tokens : 0}}}};
  }
  // OpenAI's logprobs object for these tokens (null when the request asked for none).
  json Logprobs(const std::vector<server::TokenLogprob>& toks, size_t offset0) const {
    if (logprobs < 0) return nullptr;
    std::vector<std::pair<int32_t, const TokenLogprobs*>> v;
    v.reserve(toks.size());
    for (const auto& t : toks) v.emplace_back(t.token, t.lp.get());
    auto bytes_of = [this](int32_t id) {
      return trie && id >= 0 && id < trie->vocab_size() ? trie->bytes(id) : std::string();
    };
    return chat ? server::ChatLogprobs(v, bytes_of)
                : server::CompletionLogprobs(v, bytes_of, offset0);
  }
  json Chunk(const json& delta_or_text, const json& finish, const json& lp = nullptr) const {
    json choice = {{"index", 0}, {"logprobs", lp}, {"finish_reason", finish}};
    if (chat)
      choice["delta"] = delta_or_text;
    else
      choice["text"] = delta_or_text;
    return {{"id", id},
            {"object", object},
            {"created", created},
            {"model", model},
            {"system_fingerprint", "edgeseek"},
            {"choices", json::array({choice})}};
  }
};

}  // namespace

bool RequestState::Pump(server::Delta* d, double wait_s) {
  std::vector<SeqEvent> events;
  channel->Drain(&events, wait_s);
  int tokens = 0;
  for (auto& e : events) {
    if (e.kind == SeqEventKind::kFinished) engine_finished = true;
    if (e.kind == SeqEventKind::kToken) ++tokens;
    if (gen->done()) continue;
    gen->Consume(e, d);
    if (gen->done() && !engine_finished) seq->cancel = true;  // stop string: free the slot now
  }
  // Counted as they come (not at the end), so the share between clients can be read live.
  if (tokens)
    impl->metrics.Add("edgeseek_client_generation_tokens_total", {{"client", client}}, tokens);
  return gen->done();
}

void RequestState::WaitEngine(double max_s) {
  double until = SteadySeconds() + max_s;
  server::Delta ignored;
  while (!engine_finished && SteadySeconds() < until) Pump(&ignored, 0.05);
}

void RequestState::Finish() {
  if (metrics_done) return;
  metrics_done = true;
  if (!engine_finished) {
    seq->cancel = true;
    WaitEngine(10);
  }
  Metrics& m = impl->metrics;
  const std::string& prio = impl->cfg.qos.classes[size_t(seq->priority)].name;
  Labels ml = {{"model", model}};
  Labels mp = {{"model", model}, {"priority", prio}};
  m.Add("edgeseek_request_finish_total", {{"model", model}, {"reason", gen->finish_reason()}});
  if (gen->admit_time > 0) {
    m.Add("edgeseek_prompt_tokens_total", ml, prompt_tokens);
    m.Observe("edgeseek_queue_time_seconds", mp, gen->admit_time - seq->submit_time);
  }
  m.Add("edgeseek_generation_tokens_total", ml, gen->completion_tokens());
  if (gen->preemptions) m.Add("edgeseek_preemptions_total", ml, gen->preemptions);
  if (gen->first_token_time > 0)
    m.Observe("edgeseek_time_to_first_token_seconds", mp, gen->first_token_time - seq->submit_time);
  for (double g : gen->token_gaps) m.Observe("edgeseek_inter_token_latency_seconds", ml, g);
  double end = gen->finish_time > 0 ? gen->finish_time : SteadySeconds();
  m.Observe("edgeseek_e2e_request_latency_seconds", mp, end - seq->submit_time);
  if (engine_finished) {
    auto trace = server::ChromeTrace(*seq, model,
                                     {{"receive+tokenize", {t_receive, t_tokenized}},
                                      {"respond", {t_tokenized, SteadySeconds()}}});
    impl->StoreTrace(id, client, trace.dump());
    if (impl->otlp) {
      server::RequestSpanInfo info;
      info.name = chat ? "POST /v1/chat/completions" : "POST /v1/completions";
      info.model = model;
      info.client = client;
      info.priority = prio;
      info.finish_reason = gen->finish_reason();
      info.prompt_tokens = prompt_tokens;
      info.completion_tokens = gen->completion_tokens();
      info.error = gen->engine_finish() == FinishReason::kError;
      info.parent = trace_parent;
      info.extra = {{"receive+tokenize", {t_receive, t_tokenized}}};
      info.t_start = t_receive;
      info.t_end = SteadySeconds();
      impl->otlp->Export(server::RequestSpans(*seq, info, server::ClockPair::Now()));
    }
  }
}

RequestState::~RequestState() {
  try {
    if (seq) Finish();
  } catch (...) {
  }
  if (impl) {
    std::lock_guard<std::mutex> lock(impl->mu);
    impl->live.erase(id);
  }
  ticket.Release();  // before the members go: a drain that sees none in flight may stop engines
}

// The answer of a non-streaming request from everything it generated (OpenAI's shape).
json RequestState::WholeResponse(const server::Delta& all) const {
  json out = {
      {"id", id}, {"created", created}, {"model", model}, {"system_fingerprint", "edgeseek"}};
  json choice = {{"index", 0},
                 {"logprobs", Logprobs(all.logprobs, 0)},
                 {"finish_reason", gen->finish_reason()}};
  if (chat) {
    out["object"] = "chat.completion";
    json msg = {{"role", "assistant"}, {"content", all.content}};
    if (parse_tools) {
      // A call that does not parse stays content (auto mode never fails over the model's text).
      server::ParsedOutput p = server::ParseToolCalls(tool_format, all.content, tool_names);
      if (!p.calls.empty()) {
        msg["content"] = p.content.empty() ? json(nullptr) : json(p.content);
        msg["tool_calls"] = ToolCallsJson(p.calls);
        if (choice["finish_reason"] == "stop") choice["finish_reason"] = "tool_calls";
      }
    }
    if (group->reasoning)
      msg["reasoning_content"] = all.reasoning.empty() ? json(nullptr) : json(all.reasoning);
    choice["message"] = msg;
  } else {
    out["object"] = "text_completion";
    choice["text"] = all.content;
  }
  out["choices"] = json::array({choice});
  out["usage"] = Usage();
  return out;
}

// One call of the stream's content provider: the role first, then what the step produced
// (reasoning, content, tool call pieces, logprobs), and at the end the finish or the error, the
// usage and [DONE]; a keep-alive comment when there is nothing to send. false: the client left.
bool RequestState::StreamStep(httplib::DataSink& sink) {
  std::string out;
  if (!sent_role) {
    sent_role = true;
    out +=
        Sse(chat ? Chunk({{"role", "assistant"}, {"content", ""}}, nullptr) : Chunk("", nullptr));
  }
  server::Delta d;
  bool done = Pump(&d, out.empty() ? 0.5 : 0.0);
  // Logprobs ride on the chunk of the step that produced their tokens (with an empty
  // delta when the text is still held back, e.g. inside a UTF-8 character).
  const json lp = d.logprobs.empty() ? json(nullptr) : Logprobs(d.logprobs, text_offset);
  if (!chat) text_offset += d.content.size();
  std::string finish_override, tool_sse;
  if (parse_tools) {
    // Calls leave as tool_calls deltas while the model writes them (tool_calls.h):
    // the name once known, then the arguments token by token.
    std::string content;
    std::vector<server::ToolCallPiece> pieces;
    tool_stream->Feed(d.content, done, &content, &pieces);
    d.content = std::move(content);
    for (const auto& p : pieces)
      tool_sse += Sse(Chunk({{"tool_calls", json::array({ToolPieceJson(p)})}}, nullptr));
    if (done && tool_stream->calls() > 0 && gen->finish_reason() == "stop")
      finish_override = "tool_calls";
  }
  if (chat) {
    if (!d.reasoning.empty()) out += Sse(Chunk({{"reasoning_content", d.reasoning}}, nullptr));
    if (!d.content.empty() || !lp.is_null())
      out += Sse(Chunk({{"content", d.content}}, nullptr, lp));
    out += tool_sse;
  } else if (!d.content.empty() || !lp.is_null()) {
    out += Sse(Chunk(d.content, nullptr, lp));
  }
  if (done) {
    if (auto failure = RunFailure(*gen, /*client_gone=*/false, /*stream=*/true)) {
      // Sse() replaces invalid UTF-8
      out += Sse(server::ErrorBody(GenerationError(*failure, gen->error())));
    } else {
      out += Sse(Chunk(chat ? json::object() : json(""),
                       finish_override.empty() ? gen->finish_reason() : finish_override));
      if (include_usage) {
        json u = Chunk(json::object(), nullptr);
        u["choices"] = json::array();
        u["usage"] = Usage();
        out += Sse(u);
      }
    }
    out += "data: [DONE]\n\n";
    // Finished, and the place given back, before the last bytes leave: a closed-loop client
    // sends its next request as soon as it reads [DONE], and that request must find this one's
    // place free (at 64 clients of one address, limit 64, an H100 load refused 53 of 128 with
    // 429 while the places were still held) and the metrics final.
    Finish();
    ticket.Release();
  } else if (out.empty()) {
    out = ": keep-alive\n\n";  // an SSE comment; also how a gone client is noticed
  }
  if (!sink.write(out.data(), out.size())) {
    seq->cancel = true;  // the client went away: free the slot within a step
    return false;
  }
  if (done) sink.done();
  return true;
}

// ---- generation requests: parse, validate, admit, respond ---------------------------------------
// Handle runs the four steps; each throws the ApiError it refuses with (GenerationError below is
// the one map from a refusal or failure to its status, type and code), and the route's guard
// (Routes) answers it.

void Server::Impl::Handle(const httplib::Request& req, const std::string& body_text,
                          httplib::Response& res, bool chat) {
  GenRequest g;
  g.chat = chat;
  g.t_receive = SteadySeconds();
  Parse(req, body_text, g);
  Validate(g);
  std::shared_ptr<RequestState> st = Admit(req, g);
  if (!g.gp->stream) return RespondWhole(st, res);
  RespondStream(st, res);
}

// Who asks (readiness, authentication), what (the body, by the endpoint's protocol), of which
// model and at which priority.
void Server::Impl::Parse(const httplib::Request& req, const std::string& body_text, GenRequest& g) {
  const State s = state.load();
  if (s != State::kReady)
    throw GenerationError(s == State::kLoading ? GenFailure::kLoading : GenFailure::kShuttingDown);
  ApiError err;
  g.client = Authenticate(req, &err);
  if (!g.client) throw err;

  server::ProtocolLimits plim;
  plim.max_tokens = cfg.limits.max_tokens;
  json body = server::ParseBody(body_text);
  std::string model_name;
  if (g.chat) {
    g.creq = server::ParseChatRequest(body, plim, body_text);
    g.gp = &g.creq.gen;
    model_name = g.creq.model;
  } else {
    g.preq = server::ParseCompletionRequest(body, plim, body_text);
    g.gp = &g.preq.gen;
    model_name = g.preq.model;
  }
  g.group = Route(model_name, &err);
  if (!g.group) throw err;
  g.priority = PriorityOf(g.gp->priority, req, *g.client, &err);
  if (g.priority < 0) throw err;
}

// The request against its model: the prompt's tokens, the room left for the answer, the tool
// call format and the grammar that constrains decoding.
void Server::Impl::Validate(GenRequest& g) {
  Tokenize(g);
  g.max_tokens = MaxTokens(g);
  ToolsAndConstraint(g);
}

void Server::Impl::Tokenize(GenRequest& g) const {
  ModelGroup* group = g.group;
  if (g.chat) {
    std::string text;
    try {
      text = group->text->RenderChat(g.creq.messages, g.creq.tools, g.creq.template_kwargs);
    } catch (const Error& e) {
      throw BadRequest(std::string("chat template failed: ") + e.what(), "messages");
    }
    // The template may open the reasoning block itself (DeepSeek-R1's ends with "<think>\n").
    g.start_in_reasoning = group->reasoning && TemplateOpensReasoning(text);
    g.prompt = group->text->Encode(text, /*add_special=*/false);
  } else if (g.preq.prompt_is_ids) {
    g.prompt = g.preq.prompt_ids;
    for (size_t i = 0; i < g.prompt.size(); ++i)
      if (g.prompt[i] >= group->vocab)
        throw BadRequest("'prompt' token id " + std::to_string(g.prompt[i]) + " at " +
                             std::to_string(i) + " is outside the vocabulary (" +
                             std::to_string(group->vocab) + ")",
                         "prompt");
  } else {
    g.prompt = group->text->Encode(g.preq.prompt_text, /*add_special=*/true);
  }
  if (g.prompt.empty())
    throw BadRequest("the prompt has no tokens", g.chat ? "messages" : "prompt");
}

int Server::Impl::MaxTokens(const GenRequest& g) const {
  const ModelGroup* group = g.group;
  const auto n_prompt = int64_t(g.prompt.size());
  int64_t max_prompt =
      cfg.limits.max_prompt_tokens > 0 ? cfg.limits.max_prompt_tokens : group->max_fit - 1;
  if (n_prompt > max_prompt || n_prompt >= group->max_fit)
    throw BadRequest("the prompt has " + std::to_string(n_prompt) +
                         " tokens; this model accepts at most " +
                         std::to_string(std::min(max_prompt, group->max_fit - 1)),
                     g.chat ? "messages" : "prompt", "context_length_exceeded");
  if (g.gp->max_tokens) {
    const int max_tokens = *g.gp->max_tokens;
    if (n_prompt + max_tokens > group->max_fit)
      throw BadRequest("this model's context holds " + std::to_string(group->max_fit) +
                           " tokens; the prompt (" + std::to_string(n_prompt) +
                           ") plus max_tokens (" + std::to_string(max_tokens) + ") do not fit",
                       "max_tokens", "context_length_exceeded");
    return max_tokens;
  }
  int64_t room = group->max_fit - n_prompt;
  int64_t cap =
      cfg.limits.default_max_tokens > 0 ? cfg.limits.default_max_tokens : cfg.limits.max_tokens;
  return int(std::min(room, cap));
}

// Tool calls take the template's format; required and named calls are constrained by a grammar,
// as are response_format and grammar requests.
void Server::Impl::ToolsAndConstraint(GenRequest& g) const {
  ModelGroup* group = g.group;
  server::GenParams* gp = g.gp;
  const server::ChatRequest& creq = g.creq;
  g.tool_format = g.chat ? server::DetectToolFormat(group->text->chat_template_source())
                         : server::ToolFormat::kNone;
  g.parse_tools = g.chat && !creq.tool_specs.empty() &&
                  creq.tool_choice != server::ToolChoice::kNone &&
                  g.tool_format != server::ToolFormat::kNone;
  if (g.chat && (creq.tool_choice == server::ToolChoice::kRequired ||
                 creq.tool_choice == server::ToolChoice::kNamed)) {
    if (gp->grammar)
      throw BadRequest(
          "'tool_choice' required or named cannot be combined with 'response_format' or 'grammar'",
          "tool_choice");
    if (g.tool_format == server::ToolFormat::kNone)
      throw BadRequest(
          "model '" + group->entry.name + "': its chat template has no tool call format",
          "tool_choice");
    std::vector<server::ToolSpec> callable;
    for (const auto& t : creq.tool_specs)
      if (creq.tool_choice == server::ToolChoice::kRequired || t.name == creq.tool_name)
        callable.push_back(t);
    try {
      gp->grammar = std::make_shared<const grammar::Grammar>(
          grammar::Grammar::ParseGbnf(server::ToolCallGbnf(g.tool_format, callable)));
    } catch (const Error& e) {
      throw BadRequest(std::string("tool call grammar: ") + e.what(), "tools");
    }
  }
  if (gp->grammar) {
    auto trie = group->text->token_trie();
    if (!trie)
      throw BadRequest(
          "model '" + group->entry.name + "' has no tokenizer view for constrained decoding",
          "response_format");
    g.constraint = std::make_shared<server::GrammarConstraint>(
        gp->grammar, std::move(trie),
        gp->ignore_eos ? std::vector<int32_t>{} : group->text->eos_ids());
  }
}

// A place in flight (or the refusal), the request's state and its engine request, the plugins'
// say, then the model's queue.
std::shared_ptr<RequestState> Server::Impl::Admit(const httplib::Request& req, GenRequest& g) {
  server::Admission::Ticket ticket = TakeTicket(g);
  auto st = NewRequestState(req, g);
  st->ticket = std::move(ticket);  // st's destructor gives the place back from here on
  auto seq = NewSeqRequest(g, *st);
  if (!plugins.empty()) ApplyPlugins(g, *st, *seq);
  st->seq = seq;
  st->t_tokenized = seq->submit_time;
  {
    std::lock_guard<std::mutex> lock(mu);
    live[st->id] = seq;
  }
  g.group->queue->Push(seq);
  return st;
}

server::Admission::Ticket Server::Impl::TakeTicket(const GenRequest& g) {
  // The client's limit and the in-flight cap are checked and taken in one step (admission.h).
  const ClientInfo* client = g.client;
  int limit =
      client->max_concurrent > 0 ? client->max_concurrent : cfg.limits.max_concurrent_per_client;
  server::Admission::Refusal refusal;
  int in_flight = 0;
  server::Admission::Ticket ticket =
      admission.TryAdmit(client->name, limit, InFlightCap(g.priority), &refusal, &in_flight);
  if (refusal == server::Admission::Refusal::kClientLimit)
    throw GenerationError(
        GenFailure::kClientLimit,
        "too many concurrent requests for this client (limit " + std::to_string(limit) + ")");
  // Every request in flight holds an HTTP thread until it ends; past this cap the threads that
  // read new connections (and the top class's share) would be gone (docs/server.md).
  if (refusal == server::Admission::Refusal::kInFlightCap)
    throw GenerationError(GenFailure::kInFlightCap,
                          "the server is at capacity: " + std::to_string(in_flight) +
                              " requests are in flight for " + std::to_string(cfg.http_threads) +
                              " HTTP threads (http_threads); retry later");
  if (g.group->queue->size() >= size_t(cfg.limits.max_queue))  // (the ticket gives the place back)
    throw GenerationError(GenFailure::kQueueFull,
                          "the server is overloaded: " + std::to_string(g.group->queue->size()) +
                              " requests are queued");
  return ticket;
}

std::shared_ptr<RequestState> Server::Impl::NewRequestState(const httplib::Request& req,
                                                            const GenRequest& g) {
  const bool chat = g.chat;
  ModelGroup* group = g.group;
  auto st = std::make_shared<RequestState>();
  st->impl = this;
  st->client = g.client->name;
  st->id = RandomId(chat ? "chatcmpl-" : "cmpl-");
  st->chat = chat;
  st->object = chat ? "chat.completion.chunk" : "text_completion";
  st->model = group->entry.name;
  st->group = group;
  st->created = int64_t(std::time(nullptr));
  st->include_usage = g.gp->include_usage;
  st->logprobs = g.gp->logprobs;
  st->parse_tools = g.parse_tools;
  st->tool_format = g.tool_format;
  for (const auto& t : g.creq.tool_specs) st->tool_names.insert(t.name);
  if (g.parse_tools)
    st->tool_stream = std::make_unique<server::ToolCallStream>(g.tool_format, st->tool_names);
  if (g.gp->logprobs >= 0) st->trie = group->text->token_trie();
  st->prompt_tokens = int(g.prompt.size());
  st->t_receive = g.t_receive;
  if (otlp) st->trace_parent = server::ParseTraceparent(req.get_header_value("traceparent"));
  st->channel = std::make_shared<server::EventChannel>();
  st->gen = std::make_unique<server::Generation>(group->text, g.gp->stop, chat && group->reasoning,
                                                 g.start_in_reasoning);
  return st;
}

std::shared_ptr<SeqRequest> Server::Impl::NewSeqRequest(GenRequest& g, const RequestState& st) {
  const server::GenParams* gp = g.gp;
  auto seq = std::make_shared<SeqRequest>();
  seq->id = st.id;
  seq->prompt = std::move(g.prompt);
  seq->sampling = gp->sampling;
  seq->max_tokens = g.max_tokens;
  if (!gp->ignore_eos) seq->stop_ids = g.group->text->eos_ids();
  seq->priority = g.priority;
  seq->client = g.client->name;
  // Cached KV blocks are shared within a scope only: a client's own, or the shared one.
  seq->prefix_scope = g.client->shared_prefix ? "" : "client:" + g.client->name;
  seq->constraint = std::move(g.constraint);
  seq->logprobs = gp->logprobs;
  seq->submit_time = SteadySeconds();
  seq->deadline = seq->submit_time + cfg.limits.request_timeout_s;
  seq->on_event = [ch = st.channel](const SeqEvent& e) { ch->Push(e); };
  seq->metadata = gp->metadata;
  return seq;
}

// Plugins' constraints decide before the request is queued; probes see it run.
void Server::Impl::ApplyPlugins(const GenRequest& g, const RequestState& st, SeqRequest& seq) {
  const PluginRequestContext ctx{g.group->entry.name, cfg.qos.classes[size_t(g.priority)].name,
                                 int(g.group->instances.size())};
  const PluginDecision d = plugins.Check(seq, ctx);
  if (d.kind == PluginDecision::Kind::kReject)
    throw GenerationError(GenFailure::kPluginReject,
                          "request rejected by plugin '" + d.plugin + "': " + d.message);
  if (d.kind == PluginDecision::Kind::kError)
    throw GenerationError(GenFailure::kPluginError, d.message + "; the request was not run");
  if (d.kind == PluginDecision::Kind::kRoute) seq.pinned_instance = d.instance;
  // On the engine thread (the request owns this function, so `r` outlives it).
  // Probes first: a finish is probed before the client can see the end.
  seq.on_event = [ch = st.channel, this, ctx, r = &seq,
                  started = false](const SeqEvent& e) mutable {
    if (e.kind == SeqEventKind::kAdmitted && !started) {
      started = true;
      plugins.OnRequestStart(*r, ctx);
    } else if (e.kind == SeqEventKind::kFinished) {
      plugins.OnRequestFinish(*r, ctx, e.finish, r->n_generated);
    }
    ch->Push(e);
  };
}

// Non-streaming: the handler's thread waits for the end, so it also watches the socket: a client
// that hung up gets its generation cancelled (its slot and KV freed within a step), not run to
// the end.
void Server::Impl::RespondWhole(const std::shared_ptr<RequestState>& st, httplib::Response& res) {
  server::Delta all;
  bool client_gone = false;
  while (!st->Pump(&all, 0.25)) {
    if (!client_gone && GatedServer::ClientGone()) {
      client_gone = true;
      st->seq->cancel = true;
    }
  }
  st->WaitEngine(5);
  if (auto failure = RunFailure(*st->gen, client_gone, /*stream=*/false)) {
    st->Finish();
    throw GenerationError(*failure, *failure == GenFailure::kTimeout
                                        ? std::to_string(int(cfg.limits.request_timeout_s))
                                        : st->gen->error());
  }
  json out = st->WholeResponse(all);
  st->Finish();
  st->ticket.Release();  // as a stream's end does (StreamStep): the place is free before the answer
  res.set_content(out.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

// Streaming: server-sent events, one chunk per step's text (RequestState::StreamStep).
void Server::Impl::RespondStream(const std::shared_ptr<RequestState>& st, httplib::Response& res) {
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [st](size_t, httplib::DataSink& sink) -> bool {
        try {
          return st->StreamStep(sink);
        } catch (const std::exception& e) {
          std::fprintf(stderr, "edgeseek serve: stream %s failed: %s\n", st->id.c_str(), e.what());
          st->seq->cancel = true;
          return false;
        }
      },
      [st](bool success) {
        if (!st->gen->done() || !success) st->seq->cancel = true;
      });
}

bool Server::Impl::CheckPost(const httplib::Request& req, ApiError* err) const {
  // Every refusal here closes the connection: the body is unread, and without a usable length
  // its end is unknown.
  auto refuse = [&](int status, const std::string& msg, const char* type, const char* code) {
    *err = MakeError(status, msg, type, code);
    err->close_connection = true;
    return false;
  };
  if (!Authenticate(req, err)) {
    err->close_connection = true;
    return false;
  }
  // A form or text/plain POST is a "simple" cross-origin request a browser sends without asking;
  // requiring JSON's media type keeps web pages from driving the server (issue 23).
  if (!IsJsonType(req.get_header_value("Content-Type")))
    return refuse(415,
                  "Content-Type must be application/json, got '" +
                      Clip(req.get_header_value("Content-Type")) + "'",
                  "invalid_request_error", "unsupported_media_type");
  std::string enc = req.get_header_value("Content-Encoding");
  if (!enc.empty() && enc != "identity")
    return refuse(
        415, "Content-Encoding '" + Clip(enc) + "' is not supported; send the body uncompressed",
        "invalid_request_error", "unsupported_media_type");
  size_t n_length = req.get_header_value_count("Content-Length");
  if (req.has_header("Transfer-Encoding")) {
    if (req.get_header_value_count("Transfer-Encoding") != 1 ||
        req.get_header_value("Transfer-Encoding") != "chunked")
      return refuse(501,
                    "Transfer-Encoding '" + Clip(req.get_header_value("Transfer-Encoding")) +
                        "' is not supported (only 'chunked')",
                    "invalid_request_error", "not_implemented");
    if (n_length > 0)
      return refuse(400, "a request must not carry both Content-Length and Transfer-Encoding",
                    "invalid_request_error", "bad_framing");
    return true;  // the decoded size is counted while it is read (ReadBody)
  }
  // Without a length the body would run to the end of the connection, and a client that waits
  // for the answer would wait for the read timeout.
  if (n_length == 0)
    return refuse(411, "Content-Length (or Transfer-Encoding: chunked) is required",
                  "invalid_request_error", "length_required");
  std::string len = req.get_header_value("Content-Length");
  bool digits = !len.empty() && len.size() <= 19 && std::all_of(len.begin(), len.end(), ::isdigit);
  if (n_length != 1 || !digits)
    return refuse(400, "Content-Length must be one decimal number, got '" + Clip(len) + "'",
                  "invalid_request_error", "bad_framing");
  uint64_t bytes = std::stoull(len);
  if (bytes > cfg.limits.max_body_bytes)
    return refuse(413,
                  "request body of " + len + " bytes exceeds the limit of " +
                      std::to_string(cfg.limits.max_body_bytes) + " (limits.max_body_bytes)",
                  "invalid_request_error", "request_too_large");
  return true;
}

std::string Server::Impl::ReadBody(const httplib::ContentReader& reader) const {
  std::string body;
  bool too_big = false;
  const size_t max = cfg.limits.max_body_bytes;
  // Counted here, after any transfer decoding: a chunked body is not covered by httplib's
  // payload limit (issue 23: 50 MB were read and tokenized).
  bool ok = reader([&](const char* data, size_t n) {
    if (body.size() + n > max) {
      too_big = true;
      return false;
    }
    body.append(data, n);
    return true;
  });
  if (ok) return body;
  ApiError e;
  if (too_big)
    e = MakeError(413,
                  "request body exceeds the limit of " + std::to_string(max) +
                      " bytes (limits.max_body_bytes)",
                  "invalid_request_error", "request_too_large");
  else if (GatedServer::ReceiveTimedOut())
    e = MakeError(408,
                  "request body not received in time: " + std::to_string(body.size()) +
                      " bytes came (limits.body_timeout_s, limits.idle_timeout_s)",
                  "invalid_request_error", "request_timeout");
  else
    e = MakeError(400,
                  "request body is incomplete or badly framed after " +
                      std::to_string(body.size()) + " bytes",
                  "invalid_request_error", "bad_framing");
  e.close_connection = true;
  throw e;
}

void Server::Impl::ServeGet(const PathMatch& m, const httplib::Request& req, httplib::Response& r) {
  ApiError err;
  switch (m.ep) {
    case Endpoint::kHealth: {
      State s = state.load();
      r.status = s == State::kReady ? 200 : 503;
      const char* name = s == State::kReady ? "ok" : s == State::kLoading ? "loading" : "draining";
      if (s != State::kReady) r.set_header("Retry-After", "5");
      json body = {{"status", name},
                   {"deterministic", cfg.scheduler.deterministic},
                   {"profile", cfg.scheduler.profile}};
      if (s != State::kLoading) {
        bool invariant = true;
        for (auto& g : groups)
          for (auto& in : g->instances) invariant = invariant && in.engine->batch_invariant();
        body["batch_invariant"] = invariant;
      }
      return r.set_content(body.dump(), "application/json");
    }
    case Endpoint::kMetrics: {
      // With keys, a scrape needs one unless metrics_public says otherwise; either way the
      // per-client series shown are the caller's own (none without a key), so one tenant does
      // not learn the others' names or token counts.
      const ClientInfo* client = nullptr;
      std::string key = BearerKey(req);
      bool operator_key =
          !key.empty() && std::find(cfg.metrics_keys.begin(), cfg.metrics_keys.end(), key) !=
                              cfg.metrics_keys.end();
      if (auth && !operator_key) {
        bool has_key = req.has_header("Authorization");
        if (has_key || !cfg.metrics_public) {
          client = Authenticate(req, &err);
          if (!client) return SendError(r, err);
        }
      }
      std::string viewer = client ? client->name : std::string();
      bool all_clients = !auth || operator_key;
      return r.set_content(metrics.Render([&](const Labels& labels) {
        if (all_clients) return true;
        for (auto& [k, v] : labels)
          if (k == "client") return v == viewer;
        return true;
      }),
                           "text/plain; version=0.0.4; charset=utf-8");
    }
    case Endpoint::kModels: {
      if (!Authenticate(req, &err)) return SendError(r, err);
      json data = json::array();
      if (state.load() != State::kLoading)
        for (auto& g : groups)
          data.push_back({{"id", g->entry.name},
                          {"object", "model"},
                          {"created", g->created},
                          {"owned_by", "edgeseek"},
                          {"max_model_len", g->max_fit},
                          {"instances", g->instances.size()},
                          {"edgeseek", ModelMeta(*g)}});
      return r.set_content(json{{"object", "list"}, {"data", data}}.dump(), "application/json");
    }
    case Endpoint::kModel: {
      if (!Authenticate(req, &err)) return SendError(r, err);
      if (state.load() == State::kLoading) {
        err = MakeError(503, "the server is loading models", "server_error", "service_unavailable");
        err.retry_after_s = 5;
        return SendError(r, err);
      }
      ModelGroup* g = Route(m.id, &err);
      if (!g) return SendError(r, err);
      return r.set_content(json{{"id", g->entry.name},
                                {"object", "model"},
                                {"created", g->created},
                                {"owned_by", "edgeseek"},
                                {"edgeseek", ModelMeta(*g)}}
                               .dump(),
                           "application/json");
    }
    case Endpoint::kTrace: {
      const ClientInfo* client = Authenticate(req, &err);
      if (!client) return SendError(r, err);
      // Another client's trace answers as a missing one: its existence is not told either.
      std::lock_guard<std::mutex> lock(mu);
      for (auto& t : traces)
        if (t.id == m.id && t.owner == client->name)
          return r.set_content(t.json, "application/json");
      return SendError(
          r,
          MakeError(404, "no trace for request '" + Clip(m.id) + "' (only the last 256 are kept)",
                    "invalid_request_error", "trace_not_found"));
    }
    case Endpoint::kWeb: {
      // Public, like /health: the page holds no data; the APIs it calls ask for the key.
      const server::WebAsset* a = server::FindWebAsset(req.path);
      if (!a)
        return SendError(r, MakeError(404, "no such file: " + Clip(req.path),
                                      "invalid_request_error", "not_found"));
      r.set_header("Content-Security-Policy", server::kWebContentSecurityPolicy);
      r.set_header("X-Content-Type-Options", "nosniff");
      r.set_header("Referrer-Policy", "no-referrer");
      r.set_header("Cross-Origin-Opener-Policy", "same-origin");
      // Revalidated on every load (the names carry no version), answered by 304 when unchanged.
      r.set_header("Cache-Control", "no-cache");
      r.set_header("ETag", a->etag);
      if (req.get_header_value("If-None-Match") == a->etag) {
        r.status = 304;
        return;
      }
      return r.set_content(reinterpret_cast<const char*>(a->data), a->size, a->content_type);
    }
    default:
      return SendError(r, MakeError(404, "no such endpoint", "invalid_request_error", "not_found"));
  }
}

httplib::Server::HandlerResponse Server::Impl::PreRoute(const httplib::Request& req,
                                                        httplib::Response& res) {
  using HR = httplib::Server::HandlerResponse;
  PathMatch m = MatchPath(req.path);
  if (m.ep == Endpoint::kNone) {
    ApiError e =
        MakeError(404, "no such endpoint: " + Clip(req.path), "invalid_request_error", "not_found");
    e.close_connection = HasBody(req);
    SendError(res, e);
    return HR::Handled;
  }
  bool get = req.method == "GET" || req.method == "HEAD";
  if (m.post() ? req.method != "POST" : !get) {
    res.set_header("Allow", m.allow());
    ApiError e = MakeError(405,
                           "method " + Clip(req.method, 16) + " is not allowed on " +
                               Clip(req.path) + "; use " + m.allow(),
                           "invalid_request_error", "method_not_allowed");
    e.close_connection = HasBody(req);
    SendError(res, e);
    return HR::Handled;
  }
  if (m.post()) {
    ApiError e;
    if (!CheckPost(req, &e)) {
      SendError(res, e);
      return HR::Handled;
    }
    return HR::Unhandled;  // httplib calls the endpoint's handler, which reads the body
  }
  ServeGet(m, req, res);
  return HR::Handled;
}

void Server::Impl::Routes() {
  http.set_payload_max_length(cfg.limits.max_body_bytes);
  // Per read while a response is written or a large body read; the gate's deadlines
  // (header_timeout_s, body_timeout_s, idle_timeout_s) bound how long a request may take to arrive.
  http.set_read_timeout(30, 0);
  http.set_write_timeout(30, 0);
  http.set_keep_alive_max_count(1000);
  // Longer than keep-alive clients keep an idle socket (node's agentkeepalive, the openai
  // client's agent: 4 s), so a client never reuses a socket the server is closing (ECONNRESET,
  // "socket hang up"). Idle keep-alive connections wait in the gate, not on an HTTP thread.
  http.set_keep_alive_timeout(5);

  auto guarded = [](const std::function<void(const httplib::Request&, httplib::Response&)>& fn) {
    return [fn](const httplib::Request& req, httplib::Response& res) {
      try {
        fn(req, res);
      } catch (const ApiError& e) {
        SendError(res, e);
      } catch (const Error& e) {
        SendError(res, BadRequest(e.what()));
      } catch (const std::bad_alloc&) {
        SendError(res, MakeError(503, "out of memory", "server_error", "out_of_memory"));
      } catch (const std::exception& e) {
        SendError(res, MakeError(500, std::string("internal error: ") + e.what(), "server_error",
                                 "internal_error"));
      }
    };
  };

  http.set_pre_routing_handler(
      [this, guarded](const httplib::Request& req, httplib::Response& res) {
        auto answer = httplib::Server::HandlerResponse::Handled;
        guarded([&](const httplib::Request& q, httplib::Response& r) { answer = PreRoute(q, r); })(
            req, res);
        return answer;
      });
  // A client that sends "Expect: 100-continue" waits for the go-ahead before its body: it gets
  // the refusal (401, 413, 415...) instead, and the body is never sent.
  http.set_expect_100_continue_handler([this](const httplib::Request& req, httplib::Response& res) {
    PathMatch m = MatchPath(req.path);
    if (!m.post() || req.method != "POST") return 100;
    ApiError e;
    if (CheckPost(req, &e)) return 100;
    e.close_connection = true;
    SendError(res, e);
    return e.status;
  });
  for (bool chat : {true, false}) {
    httplib::Server::HandlerWithContentReader h =
        [this, guarded, chat](const httplib::Request& q, httplib::Response& r,
                              const httplib::ContentReader& reader) {
          guarded([&](const httplib::Request& req, httplib::Response& res) {
            Handle(req, ReadBody(reader), res, chat);
          })(q, r);
        };
    http.Post(chat ? "/v1/chat/completions" : "/v1/completions", h);
  }
  http.set_error_handler([](const httplib::Request&, httplib::Response& r) {
    if (!r.body.empty()) return;
    ApiError e;
    e.status = r.status;
    e.type = r.status >= 500 ? "server_error" : "invalid_request_error";
    switch (r.status) {
      case 400:
        e.message = "malformed HTTP request";
        e.code = "bad_request";
        break;
      case 404:
        e.message = "no such endpoint";
        e.code = "not_found";
        break;
      case 405:
        e.message = "method not allowed";
        e.code = "method_not_allowed";
        break;
      case 413:
        e.message = "request body too large";
        e.code = "request_too_large";
        break;
      case 414:
        e.message = "request URI too long";
        e.code = "uri_too_long";
        break;
      default:
        e.message = "HTTP error " + std::to_string(r.status);
    }
    e.close_connection = r.status == 400 || r.status == 413 || r.status == 414;
    SendError(r, e);
  });
  http.set_exception_handler(
      [](const httplib::Request&, httplib::Response& r, const std::exception_ptr&) {
        SendError(r, MakeError(500, "internal error", "server_error", "internal_error"));
      });
  http.set_gate_observer([this](int status) {
    metrics.Add("edgeseek_requests_total",
                {{"endpoint", "other"}, {"status", std::to_string(status)}});
  });
  http.set_logger([this](const httplib::Request& q, const httplib::Response& r) {
    static const char* kNames[] = {"other",  "chat_completions", "completions", "models", "models",
                                   "health", "metrics",          "traces",      "web"};
    metrics.Add("edgeseek_requests_total", {{"endpoint", kNames[int(MatchPath(q.path).ep)]},
                                            {"status", std::to_string(r.status)}});
  });
}

void Server::Impl::Shutdown() {
  std::call_once(shutdown_once, [this] {
    State prev = state.exchange(State::kDraining);
    (void)prev;
    // The whole drain fits in drain_grace_s (issue 23: SIGTERM ends the process within it):
    // running requests get the grace less a reserve, then what still runs is cancelled and
    // leaves within a step; `edgeseek serve` ends the process at the grace whatever is left (a
    // step or a render in progress cannot be interrupted).
    const double start = SteadySeconds(), grace = std::max(0.0, cfg.drain_grace_s);
    const double until = start + grace - std::min(1.0, grace / 2);
    while (admission.in_flight() > 0 && SteadySeconds() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    {
      std::lock_guard<std::mutex> lock(mu);
      for (auto& [id, w] : live)
        if (auto s = w.lock()) s->cancel = true;
    }
    for (auto& g : groups) g->queue->Notify();
    // Cancelled sequences leave within a step.
    const double hard = start + grace - std::min(0.2, grace / 8);
    while (admission.in_flight() > 0 && SteadySeconds() < hard)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    http.stop();
    if (http_thread.joinable()) http_thread.join();
    for (auto& g : groups)
      for (auto& in : g->instances) in.engine->Stop();
    if (otlp) otlp->Stop();  // sends what finished requests left queued
    state = State::kStopped;
  });
}

// ==== Server ==================================================================================
Server::Server(ServerConfig cfg, ModelBuilder loader)
    : impl_(std::make_unique<Impl>(std::move(cfg), std::move(loader))) {
  Impl& m = *impl_;
  ES_CHECK(!m.cfg.qos.classes.empty(), "server config: at least one priority class is needed");
  if (!m.cfg.otlp.endpoint.empty()) {
    m.otlp = std::make_unique<server::OtlpExporter>(
        m.cfg.otlp, ES_VERSION_STRING,
        [&m](const char* outcome, size_t spans, const std::string& message) {
          m.metrics.Add("edgeseek_otlp_spans_total", {{"outcome", outcome}}, double(spans));
          if (!message.empty())
            std::fprintf(stderr, "edgeseek serve: OTLP export %s (%zu spans): %s\n", outcome, spans,
                         message.c_str());
        });
  }
  m.default_priority = int(m.cfg.qos.classes.size()) / 2;
  for (size_t i = 0; i < m.cfg.qos.classes.size(); ++i)
    if (m.cfg.qos.classes[i].name == m.cfg.default_priority) m.default_priority = int(i);
  auto class_index = [&](const std::string& n) {
    for (size_t i = 0; i < m.cfg.qos.classes.size(); ++i)
      if (m.cfg.qos.classes[i].name == n) return int(i);
    return -1;
  };
  for (size_t i = 0; i < m.cfg.api_keys.size(); ++i)
    m.keys[m.cfg.api_keys[i]] = ClientInfo{"key" + std::to_string(i), 0, -1, false};
  for (auto& c : m.cfg.clients)
    m.keys[c.api_key] =
        ClientInfo{c.name, c.max_concurrent, class_index(c.priority), c.prefix_scope == "shared"};
  m.auth = !m.keys.empty();
  if (!m.cfg.trace_dir.empty()) std::filesystem::create_directories(m.cfg.trace_dir);
  m.DefineMetrics();
  m.Routes();
  ES_CHECK(pipe(m.shut_pipe) == 0, "serve: cannot create the shutdown pipe");
}

Server::~Server() {
  try {
    Shutdown();
  } catch (...) {
  }
  if (impl_->shut_watch.joinable()) impl_->shut_watch.join();
  for (int fd : impl_->shut_pipe)
    if (fd >= 0) close(fd);
}

void Server::Listen() {
  Impl& m = *impl_;
  if (m.cfg.port == 0) {
    int p = m.http.bind_to_any_port(m.cfg.host.c_str());
    ES_CHECK(p > 0, "serve: cannot bind ", m.cfg.host, " (any port)");
    m.cfg.port = p;
  } else {
    ES_CHECK(m.http.bind_to_port(m.cfg.host.c_str(), m.cfg.port), "serve: cannot bind ", m.cfg.host,
             ":", m.cfg.port, " (in use, or not an address of this machine)");
  }
  m.http.WidenListenBacklog();
  m.http_thread = std::thread([&m] {
    m.http.listen_after_bind();
    m.listen_returned = true;
  });
  // httplib's stop() does nothing until the accept loop runs (is_running()): a Shutdown right
  // after Listen (a model that fails to load at once) would otherwise leave the loop running and
  // the join waiting forever.
  while (!m.http.is_running() && !m.listen_returned)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

int Server::port() const { return impl_->cfg.port; }

void Server::LoadModels() {
  Impl& m = *impl_;
  ES_CHECK(!m.cfg.models.empty(),
           "serve: no model to serve (give -m MODEL or 'models' in the config)");
  // Plugins first: a bad one stops the start with its path named, before minutes of loading.
  for (const std::string& spec : m.cfg.plugins) m.plugins.Load(spec);
  m.plugins.set_error_sink([&m](const std::string& plugin, const std::string& message) {
    std::fprintf(stderr, "edgeseek serve: plugin '%s': %s\n", plugin.c_str(), message.c_str());
    m.metrics.Add("edgeseek_plugin_errors_total", {{"plugin", plugin}}, 1);
  });
  for (auto& entry : m.cfg.models) {
    auto g = std::make_unique<ModelGroup>();
    g->entry = entry;
    g->created = int64_t(std::time(nullptr));
    ModelEntry load_entry = entry;
    for (auto& ic : load_entry.instances) {
      ic.profile = m.cfg.scheduler.profile;
      ic.deterministic = m.cfg.scheduler.deterministic;
    }
    LoadedModel lm = m.loader(load_entry);
    ES_CHECK(lm.text && !lm.instances.empty(), "serve: model '", entry.name,
             "' loaded without instances");
    g->text = lm.text;
    g->reasoning =
        entry.reasoning == "on" || (entry.reasoning == "auto" && lm.text->has_reasoning_tags());
    g->queue = std::make_shared<RequestQueue>(m.cfg.qos);
    if (m.plugins.has_policy()) {
      const int n_instances = int(lm.instances.size());
      g->queue->set_priority_fn(
          [&m, name = entry.name, n_instances](const SeqRequest& r, double now) {
            const PluginRequestContext ctx{name, m.cfg.qos.classes[size_t(r.priority)].name,
                                           n_instances};
            return m.plugins.Score(r, ctx, now - r.submit_time);
          });
    }
    if (lm.instances.size() >= 2 && entry.balance.migrate)
      g->balancer = std::make_shared<LoadBalancer>(int(lm.instances.size()), entry.balance);
    for (size_t i = 0; i < lm.instances.size(); ++i) {
      Instance in;
      in.kv_bytes_per_token = lm.instances[i]->kv_bytes_per_token();
      in.name = i < lm.instance_names.size() ? lm.instance_names[i] : std::to_string(i);
      EngineOptions eo = m.cfg.scheduler;
      eo.instance = int(i);
      double mb = i < entry.instances.size() ? entry.instances[i].kv_memory_mb : 0;
      if (mb > 0 && in.kv_bytes_per_token > 0)
        eo.kv_token_budget =
            std::max<int64_t>(1, int64_t(mb * 1048576.0 / double(in.kv_bytes_per_token)));
      g->vocab = lm.instances[i]->vocab_size();
      in.engine = std::make_unique<Engine>(std::move(lm.instances[i]), g->queue, eo);
      if (i < lm.drafters.size() && lm.drafters[i])
        in.engine->set_drafter(std::move(lm.drafters[i]), entry.spec_k);
      if (g->balancer) in.engine->set_balancer(g->balancer);
      ModelGroup* gp = g.get();
      Labels l = {{"model", entry.name}, {"instance", std::to_string(i)}};
      in.engine->set_step_observer([&m, l, name = entry.name, i](const StepInfo& s) {
        if (!m.plugins.empty()) m.plugins.OnStep(name, int(i), s);
        m.metrics.Observe("edgeseek_batch_tokens", l, s.batch_tokens);
        m.metrics.Observe("edgeseek_batch_sequences", l, s.batch_seqs);
        m.metrics.Observe("edgeseek_step_seconds", l, s.seconds);
        if (s.prefill_tokens == 0) m.metrics.Observe("edgeseek_decode_step_seconds", l, s.seconds);
        if (s.host_seconds > 0) m.metrics.Observe("edgeseek_step_host_seconds", l, s.host_seconds);
        m.metrics.Add("edgeseek_engine_steps_total", l, 1);
        if (s.split.valid) {
          auto phase = [&](const char* p, double v) {
            Labels lp = l;
            lp.emplace_back("phase", p);
            m.metrics.Add("edgeseek_backend_seconds_total", lp, v);
          };
          phase("upload", s.split.upload_s);
          phase("dispatch", s.split.dispatch_s);
          phase("shader", s.split.shader_s);
          phase("download", s.split.download_s);
        }
      });
      (void)gp;
      g->max_fit = std::max(g->max_fit, in.engine->max_need());
      g->instances.push_back(std::move(in));
    }
    m.groups.push_back(std::move(g));
  }
  for (auto& g : m.groups)
    for (size_t i = 0; i < g->instances.size(); ++i) {
      // GPU instances build their pipelines now, not in the first requests' steps.
      const double t0 = SteadySeconds();
      const int forwards = g->instances[i].engine->Warm();
      if (forwards > 0)
        std::fprintf(stderr,
                     "edgeseek serve: model '%s' instance %zu warmed up (%d forwards) in %.1f s\n",
                     g->entry.name.c_str(), i, forwards, SteadySeconds() - t0);
      g->instances[i].engine->Start();
    }
  m.state = State::kReady;
}

void Server::Shutdown() { impl_->Shutdown(); }

void Server::RequestShutdown() {
  char c = 1;
  ssize_t w = write(impl_->shut_pipe[1], &c, 1);
  (void)w;
}

void Server::WaitForShutdown() {
  char c;
  while (read(impl_->shut_pipe[0], &c, 1) < 0 && errno == EINTR) {
  }
  Shutdown();
}

}  // namespace es
