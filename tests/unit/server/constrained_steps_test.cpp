// Constrained rows on a model that samples on the device (the Vulkan backend's case): the engine
// makes each constrained row's allow-mask before the step (TokenConstraint::AllowMask) and sends
// it with the row's sampling parameters, instead of taking the whole step's logits to the host.
// The fake model claiming device sampling (its ForwardSample: Forward, then SampleRowHost) must
// give what the host path gives: greedy outputs identical, constrained and plain requests mixed
// in one batch, a grammar that ends with no stop id finished as before; sampled outputs valid.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>

#include "edgeseek/internal/grammar/grammar.h"
#include "edgeseek/internal/grammar/matcher.h"
#include "engine_harness.h"
#include "server/grammar_constraint.h"

namespace es::test {
namespace {

const char* kJsonish =
    R"(root ::= "{" ws "\"" [a-z]{1,8} "\"" ws ":" ws ( [0-9]{1,4} | "true" | "false" ) ws "}"
ws ::= [ ]?)";
const char* kDigit = R"(root ::= "ab" [0-9])";

std::shared_ptr<const grammar::Grammar> Parse(const char* gbnf) {
  return std::make_shared<const grammar::Grammar>(grammar::Grammar::ParseGbnf(gbnf));
}

struct MixedRun {
  std::map<std::string, Collected> out;
  int64_t masked_rows = 0;
  int max_seqs = 0;  // the most sequences of one step
};

// Four constrained requests (greedy and sampled, one whose grammar ends with no stop id) and two
// plain ones, all in the engine at once.
MixedRun RunMixed(bool device_sampling) {
  Harness h(6, 256);
  h.model->set_device_sampling(device_sampling);
  const auto trie = FakeTextModel().token_trie();
  auto add = [&](const std::string& id, int seed, float temperature, const char* gbnf,
                 std::vector<int32_t> stops) {
    auto r = h.Make(id, Prompt(10 + seed, seed), 48, temperature, uint64_t(seed));
    if (gbnf) r->constraint = std::make_shared<server::GrammarConstraint>(Parse(gbnf), trie, stops);
    r->stop_ids = std::move(stops);
    h.Submit(r);
  };
  add("json_greedy_a", 1, 0.0f, kJsonish, {256});
  add("json_greedy_b", 2, 0.0f, kJsonish, {256});
  add("json_sampled", 3, 0.9f, kJsonish, {256});
  add("digit_no_stop", 4, 0.0f, kDigit, {});
  add("plain_greedy", 5, 0.0f, nullptr, {256});
  add("plain_sampled", 6, 0.9f, nullptr, {256});
  h.RunAll();
  MixedRun run{h.out, h.model->masked_rows(), 0};
  for (const auto& s : h.model->log()) run.max_seqs = std::max(run.max_seqs, s.seqs);
  return run;
}

// The constrained tokens (without the stop id) read as text form a sentence of the grammar.
bool Complete(const char* gbnf, const std::vector<int32_t>& tokens) {
  grammar::Matcher m(Parse(gbnf), FakeTextModel().token_trie());
  for (int32_t t : tokens)
    if (t != 256 && !m.Accept(t)) return false;
  return m.accepting();
}

TEST(ConstrainedSteps, DeviceMasksGiveTheHostPathsOutputs) {
  const MixedRun host = RunMixed(false), device = RunMixed(true);
  EXPECT_EQ(host.masked_rows, 0);
  EXPECT_GT(device.masked_rows, 20);  // every constrained decode step sent its mask
  EXPECT_GE(device.max_seqs, 4);      // constrained and plain rows shared steps
  for (const char* id : {"json_greedy_a", "json_greedy_b", "digit_no_stop", "plain_greedy"}) {
    SCOPED_TRACE(id);
    EXPECT_EQ(device.out.at(id).tokens, host.out.at(id).tokens);
    EXPECT_EQ(device.out.at(id).finish, host.out.at(id).finish);
  }
  for (const MixedRun* run : {&host, &device}) {
    for (const char* id : {"json_greedy_a", "json_greedy_b", "json_sampled"}) {
      const Collected& c = run->out.at(id);
      EXPECT_EQ(c.finish, FinishReason::kStop) << id;
      ASSERT_FALSE(c.tokens.empty()) << id;
      EXPECT_EQ(c.tokens.back(), 256) << id;  // the stop id, allowed once the object is complete
      EXPECT_TRUE(Complete(kJsonish, c.tokens)) << id;
    }
    // Nothing may follow "ab<digit>" and there is no stop id: finished as complete, no more.
    const Collected& d = run->out.at("digit_no_stop");
    EXPECT_EQ(d.finish, FinishReason::kStop);
    EXPECT_EQ(d.tokens.size(), 3u);
    EXPECT_TRUE(Complete(kDigit, d.tokens));
    EXPECT_EQ(run->out.at("plain_sampled").finish, FinishReason::kLength);
  }
}

// GrammarConstraint::AllowMask is Apply's set as bits (vocab 258: not a multiple of 64), the stop
// id included exactly where the text is complete, and no bit at or past the vocabulary.
TEST(ConstrainedSteps, AllowMaskIsApplysSet) {
  const auto trie = FakeTextModel().token_trie();
  const int V = FakeStepModel::kVocab;
  server::GrammarConstraint c(Parse(kJsonish), trie, {256, 400});
  const std::string text = "{\"ab\" :12}";
  for (size_t i = 0; i <= text.size(); ++i) {  // the last check: at the complete text
    std::vector<float> row(size_t(V), 1.0f);
    const int applied = c.Apply(row.data(), V);
    std::vector<uint64_t> allow;
    const int allowed = c.AllowMask(V, &allow);
    EXPECT_EQ(allowed, applied) << i;
    ASSERT_EQ(allow.size(), size_t(V + 63) / 64);
    for (int id = 0; id < int(allow.size()) * 64; ++id)
      EXPECT_EQ(Allowed(allow, id), id < V && row[size_t(id)] > -INFINITY) << i << " id " << id;
    EXPECT_EQ(Allowed(allow, 256), c.complete()) << i;
    if (i < text.size()) c.Accept(int32_t(uint8_t(text[i])));
  }
  EXPECT_TRUE(c.complete());
}

}  // namespace
}  // namespace es::test
