// Greedy decoding through Backend::ComputeArgmax / Runner::ForwardArgmax (only ids come back
// from a GPU backend): the ids equal the argmax of the logits Forward returns, and Generate's
// greedy path (which takes ForwardArgmax) equals a hand-written loop over Forward + Argmax.
#include <gtest/gtest.h>

#include "edgeseek/internal/backends/backend.h"
#include "edgeseek/internal/runtime/generator.h"
#include "edgeseek/internal/runtime/model.h"
#include "edgeseek/internal/runtime/runner.h"
#include "edgeseek/internal/runtime/sampler.h"
#include "test_util.h"

namespace es {
namespace {

std::shared_ptr<Model> GoldenLlama() {
  return Model::Load(test::SourceDir() + "/tests/golden/data/models/llama3");
}

TEST(Greedy, ForwardArgmaxEqualsArgmaxOfLogits) {
  auto m = GoldenLlama();
  RunnerOptions ro;
  ro.n_slots = 2;
  Runner r(m, CreateBackend("cpu", {}), ro);
  Batch b;
  b.Add(0, 0, {5, 17, 3, 99, 42, 7, 1});
  b.Add(1, 0, {8, 2});
  b.Finalize();
  std::vector<float> logits;
  std::vector<int32_t> ids;
  r.Forward(b, &logits);
  r.ForwardArgmax(b, &ids);
  const int V = m->vocab_size();
  ASSERT_EQ(ids.size(), b.out_rows.size());
  ASSERT_EQ(logits.size(), ids.size() * size_t(V));
  for (size_t i = 0; i < ids.size(); ++i)
    EXPECT_EQ(ids[i], Argmax(logits.data() + i * size_t(V), V));
}

TEST(Greedy, GenerateMatchesForwardAndArgmaxLoop) {
  auto m = GoldenLlama();
  const std::vector<int32_t> prompt = {11, 22, 33, 44, 55, 66, 77, 88, 99};
  GenerateOptions go;
  go.max_new_tokens = 6;
  go.sampling.temperature = 0;
  go.prefill_chunk = 4;  // chunked prefill: ForwardArgmax for the first chunks
  Runner r1(m, CreateBackend("cpu", {}), {});
  const std::vector<int32_t> got = Generate(r1, r1.AcquireSlot(), prompt, go);

  Runner r2(m, CreateBackend("cpu", {}), {});
  const int slot = r2.AcquireSlot();
  std::vector<float> logits;
  Batch b;
  b.Add(slot, 0, prompt);
  b.Finalize();
  r2.Forward(b, &logits);
  std::vector<int32_t> want;
  for (int64_t pos = int64_t(prompt.size()); int(want.size()) < go.max_new_tokens; ++pos) {
    want.push_back(Argmax(logits.data(), m->vocab_size()));
    Batch d;
    d.Add(slot, pos, {want.back()});
    d.Finalize();
    r2.Forward(d, &logits);
  }
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace es
