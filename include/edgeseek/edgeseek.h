/* edgeseek.h — the C API of libedgeseek, the whole public surface (docs/c_api.md).
 *
 * C11, opaque handles, errors as values: every call that can fail returns an es_status, and on
 * failure es_last_error() (per thread) holds one line naming what was at fault. Nothing here
 * throws, aborts or exits.
 *
 *   es_model_params mp = es_model_default_params();
 *   mp.path = "DeepSeek-R1-Distill-Qwen-1.5B";
 *   es_model* m;
 *   if (es_model_load(&mp, &m) != ES_OK) { fprintf(stderr, "%s\n", es_last_error()); ... }
 *   es_chat_message msg = {"user", "Why is the sky blue?"};
 *   char prompt[4096]; size_t n;
 *   es_chat_apply_template(m, &msg, 1, true, prompt, sizeof prompt, &n);
 *   es_generate_params gp = es_generate_default_params();
 *   gp.on_text = print_text;               // receives content and reasoning apart
 *   es_generate(m, prompt, &gp, NULL);
 *   es_model_free(m);
 *
 * Threads: a model serves one es_generate / es_logits call at a time (calls on one model are
 * serialized inside); tokenize, detokenize and templates may run from any thread. An es_engine
 * (continuous batching over many requests, for servers) runs its own thread; its callbacks come
 * from that thread.
 */
#ifndef EDGESEEK_H
#define EDGESEEK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(ES_BUILDING_LIBRARY)
#define ES_API __attribute__((visibility("default")))
#else
#define ES_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define ES_API_VERSION 1

/* ---- errors --------------------------------------------------------------------------------- */
typedef enum es_status {
  ES_OK = 0,
  ES_ERR_INVALID_ARGUMENT = 1, /* a null handle or pointer, a value out of range */
  ES_ERR_LOAD = 2,             /* model, tokenizer, backend or device could not be loaded */
  ES_ERR_RUNTIME = 3,          /* tokenizing, templating or generating failed */
  ES_ERR_BUFFER_TOO_SMALL = 4, /* the output did not fit: the size out-parameter holds the need */
  ES_ERR_CALLBACK = 5          /* a plugin callback reported an error (es_plugin) */
} es_status;

/* The message of the last call that failed on this thread ("" when none has). Valid until the
 * next failing call on this thread. */
ES_API const char* es_last_error(void);
ES_API const char* es_status_name(es_status status);
ES_API const char* es_version(void); /* "0.1.0" */

/* ---- models --------------------------------------------------------------------------------- */
typedef struct es_model es_model;

typedef struct es_model_params {
  const char* path;      /* Hugging Face folder, .gguf or .onnx (required) */
  const char* tokenizer; /* tokenizer folder or tokenizer.json; NULL: the model's own */
  const char* backend;   /* "cpu" or "vulkan"; NULL: "cpu" */
  const char* device;    /* GPU index or name; NULL: the first */
  const char* kv_type;   /* "f32", "f16", "q8_0", "q4_0"; NULL: the backend's default */
  const char* dtype;     /* quantize weights at load ("q8_0", "q4_k_m", ...); NULL: as stored */
  int threads;           /* CPU threads; 0: all */
  int64_t context;       /* tokens per sequence; 0: min(model maximum, 4096) */
} es_model_params;

ES_API es_model_params es_model_default_params(void);
ES_API es_status es_model_load(const es_model_params* params, es_model** out);
ES_API void es_model_free(es_model* model); /* NULL is a no-op */
ES_API int32_t es_model_vocab_size(const es_model* model);
ES_API int64_t es_model_context(const es_model* model);
/* Whether the model knows reasoning tags (</think> in its template or vocabulary). */
ES_API bool es_model_has_reasoning(const es_model* model);

/* ---- text ----------------------------------------------------------------------------------- */
/* Output buffers: the call writes at most `capacity` elements and sets *n_out to the number the
 * whole result needs; ES_ERR_BUFFER_TOO_SMALL when that is more than `capacity` (call again with
 * a larger buffer; capacity 0 with a NULL buffer asks for the size). Text results are
 * NUL-terminated when there is room for the NUL (*n_out does not count it). */
ES_API es_status es_tokenize(const es_model* model, const char* text, size_t text_len,
                             bool add_special, int32_t* ids, size_t capacity, size_t* n_out);
ES_API es_status es_detokenize(const es_model* model, const int32_t* ids, size_t n_ids,
                               bool skip_special, char* text, size_t capacity, size_t* n_out);

