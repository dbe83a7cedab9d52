// Plugins of the serving scheduler (the es_plugin ABI of include/edgeseek/edgeseek.h): shared
// objects that register scheduler constraints (admit / reject / route a request to an instance
// by its metadata), a scheduling policy (a score over queued requests) and probes (per engine
// step with the latency split; per request at start and finish).
//
// The host calls every callback so that a misbehaving plugin cannot break its caller: an error
// status, a result out of range (a verdict that does not exist, an instance the model lacks, a
// NaN or infinite score) or a C++ exception leaving the callback is reported (the error sink:
// stderr, and the server's edgeseek_plugin_errors_total) and answered with a safe default —
// Check() says kError (the server refuses that request with a 500 and keeps serving), Score()
// gives 0, probes are skipped. A segfault or abort inside a plugin cannot be contained in
// process (docs/server.md "Plugins").
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "edgeseek/edgeseek.h"
#include "edgeseek/internal/runtime/engine.h"

namespace es {

// The context of a request that plugins see besides the SeqRequest itself.
struct PluginRequestContext {
  std::string model;
  std::string priority;  // the QoS class's name
  int n_instances = 1;
};

struct PluginDecision {
  enum class Kind { kAdmit, kReject, kRoute, kError };
  Kind kind = Kind::kAdmit;
  int instance = -1;    // kRoute
  std::string plugin;   // who decided (kReject, kRoute, kError)
  std::string message;  // kReject: the plugin's reason; kError: what went wrong
};

class PluginHost {
 public:
  // (plugin name, message) of every failure; default: one line on stderr.
  using ErrorSink = std::function<void(const std::string& plugin, const std::string& message)>;

  PluginHost();
  ~PluginHost();  // each plugin's destroy(), then dlclose
  PluginHost(const PluginHost&) = delete;
  PluginHost& operator=(const PluginHost&) = delete;

  // "path/lib.so" or "path/lib.so:CONFIG" (CONFIG goes to es_plugin_init). Throws es::Error
  // naming the path: cannot be opened, no es_plugin_init, another ABI version, init failed
  // (with the plugin's message), a second policy.
  void Load(const std::string& spec);
  // A plugin made in this process (tests); `handle` (may be null) is dlclosed at the end.
  void Add(const es_plugin& plugin, void* handle = nullptr);
  void set_error_sink(ErrorSink sink) { sink_ = std::move(sink); }

  bool empty() const { return plugins_.empty(); }
  bool has_policy() const;
  std::vector<std::string> names() const;
  int64_t errors() const { return errors_.load(); }

  // Constraints in load order; the first reject, route or failure decides.
  PluginDecision Check(const SeqRequest& r, const PluginRequestContext& ctx);
  // The policy's score of a queued request (0 when it fails).
  double Score(const SeqRequest& r, const PluginRequestContext& ctx, double waited_s);
  // Probes.
  void OnStep(const std::string& model, int instance, const StepInfo& step);
  void OnRequestStart(const SeqRequest& r, const PluginRequestContext& ctx);
  void OnRequestFinish(const SeqRequest& r, const PluginRequestContext& ctx, FinishReason why,
                       int completion_tokens);

 private:
  struct Plugin {
    es_plugin api{};
    void* handle = nullptr;  // dlopen's; null for Add()ed plugins without one
    std::string name;
  };
  // Runs one callback of `p` (`fn(error_buffer)` returns its status); false, reported, when it
  // failed or threw.
  template <class Fn>
  bool Call(const Plugin& p, const char* what, Fn&& fn);
  void Report(const std::string& plugin, const std::string& message);

  std::vector<Plugin> plugins_;  // set before serving, then read-only
  ErrorSink sink_;
  std::atomic<int64_t> errors_{0};
};

}  // namespace es
