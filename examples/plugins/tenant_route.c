/* tenant_route.c — a scheduler constraint: requests of regulated tenants run only on one
 * instance, requests of a denied tenant are refused, everything else is admitted.
 *
 *   edgeseek serve ... --plugin libes_tenant_route.so:tenants=acme,globex;instance=1;deny=mallory
 *
 * The tenant is the request's metadata "tenant" ({"metadata": {"tenant": "acme"}}). */
#include <edgeseek/edgeseek.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  char tenants[512]; /* ",acme,globex," */
  char deny[512];    /* ",mallory," */
  int instance;
} State;

/* Copies the value of `key=` in "k=v;k=v" into `out` as ",a,b,". */
static void ListOption(const char* config, const char* key, char* out, size_t cap) {
  snprintf(out, cap, ",");
  const char* at = strstr(config, key);
  if (!at) return;
  at += strlen(key);
  size_t n = strcspn(at, ";");
  if (n + 3 > cap) n = cap - 3;
  strncat(out, at, n);
  strcat(out, ",");
}

static bool InList(const char* list, const char* tenant) {
  char needle[160];
  if (strlen(tenant) > 150 || !*tenant) return false;
  snprintf(needle, sizeof needle, ",%s,", tenant);
  return strstr(list, needle) != NULL;
}

static const char* Tenant(const es_request_info* r) {
  for (size_t i = 0; i < r->n_metadata; ++i)
    if (!strcmp(r->metadata_keys[i], "tenant")) return r->metadata_values[i];
  return "";
}

static es_status Constraint(void* state, const es_request_info* r, es_constraint_result* out,
                            char* error) {
  (void)error;
  const State* s = (const State*)state;
  const char* tenant = Tenant(r);
  if (InList(s->deny, tenant)) {
    out->verdict = ES_VERDICT_REJECT;
    snprintf(out->message, sizeof out->message, "tenant '%s' may not use model '%s'", tenant,
             r->model);
  } else if (InList(s->tenants, tenant)) {
    out->verdict = ES_VERDICT_ROUTE;
    out->instance = s->instance < r->n_instances ? s->instance : r->n_instances - 1;
  } else {
    out->verdict = ES_VERDICT_ADMIT;
  }
  return ES_OK;
}

static void Destroy(void* state) { free(state); }

es_status es_plugin_init(const char* config, es_plugin* plugin) {
  State* s = (State*)calloc(1, sizeof *s);
  if (!s) return ES_ERR_RUNTIME;
  ListOption(config, "tenants=", s->tenants, sizeof s->tenants);
  ListOption(config, "deny=", s->deny, sizeof s->deny);
  const char* inst = strstr(config, "instance=");
  s->instance = inst ? atoi(inst + 9) : 0;
  plugin->name = "tenant_route";
  plugin->state = s;
  plugin->constraint = Constraint;
  plugin->destroy = Destroy;
  return ES_OK;
}
