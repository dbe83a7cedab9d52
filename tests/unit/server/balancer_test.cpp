// Balancing between instances (edgeseek/internal/runtime/balancer.h): the migration rule over
// made-up loads (moves only when it helps, never to a full instance, never a request that may not
// move, no ping-pong), the shared loads' accounting of requests on their way, and two engines over
// FakeStepModel sharing one queue: a running request migrates mid-decode, only its target
// takes it, its output equals a solo run, and no KV block or slot is left behind; the same
// through the server, with /metrics counting the migration.
#include "edgeseek/internal/runtime/balancer.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <map>
#include <thread>

#include "edgeseek/internal/runtime/engine.h"
#include "engine_harness.h"
#include "fake_model.h"
#include "test_util.h"

namespace es {
namespace {

using test::Collected;
using test::FakeStepModel;
using test::Harness;
using test::Prompt;

// ---- the rule over made-up loads -------------------------------------------------------------
InstanceLoad Inst(int slots, int running, int64_t blocks, int64_t used, double step_s = 0.01) {
  InstanceLoad l;
  l.slots = slots;
  l.running = running;
  l.blocks = blocks;
  l.used_blocks = used;
  l.available_blocks = blocks - used;
  l.max_need = 4096;
  l.step_s = step_s;
  return l;
}

MigrationCandidate Cand(int64_t tokens, int left, bool preemptible = true, bool migrated = false,
                        double admit_time = 0) {
  MigrationCandidate c;
  c.preemptible = preemptible;
  c.migrated = migrated;
  c.tokens = tokens;
  c.need = tokens + left;
  c.left = left;
  c.admit_time = admit_time;
  return c;
}

// A full instance of 4 slots running four requests of 40 tokens with 50 left each.
InstanceLoad FullSource() {
  InstanceLoad s = Inst(4, 4, 100, 12);
  for (int i = 0; i < 4; ++i) s.candidates.push_back(Cand(40, 50, true, false, double(i)));
  return s;
}

TEST(BalanceRule, MovesFromAFullInstanceToAnIdleOne) {
  const BalancePolicy p;
  const Migration m = PlanMigration({FullSource(), Inst(4, 0, 100, 0)}, 0, 0, p);
  EXPECT_EQ(m.to, 1);
  EXPECT_EQ(m.candidate, 3) << "equal requests: the latest admitted goes";
  // Only the overloaded instance sheds: the idle one has nothing to give.
  EXPECT_EQ(PlanMigration({FullSource(), Inst(4, 0, 100, 0)}, 1, 0, p).to, -1);
  BalancePolicy off;
  off.migrate = false;
  EXPECT_EQ(PlanMigration({FullSource(), Inst(4, 0, 100, 0)}, 0, 0, off).to, -1);
}

TEST(BalanceRule, NothingMovesWhileRequestsWait) {
  // The idle instance takes queued work through the shared queue instead.
  EXPECT_EQ(PlanMigration({FullSource(), Inst(4, 0, 100, 0)}, 0, 1, BalancePolicy{}).to, -1);
}

TEST(BalanceRule, OnlyAnOverloadedInstanceSheds) {
  InstanceLoad half = Inst(4, 2, 100, 6);
  half.candidates = {Cand(40, 50), Cand(40, 50)};
  BalancePolicy p;  // overload 0.75
  EXPECT_EQ(PlanMigration({half, Inst(4, 0, 100, 0)}, 0, 0, p).to, -1);
  p.overload = 0.5;
  EXPECT_EQ(PlanMigration({half, Inst(4, 0, 100, 0)}, 0, 0, p).to, 1);
  // A lone request stays, even on a full instance of one slot.
  InstanceLoad one = Inst(1, 1, 100, 3);
  one.candidates = {Cand(40, 50)};
  EXPECT_EQ(PlanMigration({one, Inst(4, 0, 100, 0)}, 0, 0, p).to, -1);
  // Overloaded by KV blocks alone: 2 of 8 slots, but 95 of 100 blocks held.
  InstanceLoad kv = Inst(8, 2, 100, 95);
  kv.candidates = {Cand(900, 50), Cand(600, 50)};
  const Migration m = PlanMigration({kv, Inst(8, 0, 100, 0)}, 0, 0, BalancePolicy{});
  EXPECT_EQ(m.to, 1);
}

TEST(BalanceRule, NeverToAnInstanceWithoutRoom) {
  const BalancePolicy p;
  // No free slot.
  EXPECT_EQ(PlanMigration({FullSource(), Inst(4, 4, 100, 10)}, 0, 0, p).to, -1);
  // Blocks: 40 + 1 tokens take 3 blocks, plus one of headroom per running request (1): 4.
  InstanceLoad short_pool = Inst(4, 1, 100, 97);
  short_pool.used_blocks = 10;  // occupancy low; what is available is short (cached elsewhere)
  EXPECT_EQ(PlanMigration({FullSource(), short_pool}, 0, 0, p).to, -1);
  short_pool.available_blocks = 4;
  EXPECT_EQ(PlanMigration({FullSource(), short_pool}, 0, 0, p).to, 1);
  // A request longer than the target's context or KV budget could ever hold.
  InstanceLoad small = Inst(4, 0, 100, 0);
  small.max_need = 89;  // the requests need 40 + 50
  EXPECT_EQ(PlanMigration({FullSource(), small}, 0, 0, p).to, -1);
  small.max_need = 90;
  EXPECT_EQ(PlanMigration({FullSource(), small}, 0, 0, p).to, 1);
}

TEST(BalanceRule, NeverARequestThatMayNotMove) {
  const BalancePolicy p;  // min_tokens_left 16
  InstanceLoad s = Inst(4, 4, 100, 12);
  s.candidates = {Cand(40, 50, /*preemptible=*/false), Cand(40, 50, true, /*migrated=*/true),
                  Cand(40, 15), Cand(40, 50, false)};
  EXPECT_EQ(PlanMigration({s, Inst(4, 0, 100, 0)}, 0, 0, p).to, -1);
  s.candidates[2].left = 16;
  const Migration m = PlanMigration({s, Inst(4, 0, 100, 0)}, 0, 0, p);
  EXPECT_EQ(m.to, 1);
  EXPECT_EQ(m.candidate, 2);
}

TEST(BalanceRule, OnlyWhenTheTargetEndsUpLessLoadedThanTheSourceWas) {
  const BalancePolicy p;
  // 4 of 4 against 3 of 4: the target would be as full as the source.
  EXPECT_EQ(PlanMigration({FullSource(), Inst(4, 3, 100, 9)}, 0, 0, p).to, -1);
  EXPECT_EQ(PlanMigration({FullSource(), Inst(4, 2, 100, 6)}, 0, 0, p).to, 1);
  // A bigger target counts by its own slots: 4 of 4 against 6 of 8 (after: 7/8 < 1).
  EXPECT_EQ(PlanMigration({FullSource(), Inst(8, 6, 100, 18)}, 0, 0, p).to, 1);
}

TEST(BalanceRule, PicksTheLeastLoadedTargetThenTheFasterThenTheFirst) {
  const BalancePolicy p;
  EXPECT_EQ(PlanMigration({FullSource(), Inst(4, 1, 100, 3), Inst(4, 0, 100, 0)}, 0, 0, p).to, 2);
  EXPECT_EQ(
      PlanMigration({FullSource(), Inst(4, 0, 100, 0, 0.02), Inst(4, 0, 100, 0, 0.01)}, 0, 0, p).to,
      2);
  EXPECT_EQ(PlanMigration({FullSource(), Inst(4, 0, 100, 0), Inst(4, 0, 100, 0)}, 0, 0, p).to, 1);
  // The source may be any index.
  EXPECT_EQ(PlanMigration({Inst(4, 0, 100, 0), FullSource()}, 1, 0, p).to, 0);
}

TEST(BalanceRule, PicksTheRequestWithMostLeftThenTheCheapestToRecompute) {
  const BalancePolicy p;
  InstanceLoad s = Inst(4, 4, 100, 12);
  s.candidates = {Cand(40, 20), Cand(60, 90), Cand(30, 90), Cand(30, 40)};
  EXPECT_EQ(PlanMigration({s, Inst(4, 0, 100, 0)}, 0, 0, p).candidate, 2);
}

TEST(BalanceRule, LoadsSettleWithoutPingPong) {
  // Two instances of 4 slots; every request may move once. Plan from both sides, apply each
  // move to the loads as the engines would, until neither moves.
  const BalancePolicy p;
  std::vector<InstanceLoad> loads = {FullSource(), Inst(4, 0, 100, 0)};
  std::vector<std::pair<int, int>> moves;
  for (int round = 0; round < 20; ++round) {
    bool moved = false;
    for (int src = 0; src < 2; ++src) {
      const Migration m = PlanMigration(loads, src, 0, p);
      if (m.to < 0) continue;
      MigrationCandidate c = loads[size_t(src)].candidates[size_t(m.candidate)];
      loads[size_t(src)].candidates.erase(loads[size_t(src)].candidates.begin() + m.candidate);
      --loads[size_t(src)].running;
      const int64_t b = KvBlocksFor(c.tokens + 1);
      loads[size_t(src)].used_blocks -= b;
      loads[size_t(src)].available_blocks += b;
      c.migrated = true;
      loads[size_t(m.to)].candidates.push_back(c);
      ++loads[size_t(m.to)].running;
      loads[size_t(m.to)].used_blocks += b;
      loads[size_t(m.to)].available_blocks -= b;
      moves.push_back({src, m.to});
      moved = true;
    }
    if (!moved) break;
  }
  // 4/0 -> 3/1 -> 2/2, then nothing: occupancy 0.5 is below the overload threshold.
  ASSERT_EQ(moves.size(), 2u);
  for (auto& mv : moves) EXPECT_EQ(mv, std::make_pair(0, 1));
  EXPECT_EQ(loads[0].running, 2);
  EXPECT_EQ(loads[1].running, 2);
  // Even at the lowest threshold the balanced state stays put: 2/2 -> 1/3 does not help.
  BalancePolicy low;
  low.overload = 0.01;
  low.min_tokens_left = 1;
  for (auto& c : loads[0].candidates) c.migrated = false;
  for (auto& c : loads[1].candidates) c.migrated = false;
  EXPECT_EQ(PlanMigration(loads, 0, 0, low).to, -1);
  EXPECT_EQ(PlanMigration(loads, 1, 0, low).to, -1);
}

TEST(LoadBalancer, ARequestOnItsWayCountsOnItsTarget) {
  LoadBalancer b(2, BalancePolicy{});
  b.Publish(0, FullSource());
  b.Publish(1, Inst(4, 0, 100, 0));
  EXPECT_TRUE(b.Loads()[0].candidates.empty()) << "published loads keep no candidates";
  b.Depart(0, 1, 3);
  auto loads = b.Loads();
  EXPECT_EQ(loads[1].running, 1);
  EXPECT_EQ(loads[1].used_blocks, 3);
  EXPECT_EQ(loads[1].available_blocks, 97);
  // The source's exact view replaces its published one.
  EXPECT_EQ(b.Loads(0, Inst(4, 3, 100, 9)).at(0).running, 3);
  b.Arrive(1, 3);
  EXPECT_EQ(b.Loads()[1].running, 0);
  EXPECT_EQ(b.Loads()[1].available_blocks, 100);
  EXPECT_EQ((b.migrations()), (std::map<std::pair<int, int>, int64_t>{{{0, 1}, 1}}));
}

// ---- two engines over one queue ---------------------------------------------------------------
// Instances 0 and 1 of one fake model, stepped by hand, with their events collected by id.
struct Pair {
  std::shared_ptr<RequestQueue> queue = std::make_shared<RequestQueue>(QosPolicy{});
  std::shared_ptr<LoadBalancer> balancer;
  FakeStepModel* model[2] = {};
  std::unique_ptr<Engine> engine[2];
  std::map<std::string, std::shared_ptr<SeqRequest>> req;
  std::map<std::string, Collected> out;

