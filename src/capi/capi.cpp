// The C API (include/edgeseek/edgeseek.h) over the C++ library: every entry point catches what
// the layer beneath throws and turns it into an es_status plus a per-thread message, so no
// exception crosses the C boundary. The text pipeline is the CLI's and the server's
// (runtime/text_pipeline.h); generation is es::Generate on a one-slot Runner, the engine is
// es::Engine on a Runner of its own that shares the model's weights.
#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "edgeseek/edgeseek.h"
#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/formats/quant_policy.h"
#include "edgeseek/internal/runtime/engine.h"
#include "edgeseek/internal/runtime/generator.h"
#include "edgeseek/internal/runtime/model.h"
#include "edgeseek/internal/runtime/runner.h"
#include "edgeseek/internal/runtime/text_pipeline.h"

// ---- handles ----------------------------------------------------------------------------------
struct es_model {
  std::shared_ptr<es::Model> model;
  std::unique_ptr<es::ChatText> text;
  std::unique_ptr<es::Runner> runner;  // one slot: es_generate, es_logits
  std::mutex mu;                       // one generate / logits call at a time
  // For the runners of engines: the same backend, device, threads and KV type.
  std::string backend, device, kv_type;
  int threads = 0;
  int64_t context = 0;
};

struct es_request {
  es_engine* engine = nullptr;  // null once the engine is freed
  std::shared_ptr<es::SeqRequest> seq;
  std::unique_ptr<es::TokenText> pipe;
  es_generate_params params{};
  std::vector<std::string> stops;
  const es::ChatText* text = nullptr;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;       // guarded by mu
  bool stop_hit = false;   // engine thread
  bool user_stop = false;  // engine thread: a callback returned false
  es_generate_result result{};
  std::string error;  // kError's message
};

struct es_engine {
  es_model* model = nullptr;
  std::shared_ptr<es::RequestQueue> queue;
  std::unique_ptr<es::Engine> engine;
  std::mutex mu;
  std::set<es_request*> live;  // submitted, not yet freed
  uint64_t next_id = 0;
};