typedef struct es_chat_message {
  const char* role; /* "system", "user", "assistant" */
  const char* content;
} es_chat_message;

/* Renders the conversation with the model's chat template (tokenizer_config.json's). */
ES_API es_status es_chat_apply_template(const es_model* model, const es_chat_message* messages,
                                        size_t n_messages, bool add_generation_prompt, char* text,
                                        size_t capacity, size_t* n_out);

/* ---- generation ----------------------------------------------------------------------------- */
typedef struct es_sampler_config {
  float temperature;    /* 0: greedy */
  int top_k;            /* 0: off */
  float top_p;          /* 1: off */
  float min_p;          /* 0: off */
  float repeat_penalty; /* 1: off */
  uint64_t seed;
} es_sampler_config;

ES_API es_sampler_config es_sampler_default_config(void); /* greedy */

typedef enum es_text_kind { ES_TEXT_CONTENT = 0, ES_TEXT_REASONING = 1 } es_text_kind;

/* Streamed text, UTF-8 complete, reasoning (between <think> and </think>) apart from the answer.
 * Return false to stop generating. */
typedef bool (*es_text_fn)(void* user, es_text_kind kind, const char* text, size_t len);
/* Each generated id (EOS included), before its text. Return false to stop. */
typedef bool (*es_token_fn)(void* user, int32_t token);

typedef enum es_finish_reason {
  ES_FINISH_NONE = 0,
  ES_FINISH_STOP = 1,      /* EOS or a stop string */
  ES_FINISH_LENGTH = 2,    /* max_tokens or the context */
  ES_FINISH_CANCELLED = 3, /* a callback returned false, or es_request_cancel */
  ES_FINISH_ERROR = 4
} es_finish_reason;

typedef struct es_generate_params {
  es_sampler_config sampler;
  int max_tokens;           /* > 0; capped by what fits the context */
  bool add_special;         /* add BOS/EOS as the tokenizer says (plain text prompts); false for a
                               prompt that came from es_chat_apply_template */
  bool reasoning;           /* split <think>…</think> off (models with reasoning tags) */
  const char* const* stops; /* stop strings (the text stops before them) */
  size_t n_stops;
  es_text_fn on_text;   /* may be NULL */
  es_token_fn on_token; /* may be NULL */
  void* user;           /* passed to the callbacks */
} es_generate_params;

ES_API es_generate_params es_generate_default_params(void); /* greedy, 256 tokens, reasoning on */

typedef struct es_generate_result {
  es_finish_reason finish;
  int32_t prompt_tokens;
  int32_t completion_tokens;
} es_generate_result;

/* Tokenizes `prompt`, prefills it and generates, streaming through the callbacks. When the prompt
 * ends with "<think>" (R1's template opens the reasoning block) the answer starts in reasoning.
 * `result` may be NULL. */
ES_API es_status es_generate(es_model* model, const char* prompt, const es_generate_params* params,
                             es_generate_result* result);

/* One prefill of ids[0..n_ids) in a fresh sequence; writes the logits of every position
 * (all_positions: [n_ids, vocab] row-major) or of the last one ([vocab]). *n_out: floats needed. */
ES_API es_status es_logits(es_model* model, const int32_t* ids, size_t n_ids, bool all_positions,
                           float* logits, size_t capacity, size_t* n_out);

/* ---- the batching engine (servers) ---------------------------------------------------------- */
/* Continuous batching over a model's weights: its own KV cache of `slots` sequences, one thread
 * stepping every running request together (prefill chunks and decodes in one batch). */
typedef struct es_engine es_engine;
typedef struct es_request es_request;

typedef struct es_engine_params {
  int slots;            /* sequences at once; 0: 4 */
  int max_batch_tokens; /* tokens per step; 0: the backend's (256 on the CPU, 1024 on GPUs) */
} es_engine_params;

ES_API es_engine_params es_engine_default_params(void);
/* The engine shares `model`'s weights (free the engine first). */
ES_API es_status es_engine_create(es_model* model, const es_engine_params* params, es_engine** out);
/* Stops the thread; requests still running finish as ES_FINISH_CANCELLED. NULL is a no-op. */
ES_API void es_engine_free(es_engine* engine);

/* Queues a request. Its callbacks run on the engine thread and must be quick; `params` (and its
 * stop strings) are copied. */
ES_API es_status es_engine_submit(es_engine* engine, const char* prompt,
                                  const es_generate_params* params, es_request** out);
