// The OpenAI-compatible HTTP server (`edgeseek serve`): configuration, model instances, and the
// server object. Endpoints: POST /v1/chat/completions, POST /v1/completions, GET /v1/models,
// GET /health, GET /metrics, GET /v1/traces/{id}. See docs/server.md.
//
//   ServerConfig cfg = LoadServerConfig("server.json", SchemaPath());   // or built in code
//   Server srv(cfg, DefaultModelBuilder());
//   srv.Listen();           // binds, serves /health as "loading" (503)
//   srv.LoadModels();       // builds every instance; then "ready"
//   srv.WaitForShutdown();  // until Shutdown() (SIGTERM): drain, stop
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "edgeseek/internal/grammar/matcher.h"
#include "edgeseek/internal/runtime/engine.h"

namespace es {

// ---- configuration (configs/server.schema.json) ------------------------------------------
struct InstanceConfig {
  std::string backend = "cpu";
  std::string device;
  int threads = 0;
  int slots = 4;
  int64_t context = 0;      // 0: min(model max, 4096)
  double kv_memory_mb = 0;  // 0: slots x context
  std::string kv_type;      // f32|f16|q8_0|q4_0 (ParseKvType); empty: the backend's default
  // Layer split over devices (edgeseek/internal/runtime/pipeline.h, SplitOptions): "cpu,0",
  // "0,0", ...; empty: `backend` / `device` alone (or the MPI ranks under mpirun).
  std::string devices;
  std::string split = "layer";
  std::string split_layers;  // per-device layer counts; empty: by memory
  // Set by the server from its scheduler options before loading (BackendOptions).
  bool profile = false;
  bool deterministic = false;
};

struct ModelEntry {
  std::string name;       // the `model` clients ask for
  std::string path;       // HF folder / GGUF
  std::string synthetic;  // preset name or config.json path (random weights)
  std::string tokenizer;  // tokenizer folder/file; default: the model's, or next to `synthetic`
  uint64_t seed = 0;
  std::string dtype;               // synthetic weights' type ("bf16" when empty)
  std::string reasoning = "auto";  // auto: on when the chat template or vocabulary has </think>
  std::vector<InstanceConfig> instances = {InstanceConfig{}};
  // Speculative decoding of a lone decoding request (Engine::set_drafter, docs/speculative.md):
  // "" off, "ngram" (prompt lookup), "target" (the model's own weights: acceptance's upper
  // bound) or a draft model's folder / GGUF; draft_dtype quantizes the draft at load.
  std::string draft;
  std::string draft_dtype;
  int spec_k = 4;
  // Between instances (two or more): migration of running requests from an overloaded
  // instance to one with room (balancer.h, docs/server.md "Several instances").
  BalancePolicy balance;
};

struct ClientConfig {
  std::string api_key, name;
  int weight = 1;
  int max_concurrent = 0;     // 0: limits.max_concurrent_per_client
  std::string priority = {};  // default class for this client (empty: the server's default)
  // Prefix-cache scope: "client" (its cached prompt blocks serve only its own requests) or
  // "shared" (shared with every other "shared" client of the model).
  std::string prefix_scope = "client";
};

struct ServerLimits {
  size_t max_body_bytes = 4 << 20;
  int64_t max_prompt_tokens = 0;  // 0: the context
  int max_tokens = 4096;
  int default_max_tokens = 0;  // 0: whatever fits the context
  int max_concurrent_per_client = 64;
  int max_queue = 1024;
  double request_timeout_s = 600;
  // Receive deadlines (docs/server.md, "Slow clients"): headers within header_timeout_s of the
  // connection (or of the first byte after keep-alive), the body within body_timeout_s after
  // them, and never idle_timeout_s of silence inside a request; 408 otherwise. 1.5 s: a lying
  // Content-Length is answered well within issue 23's 2 s for every answer (at 2 s it took
  // 2.004 s), while a live client's TCP retransmissions (200 ms minimum RTO) still fit.
  double header_timeout_s = 10;
  double body_timeout_s = 60;
  double idle_timeout_s = 1.5;
  // Open connections in total and from one client IP (docs/server.md, "Connection limits");
  // one more is answered 503 with Retry-After: 1 and closed at accept.
  int max_connections = 1024;
  int max_connections_per_ip = 256;
};

// OpenTelemetry trace export (OTLP/HTTP JSON, src/server/otlp.h; docs/server.md).
struct OtlpConfig {
  std::string endpoint;  // http(s)://host:port/v1/traces; empty: off
  std::string service_name = "edgeseek";
  double timeout_s = 2;   // connect / read / write timeout of one POST
  int max_queued = 1024;  // requests' spans waiting to be sent; more are dropped
};

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::vector<std::string> api_keys;  // empty and no clients: no authentication
  std::string trace_dir;
  int http_threads = 128;
  double drain_grace_s = 30;
  // With API keys configured, /metrics needs one unless this is set; public metrics leave the
  // per-client series out, and a key sees only its own client's.
  bool metrics_public = false;
  // Keys that may read /metrics with every client's series (an operator's scraper); they are
  // not accepted by the other endpoints.
  std::vector<std::string> metrics_keys;
  ServerLimits limits;
  EngineOptions scheduler;
  // Classes from "priorities" (default: high 8, normal 4, low 1); client weights from "clients".
  QosPolicy qos{{{"high", 8, 0, false}, {"normal", 4, 0, true}, {"low", 1, 0, true}}, {}, 1};
  std::string default_priority;  // class name; empty: the middle class
  std::vector<ClientConfig> clients;
  std::vector<ModelEntry> models;
  // Plugins (edgeseek.h's es_plugin ABI, plugin_host.h): "lib.so" or "lib.so:CONFIG", loaded in
  // this order before the models.
  std::vector<std::string> plugins;
  OtlpConfig otlp;
};

