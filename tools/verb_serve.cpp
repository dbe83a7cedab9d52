// `edgeseek serve`: the OpenAI-compatible server (edgeseek/internal/server/server.h,
// docs/server.md).
//
//   edgeseek serve -m ~/models/DeepSeek-R1-Distill-Qwen-1.5B --port 8080
//   edgeseek serve --synthetic tests/server/tiny_config.json --tokenizer tests/data/tiny_tokenizer
//   edgeseek serve --config configs/server.example.json
//
// Binds 127.0.0.1 unless --host says otherwise; answers /health with 503 "loading" while the
// models load; SIGTERM or SIGINT drains (no new requests, running ones finish within the grace
// period, what is left is cancelled) and exits 0; if the drain has not finished drain_grace_s
// after the signal (a worker in a template render or an engine step cannot be interrupted),
// the process exits 1 then: it never outlives the grace (issue 23). Model options (-m, --synthetic,
// --dtype, --backend, -t, --context,
// --profile...) are the other model verbs' (ModelArgs); host, port, model name and API keys are
// shared with `loadtest` (EndpointArgs).
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common.h"
#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/runtime/mpi_stage.h"
#include "edgeseek/internal/server/server.h"
#include "verb.h"

namespace es::tools {
namespace {

struct ServeArgs {
  ModelArgs model;
  EndpointArgs endpoint;
  SpecArgs spec;
  std::string config, api_key_file, trace_dir, reasoning = "auto";
  std::vector<std::string> plugins;  // --plugin
  std::string otlp_endpoint;         // --otlp-endpoint
  int slots = 4, max_batch_tokens = 0;
  double grace_s = -1;
  bool deterministic = false;
  std::string prefix_cache;  // "on" / "off"; empty: the config's (default on)
};

Server* g_server = nullptr;
std::atomic<int64_t> g_signal_ns{0};  // CLOCK_MONOTONIC of the first signal; lock-free

int64_t MonotonicNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);  // async-signal-safe
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

void OnSignal(int) {
  int64_t none = 0;
  g_signal_ns.compare_exchange_strong(none, MonotonicNs());
  if (g_server) g_server->RequestShutdown();  // write() to a pipe: async-signal-safe
}

constexpr double kMinDrainS = 0.5;

// Ends the process drain_grace_s (at least kMinDrainS) after the signal when the drain has
// not: Server::Shutdown plans its drain within the grace and cancels what still runs, but
// cannot interrupt a render or an engine step in progress (a long prefill on a slow device),
// and joining such a worker would wait for it (issue 23: SIGTERM did not stop a server rendering a
// runaway template).
class DrainDeadline {
 public:
  explicit DrainDeadline(double grace_s)
      : thread_([this, grace_s] {
          while (g_signal_ns.load() == 0 && !done_.load())
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
          // At least kMinDrainS: an idle server's drain (closing the listener, joining the HTTP
          // and engine threads) takes ~0.1 s; a grace of 0 would exit 1 for nothing.
          const int64_t until = g_signal_ns.load() + int64_t(std::max(kMinDrainS, grace_s) * 1e9);
          while (!done_.load() && MonotonicNs() < until)
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
          if (done_.load()) return;
          std::fprintf(stderr,
                       "edgeseek serve: the drain did not finish within %g s of the signal "
                       "(drain_grace_s; a step or a render still running); exiting\n",
                       std::max(kMinDrainS, grace_s));
          std::fflush(stderr);
          _exit(1);
        }) {}
  ~DrainDeadline() {
    done_ = true;
    thread_.join();
  }

