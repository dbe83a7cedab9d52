// The forward graph depends on a batch only through its row and output-row counts, which is what
// lets Runner keep one graph per such shape (Runner::GraphFor): two batches of equal counts but
// other tokens, positions, slots and read-out rows build node-for-node equal graphs (dense
// Llama, MLA + MoE DeepSeek-V3); and a Runner that has gone through more shapes than it keeps,
// and back, gives the logits a fresh Runner gives for the same batch.
#include <gtest/gtest.h>

#include <cstring>

#include "edgeseek/internal/backends/backend.h"
#include "edgeseek/internal/models/arch.h"
#include "edgeseek/internal/runtime/model.h"
#include "edgeseek/internal/runtime/runner.h"
#include "test_util.h"

namespace es {
namespace {

std::shared_ptr<Model> Golden(const std::string& name) {
  return Model::Load(test::SourceDir() + "/tests/golden/data/models/" + name);
}

void ExpectSameGraph(const Graph& a, const Graph& b, const std::string& what) {
  ASSERT_EQ(a.nodes().size(), b.nodes().size()) << what;
  for (size_t k = 0; k < a.nodes().size(); ++k) {
    const Node &x = a.nodes()[k], &y = b.nodes()[k];
    const std::string at = what + ", node " + std::to_string(k) + " " + x.name;
    EXPECT_EQ(x.op, y.op) << at;
    EXPECT_EQ(x.name, y.name) << at;
    EXPECT_EQ(x.src, y.src) << at;
    EXPECT_EQ(x.shape, y.shape) << at;
    EXPECT_EQ(x.dtype, y.dtype) << at;
    EXPECT_EQ(x.weight, y.weight) << at;
    EXPECT_EQ(x.layer, y.layer) << at;
    EXPECT_EQ(x.params.index(), y.params.index()) << at;
    EXPECT_EQ(ParamsHash(x), ParamsHash(y)) << at;
  }
}

TEST(GraphShape, BuildDependsOnlyOnRowAndOutputCounts) {
  for (const char* name : {"llama3", "dsv3"}) {
    const auto m = Golden(name);
    Batch a;  // 5 rows, 2 read out
    a.Add(0, 0, {1, 2, 3});
    a.Add(1, 7, {4, 5});
    a.Finalize();
    Batch b;  // 5 rows, 2 read out: other slots, positions, tokens and rows
    b.Add(2, 30, {9});
    b.Add(0, 4, {8, 7, 6, 5});
    b.Finalize();
    ASSERT_EQ(a.out_rows.size(), b.out_rows.size());
    ASSERT_NE(a.out_rows, b.out_rows);
    ExpectSameGraph(m->arch().Build(a), m->arch().Build(b), name);
  }
}

TEST(GraphShape, RunnerReusesGraphsAcrossShapes) {
  const auto m = Golden("llama3");
  RunnerOptions ro;
  ro.n_slots = 2;
  Runner cached(m, CreateBackend("cpu", {}), ro);
  std::vector<float> logits;
  // Eleven shapes (more than the Runner keeps) on slot 0, positions 0..; then, on slot 1, the
  // first shape again (evicted by then) and a shape of equal rows but fewer read-out rows.
  int64_t pos = 0;
  for (int rows = 1; rows <= 11; ++rows) {
    Batch b;
    std::vector<int32_t> toks(static_cast<size_t>(rows));
    for (int t = 0; t < rows; ++t) toks[size_t(t)] = (t * 13 + rows) % 50;
    b.Add(0, pos, toks, rows % 2 == 0);
    b.Finalize();
    cached.Forward(b, &logits);
    pos += rows;
  }
  auto check = [&](const Batch& b, const std::string& what) {
    cached.Forward(b, &logits);
    Runner fresh(m, CreateBackend("cpu", {}), ro);
    std::vector<float> want;
    fresh.Forward(b, &want);
    EXPECT_EQ(logits, want) << what;
  };
  Batch all;
  all.Add(1, 0, {3, 1, 4}, true);
  all.Finalize();
  check(all, "3 rows, all read out");
  Batch last;
  last.Add(1, 0, {3, 1, 4});
  last.Finalize();
  check(last, "3 rows, the last read out");
}

}  // namespace
}  // namespace es
