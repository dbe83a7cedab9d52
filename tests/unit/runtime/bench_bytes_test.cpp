// The bytes one decode step is charged for in `edgeseek bench`'s bandwidth line: every weight
// once, except an untied embedding table (one row a token) — tied, it is the output and read whole.
#include <gtest/gtest.h>

#include "edgeseek/internal/models/config.h"
#include "edgeseek/internal/runtime/bench.h"
#include "edgeseek/internal/runtime/model.h"
#include "test_util.h"

namespace es {
namespace {

size_t EmbedBytes(const Model& m) {
  for (const Tensor* t : m.weights())
    if (t->name == "model.embed_tokens.weight") return t->nbytes;
  return 0;
}

TEST(BenchBytes, UntiedEmbeddingCountsOneRow) {
  auto m = Model::Load(test::SourceDir() + "/tests/golden/data/models/llama3");
  ASSERT_FALSE(m->config().tie_word_embeddings);
  const size_t embed = EmbedBytes(*m);
  ASSERT_GT(embed, 0u);
  EXPECT_EQ(ActiveWeightBytes(*m), m->weight_bytes() - embed + embed / size_t(m->vocab_size()));
}

TEST(BenchBytes, TiedEmbeddingIsReadWhole) {
  auto m = Model::Load(test::SourceDir() + "/tests/golden/data/models/qwen2_tied");
  ASSERT_TRUE(m->config().tie_word_embeddings);
  EXPECT_EQ(ActiveWeightBytes(*m), m->weight_bytes());
}

}  // namespace
}  // namespace es