  Pair(int slots, BalancePolicy policy) {
    balancer = std::make_shared<LoadBalancer>(2, policy);
    for (int i = 0; i < 2; ++i) {
      auto m = std::make_unique<FakeStepModel>(slots, 256);
      model[i] = m.get();
      EngineOptions eo;
      eo.instance = i;
      engine[i] = std::make_unique<Engine>(std::move(m), queue, eo);
      engine[i]->set_balancer(balancer);
    }
  }
  ~Pair() {
    for (auto& e : engine) e->Stop();
  }
  void Submit(const std::string& id, std::vector<int32_t> prompt, int max_tokens,
              float temperature = 0, uint64_t seed = 0) {
    auto r = std::make_shared<SeqRequest>();
    r->id = id;
    r->prompt = std::move(prompt);
    r->max_tokens = max_tokens;
    r->sampling.temperature = temperature;
    r->sampling.seed = seed;
    r->on_event = [this, id](const SeqEvent& e) {
      if (e.kind == SeqEventKind::kToken) out[id].tokens.push_back(e.token);
      if (e.kind == SeqEventKind::kPreempted) ++out[id].preempted;
      if (e.kind == SeqEventKind::kFinished) out[id].finish = e.finish;
    };
    req[id] = r;
    queue->Push(r);
  }
  void RunAll() {
    for (int i = 0; i < 1000; ++i) {
      const bool a = engine[0]->Step(), b = engine[1]->Step();
      if (!a && !b) break;
    }
  }
  int64_t Migrations(int from, int to) const {
    const auto m = balancer->migrations();
    const auto it = m.find({from, to});
    return it == m.end() ? 0 : it->second;
  }
  void ExpectNothingLeft() {
    for (int i = 0; i < 2; ++i) {
      const EngineStats s = engine[i]->stats();
      EXPECT_EQ(s.running, 0);
      EXPECT_EQ(s.kv_blocks_used, 0) << "instance " << i << " leaked KV blocks";
      EXPECT_EQ(s.kv_blocks_used + s.kv_blocks_cached + s.kv_blocks_free, s.kv_blocks_total);
      EXPECT_EQ(model[i]->used_slots(), 0);
      EXPECT_EQ(balancer->Loads()[size_t(i)].running, 0) << "instance " << i;
    }
    EXPECT_EQ(queue->size(), 0u);
  }
};

std::vector<int32_t> Solo(std::vector<int32_t> prompt, int max_tokens, float temperature,
                          uint64_t seed) {
  Harness h(1, 256);
  auto r = h.Make("solo", std::move(prompt), max_tokens, temperature, seed);
  r->stop_ids.clear();
  h.Submit(r);
  h.RunAll();
  return h.out["solo"].tokens;
}

// Instance 1 runs two short requests, instance 0 two long ones ("m" with the shorter prompt,
// "k"); when the short ones end, instance 0 (full) sheds "m" to instance 1 in mid-decode.
void MigrateMidDecode(float temperature) {
  BalancePolicy policy;
  policy.min_tokens_left = 4;
  Pair p(2, policy);
  p.Submit("s0", Prompt(5, 1), 3);  // 3 tokens: too close to their end to move
  p.Submit("s1", Prompt(6, 2), 3);
  p.engine[1]->Step();
  ASSERT_EQ(p.engine[1]->stats().running, 2);
  p.Submit("m", Prompt(21, 3), 40, temperature, 77);
  p.Submit("k", Prompt(37, 4), 40, 0.8f, 78);
  p.engine[0]->Step();
  ASSERT_EQ(p.engine[0]->stats().running, 2);
  EXPECT_EQ(p.Migrations(0, 1) + p.Migrations(1, 0), 0) << "both are full: nowhere to go";
  int steps = 0;
  while (p.Migrations(0, 1) == 0 && steps++ < 50) {
    p.engine[1]->Step();
    p.engine[0]->Step();
  }
  ASSERT_EQ(p.Migrations(0, 1), 1) << "no migration";
  EXPECT_EQ(p.out["s0"].finish, FinishReason::kLength);
  EXPECT_EQ(p.req["m"]->migrations, 1);
  EXPECT_EQ(p.req["m"]->migrate_to, 1);
  EXPECT_GT(p.out["m"].tokens.size(), 1u) << "it moved before decoding";
  EXPECT_EQ(p.engine[0]->stats().running, 1);
  EXPECT_EQ(p.queue->size(), 1u);
  EXPECT_EQ(p.queue->size_unassigned(), 0u);
  // The source does not take it back, though it has a free slot now.
  p.engine[0]->Step();
  EXPECT_EQ(p.engine[0]->stats().running, 1);
  EXPECT_EQ(p.queue->size(), 1u);
  // The target does, and counts it once: running there, no longer on its way.
  p.engine[1]->Step();
  EXPECT_EQ(p.engine[1]->stats().running, 1);
  EXPECT_EQ(p.req["m"]->instance, 1);
  EXPECT_EQ(p.req["m"]->migrate_to, -1);
  EXPECT_EQ(p.balancer->Loads()[1].running, 1);
  p.RunAll();
  EXPECT_EQ(p.Migrations(0, 1), 1);
  EXPECT_EQ(p.Migrations(1, 0), 0) << "ping-pong";
  EXPECT_EQ(p.out["m"].tokens, Solo(Prompt(21, 3), 40, temperature, 77));
  EXPECT_EQ(p.out["k"].tokens, Solo(Prompt(37, 4), 40, 0.8f, 78));
  EXPECT_EQ(p.out["m"].preempted, 0) << "a migration is no preemption";
  p.ExpectNothingLeft();
}

TEST(Balancing, AGreedyRequestMigratesMidDecodeWithItsOutputUnchanged) { MigrateMidDecode(0); }
TEST(Balancing, ASampledRequestMigratesMidDecodeWithItsOutputUnchanged) { MigrateMidDecode(0.8f); }

TEST(Balancing, AMigrationCancelledOnItsWayLeavesNothingBehind) {
  BalancePolicy policy;
  policy.min_tokens_left = 4;
  Pair p(2, policy);
  p.Submit("a", Prompt(9, 1), 30);
  p.Submit("b", Prompt(9, 2), 30);
  p.engine[0]->Step();  // admits both (full) while instance 1 idles: one moves at once
  ASSERT_EQ(p.Migrations(0, 1), 1);
  ASSERT_EQ(p.queue->size(), 1u);
  EXPECT_EQ(p.balancer->Loads()[1].running, 1);
  auto moved = p.req["a"]->migrate_to == 1 ? p.req["a"] : p.req["b"];
  ASSERT_EQ(moved->migrate_to, 1);
  moved->cancel = true;
  p.engine[0]->Step();  // the source sweeps it out of the queue
  EXPECT_EQ(p.out[moved->id].finish, FinishReason::kCancelled);
  EXPECT_EQ(p.queue->size(), 0u);
  EXPECT_EQ(p.balancer->Loads()[1].running, 0) << "a dead migration still counts on its target";
  p.RunAll();
  p.ExpectNothingLeft();
}

TEST(Balancing, SwitchedOffNothingMoves) {
  BalancePolicy off;
  off.migrate = false;
  off.min_tokens_left = 1;
  Pair p(2, off);
  p.Submit("a", Prompt(9, 1), 30);
  p.Submit("b", Prompt(9, 2), 30);
  p.engine[0]->Step();
  p.RunAll();
  EXPECT_EQ(p.Migrations(0, 1), 0);
  EXPECT_EQ(p.req["a"]->instance, 0);
  EXPECT_EQ(p.req["b"]->instance, 0);
  EXPECT_EQ(p.out["a"].tokens.size(), 30u);
  p.ExpectNothingLeft();
}

// ---- through the server ---------------------------------------------------------------------
std::string Metric(Server& srv, const std::string& needle_prefix) {
  httplib::Client cli("127.0.0.1", srv.port());
  const std::string m = cli.Get("/metrics")->body;
  const size_t at = m.find(needle_prefix);
  if (at == std::string::npos) return "<missing>";
  const size_t end = m.find('\n', at);
  return m.substr(at + needle_prefix.size(), end - at - needle_prefix.size());
}

std::string Complete(int port, const std::string& prompt, int max_tokens,
                     const std::string& extra) {
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(30, 0);
  const std::string body =
      R"({"prompt":")" + prompt + R"(","max_tokens":)" + std::to_string(max_tokens) + extra + "}";
  auto res = cli.Post("/v1/completions", body, "application/json");
  if (!res || res->status != 200) return "<failed " + (res ? res->body : std::string("-")) + ">";
  return nlohmann::json::parse(res->body)["choices"][0]["text"].get<std::string>();
}

// Two instances of 2 slots; instance 0's context (64) is too short for the two "blockers"
// (60-byte prompts + 16 tokens), so they run on instance 1, and the two long requests that
// follow find only instance 0 free. When the blockers end, instance 0 (full) sheds one.
TEST(HttpBalancing, AMigrationIsCountedAndChangesNoOutput) {
  ServerConfig c = test::TinyServerConfig();
  c.models[0].instances = {InstanceConfig{}, InstanceConfig{}};
  c.models[0].instances[0].slots = 2;
  c.models[0].instances[0].context = 64;
  c.models[0].instances[1].slots = 2;
  c.models[0].instances[1].context = 256;
  Server srv(c, test::FakeLoader(0.02));
  srv.Listen();
  srv.LoadModels();
  const int port = srv.port();
  const std::string zero = "edgeseek_migrations_total{model=\"tiny\",from=\"0\",to=\"1\"} ";
  EXPECT_EQ(Metric(srv, zero), "0");
  EXPECT_EQ(Metric(srv, "edgeseek_instance_occupancy{model=\"tiny\",instance=\"1\"} "), "0");
  const std::string blocker(60, 'b');
  std::vector<std::thread> threads;
  std::string out[4];
  for (int i = 0; i < 2; ++i)
    threads.emplace_back([&, i] { out[i] = Complete(port, blocker + char('0' + i), 16, ""); });
  for (int i = 0;
       i < 500 && Metric(srv, "edgeseek_running_sequences{model=\"tiny\",instance=\"1\"} ") != "2";
       ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ASSERT_EQ(Metric(srv, "edgeseek_running_sequences{model=\"tiny\",instance=\"1\"} "), "2");
  const std::string greedy = R"(,"temperature":0)", seeded = R"(,"temperature":0.8,"seed":5)";
  threads.emplace_back([&] { out[2] = Complete(port, "long one", 48, greedy); });
  threads.emplace_back([&] { out[3] = Complete(port, "long two", 48, seeded); });
  for (auto& t : threads) t.join();
  EXPECT_EQ(Metric(srv, zero), "1");
  EXPECT_EQ(Metric(srv, "edgeseek_migrations_total{model=\"tiny\",from=\"1\",to=\"0\"} "), "0");
  // Alone on an idle server, each long request gives the text it gave under migration.
  EXPECT_EQ(Complete(port, "long one", 48, greedy), out[2]);
  EXPECT_EQ(Complete(port, "long two", 48, seeded), out[3]);
  for (const char* i : {"0", "1"})
    EXPECT_EQ(Metric(srv, std::string("edgeseek_kv_blocks{model=\"tiny\",instance=\"") + i +
                              "\",state=\"used\"} "),
              "0")
        << "instance " << i;
  srv.Shutdown();
}

}  // namespace
}  // namespace es