// Reads and validates a config file against the schema; throws es::Error naming the file and
// the JSON pointer of the bad field ("server.json: /models/0/instances/0/slots: 0 is less than
// the minimum 1").
ServerConfig LoadServerConfig(const std::string& path, const std::string& schema_path);
ServerConfig ServerConfigFromJson(const nlohmann::json& doc, const std::string& schema_path,
                                  const std::string& origin);
// configs/server.schema.json next to the source tree or installed; ES_SERVER_SCHEMA overrides.
std::string DefaultSchemaPath();

// ---- models ----------------------------------------------------------------------------------
// Text side of a model: tokenizer, chat template, EOS ids. The loader builds one per model.
class TokenTextStream {
 public:
  virtual ~TokenTextStream() = default;
  virtual std::string Push(int32_t token) = 0;  // UTF-8-complete text so far
  virtual std::string Flush() = 0;
};

class TextModel {
 public:
  virtual ~TextModel() = default;
  // add_special: BOS/EOS as the tokenizer config asks (completions); chat prompts already
  // carry them from the template. es::Error on failure.
  virtual std::vector<int32_t> Encode(const std::string& text, bool add_special) const = 0;
  // Renders messages (array of {role, content, ...}) with the chat template.
  virtual std::string RenderChat(const nlohmann::json& messages, const nlohmann::json& tools,
                                 const nlohmann::json& kwargs) const = 0;
  virtual std::unique_ptr<TokenTextStream> NewStream() const = 0;
  virtual std::vector<int32_t> eos_ids() const = 0;
  virtual bool has_reasoning_tags() const = 0;  // "</think>" in the template or vocabulary
  // The index grammars match tokens against (constrained decoding): every id's bytes, special
  // ids none. Built on first use and shared; null when the model offers none (grammar requests
  // are then refused).
  virtual std::shared_ptr<const grammar::TokenTrie> token_trie() const { return nullptr; }
  // The chat template's source ("" without one): the server reads its tool call format from it.
  virtual std::string chat_template_source() const { return ""; }
};

struct LoadedModel {
  std::shared_ptr<const TextModel> text;
  std::vector<std::unique_ptr<StepModel>> instances;  // one per InstanceConfig
  std::vector<std::string> instance_names;            // "cpu", "vulkan:0"
  // Per instance (empty, or one each, null for none): the drafter its engine speculates with.
  std::vector<std::unique_ptr<Drafter>> drafters;
};

using ModelBuilder = std::function<LoadedModel(const ModelEntry&)>;
// Loads with es::Model / es::Runner / es::Tokenizer.
ModelBuilder DefaultModelBuilder();

// ---- the server --------------------------------------------------------------------------
class Server {
 public:
  Server(ServerConfig cfg, ModelBuilder loader);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds host:port (port 0: any free one) and serves in the background; throws es::Error.
  void Listen();
  int port() const;
  // Loads every model and starts its engines; afterwards /health says ready.
  void LoadModels();
  // Stops accepting, lets running requests finish for up to drain_grace_s less a reserve
  // (min(1 s, grace/2)), cancels the rest, stops; it returns later than drain_grace_s only when
  // a step or a render in progress outlives it (`edgeseek serve` exits the process then). Safe from
  // any thread (not from a signal handler: use RequestShutdown there).
  void Shutdown();
  // Async-signal-safe: wakes WaitForShutdown, which then calls Shutdown.
  void RequestShutdown();
  void WaitForShutdown();

  struct Impl;  // opaque (src/server/server.cpp)

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace es