 private:
  std::atomic<bool> done_{false};
  std::thread thread_;
};

std::string DefaultName(const std::string& model, const std::string& synthetic) {
  namespace fs = std::filesystem;
  if (!model.empty()) {
    fs::path p(model);
    std::string n = p.filename().string();
    if (n.empty()) n = p.parent_path().filename().string();
    return n;
  }
  if (fs::is_regular_file(synthetic)) return fs::path(synthetic).stem().string();
  return synthetic;
}

int RunServe(const ServeArgs& a) {
  ServerConfig cfg;
  if (!a.config.empty()) cfg = LoadServerConfig(a.config, DefaultSchemaPath());
  if (!a.endpoint.host.empty()) cfg.host = a.endpoint.host;
  if (a.endpoint.port >= 0) cfg.port = a.endpoint.port;
  if (!a.trace_dir.empty()) cfg.trace_dir = a.trace_dir;
  if (a.grace_s >= 0) cfg.drain_grace_s = a.grace_s;
  if (a.max_batch_tokens > 0) cfg.scheduler.max_batch_tokens = a.max_batch_tokens;
  if (a.deterministic) cfg.scheduler.deterministic = true;
  if (!a.prefix_cache.empty()) cfg.scheduler.prefix_cache = a.prefix_cache == "on";
  if (a.model.profile) cfg.scheduler.profile = true;
  for (auto& k : a.endpoint.api_keys) cfg.api_keys.push_back(k);
  for (auto& p : a.plugins) cfg.plugins.push_back(p);
  if (!a.otlp_endpoint.empty()) cfg.otlp.endpoint = a.otlp_endpoint;
  if (!a.api_key_file.empty()) {
    std::ifstream f(a.api_key_file);
    ES_CHECK(f, "--api-key-file ", a.api_key_file, ": cannot open");
    std::string line;
    while (std::getline(f, line)) {
      while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
      if (!line.empty() && line[0] != '#') cfg.api_keys.push_back(line);
    }
  }
  const ModelArgs& ma = a.model;
  if (!ma.model.empty() || !ma.synthetic.empty()) {
    ModelEntry m;
    m.path = ma.model;
    m.synthetic = ma.synthetic;
    m.tokenizer = ma.tokenizer;
    m.seed = ma.seed;
    m.dtype = ma.dtype;
    m.reasoning = a.reasoning;
    ES_CHECK(a.spec.draft.empty() || a.spec.spec.empty(), "--draft and --spec ", a.spec.spec,
             " are alternatives: pass one");
    m.draft = !a.spec.spec.empty() ? a.spec.spec : a.spec.draft;
    m.draft_dtype = a.spec.draft_dtype;
    m.spec_k = a.spec.k;
    m.name =
        a.endpoint.model_name.empty() ? DefaultName(ma.model, ma.synthetic) : a.endpoint.model_name;
    InstanceConfig ic;
    ic.backend = ma.backend;
    ic.device = ma.device;
    ic.threads = ma.threads;
    ic.slots = a.slots;
    ic.context = ma.context;
    ic.kv_type = ma.kv_type;
    ic.devices = ma.devices, ic.split = ma.split, ic.split_layers = ma.split_layers;
    m.instances = {ic};
    cfg.models.insert(cfg.models.begin(), m);
  }
  ES_CHECK(!cfg.models.empty(),
           "serve: no model: give -m MODEL, --synthetic NAME or a --config with models");

  DrainDeadline deadline(cfg.drain_grace_s);  // before the server: destroyed after it
  Server server(cfg, DefaultModelBuilder());
  g_server = &server;
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  // A lost MPI rank (mpirun -np N serve): the requests it failed got 503; drain and exit.
  SetMpiLostHandler([] {
    if (g_server) g_server->RequestShutdown();
  });
  std::signal(SIGPIPE, SIG_IGN);  // a client gone mid-write is an error value, not a signal

  server.Listen();
  std::fprintf(stderr, "edgeseek serve: listening on http://%s:%d (loading)\n", cfg.host.c_str(),
               server.port());
  try {
    server.LoadModels();
  } catch (...) {
    server.Shutdown();
    g_server = nullptr;
    throw;
  }
  std::fprintf(stderr, "edgeseek serve: ready (%zu model%s%s%s)\n", cfg.models.size(),
               cfg.models.size() == 1 ? "" : "s",
               cfg.scheduler.deterministic ? ", deterministic" : "",
               cfg.scheduler.profile ? ", profiling" : "");
  server.WaitForShutdown();
  std::fprintf(stderr, "edgeseek serve: drained, exiting\n");
  g_server = nullptr;
  return 0;
}

VerbRun Setup(CLI::App& sub) {
  auto a = std::make_shared<ServeArgs>();
  a->model.Add(sub);
  a->endpoint.AddServer(sub);
  a->spec.Add(sub);
  sub.add_option("--slots", a->slots, "sequences decoded together (KV slots)")
      ->check(CLI::Range(1, 4096));
  sub.add_option("--reasoning", a->reasoning, "split <think> blocks into reasoning_content")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  sub.add_option("--config", a->config, "server config JSON (configs/server.schema.json)");
  sub.add_option("--api-key-file", a->api_key_file, "file with one accepted API key per line");
  sub.add_option("--trace-dir", a->trace_dir, "write each request's Chrome trace JSON here");
  sub.add_option(
      "--plugin", a->plugins,
      "plugin shared object, LIB.so or LIB.so:CONFIG (repeatable; after the config's plugins)");
  sub.add_option("--otlp-endpoint", a->otlp_endpoint,
                 "export request traces to this OpenTelemetry collector (OTLP/HTTP JSON), e.g. "
                 "http://127.0.0.1:4318/v1/traces");
  sub.add_option("--max-batch-tokens", a->max_batch_tokens,
                 "tokens per engine step (prefill budget; default 256 on the CPU, 1024 on GPUs)");
  sub.add_option(
      "--drain-grace", a->grace_s,
      "seconds from SIGTERM to the end of the process (at least 0.5): running requests finish, "
      "the rest is cancelled (default 30)");
  sub.add_option("--prefix-cache", a->prefix_cache,
                 "reuse cached KV blocks of a prompt's longest cached prefix (default on)")
      ->check(CLI::IsMember({"on", "off"}));
  sub.add_flag(
      "--deterministic", a->deterministic,
      "batch-invariant outputs on every backend (CPU: always; GPU: one sequence per step)");
  return [a] { return RunServe(*a); };
}

VerbRegistrar reg("serve", "OpenAI-compatible HTTP server with continuous batching", Setup);

}  // namespace
}  // namespace es::tools
