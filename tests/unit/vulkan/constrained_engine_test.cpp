// Constrained requests through the engine on the Vulkan backend (lavapipe): rows with a grammar
// sample on the device with their allow-mask (made on the host before the step), so a step of
// constrained and plain rows brings back only ids. Greedy outputs must equal the host path's —
// the same requests asking for logprobs, which takes every step to the logits path and masks on
// the host — and the CPU backend's (host path), in a batch mixing constrained and plain rows.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>

#include "counting_backend.h"
#include "edgeseek/internal/grammar/grammar.h"
#include "edgeseek/internal/grammar/matcher.h"
#include "edgeseek/internal/models/arch.h"
#include "edgeseek/internal/runtime/engine.h"
#include "edgeseek/internal/runtime/model.h"
#include "edgeseek/internal/runtime/runner.h"
#include "server/grammar_constraint.h"
#include "test_util.h"
#include "vk_util.h"

namespace es::test {
namespace {

struct Out {
  std::vector<int32_t> tokens;
  FinishReason finish = FinishReason::kNone;
};

const char* kGrammar = R"(root ::= "{" [a-z]{2,6} ":" ( [0-9]{1,3} | "true" ) "}")";

std::shared_ptr<const grammar::TokenTrie> AsciiTrie(int vocab) {
  std::vector<std::string> bytes(static_cast<size_t>(vocab));  // ids past 127: no bytes
  for (int i = 0; i < 128; ++i) bytes[size_t(i)] = std::string(1, char(i));
  return std::make_shared<const grammar::TokenTrie>(bytes);
}

// Two constrained requests and a plain one, greedy, at once (one batch).
std::map<std::string, Out> RunEngine(const std::shared_ptr<Model>& model,
                                     std::unique_ptr<Backend> backend, bool logprobs) {
  const int V = int(model->config().vocab_size), stop_id = V - 1;  // the stop id has no bytes
  RunnerOptions ro;
  ro.n_slots = 3;
  ro.context = 64;
  auto queue = std::make_shared<RequestQueue>(QosPolicy{});
  Engine e(WrapRunner(std::make_unique<Runner>(model, std::move(backend), ro)), queue,
           EngineOptions{});
  const auto trie = AsciiTrie(V);
  const auto g = std::make_shared<const grammar::Grammar>(grammar::Grammar::ParseGbnf(kGrammar));
  std::map<std::string, Out> out;
  for (int k = 0; k < 3; ++k) {
    const std::string id = k < 2 ? "constrained_" + std::to_string(k) : "plain";
    auto r = std::make_shared<SeqRequest>();
    r->id = id;
    r->prompt = TestTokens(5 + k, 11 + k, 128);
    r->max_tokens = 24;
    r->sampling.temperature = 0;
    r->stop_ids = {stop_id};
    if (k < 2) r->constraint = std::make_shared<server::GrammarConstraint>(g, trie, r->stop_ids);
    r->logprobs = logprobs ? 0 : -1;
    r->on_event = [&out, id](const SeqEvent& ev) {
      if (ev.kind == SeqEventKind::kToken) out[id].tokens.push_back(ev.token);
      if (ev.kind == SeqEventKind::kFinished) out[id].finish = ev.finish;
    };
    queue->Push(r);
  }
  while (e.Step()) {
  }
  return out;
}

TEST_F(VulkanTest, ConstrainedEngineStepsSampleWithDeviceMasks) {
  auto model = SyntheticModel(kTinyLlamaConfig, 5);
  ReadBack masked, host;
  const auto device =
      RunEngine(model, std::make_unique<CountingBackend>(MakeVulkan({}), &masked), false);
  const auto logits =
      RunEngine(model, std::make_unique<CountingBackend>(MakeVulkan({}), &host), true);
  const auto cpu = RunEngine(model, CreateCpuBackend(BackendOptions{}), false);
  // The mask path brings back no logits; the logprobs run brings back nothing else.
  EXPECT_EQ(masked.logit_calls, 0);
  EXPECT_GT(masked.sample_calls, 5);
  EXPECT_EQ(host.sample_calls, 0);
  EXPECT_GT(host.logit_calls, 5);
  for (const char* id : {"constrained_0", "constrained_1", "plain"}) {
    SCOPED_TRACE(id);
    EXPECT_EQ(device.at(id).tokens, logits.at(id).tokens);
    EXPECT_EQ(device.at(id).tokens, cpu.at(id).tokens);
    EXPECT_EQ(device.at(id).finish, logits.at(id).finish);
  }
  const auto g = std::make_shared<const grammar::Grammar>(grammar::Grammar::ParseGbnf(kGrammar));
  for (const char* id : {"constrained_0", "constrained_1"}) {
    const Out& o = device.at(id);
    EXPECT_EQ(o.finish, FinishReason::kStop) << id;
    grammar::Matcher m(g, AsciiTrie(int(model->config().vocab_size)));
    for (size_t i = 0; i + 1 < o.tokens.size(); ++i) EXPECT_TRUE(m.Accept(o.tokens[i])) << id;
    EXPECT_TRUE(m.accepting()) << id;
  }
}

}  // namespace
}  // namespace es::test
