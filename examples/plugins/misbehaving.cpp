// misbehaving.cpp — a plugin that breaks the rules on purpose, to show (and test) that the
// server contains it: the config picks how.
//   error       every callback returns ES_ERR_CALLBACK with a message
//   garbage     the constraint answers verdict 42, the policy a NaN score
//   nowhere     the constraint routes to instance 99
//   throw       every callback throws a C++ exception
//   reject_all  the constraint refuses everything (a valid answer, not an error)
// Not here: a segfault or abort() — those end the process; nothing in-process contains them.
#include <edgeseek/edgeseek.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>

namespace {

enum Mode { kError, kGarbage, kNowhere, kThrow, kRejectAll };

Mode ModeOf(void* state) { return *static_cast<Mode*>(state); }

es_status Fail(char* error, const char* what) {
  std::snprintf(error, ES_PLUGIN_ERROR_BYTES, "misbehaving on purpose in %s", what);
  return ES_ERR_CALLBACK;
}

es_status Constraint(void* state, const es_request_info*, es_constraint_result* out, char* error) {
  switch (ModeOf(state)) {
    case kError:
      return Fail(error, "constraint");
    case kGarbage:
      out->verdict = static_cast<es_verdict>(42);
      return ES_OK;
    case kNowhere:
      out->verdict = ES_VERDICT_ROUTE;
      out->instance = 99;
      return ES_OK;
    case kThrow:
      throw std::runtime_error("constraint blew up");
    case kRejectAll:
      out->verdict = ES_VERDICT_REJECT;
      std::snprintf(out->message, sizeof out->message, "this plugin rejects everything");
      return ES_OK;
  }
  return ES_OK;
}

es_status Policy(void* state, const es_request_info*, double, double* score, char* error) {
  switch (ModeOf(state)) {
    case kError:
      return Fail(error, "policy");
    case kGarbage:
      *score = std::nan("");
      return ES_OK;
    case kThrow:
      throw std::runtime_error("policy blew up");
    default:
      *score = 0;
      return ES_OK;
  }
}

es_status OnStep(void* state, const es_step_info*, char* error) {
  if (ModeOf(state) == kThrow) throw std::runtime_error("probe blew up");
  if (ModeOf(state) == kError) return Fail(error, "on_step");
  return ES_OK;
}

void Destroy(void* state) { delete static_cast<Mode*>(state); }

}  // namespace

extern "C" es_status es_plugin_init(const char* config, es_plugin* plugin) {
  const std::string c = config ? config : "";
  Mode m;
  if (c == "error")
    m = kError;
  else if (c == "garbage")
    m = kGarbage;
  else if (c == "nowhere")
    m = kNowhere;
  else if (c == "throw")
    m = kThrow;
  else if (c == "reject_all")
    m = kRejectAll;
  else
    return ES_ERR_INVALID_ARGUMENT;
  plugin->name = "misbehaving";
  plugin->state = new Mode(m);
  plugin->constraint = Constraint;
  // reject_all is a well-behaved plugin with a harsh rule: no policy to go wrong.
  if (m != kRejectAll && m != kNowhere) plugin->policy = Policy;
  plugin->on_step = OnStep;
  plugin->destroy = Destroy;
  return ES_OK;
}
