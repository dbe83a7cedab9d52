// Loading plugins and calling them defensively (edgeseek/internal/runtime/plugin_host.h).
#include "edgeseek/internal/runtime/plugin_host.h"

#include <dlfcn.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <type_traits>

#include "edgeseek/internal/core/error.h"

namespace es {

namespace {

// es_request_info over a SeqRequest; the strings live as long as this object.
class RequestInfo {
 public:
  RequestInfo(const SeqRequest& r, const PluginRequestContext& ctx) {
    for (const auto& [k, v] : r.metadata) keys_.push_back(k.c_str()), values_.push_back(v.c_str());
    info_.id = r.id.c_str();
    info_.model = ctx.model.c_str();
    info_.client = r.client.c_str();
    info_.priority = ctx.priority.c_str();
    info_.prompt_tokens = int32_t(r.prompt.size());
    info_.max_tokens = r.max_tokens;
    info_.n_instances = ctx.n_instances;
    info_.n_metadata = keys_.size();
    info_.metadata_keys = keys_.data();
    info_.metadata_values = values_.data();
  }
  const es_request_info* get() const { return &info_; }

 private:
  std::vector<const char*> keys_, values_;
  es_request_info info_{};
};

es_finish_reason ToC(FinishReason r) {
  switch (r) {
    case FinishReason::kStop:
      return ES_FINISH_STOP;
    case FinishReason::kLength:
      return ES_FINISH_LENGTH;
    case FinishReason::kCancelled:
    case FinishReason::kTimeout:
      return ES_FINISH_CANCELLED;
    case FinishReason::kError:
      return ES_FINISH_ERROR;
    default:
      return ES_FINISH_NONE;
  }
}

}  // namespace

PluginHost::PluginHost()
    : sink_([](const std::string& plugin, const std::string& message) {
        std::fprintf(stderr, "edgeseek: plugin '%s': %s\n", plugin.c_str(), message.c_str());
      }) {}

PluginHost::~PluginHost() {
  for (auto it = plugins_.rbegin(); it != plugins_.rend(); ++it) {
    if (it->api.destroy) {
      try {
        it->api.destroy(it->api.state);
      } catch (...) {
      }
    }
    if (it->handle) dlclose(it->handle);
  }
}

void PluginHost::Load(const std::string& spec) {
  // "lib.so:CONFIG": the config starts after the first ':' that follows the file name's ".so".
  std::string path = spec, config;
  const size_t so = spec.find(".so");
  const size_t colon = spec.find(':', so == std::string::npos ? 0 : so);
  if (colon != std::string::npos) path = spec.substr(0, colon), config = spec.substr(colon + 1);
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) Fail("plugin '", path, "': cannot load: ", dlerror());
  auto init = reinterpret_cast<es_plugin_init_fn>(dlsym(handle, "es_plugin_init"));
  if (!init) {
    dlclose(handle);
    Fail("plugin '", path, "': no es_plugin_init symbol (see include/edgeseek/edgeseek.h)");
  }
  es_plugin p;
  std::memset(&p, 0, sizeof p);
  p.abi_version = ES_PLUGIN_ABI_VERSION;
  es_status st;
  try {
    st = init(config.c_str(), &p);
  } catch (...) {
    dlclose(handle);
    Fail("plugin '", path, "': es_plugin_init threw an exception");
  }
  if (st != ES_OK) {
    dlclose(handle);
    Fail("plugin '", path, "': es_plugin_init failed (status ", int(st), ")",
         p.name ? std::string(" in '") + p.name + "'" : std::string());
  }
  if (p.abi_version != ES_PLUGIN_ABI_VERSION) {
    if (p.destroy) p.destroy(p.state);
    dlclose(handle);
    Fail("plugin '", path, "': ABI version ", p.abi_version, ", this server speaks ",
         ES_PLUGIN_ABI_VERSION);
  }
  if (!p.name || !*p.name) p.name = nullptr;
  try {
    Add(p, handle);
  } catch (const Error& e) {
    if (p.destroy) p.destroy(p.state);
    dlclose(handle);
    Fail("plugin '", path, "': ", e.what());
  }
  if (!p.name) plugins_.back().name = path;
}

void PluginHost::Add(const es_plugin& plugin, void* handle) {
  if (plugin.policy && has_policy()) Fail("a second scheduling policy (one per server)");
  Plugin p;
  p.api = plugin;
  p.handle = handle;
  p.name = plugin.name ? plugin.name : "plugin" + std::to_string(plugins_.size());
  plugins_.push_back(std::move(p));
}

bool PluginHost::has_policy() const {
  for (const auto& p : plugins_)
    if (p.api.policy) return true;
  return false;
}

std::vector<std::string> PluginHost::names() const {
  std::vector<std::string> v;
  for (const auto& p : plugins_) v.push_back(p.name);
  return v;
}

void PluginHost::Report(const std::string& plugin, const std::string& message) {
  ++errors_;
  if (sink_) sink_(plugin, message);
}

