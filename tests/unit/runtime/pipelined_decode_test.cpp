// Decode groups in flight over a layer split (Runner::Push, Engine's pipelined steps): groups of
// disjoint sequences move through the CPU stages side by side, one a stage, and every sequence
// gets exactly what the plain runner computes for it (CPU stages are bit for bit): the runner's
// outputs push by push, and the engine's tokens for greedy and seeded sampled requests of
// different lengths, one finishing early, one arriving late, one cancelled while in flight.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "edgeseek/internal/backends/backend.h"
#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/models/config.h"
#include "edgeseek/internal/runtime/engine.h"
#include "edgeseek/internal/runtime/model.h"
#include "edgeseek/internal/runtime/pipeline.h"
#include "edgeseek/internal/runtime/runner.h"
#include "test_util.h"

namespace es {
namespace {

std::shared_ptr<Model> Golden(const std::string& name) {
  return Model::Load(test::SourceDir() + "/tests/golden/data/models/" + name);
}

// The plain runner (first = {0}) or CPU stages starting at `first`, paged over a shared pool.
std::unique_ptr<Runner> MakeRunner(const std::shared_ptr<Model>& m, std::vector<int> first) {
  RunnerOptions ro;
  ro.n_slots = 4;
  ro.context = 96;
  ro.kv_memory_bytes = 20 * kKvBlockTokens * m->config().MakeKvSpec(DType::kF32).BytesPerToken();
  if (first.size() == 1) return std::make_unique<Runner>(m, CreateBackend("cpu", {}), ro);
  std::vector<std::unique_ptr<PipelineStage>> front;
  for (size_t i = 1; i < first.size(); ++i)
    front.push_back(MakeLocalStage(CreateBackend("cpu", {})));
  return std::make_unique<Runner>(m, std::move(front), std::move(first), CreateBackend("cpu", {}),
                                  ro);
}

Batch Rows(const std::vector<std::pair<int, std::vector<int32_t>>>& seqs, int64_t pos0) {
  Batch b;
  for (const auto& [slot, ids] : seqs) b.Add(slot, pos0, ids);
  b.Finalize();
  return b;
}

TEST(PipelinedDecode, RunnerGroupsLeaveInOrderWithThePlainOutputs) {
  auto m = Golden("qwen2_sharded");
  for (std::vector<int> first : {std::vector<int>{0, 1}, std::vector<int>{0, 1, 2}}) {
    const size_t S = first.size();
    auto plain = MakeRunner(m, {0});
    auto split = MakeRunner(m, first);
    ASSERT_TRUE(split->pipelined());
    EXPECT_FALSE(plain->pipelined());
    // Prompts for slots 0-3 in one forward each, then decode groups {0, 1} and {2, 3} in turn.
    const Batch prompt = Rows({{0, {3, 5, 7}}, {1, {2, 4, 6}}, {2, {9, 8, 1}}, {3, {1, 1, 2}}}, 0);
    std::vector<float> want, got;
    plain->Forward(prompt, &want);
    split->Forward(prompt, &got);
    ASSERT_EQ(got, want);
    const std::vector<Batch> groups = {Rows({{0, {11}}, {1, {12}}}, 3), Rows({{2, {13}}}, 3),
                                       Rows({{3, {14}}}, 3), Rows({{0, {15}}, {1, {16}}}, 4)};
    const std::vector<HeadOutput> outs = {HeadOutput::kLogits, HeadOutput::kArgmax,
                                          HeadOutput::kSample, HeadOutput::kLogits};
    std::vector<RowSampling> rows(1);
    rows[0].temperature = 0.9f;
    rows[0].seed = 12345;
    std::vector<float> logits;
    std::vector<int32_t> ids, want_ids;
    size_t left = 0;  // groups that came out
    for (size_t push = 0; push < groups.size() + S - 1; ++push) {
      const Batch none;
      const Batch& b = push < groups.size() ? groups[push] : none;
      const HeadOutput out = push < groups.size() ? outs[push] : HeadOutput::kLogits;
      const bool came = split->Push(b, out, rows, &logits, &ids);
      // A group leaves S - 1 pushes after it entered, oldest first.
      ASSERT_EQ(came, push + 1 >= S) << "push " << push << ", " << S << " stages";
      if (!came) continue;
      const Batch& g = groups[left];
      if (outs[left] == HeadOutput::kLogits) {
        plain->Forward(g, &want);
        EXPECT_EQ(logits, want) << "group " << left;
      } else if (outs[left] == HeadOutput::kArgmax) {
        plain->ForwardArgmax(g, &want_ids);
        EXPECT_EQ(ids, want_ids) << "group " << left;
      } else {
        plain->ForwardSample(g, rows, &want_ids);
        EXPECT_EQ(ids, want_ids) << "group " << left;
      }
      ++left;
    }
    EXPECT_EQ(left, groups.size());
    EXPECT_EQ(split->in_flight(), 0);
    // Every push but the first and the last ran two groups side by side (S of them at most).
    EXPECT_EQ(split->overlapped_pushes(), int64_t(groups.size() + S - 1 - 2));
    // A forward while a group is in flight is refused; draining lets it run.
    ASSERT_FALSE(split->Push(Rows({{2, {17}}}, 4), HeadOutput::kLogits, {}, &logits, &ids));
    EXPECT_THROW(split->Forward(Rows({{3, {18}}}, 4), &got), Error);
    while (split->in_flight() > 0) split->Push(Batch{}, HeadOutput::kLogits, {}, &logits, &ids);
    split->Forward(Rows({{3, {18}}}, 4), &got);
    plain->Forward(Rows({{2, {17}}}, 4), &want);
    plain->Forward(Rows({{3, {18}}}, 4), &want);
    EXPECT_EQ(got, want);
    // Dropped groups never come out, and a forward runs again.
    ASSERT_FALSE(split->Push(Rows({{2, {19}}}, 5), HeadOutput::kLogits, {}, &logits, &ids));
    split->DropInFlight();
    EXPECT_EQ(split->in_flight(), 0);
    EXPECT_FALSE(split->Push(Batch{}, HeadOutput::kLogits, {}, &logits, &ids));
    split->Forward(Rows({{3, {20}}}, 5), &got);
  }
}

TEST(PipelinedDecode, OneStageOrAPlainRunnerIsNotPipelined) {
  auto m = Golden("qwen2_sharded");
  auto plain = MakeRunner(m, {0});
  std::vector<float> logits;
  std::vector<int32_t> ids;
  EXPECT_THROW(plain->Push(Rows({{0, {1}}}, 0), HeadOutput::kLogits, {}, &logits, &ids), Error);
  EXPECT_EQ(WrapRunner(std::move(plain))->pipeline_stages(), 1);
  EXPECT_EQ(WrapRunner(MakeRunner(m, {0, 2}))->pipeline_stages(), 2);
}

struct Served {
  std::map<std::string, std::vector<int32_t>> tokens;
  std::map<std::string, FinishReason> finish;
  int64_t overlapped = 0;  // runner pushes that carried two or more groups
  bool cancelled_in_flight = false;
  size_t tokens_at_cancel = 0;
  EngineStats stats;
};

// Five requests through the engine over `first`'s stages: a, b, c, e at once (prompts of 5, 9,
// 3 and 12 tokens; b wants only 3 tokens and finishes early), d after 6 steps. `temperature` 0:
// greedy (argmax ids from the stages), else seeded sampling (logits to the host). `cancel`: the
// request cancelled in the step after its 4th token, while it is in flight when pipelined.
Served Serve(const std::string& model, std::vector<int> first, float temperature,
             const std::string& cancel = "") {
  auto m = Golden(model);
  const int V = m->vocab_size();
  const bool pipelined = first.size() > 1;
  auto r = MakeRunner(m, std::move(first));
  const Runner* runner = r.get();
  auto queue = std::make_shared<RequestQueue>(QosPolicy{});
  EngineOptions eo;
  eo.max_batch_tokens = 24;
  Engine e(WrapRunner(std::move(r)), queue, eo);
  Served out;
  std::map<std::string, std::shared_ptr<SeqRequest>> reqs;
  auto submit = [&](const std::string& id, int prompt, int max_tokens, uint32_t seed) {
    auto q = std::make_shared<SeqRequest>();
    q->id = id;
    for (int i = 0; i < prompt; ++i) q->prompt.push_back(int32_t((i * 7 + int(seed) * 3) % V));
    q->max_tokens = max_tokens;
    q->sampling.temperature = temperature;
    q->sampling.seed = seed;
    q->on_event = [&out, id](const SeqEvent& ev) {
      if (ev.kind == SeqEventKind::kToken) out.tokens[id].push_back(ev.token);
      if (ev.kind == SeqEventKind::kFinished) out.finish[id] = ev.finish;
    };
    reqs[id] = q;
    queue->Push(q);
  };
  submit("a", 5, 14, 1);
  submit("b", 9, 3, 2);
  submit("c", 3, 12, 3);
  submit("e", 12, 10, 5);
  for (int step = 0; step < 400; ++step) {
    if (step == 6) submit("d", 7, 9, 4);
    // Pipelined: once its next token is in flight.
    if (!cancel.empty() && !reqs[cancel]->cancel && out.tokens[cancel].size() >= 4 &&
        (!pipelined || reqs[cancel]->in_flight)) {
      out.cancelled_in_flight = reqs[cancel]->in_flight;
      out.tokens_at_cancel = out.tokens[cancel].size();
      reqs[cancel]->cancel = true;
    }
    if (!e.Step() && step > 6) break;
  }
  out.overlapped = runner->overlapped_pushes();
  out.stats = e.stats();
  return out;
}

void ExpectServedAsPlain(const std::string& model, float temperature) {
  const Served plain = Serve(model, {0}, temperature);
  ASSERT_EQ(plain.finish.size(), 5u);
  for (const auto& [id, why] : plain.finish) EXPECT_EQ(why, FinishReason::kLength) << id;
  EXPECT_EQ(plain.tokens.at("b").size(), 3u);
  for (std::vector<int> first : {std::vector<int>{0, 1}, std::vector<int>{0, 1, 2}}) {
    const Served split = Serve(model, first, temperature);
    EXPECT_EQ(split.tokens, plain.tokens) << first.size() << " stages";
    EXPECT_EQ(split.finish, plain.finish) << first.size() << " stages";
    // Decode steps ran with groups in flight side by side, and the pipeline needed more steps
    // than the plain runner's one a token (a group's token comes S - 1 steps after it entered).
    EXPECT_GT(split.overlapped, 10) << first.size() << " stages";
    EXPECT_GT(split.stats.steps, plain.stats.steps) << first.size() << " stages";
    EXPECT_EQ(split.stats.running, 0);
    EXPECT_EQ(split.stats.kv_blocks_used, 0);
  }
}

TEST(PipelinedDecode, EngineGreedyTokensEqualThePlainRunner) {
  ExpectServedAsPlain("qwen2_sharded", 0.0f);
}

TEST(PipelinedDecode, EngineSampledTokensEqualThePlainRunner) {
  ExpectServedAsPlain("qwen2_sharded", 0.8f);
}

TEST(PipelinedDecode, EngineMlaMoeGreedyTokensEqualThePlainRunner) {
  // Greedy over an MLA+MoE golden: the absorbed decode form on every stage.
  ExpectServedAsPlain("dsv3", 0.0f);
}

TEST(PipelinedDecode, CancelledWhileInFlightFinishesWhenItsGroupLeaves) {
  Served plain = Serve("qwen2_sharded", {0}, 0.0f);
  for (std::vector<int> first : {std::vector<int>{0, 1}, std::vector<int>{0, 1, 2}}) {
    const Served split = Serve("qwen2_sharded", first, 0.0f, "a");
    EXPECT_TRUE(split.cancelled_in_flight);
    EXPECT_EQ(split.finish.at("a"), FinishReason::kCancelled);
    // No token after the cancel (the one its group computed in flight is dropped): a's tokens
    // are those it had, the plain runner's first ones; the others got all of theirs.
    ASSERT_GE(split.tokens_at_cancel, 4u);
    plain.tokens["a"].resize(split.tokens_at_cancel);
    plain.finish["a"] = FinishReason::kCancelled;
    EXPECT_EQ(split.tokens, plain.tokens);
    EXPECT_EQ(split.finish, plain.finish);
    EXPECT_EQ(split.stats.running, 0);
    EXPECT_EQ(split.stats.kv_blocks_used, 0);
  }
}

}  // namespace
}  // namespace es