namespace {

thread_local std::string g_error;

es_status Fail(es_status s, const std::string& message) {
  g_error = message;
  return s;
}

// Runs `fn`, mapping exceptions to `on_error` with their message.
template <class Fn>
es_status Guard(es_status on_error, Fn&& fn) {
  try {
    return fn();
  } catch (const std::bad_alloc&) {
    return Fail(on_error, "out of memory");
  } catch (const std::exception& e) {
    return Fail(on_error, e.what());
  } catch (...) {
    return Fail(on_error, "unknown error");
  }
}

#define ES_ARG(cond, what) \
  if (!(cond)) return Fail(ES_ERR_INVALID_ARGUMENT, what)

std::string Str(const char* s) { return s ? s : ""; }

// Copies `n` elements of `src` into a caller's buffer under the size protocol of edgeseek.h.
template <class T>
es_status CopyOut(const T* src, size_t n, T* dst, size_t capacity, size_t* n_out, bool nul) {
  if (n_out) *n_out = n;
  if (n > capacity) {
    return Fail(ES_ERR_BUFFER_TOO_SMALL, "the result needs " + std::to_string(n) +
                                             " elements; the buffer holds " +
                                             std::to_string(capacity));
  }
  if (n) std::memcpy(dst, src, n * sizeof(T));
  if (nul && n < capacity) dst[n] = T(0);
  return ES_OK;
}

es::SamplingParams Sampling(const es_sampler_config& c) {
  es::SamplingParams p;
  p.temperature = c.temperature;
  p.top_k = c.top_k;
  p.top_p = c.top_p;
  p.min_p = c.min_p;
  p.repeat_penalty = c.repeat_penalty;
  p.seed = c.seed;
  return p;
}

const char* CheckParams(const es_generate_params& p) {
  if (p.max_tokens <= 0) return "es_generate_params.max_tokens must be > 0";
  if (p.n_stops && !p.stops) return "es_generate_params.stops is NULL but n_stops > 0";
  for (size_t i = 0; i < p.n_stops; ++i)
    if (!p.stops[i] || !*p.stops[i]) return "es_generate_params.stops has a NULL or empty string";
  const es_sampler_config& s = p.sampler;
  if (!(s.temperature >= 0)) return "es_sampler_config.temperature must be >= 0";
  if (s.top_k < 0) return "es_sampler_config.top_k must be >= 0";
  if (!(s.top_p > 0 && s.top_p <= 1)) return "es_sampler_config.top_p must be in (0, 1]";
  if (!(s.min_p >= 0 && s.min_p <= 1)) return "es_sampler_config.min_p must be in [0, 1]";
  if (!(s.repeat_penalty > 0)) return "es_sampler_config.repeat_penalty must be > 0";
  return nullptr;
}

std::vector<std::string> Stops(const es_generate_params& p) {
  std::vector<std::string> v;
  for (size_t i = 0; i < p.n_stops; ++i) v.emplace_back(p.stops[i]);
  return v;
}

// Sends a delta to on_text; false when the callback asked to stop.
bool EmitText(const es_generate_params& p, const std::string& reasoning,
              const std::string& content) {
  if (!p.on_text) return true;
  bool go = true;
  if (!reasoning.empty())
    go = p.on_text(p.user, ES_TEXT_REASONING, reasoning.data(), reasoning.size()) && go;
  if (!content.empty())
    go = p.on_text(p.user, ES_TEXT_CONTENT, content.data(), content.size()) && go;
  return go;
}

std::unique_ptr<es::Runner> MakeRunner(const es_model& m, int slots) {
  es::BackendOptions bo;
  bo.threads = m.threads;
  bo.device = m.device;
  es::RunnerOptions ro;
  ro.n_slots = slots;
  ro.context = m.context;
  if (!m.kv_type.empty()) ro.kv_dtype = es::ParseKvType(m.kv_type);
  return std::make_unique<es::Runner>(m.model, es::CreateBackend(m.backend, bo), ro);
}

es_finish_reason Finish(es::FinishReason r) {
  switch (r) {
    case es::FinishReason::kStop:
      return ES_FINISH_STOP;
    case es::FinishReason::kLength:
      return ES_FINISH_LENGTH;
    case es::FinishReason::kCancelled:
    case es::FinishReason::kTimeout:
      return ES_FINISH_CANCELLED;
    case es::FinishReason::kError:
      return ES_FINISH_ERROR;
    default:
      return ES_FINISH_NONE;
  }
}

}  // namespace

