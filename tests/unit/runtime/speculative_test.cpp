// Speculative decoding (speculative.h): greedy output identical with and without drafts (n-gram,
// draft = target, draft = another model of the same vocabulary), over k edge cases (k = 1, k past
// max_new_tokens, EOS inside a draft, the end of the context, penalties and banned EOS); the
// acceptance rule's output distributed as p (chi-square, and the same test failing for a wrong
// rule); sampled generation distributed as the target's sampler (chi-square against the exact
// distribution over a short horizon); tokenizer mismatch errors.
#include "edgeseek/internal/runtime/speculative.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <random>

#include "counting_backend.h"
#include "edgeseek/internal/backends/backend.h"
#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/runtime/engine.h"
#include "edgeseek/internal/runtime/generator.h"
#include "edgeseek/internal/runtime/model.h"
#include "edgeseek/internal/runtime/runner.h"
#include "edgeseek/internal/runtime/sampler.h"
#include "test_util.h"

namespace es {
namespace {

std::string LlamaDir() { return test::SourceDir() + "/tests/golden/data/models/llama3"; }

std::shared_ptr<Model> GoldenLlama() { return Model::Load(LlamaDir()); }

// Random weights of the golden Llama's shapes: the same vocabulary, another model.
std::shared_ptr<Model> OtherLlama() {
  LoadOptions lo;
  lo.seed = 7;
  lo.synthetic_dtype = DType::kF32;
  return Model::Synthetic(LlamaDir() + "/config.json", lo);
}

std::unique_ptr<Runner> MakeRunner(std::shared_ptr<const Model> m, int64_t context = 0) {
  RunnerOptions ro;
  ro.context = context;
  return std::make_unique<Runner>(std::move(m), CreateBackend("cpu", {}), ro);
}

// A prompt that repeats, so that greedy output of a tiny model and the n-gram drafter meet.
std::vector<int32_t> RepetitivePrompt() {
  std::vector<int32_t> p;
  for (int r = 0; r < 4; ++r)
    for (int32_t t : {11, 57, 203, 9, 140, 77}) p.push_back(t);
  return p;
}

struct GenRun {
  std::vector<int32_t> out;
  GenerateStats stats;
};

GenRun GenerateWith(const std::shared_ptr<Model>& m, const std::vector<int32_t>& prompt,
                    GenerateOptions go, Drafter* drafter, int k, int64_t context = 0) {
  auto r = MakeRunner(m, context);
  go.drafter = drafter;
  go.spec_k = k;
  GenRun run;
  run.out = Generate(*r, r->AcquireSlot(), prompt, go, &run.stats);
  return run;
}

GenerateOptions Greedy(int n) {
  GenerateOptions go;
  go.max_new_tokens = n;
  go.sampling.temperature = 0;
  return go;
}

// ---- drafters ----------------------------------------------------------------------------------
TEST(Ngram, LongestSuffixFirstLatestOccurrence) {
  NgramDrafter d;
  Draft out;
  // "1 2 3" occurs at 0; what followed it is proposed (up to k).
  d.Propose({1, 2, 3, 4, 1, 2, 3}, 3, {}, &out);
  EXPECT_EQ(out.tokens, (std::vector<int32_t>{4, 1, 2}));
  EXPECT_TRUE(out.probs.empty());
  // Only a 1-gram matches; the latest occurrence wins (5 at index 2, followed by 8).
  d.Propose({5, 6, 5, 8, 9, 5}, 2, {}, &out);
  EXPECT_EQ(out.tokens, (std::vector<int32_t>{8, 9}));
  // The continuation stops at the end of the history.
  d.Propose({7, 7}, 4, {}, &out);
  EXPECT_EQ(out.tokens, (std::vector<int32_t>{7}));
  d.Propose({1, 2, 3}, 4, {}, &out);
  EXPECT_TRUE(out.tokens.empty());
  d.Propose({1, 2, 1}, 0, {}, &out);
  EXPECT_TRUE(out.tokens.empty());
  EXPECT_THROW(NgramDrafter(1, 2), Error);
}

// ---- greedy: identical output ------------------------------------------------------------------
class GreedySpec : public ::testing::Test {
 protected:
  void SetUp() override { m_ = GoldenLlama(); }
  // Plain greedy output, then the same with every drafter and k; stats must show drafts taken.
  void ExpectSame(const GenerateOptions& go, int64_t context = 0) {
    const std::vector<int32_t> prompt = RepetitivePrompt();
    const GenRun plain = GenerateWith(m_, prompt, go, nullptr, 0, context);
    auto other = OtherLlama();
    for (int k : {1, 2, 4, 9}) {
      NgramDrafter ngram;
      ModelDrafter self(MakeRunner(m_, context));
      ModelDrafter diff(MakeRunner(other, context));
      for (Drafter* d : std::vector<Drafter*>{&ngram, &self, &diff}) {
        SCOPED_TRACE(d->name() + " k=" + std::to_string(k));
        const GenRun spec = GenerateWith(m_, prompt, go, d, k, context);
        EXPECT_EQ(spec.out, plain.out);
        EXPECT_EQ(spec.stats.stopped_by_eos, plain.stats.stopped_by_eos);
        EXPECT_EQ(spec.stats.decode_tokens, int64_t(spec.out.size()) - 1);
        EXPECT_EQ(spec.stats.spec.emitted, spec.stats.decode_tokens);
        EXPECT_LE(spec.stats.spec.drafted, int64_t(k) * spec.stats.spec.steps);
        if (d == &self && go.max_new_tokens > 2 && go.min_new_tokens == 0) {
          // Draft = target: every draft is accepted (the upper bound), k + 1 tokens a step. (The
          // draft does not see ids banned before min_new_tokens: those drafts may be rejected.)
          EXPECT_EQ(spec.stats.spec.accepted, spec.stats.spec.drafted);
          EXPECT_GT(spec.stats.spec.drafted, 0);
        }
      }
    }
  }
  std::shared_ptr<Model> m_;
};

TEST_F(GreedySpec, Plain) { ExpectSame(Greedy(40)); }

TEST_F(GreedySpec, KLargerThanRemainingTokens) {
  ExpectSame(Greedy(1));
  ExpectSame(Greedy(2));
  ExpectSame(Greedy(3));
}

TEST_F(GreedySpec, EosInsideADraft) {
  // An EOS id that the plain output reaches mid-way: drafts carry it, generation stops there.
  const GenRun plain = GenerateWith(m_, RepetitivePrompt(), Greedy(40), nullptr, 0);
  ASSERT_GE(plain.out.size(), 12u);
  GenerateOptions go = Greedy(40);
  go.eos_ids = {plain.out[9]};
  ExpectSame(go);
  const GenRun cut = GenerateWith(m_, RepetitivePrompt(), go, nullptr, 0);
  EXPECT_TRUE(cut.stats.stopped_by_eos);
  EXPECT_LE(cut.out.size(), 10u);
}

TEST_F(GreedySpec, BannedEosAndPenalties) {
  // EOS banned until min_new_tokens (rows before and after the limit in one step), and a repeat
  // penalty over the history that accepted drafts extend: the logits path with the sampler.
  const GenRun plain = GenerateWith(m_, RepetitivePrompt(), Greedy(30), nullptr, 0);
  GenerateOptions go = Greedy(30);
  go.eos_ids = {plain.out[3], plain.out[4]};
  go.min_new_tokens = 13;
  ExpectSame(go);
  GenerateOptions pen = Greedy(30);
  pen.sampling.repeat_penalty = 1.3f;
  pen.sampling.presence_penalty = 0.2f;
  ExpectSame(pen);
}

TEST_F(GreedySpec, ContextEnd) {
  // The context ends before max_new_tokens: drafts never pass it, and both runs fail at the
  // same token with the same error after emitting the same ids.
  const int64_t ctx = 48;
  const std::vector<int32_t> prompt = RepetitivePrompt();
  auto collect = [&](Drafter* d, int k, std::string* err) {
    std::vector<int32_t> got;
    GenerateOptions go = Greedy(100);
    go.on_token = [&](int32_t id) {
      got.push_back(id);
      return true;
    };
    try {
      GenerateWith(m_, prompt, go, d, k, ctx);
    } catch (const Error& e) {
      *err = e.what();
    }
    return got;
  };
  std::string e0, e1, e2;
  const auto plain = collect(nullptr, 0, &e0);
  NgramDrafter ngram;
  ModelDrafter self(MakeRunner(m_, ctx));
  EXPECT_EQ(collect(&ngram, 4, &e1), plain);
  EXPECT_EQ(collect(&self, 4, &e2), plain);
  EXPECT_EQ(int64_t(prompt.size() + plain.size()), ctx + 1);
  EXPECT_NE(e0.find("context"), std::string::npos) << e0;
  EXPECT_EQ(e1, e0);
  EXPECT_EQ(e2, e0);
}

// Greedy speculation reads ids only: the draft model's steps and the verification of k + 1 rows
// take the argmax path (Backend::ComputeArgmax; on a GPU only the ids come back), no logit row
// reaches the host, no distribution is built. Also with EOS banned before min_new_tokens (the
// shape of `generate -n`) while no row picks it; a row whose argmax is banned is computed again
// alone with its logits, and the output is still the plain one.
TEST_F(GreedySpec, ReadsIdsOnly) {
  const std::vector<int32_t> prompt = RepetitivePrompt();
  auto counted = [](std::shared_ptr<const Model> m, test::ReadBack* c) {
    return std::make_unique<Runner>(
        std::move(m), std::make_unique<test::CountingBackend>(CreateBackend("cpu", {}), c),
        RunnerOptions{});
  };
  const GenRun free_run = GenerateWith(m_, prompt, Greedy(30), nullptr, 0);
  int32_t never = 0;  // an id the plain output never holds
  while (std::count(free_run.out.begin(), free_run.out.end(), never)) ++never;
  struct Case {
    const char* name;
    std::vector<int32_t> eos;
    int64_t refetched_rows;  // logit rows of the speculative steps (-1: at least one)
  };
  for (const Case& c : {Case{"bench: nothing banned", {}, 0},
                        Case{"generate: EOS banned, never picked", {never}, 0},
                        Case{"EOS banned and picked", {free_run.out[5]}, -1}}) {
    GenerateOptions go = Greedy(30);
    go.min_new_tokens = go.max_new_tokens;
    go.eos_ids = c.eos;
    const GenRun plain = GenerateWith(m_, prompt, go, nullptr, 0);
    for (int k : {2, 4}) {
      test::ReadBack target, draft, at_first;
      NgramDrafter ngram;
      ModelDrafter self(counted(m_, &draft));
      for (Drafter* d : std::vector<Drafter*>{&ngram, &self}) {
        SCOPED_TRACE(std::string(c.name) + ", " + d->name() + " k=" + std::to_string(k));
        target = draft = {};
        auto runner = counted(m_, &target);
        GenerateOptions sgo = go;
        sgo.drafter = d;
        sgo.spec_k = k;
        bool first = true;
        sgo.on_token = [&](int32_t) {
          if (first) at_first = target;  // after the prefill: the speculative steps start
          first = false;
          return true;
        };
        GenerateStats st;
        EXPECT_EQ(Generate(*runner, runner->AcquireSlot(), prompt, sgo, &st), plain.out);
        EXPECT_GT(st.spec.drafted, 0);
        EXPECT_EQ(target.max_argmax_rows, k + 1);  // a verification of k + 1 rows, ids only
        const int64_t rows = target.logit_rows - at_first.logit_rows;
        if (c.refetched_rows >= 0)
          EXPECT_EQ(rows, c.refetched_rows);
        else  // one row at a time, only where the banned id won
          EXPECT_TRUE(rows > 0 && rows == target.logit_calls - at_first.logit_calls) << rows;
        EXPECT_EQ(draft.logit_calls, 0);  // the draft model: argmax steps only
        EXPECT_EQ(target.sample_calls + draft.sample_calls, 0);
      }
    }
  }
}

TEST_F(GreedySpec, NgramAcceptsOnRepetitiveOutput) {
  // The tiny model's greedy output falls into a loop; prompt lookup then drafts right.
  NgramDrafter ngram;
  const GenRun spec = GenerateWith(m_, RepetitivePrompt(), Greedy(60), &ngram, 4);
  EXPECT_GT(spec.stats.spec.accepted, 0);
  EXPECT_LT(spec.stats.spec.steps, 59);
}

// ---- the acceptance rule -----------------------------------------------------------------------
// Pearson's chi-square of counts against probabilities; bins of expected count < 5 are merged.
double ChiSquare(const std::vector<int64_t>& counts, const std::vector<double>& probs, int* dof) {
  int64_t n = 0;
  for (int64_t c : counts) n += c;
  double chi = 0, e_rest = 0, o_rest = 0;
  int bins = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    const double e = probs[i] * double(n);
    if (e < 5) {
      e_rest += e, o_rest += double(counts[i]);
      continue;
    }
    chi += (double(counts[i]) - e) * (double(counts[i]) - e) / e;
    ++bins;
  }
  if (e_rest >= 5) {
    chi += (o_rest - e_rest) * (o_rest - e_rest) / e_rest;
    ++bins;
  } else if (o_rest > 0 && e_rest == 0) {
    chi = INFINITY;  // a token that can never be drawn was
  }
  *dof = bins - 1;
  return chi;
}

// The chi-square 0.999 quantile for `dof` degrees of freedom (Wilson-Hilferty): a correct rule
// fails this test one run in a thousand, with fixed seeds never.
double ChiSquareCritical(int dof) {
  const double z = 3.0902, d = double(dof);
  const double t = 1 - 2 / (9 * d) + z * std::sqrt(2 / (9 * d));
  return d * t * t * t;
}

using Rule =
    std::function<int32_t(const Sampler::Candidates& p, int32_t d, const Sampler::Candidates* q,
                          Sampler& s, std::vector<float>* dense)>;

// Draws d ~ q, applies `rule`, and compares the emitted tokens' histogram with p.
double RuleChiSquare(const Rule& rule, const std::vector<double>& p, const std::vector<double>& q,
                     bool one_hot, int* dof) {
  const int V = int(p.size());
  Sampler::Candidates pc, qc;
  for (int i = 0; i < V; ++i) {
    if (p[size_t(i)] > 0) pc.emplace_back(float(p[size_t(i)]), i);
    if (q[size_t(i)] > 0) qc.emplace_back(float(q[size_t(i)]), i);
  }
  SamplingParams sp;
  sp.seed = 99;
  Sampler s(sp);
  std::mt19937_64 draft_rng(5);
  std::discrete_distribution<int32_t> qdist(q.begin(), q.end());
  std::vector<float> dense;
  std::vector<int64_t> counts(size_t(V), 0);
  for (int n = 0; n < 200000; ++n) {
    const int32_t d = qdist(draft_rng);
    ++counts[size_t(rule(pc, d, one_hot ? nullptr : &qc, s, &dense))];
  }
  return ChiSquare(counts, p, dof);
}

const Rule kRule = [](const Sampler::Candidates& p, int32_t d, const Sampler::Candidates* q,
                      Sampler& s, std::vector<float>* dense) {
  bool acc = false;
  return AcceptDraftToken(p, d, q, 6, s, dense, &acc);
};

// A plausible bug: on rejection, draw from p itself instead of the residual max(0, p - q).
const Rule kWrongRule = [](const Sampler::Candidates& p, int32_t d, const Sampler::Candidates* q,
                           Sampler& s, std::vector<float>* dense) {
  bool acc = false;
  const int32_t t = AcceptDraftToken(p, d, q, 6, s, dense, &acc);
  return acc ? t : s.Draw(p);
};

TEST(Acceptance, EmittedTokensAreDistributedAsTarget) {
  // q above p for some ids, below for others, zero where p is not (and the reverse).
  const std::vector<double> p = {0.40, 0.25, 0.20, 0.10, 0.05, 0.00};
  const std::vector<double> q = {0.10, 0.35, 0.00, 0.15, 0.10, 0.30};
  int dof = 0;
  double chi = RuleChiSquare(kRule, p, q, false, &dof);
  EXPECT_LT(chi, ChiSquareCritical(dof)) << "dof " << dof;
  // A deterministic drafter (q one-hot at the drawn token): accept with p(d), else p without d.
  chi = RuleChiSquare(kRule, p, q, true, &dof);
  EXPECT_LT(chi, ChiSquareCritical(dof)) << "dof " << dof;
  // Draft distribution equal to the target's: everything accepted, still p.
  chi = RuleChiSquare(kRule, p, p, false, &dof);
  EXPECT_LT(chi, ChiSquareCritical(dof)) << "dof " << dof;
}

TEST(Acceptance, TheTestCatchesAWrongRule) {
  const std::vector<double> p = {0.40, 0.25, 0.20, 0.10, 0.05, 0.00};
  const std::vector<double> q = {0.10, 0.35, 0.00, 0.15, 0.10, 0.30};
  int dof = 0;
  double chi = RuleChiSquare(kWrongRule, p, q, false, &dof);
  EXPECT_GT(chi, ChiSquareCritical(dof)) << "dof " << dof;
  chi = RuleChiSquare(kWrongRule, p, q, true, &dof);
  EXPECT_GT(chi, ChiSquareCritical(dof)) << "dof " << dof;
}

TEST(Acceptance, GreedyIsExactAndDrawsNothing) {
  SamplingParams sp;
  Sampler s(sp), fresh(sp);
  std::vector<float> dense;
  bool acc = false;
  const Sampler::Candidates p = {{1.0f, 3}};
  EXPECT_EQ(AcceptDraftToken(p, 3, nullptr, 8, s, &dense, &acc), 3);
  EXPECT_TRUE(acc);
  EXPECT_EQ(AcceptDraftToken(p, 5, nullptr, 8, s, &dense, &acc), 3);
  EXPECT_FALSE(acc);
  EXPECT_EQ(s.Uniform(), fresh.Uniform());  // the generator is where it was
  for (float v : dense) EXPECT_EQ(v, 0.0f);
}

// ---- sampled generation: the same distribution as the target's sampler -------------------------
// The exact probability of every 3-token continuation under the target's sampler (top-k keeps
// the support small), from the model's own distributions; then the histogram of 3-token outputs
// of speculative generation is tested against it, for a draft model (q != p) and the n-gram
// drafter, with the plain generator checked the same way.
TEST(SampledSpec, DistributedAsTheTarget) {
  auto m = GoldenLlama();
  auto other = OtherLlama();
  const int V = m->vocab_size();
  const std::vector<int32_t> prompt = {11, 57, 203, 11, 57};
  SamplingParams sp;
  sp.temperature = 1.5f;
  sp.top_k = 3;
  sp.repeat_penalty = 1.1f;
  // ---- the exact distribution over (t1, t2, t3) ----
  auto ref = MakeRunner(m);
  const int slot = ref->AcquireSlot();
  Sampler sampler(sp);
  auto dist_after = [&](const std::vector<int32_t>& hist) {
    Batch b;
    b.Add(slot, 0, hist);
    b.Finalize();
    std::vector<float> logits;
    ref->Forward(b, &logits);
    Sampler::Candidates c;
    sampler.Distribution(logits.data(), V, hist, {}, &c);
    return c;
  };
  std::map<std::vector<int32_t>, double> exact;
  for (auto [p1, t1] : dist_after(prompt)) {
    std::vector<int32_t> h1 = prompt;
    h1.push_back(t1);
    for (auto [p2, t2] : dist_after(h1)) {
      std::vector<int32_t> h2 = h1;
      h2.push_back(t2);
      for (auto [p3, t3] : dist_after(h2)) exact[{t1, t2, t3}] = double(p1) * p2 * p3;
    }
  }
  std::vector<std::vector<int32_t>> keys;
  std::vector<double> probs;
  for (auto& [k, p] : exact) keys.push_back(k), probs.push_back(p);

  auto target = MakeRunner(m);
  const int tslot = target->AcquireSlot();
  auto histogram = [&](Drafter* d, int k, int runs) {
    std::map<std::vector<int32_t>, int64_t> seen;
    GenerateOptions go;
    go.max_new_tokens = 3;
    go.sampling = sp;
    go.drafter = d;
    go.spec_k = k;
    for (int i = 0; i < runs; ++i) {
      go.sampling.seed = uint64_t(1000 + i);
      ++seen[Generate(*target, tslot, prompt, go)];
    }
    std::vector<int64_t> counts;
    int64_t outside = 0;
    for (auto& [k2, c] : seen)
      if (!exact.count(k2)) outside += c;
    for (auto& key : keys) counts.push_back(seen.count(key) ? seen[key] : 0);
    EXPECT_EQ(outside, 0) << "outputs the target's sampler can never give";
    return counts;
  };
  const int kRuns = 3000;
  ModelDrafter draft(MakeRunner(other));
  NgramDrafter ngram(2, 1);
  int dof = 0;
  for (auto [d, k] :
       std::vector<std::pair<Drafter*, int>>{{nullptr, 0}, {&draft, 2}, {&draft, 1}, {&ngram, 2}}) {
    SCOPED_TRACE(d ? d->name() + " k=" + std::to_string(k) : std::string("plain"));
    const double chi = ChiSquare(histogram(d, k, kRuns), probs, &dof);
    EXPECT_LT(chi, ChiSquareCritical(dof)) << "dof " << dof;
  }
}

// ---- tokenizer checks --------------------------------------------------------------------------
std::string ExpectMismatch(const Model& target, const Model& draft) {
  try {
    CheckSameTokenizer(target, draft);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error for " << draft.name() << " vs " << target.name();
  return "";
}

std::shared_ptr<Model> Tiny(const std::string& config, const std::string& tokenizer) {
  LoadOptions lo;
  lo.tokenizer = tokenizer;
  lo.synthetic_dtype = DType::kF32;
  return Model::Synthetic(config, lo);
}

TEST(DraftTokenizer, SameModelPasses) {
  auto m = GoldenLlama();
  EXPECT_NO_THROW(CheckSameTokenizer(*m, *OtherLlama()));
  const std::string tiny = test::SourceDir() + "/tests/server/tiny_config.json";
  const std::string tok = test::SourceDir() + "/tests/data/tiny_tokenizer";
  EXPECT_NO_THROW(CheckSameTokenizer(*Tiny(tiny, tok), *Tiny(tiny, tok)));
}

TEST(DraftTokenizer, VocabularySize) {
  const std::string tiny = test::SourceDir() + "/tests/server/tiny_config.json";
  const std::string msg = ExpectMismatch(*GoldenLlama(), *Tiny(tiny, ""));
  EXPECT_NE(msg.find("different vocabularies: 384 vs 320"), std::string::npos) << msg;
  EXPECT_NE(msg.find("llama3"), std::string::npos) << msg;
}

// One tokenizer, embedding tables of different sizes (as R1-Distill-Qwen 1.5B and 7B): accepted,
// and a draft whose padding rows win is never proposed past the target's table.
TEST(DraftTokenizer, PaddedEmbeddingTablesShareTheTokenizer) {
  const std::string tiny = test::SourceDir() + "/tests/server/tiny_config.json";
  const std::string tok = test::SourceDir() + "/tests/data/tiny_tokenizer";
  std::string cfg = test::ReadFile(tiny);
  const size_t at = cfg.find("\"vocab_size\": 384");
  ASSERT_NE(at, std::string::npos);
  cfg.replace(at, 17, "\"vocab_size\": 448");
  const std::string padded = test::TempDir() + "/padded_config.json";
  test::WriteFile(padded, cfg);
  auto target = Tiny(tiny, tok), draft = Tiny(padded, tok);
  ASSERT_EQ(draft->vocab_size(), 448);
  EXPECT_NO_THROW(CheckSameTokenizer(*target, *draft));
  ModelDrafter d(std::make_unique<Runner>(draft, CreateBackend("cpu", {}), RunnerOptions{}),
                 int(target->vocab_size()));
  std::vector<int32_t> history{1, 5, 9, 2, 7};
  for (int round = 0; round < 8; ++round) {
    Draft out;
    SamplingParams sp;
    sp.temperature = round % 2 ? 0.0f : 1.0f;
    sp.seed = uint64_t(round);
    d.Propose(history, 6, sp, &out);
    for (int32_t id : out.tokens) EXPECT_LT(id, target->vocab_size());
    history.push_back(out.tokens.empty() ? 3 : out.tokens[0]);
  }
}

TEST(DraftTokenizer, EosIds) {
  const std::string dir = test::TempDir();
  std::string cfg = test::ReadFile(LlamaDir() + "/config.json");
  const size_t at = cfg.find("\"eos_token_id\"");
  ASSERT_NE(at, std::string::npos);
  cfg.replace(at, cfg.find(']', at) - at + 1, "\"eos_token_id\": [2, 4]");
  test::WriteFile(dir + "/config.json", cfg);
  const std::string msg = ExpectMismatch(*GoldenLlama(), *Tiny(dir + "/config.json", ""));
  EXPECT_NE(msg.find("different EOS ids: [2,4] vs [2,3]"), std::string::npos) << msg;
}

TEST(DraftTokenizer, SpecialTokenStrings) {
  const std::string tiny = test::SourceDir() + "/tests/server/tiny_config.json";
  const std::string tok = test::SourceDir() + "/tests/data/tiny_tokenizer";
  const std::string dir = test::TempDir();
  std::string j = test::ReadFile(tok + "/tokenizer.json");
  const size_t at = j.find("<|im_start|>");
  ASSERT_NE(at, std::string::npos);
  j.replace(at, 12, "<|im_begin|>");
  test::WriteFile(dir + "/tokenizer.json", j);
  test::WriteFile(dir + "/tokenizer_config.json", test::ReadFile(tok + "/tokenizer_config.json"));
  const std::string msg = ExpectMismatch(*Tiny(tiny, tok), *Tiny(tiny, dir));
  EXPECT_NE(msg.find("different special tokens at id 377: '<|im_begin|>' vs '<|im_start|>'"),
            std::string::npos)
      << msg;
}

// ---- the engine: a lone decoding request speculates -------------------------------------------
namespace engine {

// Bans every odd id (a stand-in for a grammar: drafts it forbids must be rejected).
class EvenIds : public TokenConstraint {
 public:
  int Apply(float* logits, int vocab) override {
    for (int i = 1; i < vocab; i += 2) logits[i] = -INFINITY;
    return (vocab + 1) / 2;
  }
  void Accept(int32_t id) override { EXPECT_EQ(id % 2, 0); }
  bool complete() const override { return false; }
};

struct Out {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  FinishReason finish = FinishReason::kNone;
};

// Requests one after another (each alone: speculative steps) and two at once (batched, then
// alone once the shorter finishes), through a paged pool with the prefix cache on.
// `make` (optional) makes a drafter that reads the engine's runner (MtpDrafter).
std::map<std::string, Out> RunEngine(const std::shared_ptr<Model>& m, std::unique_ptr<Drafter> d,
                                     int k, SpecStats* spec,
                                     std::function<std::unique_ptr<Drafter>(Runner&)> make = {},
                                     std::vector<int32_t> prompt = RepetitivePrompt()) {
  RunnerOptions ro;
  ro.n_slots = 2;
  ro.context = 96;
  auto queue = std::make_shared<RequestQueue>(QosPolicy{});
  EngineOptions eo;
  eo.max_batch_tokens = 16;
  auto runner = std::make_unique<Runner>(m, CreateBackend("cpu", {}), ro);
  if (make) d = make(*runner);
  Engine e(WrapRunner(std::move(runner)), queue, eo);
  if (d) e.set_drafter(std::move(d), k);
  std::map<std::string, Out> out;
  auto submit = [&](const std::string& id, int max_tokens, std::vector<int32_t> stop,
                    std::shared_ptr<TokenConstraint> c, int logprobs, int extra) {
    auto r = std::make_shared<SeqRequest>();
    r->id = id;
    r->prompt = prompt;
    r->prompt.push_back(extra);
    r->max_tokens = max_tokens;
    r->sampling.temperature = 0;
    r->stop_ids = std::move(stop);
    r->constraint = std::move(c);
    r->logprobs = logprobs;
    r->on_event = [&out, id](const SeqEvent& ev) {
      if (ev.kind == SeqEventKind::kToken) {
        out[id].tokens.push_back(ev.token);
        if (ev.logprobs) out[id].logprobs.push_back(ev.logprobs->logprob);
      }
      if (ev.kind == SeqEventKind::kFinished) out[id].finish = ev.finish;
    };
    queue->Push(r);
  };
  auto drain = [&] {
    while (e.Step()) {
    }
  };
  submit("plain", 40, {}, nullptr, -1, 1);
  drain();
  submit("stop", 40, {out["plain"].tokens[7]}, nullptr, -1, 1);  // the same prompt: cached blocks
  drain();
  submit("constrained", 20, {}, std::make_shared<EvenIds>(), 2, 2);
  drain();
  // The whole context (admission takes no more): the last drafts are cut by it.
  submit("context", int(ro.context) - int(prompt.size()) - 1, {}, nullptr, -1, 3);
  drain();
  submit("pair_a", 6, {}, nullptr, 1, 4);
  submit("pair_b", 30, {}, nullptr, -1, 5);
  drain();
  EXPECT_EQ(e.stats().kv_blocks_used, 0);
  *spec = e.stats().spec;
  return out;
}

TEST(SpecEngine, GreedyOutputIdenticalWithAndWithoutDrafts) {
  auto m = GoldenLlama();
  SpecStats none, s;
  const auto plain = RunEngine(m, nullptr, 0, &none);
  EXPECT_EQ(none.steps, 0);
  EXPECT_EQ(plain.at("stop").finish, FinishReason::kStop);
  EXPECT_EQ(plain.at("context").finish, FinishReason::kLength);
  EXPECT_EQ(plain.at("context").tokens.size(), 96u - 25u);
  for (int k : {1, 3, 8}) {
    std::vector<std::unique_ptr<Drafter>> drafters;
    drafters.push_back(std::make_unique<NgramDrafter>());
    drafters.push_back(std::make_unique<ModelDrafter>(MakeRunner(m, 96)));
    drafters.push_back(std::make_unique<ModelDrafter>(MakeRunner(OtherLlama(), 96)));
    for (auto& d : drafters) {
      SCOPED_TRACE(d->name() + " k=" + std::to_string(k));
      const auto got = RunEngine(m, std::move(d), k, &s);
      EXPECT_GT(s.steps, 0);
      ASSERT_EQ(got.size(), plain.size());
      for (auto& [id, o] : plain) {
        SCOPED_TRACE(id);
        EXPECT_EQ(got.at(id).tokens, o.tokens);
        EXPECT_EQ(got.at(id).finish, o.finish);
        EXPECT_EQ(got.at(id).logprobs, o.logprobs);  // same rows, same processing: bitwise
      }
    }
  }
}

// MTP drafts in the engine (the server's path: paged pool, prefix cache, batched then lone
// requests) on the golden DeepSeek-V3 checkpoint with an MTP layer.
TEST(SpecEngine, MtpGreedyOutputIdenticalWithAndWithoutDrafts) {
  auto m = Model::Load(test::SourceDir() + "/tests/golden/data/models/dsv3_mtp");
  const std::vector<int32_t> prompt = {0, 5, 17, 42, 42, 9, 100, 250, 3, 17, 42, 42, 61, 7, 7};
  SpecStats none, s;
  const auto plain = RunEngine(m, nullptr, 0, &none, {}, prompt);
  for (int k : {1, 3}) {
    SCOPED_TRACE("k=" + std::to_string(k));
    const auto got = RunEngine(
        m, nullptr, k, &s, [](Runner& r) { return std::make_unique<MtpDrafter>(r); }, prompt);
    EXPECT_GT(s.steps, 0);
    EXPECT_GT(s.drafted, 0);
    ASSERT_EQ(got.size(), plain.size());
    for (auto& [id, o] : plain) {
      SCOPED_TRACE(id);
      EXPECT_EQ(got.at(id).tokens, o.tokens);
      EXPECT_EQ(got.at(id).finish, o.finish);
    }
  }
}

// The server's speculative step of a greedy request reads ids only: the verification and the
// draft model's steps take ForwardArgmax, no logit row comes back (the output is the plain one).
TEST(SpecEngine, GreedyStepReadsIdsOnly) {
  auto m = GoldenLlama();
  auto run = [&](std::unique_ptr<Drafter> d, int k, test::ReadBack* target) {
    RunnerOptions ro;
    ro.context = 96;
    auto queue = std::make_shared<RequestQueue>(QosPolicy{});
    Engine e(WrapRunner(std::make_unique<Runner>(
                 m, std::make_unique<test::CountingBackend>(CreateBackend("cpu", {}), target), ro)),
             queue, EngineOptions{});
    const bool speculative = d != nullptr;
    if (d) e.set_drafter(std::move(d), k);
    std::vector<int32_t> out;
    auto r = std::make_shared<SeqRequest>();
    r->id = "greedy";
    r->prompt = RepetitivePrompt();
    r->max_tokens = 30;
    r->sampling.temperature = 0;
    r->on_event = [&out](const SeqEvent& ev) {
      if (ev.kind == SeqEventKind::kToken) out.push_back(ev.token);
    };
    queue->Push(r);
    while (e.Step()) {
    }
    if (speculative) {
      EXPECT_GT(e.stats().spec.steps, 0);
    }
    return out;
  };
  test::ReadBack none;
  const std::vector<int32_t> plain = run(nullptr, 0, &none);
  ASSERT_EQ(plain.size(), 30u);
  for (int k : {2, 4}) {
    test::ReadBack target, draft;
    std::vector<std::unique_ptr<Drafter>> drafters;
    drafters.push_back(std::make_unique<NgramDrafter>());
    drafters.push_back(std::make_unique<ModelDrafter>(std::make_unique<Runner>(
        m, std::make_unique<test::CountingBackend>(CreateBackend("cpu", {}), &draft),
        RunnerOptions{})));
    for (auto& d : drafters) {
      SCOPED_TRACE(d->name() + " k=" + std::to_string(k));
      target = {};
      EXPECT_EQ(run(std::move(d), k, &target), plain);
      EXPECT_EQ(target.logit_calls, 0);
      EXPECT_EQ(target.max_argmax_rows, k + 1);
    }
    EXPECT_EQ(draft.logit_calls, 0);
    EXPECT_GT(draft.argmax_calls, 0);
  }
}

}  // namespace engine

}  // namespace
}  // namespace es
