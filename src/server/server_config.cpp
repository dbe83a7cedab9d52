// Server configuration: JSON file → schema validation (configs/server.schema.json) → ServerConfig.
// Checks the schema cannot express (a default_priority naming a class, duplicate names) are
// done here with the same "file: /pointer: message" form.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/core/json_field.h"
#include "edgeseek/internal/grammar/json_schema.h"
#include "edgeseek/internal/runtime/runner.h"
#include "edgeseek/internal/server/server.h"

namespace es {

using json = nlohmann::json;

namespace {

template <class T>
void Get(const json& o, const char* key, T* out) {
  if (o.contains(key)) *out = o.at(key).get<T>();
}

bool ClassExists(const ServerConfig& c, const std::string& n) {
  for (auto& q : c.qos.classes)
    if (q.name == n) return true;
  return false;
}

// The top-level fields and the otlp, limits and scheduler objects.
void ReadSettings(const json& doc, ServerConfig* c) {
  Get(doc, "host", &c->host);
  Get(doc, "port", &c->port);
  Get(doc, "api_keys", &c->api_keys);
  Get(doc, "trace_dir", &c->trace_dir);
  Get(doc, "http_threads", &c->http_threads);
  Get(doc, "drain_grace_s", &c->drain_grace_s);
  Get(doc, "metrics_public", &c->metrics_public);
  Get(doc, "metrics_keys", &c->metrics_keys);
  Get(doc, "plugins", &c->plugins);
  if (doc.contains("otlp")) {
    const json& o = doc.at("otlp");
    Get(o, "endpoint", &c->otlp.endpoint);
    Get(o, "service_name", &c->otlp.service_name);
    Get(o, "timeout_s", &c->otlp.timeout_s);
    Get(o, "max_queued", &c->otlp.max_queued);
  }
  if (doc.contains("limits")) {
    const json& l = doc.at("limits");
    Get(l, "max_body_bytes", &c->limits.max_body_bytes);
    Get(l, "max_prompt_tokens", &c->limits.max_prompt_tokens);
    Get(l, "max_tokens", &c->limits.max_tokens);
    Get(l, "default_max_tokens", &c->limits.default_max_tokens);
    Get(l, "max_concurrent_per_client", &c->limits.max_concurrent_per_client);
    Get(l, "max_queue", &c->limits.max_queue);
    Get(l, "request_timeout_s", &c->limits.request_timeout_s);
    Get(l, "header_timeout_s", &c->limits.header_timeout_s);
    Get(l, "body_timeout_s", &c->limits.body_timeout_s);
    Get(l, "idle_timeout_s", &c->limits.idle_timeout_s);
    Get(l, "max_connections", &c->limits.max_connections);
    Get(l, "max_connections_per_ip", &c->limits.max_connections_per_ip);
  }
  if (doc.contains("scheduler")) {
    const json& s = doc.at("scheduler");
    Get(s, "max_batch_tokens", &c->scheduler.max_batch_tokens);
    Get(s, "max_batch_seqs", &c->scheduler.max_batch_seqs);
    Get(s, "prefill_chunk", &c->scheduler.prefill_chunk);
    Get(s, "deterministic", &c->scheduler.deterministic);
    Get(s, "profile", &c->scheduler.profile);
    Get(s, "prefix_cache", &c->scheduler.prefix_cache);
  }
}

// /priorities: the classes, in order (the first is the highest).
void ReadPriorities(const json& doc, const std::string& origin, ServerConfig* c) {
  if (doc.contains("priorities")) {
    c->qos.classes.clear();
    std::set<std::string> names;
    for (size_t i = 0; i < doc.at("priorities").size(); ++i) {
      const json& p = doc.at("priorities")[i];
      QosClass q;
      q.name = p.at("name").get<std::string>();
      ES_CHECK(names.insert(q.name).second, origin, ": /priorities/", i, "/name: class '", q.name,
               "' is defined twice");
      Get(p, "weight", &q.weight);
      if (p.contains("preempt_after_ms"))
        q.preempt_after_s = p.at("preempt_after_ms").get<double>() / 1000;
      Get(p, "preemptible", &q.preemptible);
      c->qos.classes.push_back(q);
    }
  }
}

// /clients: API keys, names, weights, limits, priority classes and prefix-cache scopes.
void ReadClients(const json& doc, const std::string& origin, ServerConfig* c) {
  if (doc.contains("clients")) {
    std::set<std::string> keys, names;
    for (size_t i = 0; i < doc.at("clients").size(); ++i) {
      const json& j = doc.at("clients")[i];
      ClientConfig cl;
      cl.api_key = j.at("api_key").get<std::string>();
      cl.name = j.value("name", "client" + std::to_string(i));
      Get(j, "weight", &cl.weight);
      Get(j, "max_concurrent", &cl.max_concurrent);
      Get(j, "priority", &cl.priority);
      Get(j, "prefix_scope", &cl.prefix_scope);
      ES_CHECK(cl.prefix_scope == "client" || cl.prefix_scope == "shared", origin, ": /clients/", i,
               "/prefix_scope: '", cl.prefix_scope, "' is neither \"client\" nor \"shared\"");
      ES_CHECK(keys.insert(cl.api_key).second, origin, ": /clients/", i,
               "/api_key: key used twice");
      ES_CHECK(names.insert(cl.name).second, origin, ": /clients/", i, "/name: '", cl.name,
               "' used twice");
      ES_CHECK(cl.priority.empty() || ClassExists(*c, cl.priority), origin, ": /clients/", i,
               "/priority: no priority class is named '", cl.priority, "'");
      c->qos.client_weights.emplace_back(cl.name, cl.weight);
      c->clients.push_back(cl);
    }
  }
}

// One of /models/i/instances.
InstanceConfig ReadInstance(const json& ij, const std::string& origin, size_t i, size_t k) {
  InstanceConfig ic;
  Get(ij, "backend", &ic.backend);
  Get(ij, "device", &ic.device);
  Get(ij, "threads", &ic.threads);
  Get(ij, "slots", &ic.slots);
  Get(ij, "context", &ic.context);
  Get(ij, "kv_memory_mb", &ic.kv_memory_mb);
  Get(ij, "kv_type", &ic.kv_type);
  Get(ij, "devices", &ic.devices);
  Get(ij, "split", &ic.split);
  Get(ij, "split_layers", &ic.split_layers);
  if (!ic.kv_type.empty()) {
    try {
      ParseKvType(ic.kv_type);
    } catch (const Error& e) {
      Fail(origin, ": /models/", i, "/instances/", k, "/kv_type: ", e.what());
    }
  }
  return ic;
}

// /models/i: the weights, tokenizer, speculative draft, balancing and instances.
// `names`: the models read so far.
ModelEntry ReadModel(const json& j, const std::string& origin, size_t i,
                     std::set<std::string>* names) {
  ModelEntry m;
  m.name = j.at("name").get<std::string>();
  Get(j, "path", &m.path);
  Get(j, "synthetic", &m.synthetic);
  Get(j, "tokenizer", &m.tokenizer);
  Get(j, "seed", &m.seed);
  Get(j, "dtype", &m.dtype);
  Get(j, "reasoning", &m.reasoning);
  if (j.contains("speculative")) {
    const json& sj = j.at("speculative");
    Get(sj, "draft", &m.draft);
    Get(sj, "draft_dtype", &m.draft_dtype);
    Get(sj, "k", &m.spec_k);
  }
  if (j.contains("balance")) {
    const json& bj = j.at("balance");
    Get(bj, "migrate", &m.balance.migrate);
    Get(bj, "overload", &m.balance.overload);
    Get(bj, "min_tokens_left", &m.balance.min_tokens_left);
  }
  ES_CHECK(!m.path.empty() || !m.synthetic.empty(), origin, ": /models/", i,
           ": one of 'path' or 'synthetic' is required");
  ES_CHECK(names->insert(m.name).second, origin, ": /models/", i, "/name: '", m.name,
           "' used twice");
  if (j.contains("instances")) {
    m.instances.clear();
    for (auto& ij : j.at("instances")) {
      m.instances.push_back(ReadInstance(ij, origin, i, m.instances.size()));
    }
  }
  return m;
}

}  // namespace

std::string DefaultSchemaPath() {
  if (const char* env = std::getenv("ES_SERVER_SCHEMA")) return env;
  namespace fs = std::filesystem;
  for (const char* p : {"configs/server.schema.json", "../configs/server.schema.json",
                        "/usr/share/edgeseek/server.schema.json"})
    if (fs::exists(p)) return p;
#ifdef ES_SOURCE_DIR
  return std::string(ES_SOURCE_DIR) + "/configs/server.schema.json";
#else
  return "configs/server.schema.json";
#endif
}

ServerConfig LoadServerConfig(const std::string& path, const std::string& schema_path) {
  return ServerConfigFromJson(json_field::ReadNamedFile(path, "config"), schema_path, path);
}

ServerConfig ServerConfigFromJson(const json& doc, const std::string& schema_path,
                                  const std::string& origin) {
  const grammar::SchemaModel schema =
      grammar::SchemaModel::Parse(json_field::ReadNamedFile(schema_path, "schema"));
  auto errors = schema.Validate(doc);
  if (!errors.empty()) {
    std::string msg = origin + ": " + errors.front();
    if (errors.size() > 1) msg += " (and " + std::to_string(errors.size() - 1) + " more)";
    throw Error(msg);
  }
  ServerConfig c;
  ReadSettings(doc, &c);
  ReadPriorities(doc, origin, &c);
  Get(doc, "default_priority", &c.default_priority);
  ES_CHECK(c.default_priority.empty() || ClassExists(c, c.default_priority), origin,
           ": /default_priority: no priority class is named '", c.default_priority, "'");
  ReadClients(doc, origin, &c);
  if (doc.contains("models")) {
    std::set<std::string> names;
    for (size_t i = 0; i < doc.at("models").size(); ++i)
      c.models.push_back(ReadModel(doc.at("models")[i], origin, i, &names));
  }
  return c;
}

}  // namespace es