template <class Fn>
bool PluginHost::Call(const Plugin& p, const char* what, Fn&& fn) {
  char error[ES_PLUGIN_ERROR_BYTES];
  error[0] = '\0';
  es_status st;
  try {
    st = fn(error);
  } catch (const std::exception& e) {
    Report(p.name, std::string(what) + " threw: " + e.what());
    return false;
  } catch (...) {
    Report(p.name, std::string(what) + " threw an exception");
    return false;
  }
  if (st != ES_OK) {
    error[sizeof error - 1] = '\0';  // a plugin that forgot the terminator
    Report(p.name, std::string(what) + " failed (status " + std::to_string(int(st)) + ")" +
                       (error[0] ? std::string(": ") + error : std::string()));
    return false;
  }
  return true;
}

PluginDecision PluginHost::Check(const SeqRequest& r, const PluginRequestContext& ctx) {
  PluginDecision d;
  const RequestInfo info(r, ctx);
  for (const auto& p : plugins_) {
    if (!p.api.constraint) continue;
    es_constraint_result out;
    std::memset(&out, 0, sizeof out);
    out.instance = -1;
    if (!Call(p, "constraint",
              [&](char* e) { return p.api.constraint(p.api.state, info.get(), &out, e); })) {
      d.kind = PluginDecision::Kind::kError;
      d.plugin = p.name;
      d.message = "plugin '" + p.name + "' failed on this request";
      return d;
    }
    out.message[sizeof out.message - 1] = '\0';
    // Read as an integer: a plugin may write any value, and loading one that es_verdict does not
    // hold through the enum type is undefined behaviour (UBSan: "not a valid value").
    std::underlying_type_t<es_verdict> verdict;
    std::memcpy(&verdict, &out.verdict, sizeof verdict);
    switch (verdict) {
      case ES_VERDICT_ADMIT:
        continue;
      case ES_VERDICT_REJECT:
        d.kind = PluginDecision::Kind::kReject;
        d.plugin = p.name;
        d.message = out.message[0] ? out.message : "rejected by plugin '" + p.name + "'";
        return d;
      case ES_VERDICT_ROUTE:
        if (out.instance < 0 || out.instance >= ctx.n_instances) {
          Report(p.name, "constraint routed to instance " + std::to_string(out.instance) +
                             " of a model with " + std::to_string(ctx.n_instances));
          d.kind = PluginDecision::Kind::kError;
          d.plugin = p.name;
          d.message =
              "plugin '" + p.name + "' routed the request to an instance that does not exist";
          return d;
        }
        d.kind = PluginDecision::Kind::kRoute;
        d.plugin = p.name;
        d.instance = out.instance;
        return d;
      default:
        Report(p.name,
               "constraint returned verdict " + std::to_string(verdict) + ", which does not exist");
        d.kind = PluginDecision::Kind::kError;
        d.plugin = p.name;
        d.message = "plugin '" + p.name + "' failed on this request";
        return d;
    }
  }
  return d;
}

double PluginHost::Score(const SeqRequest& r, const PluginRequestContext& ctx, double waited_s) {
  for (const auto& p : plugins_) {
    if (!p.api.policy) continue;
    const RequestInfo info(r, ctx);
    double score = 0;
    if (!Call(p, "policy",
              [&](char* e) { return p.api.policy(p.api.state, info.get(), waited_s, &score, e); }))
      return 0;
    if (!std::isfinite(score)) {
      Report(p.name, "policy scored request " + r.id + " " + std::to_string(score) +
                         " (not a finite number)");
      return 0;
    }
    return score;
  }
  return 0;
}

void PluginHost::OnStep(const std::string& model, int instance, const StepInfo& s) {
  es_step_info info{};
  info.model = model.c_str();
  info.instance = instance;
  info.batch_tokens = s.batch_tokens;
  info.batch_seqs = s.batch_seqs;
  info.decode_seqs = s.decode_seqs;
  info.prefill_tokens = s.prefill_tokens;
  info.seconds = s.seconds;
  info.upload_s = s.split.upload_s;
  info.dispatch_s = s.split.dispatch_s;
  info.shader_s = s.split.shader_s;
  info.download_s = s.split.download_s;
  for (const auto& p : plugins_)
    if (p.api.on_step)
      Call(p, "on_step", [&](char* e) { return p.api.on_step(p.api.state, &info, e); });
}

void PluginHost::OnRequestStart(const SeqRequest& r, const PluginRequestContext& ctx) {
  const RequestInfo info(r, ctx);
  for (const auto& p : plugins_)
    if (p.api.on_request_start)
      Call(p, "on_request_start",
           [&](char* e) { return p.api.on_request_start(p.api.state, info.get(), e); });
}

void PluginHost::OnRequestFinish(const SeqRequest& r, const PluginRequestContext& ctx,
                                 FinishReason why, int completion_tokens) {
  const RequestInfo info(r, ctx);
  for (const auto& p : plugins_)
    if (p.api.on_request_finish)
      Call(p, "on_request_finish", [&](char* e) {
        return p.api.on_request_finish(p.api.state, info.get(), ToC(why), completion_tokens, e);
      });
}

}  // namespace es
