/* step_log.c — probes: one line per engine step (the batch and its latency split) and per
 * request start and finish, appended to the file named by the config.
 *
 *   edgeseek serve ... --plugin libes_step_log.so:/tmp/steps.log
 *
 *   step MODEL INSTANCE batch_tokens batch_seqs seconds upload dispatch shader download
 *   start ID CLIENT prompt_tokens
 *   finish ID REASON completion_tokens */
#include <edgeseek/edgeseek.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct {
  FILE* f;
  pthread_mutex_t mu; /* engines of several instances call at once */
} State;

static es_status OnStep(void* state, const es_step_info* s, char* error) {
  (void)error;
  State* st = (State*)state;
  pthread_mutex_lock(&st->mu);
  fprintf(st->f, "step %s %d %d %d %.6f %.6f %.6f %.6f %.6f\n", s->model, s->instance,
          s->batch_tokens, s->batch_seqs, s->seconds, s->upload_s, s->dispatch_s, s->shader_s,
          s->download_s);
  fflush(st->f);
  pthread_mutex_unlock(&st->mu);
  return ES_OK;
}

static es_status OnStart(void* state, const es_request_info* r, char* error) {
  (void)error;
  State* st = (State*)state;
  pthread_mutex_lock(&st->mu);
  fprintf(st->f, "start %s %s %d\n", r->id, r->client[0] ? r->client : "-", r->prompt_tokens);
  fflush(st->f);
  pthread_mutex_unlock(&st->mu);
  return ES_OK;
}

static es_status OnFinish(void* state, const es_request_info* r, es_finish_reason why,
                          int32_t tokens, char* error) {
  (void)error;
  State* st = (State*)state;
  pthread_mutex_lock(&st->mu);
  fprintf(st->f, "finish %s %d %d\n", r->id, (int)why, tokens);
  fflush(st->f);
  pthread_mutex_unlock(&st->mu);
  return ES_OK;
}

static void Destroy(void* state) {
  State* st = (State*)state;
  fclose(st->f);
  pthread_mutex_destroy(&st->mu);
  free(st);
}

es_status es_plugin_init(const char* config, es_plugin* plugin) {
  if (!config || !*config) return ES_ERR_INVALID_ARGUMENT; /* needs a file */
  State* st = (State*)calloc(1, sizeof *st);
  if (!st) return ES_ERR_RUNTIME;
  st->f = fopen(config, "a");
  if (!st->f) {
    free(st);
    return ES_ERR_INVALID_ARGUMENT;
  }
  pthread_mutex_init(&st->mu, NULL);
  plugin->name = "step_log";
  plugin->state = st;
  plugin->on_step = OnStep;
  plugin->on_request_start = OnStart;
  plugin->on_request_finish = OnFinish;
  plugin->destroy = Destroy;
  return ES_OK;
}
