// Engine tests' harness: an Engine over a FakeStepModel stepped by hand, with each request's
// events collected by id (tokens, finish reason, the step of its first token, preemptions).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "edgeseek/internal/runtime/engine.h"
#include "fake_model.h"

namespace es::test {

struct Collected {
  std::vector<int32_t> tokens;
  FinishReason finish = FinishReason::kNone;
  double first_token = 0;
  int first_step = -1, preempted = 0;
};

struct Harness {
  std::shared_ptr<RequestQueue> queue;
  FakeStepModel* model = nullptr;
  std::unique_ptr<Engine> engine;
  std::map<std::string, Collected> out;
  int step = 0;

  // kv_blocks > 0: a KV pool of that many blocks instead of slots x context.
  Harness(int slots, int64_t ctx, EngineOptions eo = {}, QosPolicy qos = {},
          bool batch_variant = false, int64_t kv_blocks = 0) {
    queue = std::make_shared<RequestQueue>(qos);
    auto m = std::make_unique<FakeStepModel>(slots, ctx);
    m->set_batch_variant(batch_variant);
    if (kv_blocks > 0) m->set_kv_blocks(kv_blocks);
    model = m.get();
    engine = std::make_unique<Engine>(std::move(m), queue, eo);
  }
  std::shared_ptr<SeqRequest> Make(const std::string& id, std::vector<int32_t> prompt,
                                   int max_tokens, float temperature = 0, uint64_t seed = 0,
                                   int priority = 0, const std::string& client = "c") {
    auto r = std::make_shared<SeqRequest>();
    r->id = id;
    r->prompt = std::move(prompt);
    r->max_tokens = max_tokens;
    r->sampling.temperature = temperature;
    r->sampling.seed = seed;
    r->priority = priority;
    r->client = client;
    r->stop_ids = {256};
    r->on_event = [this, id](const SeqEvent& e) {
      auto& c = out[id];
      if (e.kind == SeqEventKind::kToken) {
        if (c.tokens.empty()) c.first_step = step;
        c.tokens.push_back(e.token);
      }
      if (e.kind == SeqEventKind::kPreempted) ++c.preempted;
      if (e.kind == SeqEventKind::kFinished) c.finish = e.finish;
    };
    return r;
  }
  // Running requests are finished (cancelled) while `out`, which their events write, still lives.
  ~Harness() { engine->Stop(); }
  void Submit(std::shared_ptr<SeqRequest> r) { queue->Push(std::move(r)); }
  void RunAll(int max_steps = 100000) {
    while (engine->Step() && max_steps-- > 0) ++step;
  }
};

inline std::vector<int32_t> Prompt(int n, int seed) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back(32 + (seed * 7 + i * 13) % 90);
  return p;
}

}  // namespace es::test
