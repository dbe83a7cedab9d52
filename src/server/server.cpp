// The HTTP server (edgeseek/server/server.h): routes, authentication, limits, routing by model,
// streaming with server-sent events, metrics and traces. Handlers never let an exception out:
// every failure becomes an OpenAI error object with its status.
#include <httplib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <deque>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "edgeseek/core/error.h"
#include "edgeseek/server/server.h"
#include "admission.h"
#include "generation.h"
#include "metrics.h"
#include "protocol.h"

namespace es {

using json = nlohmann::json;
using server::ApiError;
using server::BadRequest;
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
  int64_t max_fit = 0;   // the largest prompt + max_tokens any instance can hold
  bool reasoning = false;
  int64_t created = 0;
  int vocab = 0;
};

struct ClientInfo {
  std::string name;
  int max_concurrent = 0;
  int priority = -1;
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
  // thread back instead of holding it with retries.
  if (e.close_connection) res.set_header("Connection", "close");
  if (e.retry_after_s > 0) res.set_header("Retry-After", std::to_string(int(std::ceil(e.retry_after_s))));
  res.set_content(server::ErrorBody(e).dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

std::string Sse(const json& j) { return "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n"; }

std::string RandomId(const char* prefix, uint64_t n) {
  static const uint64_t salt = uint64_t(std::time(nullptr)) * 2654435761u;
  char buf[48];
  std::snprintf(buf, sizeof buf, "%s%012llx%04llx", prefix, (unsigned long long)((salt ^ (n * 0x9E3779B97F4A7C15ull)) & 0xffffffffffffull),
                (unsigned long long)(n & 0xffff));
  return buf;
}

}  // namespace

// ==== Impl ====================================================================================
struct Server::Impl {
  ServerConfig cfg;
  ModelBuilder loader;
  httplib::Server http;
  std::thread http_thread;
  std::atomic<State> state{State::kLoading};
  std::vector<std::unique_ptr<ModelGroup>> groups;
  Metrics metrics;
  std::map<std::string, ClientInfo> keys;  // api key -> client
  bool auth = false;
  int default_priority = 0;

  server::Admission admission;  // generation requests in flight, per client and in all
  std::mutex mu;  // guards live, traces
  std::map<std::string, std::weak_ptr<SeqRequest>> live;
  std::deque<std::pair<std::string, std::string>> traces;  // id -> trace JSON, newest last
  std::atomic<uint64_t> next_id{1};

  std::mutex shut_mu;
  std::condition_variable shut_cv;
  bool shut_requested = false;
  int shut_pipe[2] = {-1, -1};
  std::thread shut_watch;
  std::once_flag shutdown_once;

  Impl(ServerConfig c, ModelBuilder l) : cfg(std::move(c)), loader(std::move(l)) {}