/* Blocks until the request finishes; `result` may be NULL. */
ES_API es_status es_request_wait(es_request* request, es_generate_result* result);
ES_API void es_request_cancel(es_request* request);
/* Cancels the request if still running, waits for it, frees it. NULL is a no-op. */
ES_API void es_request_free(es_request* request);

/* ---- plugins (docs/server.md "Plugins") ------------------------------------------------------ */
/* A plugin is a shared object loaded by the server (`edgeseek serve --plugin lib.so[:CONFIG]`,
 * "plugins" in the server config). It exports
 *
 *   es_status es_plugin_init(const char* config, es_plugin* plugin);
 *
 * which fills `plugin` (zeroed by the caller, abi_version preset to ES_PLUGIN_ABI_VERSION) with a
 * name, its state and the callbacks it offers; any may be NULL. The callbacks run on the server's
 * threads (constraints on HTTP threads, policies and probes on engine threads), concurrently, so
 * the state must be thread-safe; they must be quick. A callback reports failure by returning an
 * error status (with a message in `error`, ES_PLUGIN_ERROR_BYTES bytes); the server then logs it,
 * counts it (edgeseek_plugin_errors_total) and keeps serving: a failing constraint refuses the
 * request with an OpenAI-style error (500), a failing policy scores the request 0. Results out of
 * range (a bad verdict, an instance that does not exist, a NaN score) count as failures, and so
 * does a C++ exception leaving a callback. A plugin that crashes the process (a segfault, abort)
 * cannot be contained in-process: run untrusted plugins out of process. */
#define ES_PLUGIN_ABI_VERSION 1
#define ES_PLUGIN_ERROR_BYTES 256

/* What a plugin sees of a request. Strings are valid during the call only. */
typedef struct es_request_info {
  const char* id;       /* "chatcmpl-..." */
  const char* model;    /* the model's name */
  const char* client;   /* the API key's client name ("" without authentication) */
  const char* priority; /* the QoS class's name */
  int32_t prompt_tokens;
  int32_t max_tokens;
  int32_t n_instances; /* instances of the model (engines a request may be routed to) */
  size_t n_metadata;   /* the request's "metadata" object: string keys and values */
  const char* const* metadata_keys;
  const char* const* metadata_values;
} es_request_info;

typedef enum es_verdict {
  ES_VERDICT_ADMIT = 0,  /* no objection */
  ES_VERDICT_REJECT = 1, /* refused: 403 with the plugin's message */
  ES_VERDICT_ROUTE = 2   /* run only on instance `instance` (0-based) */
} es_verdict;

typedef struct es_constraint_result {
  es_verdict verdict;
  int32_t instance;                    /* ES_VERDICT_ROUTE */
  char message[ES_PLUGIN_ERROR_BYTES]; /* ES_VERDICT_REJECT: why (shown to the client) */
} es_constraint_result;

/* The latency split of one engine step (seconds; split fields 0 unless the server profiles). */
typedef struct es_step_info {
  const char* model;
  int32_t instance;
  int32_t batch_tokens, batch_seqs, decode_seqs, prefill_tokens;
  double seconds;
  double upload_s, dispatch_s, shader_s, download_s;
} es_step_info;

typedef struct es_plugin {
  uint32_t abi_version; /* ES_PLUGIN_ABI_VERSION */
  const char* name;     /* static storage */
  void* state;          /* passed to every callback */
  /* Scheduler constraint: admit, reject or route a request (before it is queued). The first
   * plugin that rejects or routes decides. */
  es_status (*constraint)(void* state, const es_request_info* request, es_constraint_result* out,
                          char* error);
  /* Scheduling policy: a score per queued request, higher first (within a QoS class; replaces
   * the clients' fair shares). waited_s: time in the queue. One policy per server. */
  es_status (*policy)(void* state, const es_request_info* request, double waited_s, double* score,
                      char* error);
  /* Probes. */
  es_status (*on_step)(void* state, const es_step_info* step, char* error);
  es_status (*on_request_start)(void* state, const es_request_info* request, char* error);
  es_status (*on_request_finish)(void* state, const es_request_info* request,
                                 es_finish_reason finish, int32_t completion_tokens, char* error);
  void (*destroy)(void* state); /* at unload */
} es_plugin;

typedef es_status (*es_plugin_init_fn)(const char* config, es_plugin* plugin);

#ifdef __cplusplus
}
#endif

#endif /* EDGESEEK_H */
