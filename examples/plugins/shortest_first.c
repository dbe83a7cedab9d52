/* shortest_first.c — a scheduling policy: the queued request with the least work (prompt plus
 * max_tokens) goes first, aged so that nothing waits for ever: score = -(work) + aging * waited_s.
 *
 *   edgeseek serve ... --plugin libes_shortest_first.so:aging=50 */
#include <edgeseek/edgeseek.h>
#include <stdlib.h>
#include <string.h>

static es_status Policy(void* state, const es_request_info* r, double waited_s, double* score,
                        char* error) {
  (void)error;
  const double aging = *(const double*)state;
  *score = -(double)(r->prompt_tokens + r->max_tokens) + aging * waited_s;
  return ES_OK;
}

static void Destroy(void* state) { free(state); }

es_status es_plugin_init(const char* config, es_plugin* plugin) {
  double* aging = (double*)malloc(sizeof *aging);
  if (!aging) return ES_ERR_RUNTIME;
  const char* at = strstr(config, "aging=");
  *aging = at ? atof(at + 6) : 10.0;
  plugin->name = "shortest_first";
  plugin->state = aging;
  plugin->policy = Policy;
  plugin->destroy = Destroy;
  return ES_OK;
}
