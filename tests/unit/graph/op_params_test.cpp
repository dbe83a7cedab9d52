// Typed per-op parameters (graph.h Node::params): each op carries its own record, Graph::Add
// refuses a node that carries another op's, Params<P>() names the node when asked for the wrong
// record, and ParamsHash tells every field apart (backends key their programs on it).
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/graph/graph.h"

namespace es {
namespace {

Node Make(Op op, const char* name, OpParams params) {
  Node n;
  n.op = op;
  n.name = name;
  n.shape = {1, 8};
  n.params = std::move(params);
  return n;
}

std::string AddError(const Node& n) {
  Graph g;
  try {
    g.Add(n);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(OpParams, EachOpTakesItsOwnRecord) {
  auto rope = std::make_shared<RopeTable>();
  const std::vector<Node> ok = {
      Make(Op::kRmsNorm, "norm", RmsNormParams{1e-6f}),
      Make(Op::kSlice, "slice", SliceParams{2, 6}),
      Make(Op::kRope, "rope", RopeParams{2, 4, 0, rope}),
      Make(Op::kKvStore, "store", KvStoreParams{1}),
      Make(Op::kAttention, "attn", AttentionParams{4, 2, 2, 2, 0.5f}),
      Make(Op::kMlaAttention, "mla", MlaParams{2, 2, 2, 4, 8, 0.5f}),
      Make(Op::kMoE, "moe", MoeOpParams{}),
      Make(Op::kMatMul, "mm", {}),
      Make(Op::kAdd, "add", {}),
  };
  for (const Node& n : ok) EXPECT_EQ(AddError(n), "") << n.name;
}

TEST(OpParams, AnotherOpsRecordIsRefusedNamingTheNode) {
  EXPECT_EQ(AddError(Make(Op::kAttention, "model.layers.3.self_attn.attn", MlaParams{})),
            "graph node 'model.layers.3.self_attn.attn' (attention) carries the parameters of "
            "another op");
  // An op with parameters needs them; an op without takes none.
  EXPECT_NE(AddError(Make(Op::kRope, "rope", {})).find("'rope' (rope)"), std::string::npos);
  EXPECT_NE(AddError(Make(Op::kMatMul, "mm", SliceParams{})).find("'mm' (matmul)"),
            std::string::npos);
}

TEST(OpParams, AskingForTheWrongRecordNamesTheNode) {
  const Node n = Make(Op::kSlice, "c_raw", SliceParams{0, 512});
  EXPECT_EQ(n.Params<SliceParams>().width, 512);
  try {
    (void)n.Params<RopeParams>();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "graph node 'c_raw' (slice) carries no rope parameters");
  }
}

TEST(OpParams, TheHashTellsEveryFieldApart) {
  auto rope = std::make_shared<RopeTable>(), other = std::make_shared<RopeTable>();
  const AttentionParams a{4, 2, 64, 64, 0.125f};
  std::vector<Node> nodes = {Make(Op::kAttention, "a", a)};
  for (int f = 0; f < 5; ++f) {
    AttentionParams b = a;
    if (f == 0) b.q_heads = 8;
    if (f == 1) b.kv_heads = 4;
    if (f == 2) b.dk = 128;
    if (f == 3) b.dv = 128;
    if (f == 4) b.scale = 0.25f;
    nodes.push_back(Make(Op::kAttention, "a", b));
  }
  const MlaParams m{16, 128, 64, 128, 512, 0.1f};
  nodes.push_back(Make(Op::kMlaAttention, "m", m));
  for (int f = 0; f < 6; ++f) {
    MlaParams b = m;
    if (f == 0) b.heads = 32;
    if (f == 1) b.dn = 64;
    if (f == 2) b.dr = 32;
    if (f == 3) b.dv = 64;
    if (f == 4) b.rank = 256;
    if (f == 5) b.scale = 0.2f;
    nodes.push_back(Make(Op::kMlaAttention, "m", b));
  }
  nodes.push_back(Make(Op::kRope, "r", RopeParams{2, 4, 0, rope}));
  nodes.push_back(Make(Op::kRope, "r", RopeParams{2, 4, 0, other}));  // another table
  nodes.push_back(Make(Op::kRope, "r", RopeParams{2, 4, 2, rope}));
  nodes.push_back(Make(Op::kSlice, "s", SliceParams{0, 4}));
  nodes.push_back(Make(Op::kSlice, "s", SliceParams{4, 0}));
  nodes.push_back(Make(Op::kKvStore, "k", KvStoreParams{0}));
  nodes.push_back(Make(Op::kKvStore, "k", KvStoreParams{1}));
  nodes.push_back(Make(Op::kRmsNorm, "n", RmsNormParams{1e-6f}));
  nodes.push_back(Make(Op::kRmsNorm, "n", RmsNormParams{1e-5f}));
  MoeOpParams e;
  e.moe.n_experts = 64;
  e.moe.top_k = 6;
  nodes.push_back(Make(Op::kMoE, "e", e));
  for (int f = 0; f < 5; ++f) {
    MoeOpParams b = e;
    if (f == 0) b.moe.top_k = 8;
    if (f == 1) b.moe.routed_scaling_factor = 2.5f;
    if (f == 2) b.moe.topk_method = TopkMethod::kNoauxTc;
    if (f == 3) b.expert0 = 32, b.n_local = 32;
    if (f == 4) b.moe.ffn_dim = 1408;
    nodes.push_back(Make(Op::kMoE, "e", b));
  }
  for (size_t i = 0; i < nodes.size(); ++i)
    for (size_t j = i + 1; j < nodes.size(); ++j)
      EXPECT_NE(ParamsHash(nodes[i]), ParamsHash(nodes[j])) << i << " vs " << j;
  EXPECT_EQ(ParamsHash(nodes[0]), ParamsHash(Make(Op::kAttention, "b", a)));  // names don't count
}

TEST(OpParams, ExpertRangeDefaultsToAllExperts) {
  MoeOpParams p;
  p.moe.n_experts = 64;
  EXPECT_EQ(p.LocalExperts(), 64);
  EXPECT_EQ(p.FirstExpert(), 0);
  p.expert0 = 16, p.n_local = 8;
  EXPECT_EQ(p.LocalExperts(), 8);
  EXPECT_EQ(p.FirstExpert(), 16);
}

}  // namespace
}  // namespace es