  // ---- setup ----
  void DefineMetrics();
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
  void Handle(const httplib::Request& req, httplib::Response& res, bool chat);
  void StoreTrace(const std::string& id, const std::string& trace);
  void Shutdown();
};

json Server::Impl::ModelMeta(const ModelGroup& g) const {
  json inst = json::array();
  bool invariant = true;
  for (auto& in : g.instances) {
    EngineStats st = in.engine->stats();
    inst.push_back({{"name", in.name}, {"slots", in.engine->n_slots()}, {"context", in.engine->context()},
                    {"batch_invariant", in.engine->batch_invariant()}, {"serial", st.serial}});
    invariant = invariant && in.engine->batch_invariant();
  }
  return {{"deterministic", cfg.scheduler.deterministic}, {"batch_invariant", invariant},
          {"profile", cfg.scheduler.profile}, {"reasoning", g.reasoning}, {"instances", inst}};
}

void Server::Impl::DefineMetrics() {
  using T = Metrics::Type;
  auto lat = Metrics::LatencyBuckets();
  metrics.Define("edgeseek_requests_total", T::kCounter, "HTTP requests by endpoint and status.");
  metrics.Define("edgeseek_request_finish_total", T::kCounter, "Finished generations by model and finish reason.");
  metrics.Define("edgeseek_prompt_tokens_total", T::kCounter, "Prompt tokens of admitted requests.");
  metrics.Define("edgeseek_generation_tokens_total", T::kCounter, "Generated tokens.");
  metrics.Define("edgeseek_client_generation_tokens_total", T::kCounter, "Generated tokens by client.");
  metrics.Define("edgeseek_preemptions_total", T::kCounter, "Sequences preempted by a higher priority.");
  metrics.Define("edgeseek_queue_length", T::kGauge, "Requests waiting, by model and priority class.");
  metrics.Define("edgeseek_running_sequences", T::kGauge, "Sequences holding a KV slot, by instance.");
  metrics.Define("edgeseek_waiting_sequences", T::kGauge, "Sequences waiting for admission, by model.");
  metrics.Define("edgeseek_kv_cache_used_tokens", T::kGauge, "Tokens held in KV caches, by instance.");
  metrics.Define("edgeseek_kv_cache_reserved_tokens", T::kGauge, "Tokens reserved (prompt + max_tokens) by running requests.");
  metrics.Define("edgeseek_kv_cache_capacity_tokens", T::kGauge, "KV capacity in tokens, by instance.");
  metrics.Define("edgeseek_kv_cache_usage_ratio", T::kGauge, "Used over capacity of the KV caches, by instance.");
  metrics.Define("edgeseek_kv_cache_used_bytes", T::kGauge, "Bytes of KV cache holding tokens, by instance.");
  metrics.Define("edgeseek_engine_steps_total", T::kCounter, "Engine steps (forward passes), by instance.");
  metrics.Define("edgeseek_backend_seconds_total", T::kCounter,
                 "Backend time of the forward passes by phase (upload, dispatch, shader, download), with profiling on.");
  metrics.Define("edgeseek_client_queue_length", T::kGauge, "Requests waiting, by client.");
  metrics.Define("edgeseek_client_running_sequences", T::kGauge, "Sequences running, by client.");
  metrics.Define("edgeseek_requests_in_flight", T::kGauge,
                 "Generation requests waiting or running; each holds an HTTP thread.");
  metrics.Define("edgeseek_http_threads", T::kGauge, "HTTP worker threads (http_threads).");
  metrics.Define("edgeseek_ready", T::kGauge, "1 when every model is loaded and the server accepts requests.");
  metrics.Define("edgeseek_batch_tokens", T::kHistogram, "Tokens per engine step.",
                 {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048});
  metrics.Define("edgeseek_batch_sequences", T::kHistogram, "Sequences per engine step.",
                 {1, 2, 4, 8, 16, 32, 64, 128, 256});
  metrics.Define("edgeseek_step_seconds", T::kHistogram, "Forward pass time per engine step.", lat);
  metrics.Define("edgeseek_time_to_first_token_seconds", T::kHistogram, "Submit to first token.", lat);
  metrics.Define("edgeseek_inter_token_latency_seconds", T::kHistogram, "Time between generated tokens.", lat);
  metrics.Define("edgeseek_e2e_request_latency_seconds", T::kHistogram, "Submit to finish.", lat);
  metrics.Define("edgeseek_queue_time_seconds", T::kHistogram, "Submit to admission, by model and priority.", lat);
  metrics.Set("edgeseek_ready", {}, 0);
  metrics.AddCollector([this](Metrics& m) {
    m.Set("edgeseek_ready", {}, state.load() == State::kReady ? 1 : 0);
    m.Set("edgeseek_requests_in_flight", {}, admission.in_flight());
    m.Set("edgeseek_http_threads", {}, cfg.http_threads);
    if (state.load() == State::kLoading) return;
    for (auto& g : groups) {
      auto sizes = g->queue->size_per_class();
      size_t total = 0;
      for (size_t c = 0; c < sizes.size(); ++c) {
        m.Set("edgeseek_queue_length", {{"model", g->entry.name}, {"priority", cfg.qos.classes[c].name}}, double(sizes[c]));
        total += sizes[c];
      }
      m.Set("edgeseek_waiting_sequences", {{"model", g->entry.name}}, double(total));
      for (auto& c : g->queue->clients()) {
        m.Set("edgeseek_client_queue_length", {{"model", g->entry.name}, {"client", c.client}}, double(c.waiting));
        m.Set("edgeseek_client_running_sequences", {{"model", g->entry.name}, {"client", c.client}}, double(c.running));
      }
      for (size_t i = 0; i < g->instances.size(); ++i) {
        EngineStats s = g->instances[i].engine->stats();
        Labels l = {{"model", g->entry.name}, {"instance", std::to_string(i)}};
        m.Set("edgeseek_running_sequences", l, s.running);
        m.Set("edgeseek_kv_cache_used_tokens", l, double(s.kv_tokens_used));
        m.Set("edgeseek_kv_cache_reserved_tokens", l, double(s.kv_tokens_reserved));
        m.Set("edgeseek_kv_cache_capacity_tokens", l, double(s.kv_token_capacity));
        m.Set("edgeseek_kv_cache_usage_ratio", l,
              s.kv_token_capacity ? double(s.kv_tokens_used) / double(s.kv_token_capacity) : 0);
        m.Set("edgeseek_kv_cache_used_bytes", l, double(s.kv_tokens_used) * double(g->instances[i].kv_bytes_per_token));
      }
    }
  });
}

const ClientInfo* Server::Impl::Authenticate(const httplib::Request& req, ApiError* err) const {
  static const ClientInfo kAnonymous{"anonymous", 0, -1};
  if (!auth) return &kAnonymous;
  std::string h = req.get_header_value("Authorization");
  const std::string bearer = "Bearer ";
  std::string key = h.rfind(bearer, 0) == 0 ? h.substr(bearer.size()) : std::string();
  if (key.empty()) key = req.get_header_value("X-Api-Key");
  auto it = keys.find(key);
  if (key.empty() || it == keys.end()) {
    *err = MakeError(401, key.empty() ? "missing API key: send 'Authorization: Bearer <key>'"
                                      : "invalid API key",
                     "authentication_error", "invalid_api_key");
    return nullptr;
  }
  return &it->second;
}

ModelGroup* Server::Impl::Route(const std::string& model, ApiError* err) {
  if (model.empty()) {
    if (groups.size() == 1) return groups.front().get();
    *err = BadRequest("'model' is required: this server has " + std::to_string(groups.size()) + " models", "model");
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
                        std::to_string(classes.size() - 1) + ")", "priority");
  return -1;
}

void Server::Impl::StoreTrace(const std::string& id, const std::string& trace) {
  if (!cfg.trace_dir.empty()) {
    std::ofstream f(cfg.trace_dir + "/" + id + ".json");
    f << trace;
  }
  std::lock_guard<std::mutex> lock(mu);
  traces.emplace_back(id, trace);
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
  bool engine_finished = false;
  bool sent_role = false, sent_finish = false, metrics_done = false;

  ~RequestState();
  // Drains events into `d`; returns true when the output is complete.
  bool Pump(server::Delta* d, double wait_s);
  void WaitEngine(double max_s);
  void Finish();   // metrics, trace
  json Usage() const {
    int c = gen->completion_tokens();
    return {{"prompt_tokens", prompt_tokens}, {"completion_tokens", c}, {"total_tokens", prompt_tokens + c}};
  }
  json Chunk(const json& delta_or_text, const json& finish) const {
    json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", finish}};
    if (chat) choice["delta"] = delta_or_text;
    else choice["text"] = delta_or_text;
    return {{"id", id}, {"object", object}, {"created", created}, {"model", model},
            {"system_fingerprint", "edgeseek"}, {"choices", json::array({choice})}};
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
  if (tokens) impl->metrics.Add("edgeseek_client_generation_tokens_total", {{"client", client}}, tokens);
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
    auto trace = server::ChromeTrace(*seq, model, {{"receive+tokenize", {t_receive, t_tokenized}},
                                                   {"respond", {t_tokenized, SteadySeconds()}}});
    impl->StoreTrace(id, trace.dump());
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

void Server::Impl::Handle(const httplib::Request& req, httplib::Response& res, bool chat) {
  double t_receive = SteadySeconds();
  ApiError err;
  if (state.load() != State::kReady) {
    err = MakeError(503, state.load() == State::kLoading ? "the server is loading models" : "the server is shutting down",
                    "server_error", "service_unavailable");
    err.retry_after_s = 5;
    return SendError(res, err);
  }
  const ClientInfo* client = Authenticate(req, &err);
  if (!client) return SendError(res, err);

  server::ProtocolLimits plim;
  plim.max_tokens = cfg.limits.max_tokens;
  json body = server::ParseBody(req.body);
  server::ChatRequest creq;
  server::CompletionRequest preq;
  server::GenParams* gp;
  std::string model_name;
  if (chat) {
    creq = server::ParseChatRequest(body, plim);
    gp = &creq.gen;
    model_name = creq.model;
  } else {
    preq = server::ParseCompletionRequest(body, plim);
    gp = &preq.gen;
    model_name = preq.model;
  }
  ModelGroup* group = Route(model_name, &err);
  if (!group) return SendError(res, err);
  int priority = PriorityOf(gp->priority, req, *client, &err);
  if (priority < 0) return SendError(res, err);

  // ---- prompt ----
  std::vector<int32_t> prompt;
  bool start_in_reasoning = false;
  if (chat) {
    std::string text;
    try {
      text = group->text->RenderChat(creq.messages, creq.tools, creq.template_kwargs);
    } catch (const Error& e) {
      throw BadRequest(std::string("chat template failed: ") + e.what(), "messages");
    }
    // The template may open the reasoning block itself (DeepSeek-R1's ends with "<think>\n").
    size_t end = text.find_last_not_of(" \n\r\t");
    std::string trimmed = end == std::string::npos ? "" : text.substr(0, end + 1);
    start_in_reasoning = group->reasoning && trimmed.size() >= 7 && trimmed.compare(trimmed.size() - 7, 7, "<think>") == 0;
    prompt = group->text->Encode(text, /*add_special=*/false);
  } else if (preq.prompt_is_ids) {
    prompt = preq.prompt_ids;
    for (size_t i = 0; i < prompt.size(); ++i)
      if (prompt[i] >= group->vocab)
        throw BadRequest("'prompt' token id " + std::to_string(prompt[i]) + " at " + std::to_string(i) +
                             " is outside the vocabulary (" + std::to_string(group->vocab) + ")", "prompt");
  } else {
    prompt = group->text->Encode(preq.prompt_text, /*add_special=*/true);
  }
  if (prompt.empty()) throw BadRequest("the prompt has no tokens", chat ? "messages" : "prompt");
  int64_t max_prompt = cfg.limits.max_prompt_tokens > 0 ? cfg.limits.max_prompt_tokens : group->max_fit - 1;
  if (int64_t(prompt.size()) > max_prompt || int64_t(prompt.size()) >= group->max_fit)
    throw BadRequest("the prompt has " + std::to_string(prompt.size()) + " tokens; this model accepts at most " +
                         std::to_string(std::min(max_prompt, group->max_fit - 1)),
                     chat ? "messages" : "prompt", "context_length_exceeded");
  int max_tokens;
  if (gp->max_tokens) {
    max_tokens = *gp->max_tokens;
    if (int64_t(prompt.size()) + max_tokens > group->max_fit)
      throw BadRequest("this model's context holds " + std::to_string(group->max_fit) + " tokens; the prompt (" +
                           std::to_string(prompt.size()) + ") plus max_tokens (" + std::to_string(max_tokens) +
                           ") do not fit", "max_tokens", "context_length_exceeded");
  } else {
    int64_t room = group->max_fit - int64_t(prompt.size());
    int64_t cap = cfg.limits.default_max_tokens > 0 ? cfg.limits.default_max_tokens : cfg.limits.max_tokens;
    max_tokens = int(std::min(room, cap));
  }

  // ---- admission limits ----
  // The client's limit and the in-flight cap are checked and taken in one step (admission.h).
  int limit = client->max_concurrent > 0 ? client->max_concurrent : cfg.limits.max_concurrent_per_client;
  server::Admission::Refusal refusal;
  int in_flight = 0;
  server::Admission::Ticket ticket =
      admission.TryAdmit(client->name, limit, InFlightCap(priority), &refusal, &in_flight);
  // A refused client reconnects for its retry, so a keep-alive one gives its HTTP thread back.
  auto refuse = [&](ApiError e, double retry_after_s) {
    e.retry_after_s = retry_after_s;
    e.close_connection = true;
    SendError(res, e);
  };
  if (refusal == server::Admission::Refusal::kClientLimit)
    return refuse(MakeError(429, "too many concurrent requests for this client (limit " + std::to_string(limit) + ")",
                            "rate_limit_error", "rate_limit_exceeded"),
                  1);
  // Every request in flight holds an HTTP thread until it ends; past this cap the threads that
  // read new connections (and the top class's share) would be gone (docs/server.md).
  if (refusal == server::Admission::Refusal::kInFlightCap)
    return refuse(MakeError(503, "the server is at capacity: " + std::to_string(in_flight) +
                                     " requests are in flight for " + std::to_string(cfg.http_threads) +
                                     " HTTP threads (http_threads); retry later",
                            "server_error", "server_busy"),
                  1);
  if (group->queue->size() >= size_t(cfg.limits.max_queue))  // (the ticket gives the place back)
    return refuse(MakeError(429, "the server is overloaded: " + std::to_string(group->queue->size()) +
                                     " requests are queued",
                            "rate_limit_error", "overloaded"),
                  2);
  auto st = std::make_shared<RequestState>();
  st->impl = this;
  st->ticket = std::move(ticket);  // st's destructor gives the place back from here on
  st->client = client->name;
  uint64_t n = next_id.fetch_add(1);
  st->id = RandomId(chat ? "chatcmpl-" : "cmpl-", n);
  st->chat = chat;
  st->object = chat ? "chat.completion.chunk" : "text_completion";
  st->model = group->entry.name;
  st->group = group;
  st->created = int64_t(std::time(nullptr));
  st->include_usage = gp->include_usage;
  st->prompt_tokens = int(prompt.size());
  st->t_receive = t_receive;
  st->channel = std::make_shared<server::EventChannel>();
  st->gen = std::make_unique<server::Generation>(group->text, gp->stop, chat && group->reasoning, start_in_reasoning);

  auto seq = std::make_shared<SeqRequest>();
  seq->id = st->id;
  seq->prompt = std::move(prompt);
  seq->sampling = gp->sampling;
  seq->max_tokens = max_tokens;
  if (!gp->ignore_eos) seq->stop_ids = group->text->eos_ids();
  seq->priority = priority;
  seq->client = client->name;
  seq->submit_time = SteadySeconds();
  seq->deadline = seq->submit_time + cfg.limits.request_timeout_s;
  seq->on_event = [ch = st->channel](const SeqEvent& e) { ch->Push(e); };
  st->seq = seq;
  st->t_tokenized = seq->submit_time;
  {
    std::lock_guard<std::mutex> lock(mu);
    live[st->id] = seq;
  }
  group->queue->Push(seq);

  if (!gp->stream) {
    // ---- non-streaming: wait for the end ----
    server::Delta all;
    while (!st->Pump(&all, 0.25)) {
    }
    st->WaitEngine(5);
    FinishReason why = st->gen->engine_finish();
    if (!st->gen->stop_string_hit() && (why == FinishReason::kError || why == FinishReason::kTimeout ||
                                        why == FinishReason::kCancelled)) {
      err = why == FinishReason::kTimeout
                ? MakeError(408, "request timed out after " + std::to_string(int(cfg.limits.request_timeout_s)) + " s",
                            "timeout_error", "timeout")
            : why == FinishReason::kCancelled
                ? MakeError(503, "request cancelled: the server is shutting down", "server_error", "cancelled")
                : MakeError(500, "generation failed: " + st->gen->error(), "server_error", "internal_error");
      st->Finish();
      return SendError(res, err);
    }
    json out = {{"id", st->id}, {"created", st->created}, {"model", st->model}, {"system_fingerprint", "edgeseek"}};
    json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", st->gen->finish_reason()}};
    if (chat) {
      out["object"] = "chat.completion";
      json msg = {{"role", "assistant"}, {"content", all.content}};
      if (group->reasoning) msg["reasoning_content"] = all.reasoning.empty() ? json(nullptr) : json(all.reasoning);
      choice["message"] = msg;
    } else {
      out["object"] = "text_completion";
      choice["text"] = all.content;
    }
    out["choices"] = json::array({choice});
    out["usage"] = st->Usage();
    st->Finish();
    res.set_content(out.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
    return;
  }

  // ---- streaming: server-sent events, one chunk per step's text ----
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [st](size_t, httplib::DataSink& sink) -> bool {
        try {
          std::string out;
          if (!st->sent_role) {
            st->sent_role = true;
            out += Sse(st->chat ? st->Chunk({{"role", "assistant"}, {"content", ""}}, nullptr)
                                : st->Chunk("", nullptr));
          }
          server::Delta d;
          bool done = st->Pump(&d, out.empty() ? 0.5 : 0.0);
          if (st->chat) {
            if (!d.reasoning.empty()) out += Sse(st->Chunk({{"reasoning_content", d.reasoning}}, nullptr));
            if (!d.content.empty()) out += Sse(st->Chunk({{"content", d.content}}, nullptr));
          } else if (!d.content.empty()) {
            out += Sse(st->Chunk(d.content, nullptr));
          }
          if (done) {
            FinishReason why = st->gen->engine_finish();
            if (!st->gen->stop_string_hit() && (why == FinishReason::kError || why == FinishReason::kTimeout ||
                                                why == FinishReason::kCancelled)) {
              ApiError e = MakeError(why == FinishReason::kTimeout ? 408 : why == FinishReason::kCancelled ? 503 : 500,
                                     why == FinishReason::kTimeout ? "request timed out"
                                     : why == FinishReason::kCancelled ? "request cancelled: the server is shutting down"
                                                                       : "generation failed: " + st->gen->error(),
                                     "server_error", FinishReasonName(why));
              out += Sse(server::ErrorBody(e));  // Sse() replaces invalid UTF-8
            } else {
              out += Sse(st->Chunk(st->chat ? json::object() : json(""), st->gen->finish_reason()));
              if (st->include_usage) {
                json u = st->Chunk(json::object(), nullptr);
                u["choices"] = json::array();
                u["usage"] = st->Usage();
                out += Sse(u);
              }
            }
            out += "data: [DONE]\n\n";
          } else if (out.empty()) {
            out = ": keep-alive\n\n";  // an SSE comment; also how a gone client is noticed
          }
          if (!sink.write(out.data(), out.size())) {
            st->seq->cancel = true;  // the client went away: free the slot within a step
            return false;
          }
          if (done) {
            st->Finish();
            sink.done();
          }
          return true;
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

void Server::Impl::Routes() {
  http.set_payload_max_length(cfg.limits.max_body_bytes);
  http.set_read_timeout(30, 0);
  http.set_write_timeout(30, 0);
  http.set_keep_alive_max_count(1000);
  // Longer than keep-alive clients keep an idle socket (node's agentkeepalive, the openai
  // client's agent: 4 s), so a client never reuses a socket the server is closing (ECONNRESET,
  // "socket hang up"). An idle keep-alive connection holds its thread this long, and delays a
  // drain by as much.
  http.set_keep_alive_timeout(5);
  int threads = cfg.http_threads;
  http.new_task_queue = [threads] { return new httplib::ThreadPool(size_t(threads)); };

  auto guarded = [this](std::function<void(const httplib::Request&, httplib::Response&)> fn) {
    return [this, fn](const httplib::Request& req, httplib::Response& res) {
      try {
        fn(req, res);
      } catch (const ApiError& e) {
        SendError(res, e);
      } catch (const Error& e) {
        SendError(res, BadRequest(e.what()));
      } catch (const std::bad_alloc&) {
        SendError(res, MakeError(503, "out of memory", "server_error", "out_of_memory"));
      } catch (const std::exception& e) {
        SendError(res, MakeError(500, std::string("internal error: ") + e.what(), "server_error", "internal_error"));
      }
    };
  };

  http.Post("/v1/chat/completions", guarded([this](const httplib::Request& q, httplib::Response& r) { Handle(q, r, true); }));
  http.Post("/v1/completions", guarded([this](const httplib::Request& q, httplib::Response& r) { Handle(q, r, false); }));
  http.Get("/v1/models", guarded([this](const httplib::Request& q, httplib::Response& r) {
    ApiError err;
    if (!Authenticate(q, &err)) return SendError(r, err);
    json data = json::array();
    if (state.load() != State::kLoading)
      for (auto& g : groups)
        data.push_back({{"id", g->entry.name}, {"object", "model"}, {"created", g->created},
                        {"owned_by", "edgeseek"}, {"max_model_len", g->max_fit},
                        {"instances", g->instances.size()}, {"edgeseek", ModelMeta(*g)}});
    r.set_content(json{{"object", "list"}, {"data", data}}.dump(), "application/json");
  }));
  http.Get(R"(/v1/models/([^/]+))", guarded([this](const httplib::Request& q, httplib::Response& r) {
    ApiError err;
    if (!Authenticate(q, &err)) return SendError(r, err);
    ModelGroup* g = Route(q.matches[1], &err);
    if (!g) return SendError(r, err);
    r.set_content(json{{"id", g->entry.name}, {"object", "model"}, {"created", g->created}, {"owned_by", "edgeseek"},
                       {"edgeseek", ModelMeta(*g)}}.dump(),
                  "application/json");
  }));
  http.Get("/health", [this](const httplib::Request&, httplib::Response& r) {
    State s = state.load();
    r.status = s == State::kReady ? 200 : 503;
    const char* name = s == State::kReady ? "ok" : s == State::kLoading ? "loading" : "draining";
    if (s != State::kReady) r.set_header("Retry-After", "5");
    json body = {{"status", name}, {"deterministic", cfg.scheduler.deterministic}, {"profile", cfg.scheduler.profile}};
    if (s != State::kLoading) {
      bool invariant = true;
      for (auto& g : groups)
        for (auto& in : g->instances) invariant = invariant && in.engine->batch_invariant();
      body["batch_invariant"] = invariant;
    }
    r.set_content(body.dump(), "application/json");
  });
  http.Get("/metrics", guarded([this](const httplib::Request&, httplib::Response& r) {
    r.set_content(metrics.Render(), "text/plain; version=0.0.4; charset=utf-8");
  }));
  http.Get(R"(/v1/traces/([A-Za-z0-9_-]+))", guarded([this](const httplib::Request& q, httplib::Response& r) {
    ApiError err;
    if (!Authenticate(q, &err)) return SendError(r, err);
    std::string id = q.matches[1];
    std::lock_guard<std::mutex> lock(mu);
    for (auto& [tid, t] : traces)
      if (tid == id) return r.set_content(t, "application/json");
    SendError(r, MakeError(404, "no trace for request '" + id + "' (only the last 256 are kept)",
                           "invalid_request_error", "trace_not_found"));
  }));
  http.set_error_handler([](const httplib::Request&, httplib::Response& r) {
    if (!r.body.empty()) return;
    ApiError e;
    e.status = r.status;
    e.type = r.status >= 500 ? "server_error" : "invalid_request_error";
    switch (r.status) {
      case 404: e.message = "no such endpoint"; e.code = "not_found"; break;
      case 405: e.message = "method not allowed"; break;
      case 413: e.message = "request body too large"; e.code = "request_too_large"; break;
      case 414: e.message = "request URI too long"; break;
      default: e.message = "HTTP error " + std::to_string(r.status);
    }
    SendError(r, e);
  });
  http.set_exception_handler([](const httplib::Request&, httplib::Response& r, std::exception_ptr) {
    SendError(r, MakeError(500, "internal error", "server_error", "internal_error"));
  });
  http.set_logger([this](const httplib::Request& q, const httplib::Response& r) {
    std::string ep = q.path.rfind("/v1/chat/completions", 0) == 0 ? "chat_completions"
                     : q.path.rfind("/v1/completions", 0) == 0    ? "completions"
                     : q.path.rfind("/v1/models", 0) == 0         ? "models"
                     : q.path == "/health"                       ? "health"
                     : q.path == "/metrics"                      ? "metrics"
                     : q.path.rfind("/v1/traces", 0) == 0         ? "traces"
                                                                  : "other";
    metrics.Add("edgeseek_requests_total", {{"endpoint", ep}, {"status", std::to_string(r.status)}});
  });
}

void Server::Impl::Shutdown() {
  std::call_once(shutdown_once, [this] {
    State prev = state.exchange(State::kDraining);
    (void)prev;
    double until = SteadySeconds() + cfg.drain_grace_s;
    while (admission.in_flight() > 0 && SteadySeconds() < until) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    {
      std::lock_guard<std::mutex> lock(mu);
      for (auto& [id, w] : live)
        if (auto s = w.lock()) s->cancel = true;
    }
    for (auto& g : groups) g->queue->Notify();
    double hard = SteadySeconds() + 5;
    while (admission.in_flight() > 0 && SteadySeconds() < hard) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    http.stop();
    if (http_thread.joinable()) http_thread.join();
    for (auto& g : groups)
      for (auto& in : g->instances) in.engine->Stop();
    state = State::kStopped;
  });
}

// ==== Server ==================================================================================
Server::Server(ServerConfig cfg, ModelBuilder loader) : impl_(std::make_unique<Impl>(std::move(cfg), std::move(loader))) {
  Impl& m = *impl_;
  ES_CHECK(!m.cfg.qos.classes.empty(), "server config: at least one priority class is needed");
  m.default_priority = int(m.cfg.qos.classes.size()) / 2;
  for (size_t i = 0; i < m.cfg.qos.classes.size(); ++i)
    if (m.cfg.qos.classes[i].name == m.cfg.default_priority) m.default_priority = int(i);
  auto class_index = [&](const std::string& n) {
    for (size_t i = 0; i < m.cfg.qos.classes.size(); ++i)
      if (m.cfg.qos.classes[i].name == n) return int(i);
    return -1;
  };
  for (size_t i = 0; i < m.cfg.api_keys.size(); ++i)
    m.keys[m.cfg.api_keys[i]] = ClientInfo{"key" + std::to_string(i), 0, -1};
  for (auto& c : m.cfg.clients) m.keys[c.api_key] = ClientInfo{c.name, c.max_concurrent, class_index(c.priority)};
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
    ES_CHECK(m.http.bind_to_port(m.cfg.host.c_str(), m.cfg.port), "serve: cannot bind ", m.cfg.host, ":",
             m.cfg.port, " (in use, or not an address of this machine)");
  }
  m.http_thread = std::thread([&m] { m.http.listen_after_bind(); });
}

int Server::port() const { return impl_->cfg.port; }

void Server::LoadModels() {
  Impl& m = *impl_;
  ES_CHECK(!m.cfg.models.empty(), "serve: no model to serve (give -m MODEL or 'models' in the config)");
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
    ES_CHECK(lm.text && !lm.instances.empty(), "serve: model '", entry.name, "' loaded without instances");
    g->text = lm.text;
    g->reasoning = entry.reasoning == "on" || (entry.reasoning == "auto" && lm.text->has_reasoning_tags());
    g->queue = std::make_shared<RequestQueue>(m.cfg.qos);
    for (size_t i = 0; i < lm.instances.size(); ++i) {
      Instance in;
      in.kv_bytes_per_token = lm.instances[i]->kv_bytes_per_token();
      in.name = i < lm.instance_names.size() ? lm.instance_names[i] : std::to_string(i);
      EngineOptions eo = m.cfg.scheduler;
      eo.instance = int(i);
      double mb = i < entry.instances.size() ? entry.instances[i].kv_memory_mb : 0;
      if (mb > 0 && in.kv_bytes_per_token > 0)
        eo.kv_token_budget = std::max<int64_t>(1, int64_t(mb * 1048576.0 / double(in.kv_bytes_per_token)));
      g->vocab = lm.instances[i]->vocab_size();
      in.engine = std::make_unique<Engine>(std::move(lm.instances[i]), g->queue, eo);
      ModelGroup* gp = g.get();
      Labels l = {{"model", entry.name}, {"instance", std::to_string(i)}};
      in.engine->set_step_observer([&m, l](const StepInfo& s) {
        m.metrics.Observe("edgeseek_batch_tokens", l, s.batch_tokens);
        m.metrics.Observe("edgeseek_batch_sequences", l, s.batch_seqs);
        m.metrics.Observe("edgeseek_step_seconds", l, s.seconds);
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
    for (auto& in : g->instances) in.engine->Start();
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