extern "C" {

// ---- errors -----------------------------------------------------------------------------------
const char* es_last_error(void) { return g_error.c_str(); }

const char* es_status_name(es_status s) {
  switch (s) {
    case ES_OK:
      return "ok";
    case ES_ERR_INVALID_ARGUMENT:
      return "invalid argument";
    case ES_ERR_LOAD:
      return "load failed";
    case ES_ERR_RUNTIME:
      return "runtime error";
    case ES_ERR_BUFFER_TOO_SMALL:
      return "buffer too small";
    case ES_ERR_CALLBACK:
      return "callback error";
  }
  return "unknown status";
}

const char* es_version(void) { return ES_VERSION_STRING; }

// ---- models -----------------------------------------------------------------------------------
es_model_params es_model_default_params(void) {
  es_model_params p;
  std::memset(&p, 0, sizeof p);
  return p;
}

es_status es_model_load(const es_model_params* params, es_model** out) {
  ES_ARG(params && out, "es_model_load: params and out must not be NULL");
  *out = nullptr;
  ES_ARG(params->path && *params->path, "es_model_params.path is empty");
  ES_ARG(params->threads >= 0, "es_model_params.threads must be >= 0");
  ES_ARG(params->context >= 0, "es_model_params.context must be >= 0");
  return Guard(ES_ERR_LOAD, [&] {
    auto m = std::make_unique<es_model>();
    m->backend = params->backend ? params->backend : "cpu";
    m->device = Str(params->device);
    m->kv_type = Str(params->kv_type);
    m->threads = params->threads;
    m->context = params->context;
    if (!m->kv_type.empty()) es::ParseKvType(m->kv_type);  // a bad type fails before the load
    es::LoadOptions lo;
    lo.tokenizer = Str(params->tokenizer);
    lo.threads = params->threads;
    if (params->dtype && *params->dtype)
      lo.quantize = std::make_shared<const es::QuantPolicy>(es::BuiltinQuantPolicy(params->dtype));
    m->model = es::Model::Load(params->path, lo);
    if (!m->model->tokenizer()) {
      es::Fail(m->model->tokenizer_error().empty()
                   ? "model '" + std::string(params->path) +
                         "' has no tokenizer: set es_model_params.tokenizer"
                   : m->model->tokenizer_error());
    }
    m->text = std::make_unique<es::ChatText>(
        std::shared_ptr<const es::Tokenizer>(m->model, m->model->tokenizer()),
        m->model->generation().eos_ids, params->path);
    m->runner = MakeRunner(*m, 1);
    *out = m.release();
    return ES_OK;
  });
}

void es_model_free(es_model* model) { delete model; }

int32_t es_model_vocab_size(const es_model* model) {
  return model ? int32_t(model->model->vocab_size()) : 0;
}

int64_t es_model_context(const es_model* model) { return model ? model->runner->context() : 0; }

bool es_model_has_reasoning(const es_model* model) {
  return model && model->text->has_reasoning_tags();
}

// ---- text -------------------------------------------------------------------------------------
es_status es_tokenize(const es_model* model, const char* text, size_t text_len, bool add_special,
                      int32_t* ids, size_t capacity, size_t* n_out) {
  ES_ARG(model, "es_tokenize: model is NULL");
  ES_ARG(text || text_len == 0, "es_tokenize: text is NULL");
  ES_ARG(ids || capacity == 0, "es_tokenize: ids is NULL but capacity > 0");
  return Guard(ES_ERR_RUNTIME, [&] {
    const std::vector<int32_t> v =
        model->text->Encode(std::string_view(text ? text : "", text_len), add_special);
    return CopyOut(v.data(), v.size(), ids, capacity, n_out, false);
  });
}

es_status es_detokenize(const es_model* model, const int32_t* ids, size_t n_ids, bool skip_special,
                        char* text, size_t capacity, size_t* n_out) {
  ES_ARG(model, "es_detokenize: model is NULL");
  ES_ARG(ids || n_ids == 0, "es_detokenize: ids is NULL");
  ES_ARG(text || capacity == 0, "es_detokenize: text is NULL but capacity > 0");
  const es::Tokenizer& tok = model->text->tokenizer();
  for (size_t i = 0; i < n_ids; ++i)
    if (!tok.IsValid(ids[i]))
      return Fail(ES_ERR_INVALID_ARGUMENT, "es_detokenize: token id " + std::to_string(ids[i]) +
                                               " at " + std::to_string(i) +
                                               " is not in the vocabulary");
  return Guard(ES_ERR_RUNTIME, [&] {
    const std::string s = tok.Decode(std::vector<int32_t>(ids, ids + n_ids), skip_special);
    return CopyOut(s.data(), s.size(), text, capacity, n_out, true);
  });
}

es_status es_chat_apply_template(const es_model* model, const es_chat_message* messages,
                                 size_t n_messages, bool add_generation_prompt, char* text,
                                 size_t capacity, size_t* n_out) {
  ES_ARG(model, "es_chat_apply_template: model is NULL");
  ES_ARG(messages || n_messages == 0, "es_chat_apply_template: messages is NULL");
  ES_ARG(text || capacity == 0, "es_chat_apply_template: text is NULL but capacity > 0");
  for (size_t i = 0; i < n_messages; ++i)
    ES_ARG(messages[i].role && messages[i].content,
           "es_chat_apply_template: message " + std::to_string(i) + " has a NULL role or content");
  if (!model->text->has_template()) return Fail(ES_ERR_RUNTIME, "this model has no chat template");
  return Guard(ES_ERR_RUNTIME, [&] {
    nlohmann::ordered_json msgs = nlohmann::ordered_json::array();
    for (size_t i = 0; i < n_messages; ++i)
      msgs.push_back({{"role", messages[i].role}, {"content", messages[i].content}});
    const std::string s = model->text->RenderChat(msgs, nullptr, nullptr, add_generation_prompt);
    return CopyOut(s.data(), s.size(), text, capacity, n_out, true);
  });
}

// ---- generation -------------------------------------------------------------------------------
es_sampler_config es_sampler_default_config(void) {
  es_sampler_config c;
  std::memset(&c, 0, sizeof c);
  c.temperature = 0;
  c.top_p = 1;
  c.repeat_penalty = 1;
  return c;
}

es_generate_params es_generate_default_params(void) {
  es_generate_params p;
  std::memset(&p, 0, sizeof p);
  p.sampler = es_sampler_default_config();
  p.max_tokens = 256;
  p.reasoning = true;
  return p;
}

es_status es_generate(es_model* model, const char* prompt, const es_generate_params* params,
                      es_generate_result* result) {
  ES_ARG(model && prompt && params, "es_generate: model, prompt and params must not be NULL");
  if (const char* bad = CheckParams(*params)) return Fail(ES_ERR_INVALID_ARGUMENT, bad);
  std::lock_guard<std::mutex> lock(model->mu);
  return Guard(ES_ERR_RUNTIME, [&] {
    const es::ChatText& text = *model->text;
    es::Runner& runner = *model->runner;
    const std::vector<int32_t> ids = text.Encode(prompt, params->add_special);
    if (ids.empty()) return Fail(ES_ERR_INVALID_ARGUMENT, "es_generate: the prompt has no tokens");
    if (int64_t(ids.size()) + 1 >= runner.context())
      return Fail(ES_ERR_INVALID_ARGUMENT,
                  "es_generate: the prompt has " + std::to_string(ids.size()) +
                      " tokens; the context holds " + std::to_string(runner.context()));
    const bool reasoning = params->reasoning && text.has_reasoning_tags();
    es::TokenText pipe(text.tokenizer(), Stops(*params), reasoning,
                       reasoning && es::TemplateOpensReasoning(prompt));
    es::GenerateOptions go;
    go.max_new_tokens =
        int(std::min<int64_t>(params->max_tokens, runner.context() - int64_t(ids.size()) - 1));
    go.eos_ids = text.eos_ids();
    go.sampling = Sampling(params->sampler);
    bool cancelled = false;
    go.on_token = [&](int32_t id) {
      if (params->on_token && !params->on_token(params->user, id)) cancelled = true;
      if (text.IsEos(id)) return !cancelled;
      std::string r, c;
      const bool stopped = pipe.Push(id, &r, &c);
      if (!EmitText(*params, r, c)) cancelled = true;
      return !stopped && !cancelled;
    };
    es::GenerateStats stats;
    const int slot = runner.AcquireSlot();
    std::vector<int32_t> out;
    try {
      out = es::Generate(runner, slot, ids, go, &stats);
    } catch (...) {
      runner.ReleaseSlot(slot);
      throw;
    }
    runner.ReleaseSlot(slot);
    std::string r, c;
    pipe.Finish(&r, &c);
    if (!cancelled && !EmitText(*params, r, c)) cancelled = true;
    if (result) {
      result->prompt_tokens = int32_t(ids.size());
      result->completion_tokens = int32_t(out.size());
      result->finish = pipe.stopped() || stats.stopped_by_eos ? ES_FINISH_STOP
                       : cancelled                            ? ES_FINISH_CANCELLED
                                                              : ES_FINISH_LENGTH;
    }
    return ES_OK;
  });
}

es_status es_logits(es_model* model, const int32_t* ids, size_t n_ids, bool all_positions,
                    float* logits, size_t capacity, size_t* n_out) {
  ES_ARG(model && ids && n_ids > 0, "es_logits: model and ids must not be NULL, n_ids > 0");
  ES_ARG(logits || capacity == 0, "es_logits: logits is NULL but capacity > 0");
  const int64_t vocab = model->model->vocab_size();
  for (size_t i = 0; i < n_ids; ++i)
    ES_ARG(ids[i] >= 0 && ids[i] < vocab, "es_logits: token id " + std::to_string(ids[i]) + " at " +
                                              std::to_string(i) + " is outside the vocabulary (" +
                                              std::to_string(vocab) + ")");
  const size_t need = (all_positions ? n_ids : 1) * size_t(vocab);
  if (n_out) *n_out = need;
  if (need > capacity) return CopyOut<float>(nullptr, need, logits, capacity, n_out, false);
  std::lock_guard<std::mutex> lock(model->mu);
  return Guard(ES_ERR_RUNTIME, [&] {
    es::Runner& runner = *model->runner;
    if (int64_t(n_ids) > runner.context())
      return Fail(ES_ERR_INVALID_ARGUMENT, "es_logits: " + std::to_string(n_ids) +
                                               " tokens do not fit the context of " +
                                               std::to_string(runner.context()));
    const int slot = runner.AcquireSlot();
    std::vector<float> v;
    try {
      es::Batch b;
      b.Add(slot, 0, std::vector<int32_t>(ids, ids + n_ids), all_positions);
      b.Finalize();
      runner.Forward(b, &v);
    } catch (...) {
      runner.ReleaseSlot(slot);
      throw;
    }
    runner.ReleaseSlot(slot);
    return CopyOut(v.data(), v.size(), logits, capacity, n_out, false);
  });
}

// ---- engine -----------------------------------------------------------------------------------
es_engine_params es_engine_default_params(void) {
  es_engine_params p;
  std::memset(&p, 0, sizeof p);
  p.slots = 4;
  p.max_batch_tokens = 0;
  return p;
}

es_status es_engine_create(es_model* model, const es_engine_params* params, es_engine** out) {
  ES_ARG(model && out, "es_engine_create: model and out must not be NULL");
  *out = nullptr;
  const es_engine_params p = params ? *params : es_engine_default_params();
  ES_ARG(p.slots >= 0 && p.max_batch_tokens >= 0,
         "es_engine_params: slots and max_batch_tokens must be >= 0");
  return Guard(ES_ERR_LOAD, [&] {
    auto e = std::make_unique<es_engine>();
    e->model = model;
    e->queue = std::make_shared<es::RequestQueue>(es::QosPolicy{});
    es::EngineOptions eo;
    eo.max_batch_tokens = p.max_batch_tokens;  // 0: the backend's
    e->engine = std::make_unique<es::Engine>(
        es::WrapRunner(MakeRunner(*model, p.slots ? p.slots : 4)), e->queue, eo);
    e->engine->Start();
    *out = e.release();
    return ES_OK;
  });
}

void es_engine_free(es_engine* engine) {
  if (!engine) return;
  {
    std::lock_guard<std::mutex> lock(engine->mu);
    for (es_request* r : engine->live) r->seq->cancel = true;
  }
  engine->engine->Stop();  // running requests finish as cancelled
  // Requests still waiting never reached an engine: they finish here.
  for (auto& seq : engine->queue->TakeDead(es::SteadySeconds())) {
    es::SeqEvent ev;
    ev.kind = es::SeqEventKind::kFinished;
    ev.finish = es::FinishReason::kCancelled;
    ev.time = es::SteadySeconds();
    if (seq->on_event) seq->on_event(ev);
  }
  for (es_request* r : engine->live) r->engine = nullptr;
  delete engine;
}

es_status es_engine_submit(es_engine* engine, const char* prompt, const es_generate_params* params,
                           es_request** out) {
  ES_ARG(engine && prompt && params && out,
         "es_engine_submit: engine, prompt, params and out must not be NULL");
  *out = nullptr;
  if (const char* bad = CheckParams(*params)) return Fail(ES_ERR_INVALID_ARGUMENT, bad);
  return Guard(ES_ERR_RUNTIME, [&] {
    const es::ChatText& text = *engine->model->text;
    auto r = std::make_unique<es_request>();
    r->params = *params;
    r->stops = Stops(*params);
    r->params.stops = nullptr;  // the copies in r->stops are what is used
    r->text = &text;
    const bool reasoning = params->reasoning && text.has_reasoning_tags();
    r->pipe = std::make_unique<es::TokenText>(text.tokenizer(), r->stops, reasoning,
                                              reasoning && es::TemplateOpensReasoning(prompt));
    auto seq = std::make_shared<es::SeqRequest>();
    seq->prompt = text.Encode(prompt, params->add_special);
    if (seq->prompt.empty())
      return Fail(ES_ERR_INVALID_ARGUMENT, "es_engine_submit: the prompt has no tokens");
    const int64_t room = engine->engine->max_need() - int64_t(seq->prompt.size());
    if (room < 1)
      return Fail(ES_ERR_INVALID_ARGUMENT,
                  "es_engine_submit: the prompt has " + std::to_string(seq->prompt.size()) +
                      " tokens; the engine holds " + std::to_string(engine->engine->max_need()) +
                      " per request");
    seq->max_tokens = int(std::min<int64_t>(params->max_tokens, room));
    seq->sampling = Sampling(params->sampler);
    seq->stop_ids = text.eos_ids();
    r->result.prompt_tokens = int32_t(seq->prompt.size());
    es_request* rp = r.get();
    seq->on_event = [rp](const es::SeqEvent& e) {
      const es_generate_params& p = rp->params;
      if (e.kind == es::SeqEventKind::kToken) {
        // A step may emit several tokens (speculative decoding): none after the request was
        // told to stop (a stop string, a callback's false) reaches the callbacks.
        if (rp->stop_hit || rp->user_stop) return;
        ++rp->result.completion_tokens;
        bool go = !p.on_token || p.on_token(p.user, e.token);
        if (!rp->text->IsEos(e.token) && !rp->stop_hit) {
          std::string re, co;
          if (rp->pipe->Push(e.token, &re, &co)) rp->stop_hit = true;
          go = EmitText(p, re, co) && go;
        }
        if (!go) rp->user_stop = true;
        if (!go || rp->stop_hit) rp->seq->cancel = true;
      } else if (e.kind == es::SeqEventKind::kFinished) {
        std::string re, co;
        rp->pipe->Finish(&re, &co);
        if (!rp->user_stop) EmitText(p, re, co);
        std::lock_guard<std::mutex> lock(rp->mu);
        rp->result.finish = rp->stop_hit    ? ES_FINISH_STOP
                            : rp->user_stop ? ES_FINISH_CANCELLED
                                            : Finish(e.finish);
        rp->error = e.message;
        rp->done = true;
        rp->cv.notify_all();
      }
    };
    {
      std::lock_guard<std::mutex> lock(engine->mu);
      seq->id = "c" + std::to_string(engine->next_id++);
      engine->live.insert(rp);
    }
    r->seq = seq;
    r->engine = engine;
    engine->queue->Push(seq);
    *out = r.release();
    return ES_OK;
  });
}

es_status es_request_wait(es_request* request, es_generate_result* result) {
  ES_ARG(request, "es_request_wait: request is NULL");
  std::unique_lock<std::mutex> lock(request->mu);
  request->cv.wait(lock, [&] { return request->done; });
  if (result) *result = request->result;
  if (request->result.finish == ES_FINISH_ERROR) return Fail(ES_ERR_RUNTIME, request->error);
  return ES_OK;
}

void es_request_cancel(es_request* request) {
  if (request) request->seq->cancel = true;
}

void es_request_free(es_request* request) {
  if (!request) return;
  request->seq->cancel = true;
  {
    std::unique_lock<std::mutex> lock(request->mu);
    request->cv.wait(lock, [&] { return request->done; });
  }
  if (request->engine) {
    std::lock_guard<std::mutex> lock(request->engine->mu);
    request->engine->live.erase(request);
  }
  delete request;
}

}  // extern "C"
