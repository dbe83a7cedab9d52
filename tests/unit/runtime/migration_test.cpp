// Migration between two instances of a real (golden) model on the CPU backend
// (edgeseek/internal/runtime/balancer.h): a running request moved in mid-decode from a full
// instance to an idle one recomputes its KV there and gives, greedy and seeded, the tokens it gives
// alone; both instances' blocks are all back afterwards.
#include <gtest/gtest.h>

#include <map>

#include "edgeseek/internal/backends/backend.h"
#include "edgeseek/internal/runtime/balancer.h"
#include "edgeseek/internal/runtime/engine.h"
#include "edgeseek/internal/runtime/model.h"
#include "edgeseek/internal/runtime/runner.h"
#include "test_util.h"

namespace es {
namespace {

std::shared_ptr<Model> Llama() {
  static auto m = Model::Load(test::SourceDir() + "/tests/golden/data/models/llama3");
  return m;
}

std::vector<int32_t> Tokens(int n, int seed) {
  const int vocab = Llama()->vocab_size();
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(int32_t((seed * 131 + i * 17 + 3) % vocab));
  return t;
}

std::unique_ptr<StepModel> Instance(int slots) {
  RunnerOptions ro;
  ro.n_slots = slots;
  ro.context = 128;
  return WrapRunner(std::make_unique<Runner>(Llama(), CreateBackend("cpu", {}), ro));
}

struct Outputs {
  std::map<std::string, std::vector<int32_t>> tokens;
  std::map<std::string, std::shared_ptr<SeqRequest>> req;
  void Submit(RequestQueue& q, const std::string& id, std::vector<int32_t> prompt, int max_tokens,
              float temperature, uint64_t seed) {
    auto r = std::make_shared<SeqRequest>();
    r->id = id;
    r->prompt = std::move(prompt);
    r->max_tokens = max_tokens;
    r->sampling.temperature = temperature;
    r->sampling.seed = seed;
    r->on_event = [this, id](const SeqEvent& e) {
      if (e.kind == SeqEventKind::kToken) tokens[id].push_back(e.token);
    };
    req[id] = r;
    q.Push(r);
  }
};

std::vector<int32_t> Solo(std::vector<int32_t> prompt, int max_tokens, float temperature,
                          uint64_t seed) {
  auto queue = std::make_shared<RequestQueue>(QosPolicy{});
  Engine e(Instance(1), queue, {});
  Outputs out;
  out.Submit(*queue, "solo", std::move(prompt), max_tokens, temperature, seed);
  while (e.Step()) {
  }
  return out.tokens["solo"];
}

class MigrationCpu : public ::testing::TestWithParam<float> {};

TEST_P(MigrationCpu, AMovedRequestGivesItsSoloOutput) {
  const float temperature = GetParam();
  auto queue = std::make_shared<RequestQueue>(QosPolicy{});
  BalancePolicy policy;
  policy.min_tokens_left = 4;
  auto balancer = std::make_shared<LoadBalancer>(2, policy);
  std::unique_ptr<Engine> engine[2];
  for (int i = 0; i < 2; ++i) {
    EngineOptions eo;
    eo.instance = i;
    eo.max_batch_tokens = 24;  // chunked prefill, also of the recomputed KV
    engine[i] = std::make_unique<Engine>(Instance(2), queue, eo);
    engine[i]->set_balancer(balancer);
  }
  Outputs out;
  // Instance 1 runs two short requests; instance 0 the two long ones, then, when the short
  // ones end, sheds one to instance 1: "m", which has the more tokens left.
  out.Submit(*queue, "s0", Tokens(5, 1), 3, 0, 0);
  out.Submit(*queue, "s1", Tokens(6, 2), 3, 0, 0);
  engine[1]->Step();
  ASSERT_EQ(engine[1]->stats().running, 2);
  out.Submit(*queue, "m", Tokens(21, 3), 24, temperature, 7);
  out.Submit(*queue, "k", Tokens(37, 4), 16, 0.8f, 8);
  engine[0]->Step();
  ASSERT_EQ(engine[0]->stats().running, 2);
  for (int i = 0; i < 1000; ++i) {
    const bool a = engine[1]->Step(), b = engine[0]->Step();
    if (!a && !b) break;
  }
  const auto moved = balancer->migrations();
  ASSERT_EQ(moved.size(), 1u);
  EXPECT_EQ(moved.begin()->first, std::make_pair(0, 1));
  EXPECT_EQ(moved.begin()->second, 1);
  EXPECT_EQ(out.req["m"]->migrations, 1);
  EXPECT_EQ(out.req["m"]->instance, 1);
  EXPECT_EQ(out.req["k"]->instance, 0);
  // It had decoded on instance 0 before it moved (the short ones took 3 steps).
  int64_t decoded_before = 0;
  for (auto& t : out.req["m"]->trace)
    if (std::string(t.name) == "migrated") decoded_before = t.tokens - 21;
  EXPECT_GE(decoded_before, 2);
  EXPECT_EQ(out.tokens["m"], Solo(Tokens(21, 3), 24, temperature, 7));
  EXPECT_EQ(out.tokens["k"], Solo(Tokens(37, 4), 16, 0.8f, 8));
  for (int i = 0; i < 2; ++i) {
    const EngineStats s = engine[i]->stats();
    EXPECT_EQ(s.running, 0);
    EXPECT_EQ(s.kv_blocks_used, 0) << "instance " << i << " leaked KV blocks";
    EXPECT_EQ(s.kv_blocks_used + s.kv_blocks_cached + s.kv_blocks_free, s.kv_blocks_total);
  }
  EXPECT_EQ(queue->size(), 0u);
}

INSTANTIATE_TEST_SUITE_P(GreedyAndSeeded, MigrationCpu, ::testing::Values(0.0f, 0.8f));

}  // namespace
}  // namespace es
