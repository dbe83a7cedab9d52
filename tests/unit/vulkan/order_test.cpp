// The dispatch order (command.h OrderByLevel, DependsOn) on made-up dispatches, no device: a
// dispatch moves up to the first level after everything it reads, overwrites or clobbers, and no
// further; reads of buffers nothing writes (weights) order nothing; the order within a level is
// the graph's.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "command.h"

namespace es {
namespace {

using vk::BufRange;
using vk::Dispatch;

VkBuffer Buf(uintptr_t id) { return reinterpret_cast<VkBuffer>(id); }
BufRange R(uintptr_t buf, uint64_t off, uint64_t size) { return {Buf(buf), off, size}; }

// A dispatch that reads `in` and writes `out`, tagged by its node number.
Dispatch D(int tag, std::vector<BufRange> in, std::vector<BufRange> out) {
  Dispatch d;
  d.node = tag;
  for (const BufRange& r : in) d.bindings.push_back({r});
  for (const BufRange& r : out) {
    d.writes.push_back(int(d.bindings.size()));
    d.bindings.push_back({r});
  }
  return d;
}

std::vector<int> Tags(const std::vector<Dispatch>& ds) {
  std::vector<int> t;
  for (const Dispatch& d : ds) t.push_back(d.node);
  return t;
}

const BufRange kW = R(1, 0, 4096);  // weights: read by all, written by none

TEST(VulkanOrder, ReadersOfTheSameInputShareTheFirstLevel) {
  // 0: x -> a; 1: a -> b; 2: x -> c (the router beside the shared experts); 3: c -> d
  const BufRange x = R(2, 0, 64), a = R(2, 64, 64), b = R(2, 128, 64), c = R(2, 192, 64),
                 d = R(2, 256, 64);
  std::vector<Dispatch> ds{D(0, {kW, x}, {a}), D(1, {kW, a}, {b}), D(2, {kW, x}, {c}),
                           D(3, {kW, c}, {d})};
  vk::OrderByLevel(ds);
  EXPECT_EQ(Tags(ds), (std::vector<int>{0, 2, 1, 3}));
}

TEST(VulkanOrder, OverwritingWaitsForEarlierReadersAndWriters) {
  const BufRange x = R(2, 0, 64), y = R(2, 64, 64), z = R(3, 0, 64);
  // 1 overwrites what 0 reads (an arena range reused after its last reader); 2 overwrites what
  // 1 wrote; 3 writes elsewhere and waits for nothing.
  std::vector<Dispatch> ds{D(0, {x}, {y}), D(1, {kW}, {x}), D(2, {kW}, {x}), D(3, {kW}, {z})};
  EXPECT_TRUE(vk::DependsOn(ds[1], ds[0]));
  EXPECT_TRUE(vk::DependsOn(ds[2], ds[1]));
  EXPECT_FALSE(vk::DependsOn(ds[3], ds[0]));
  vk::OrderByLevel(ds);
  EXPECT_EQ(Tags(ds), (std::vector<int>{0, 3, 1, 2}));
}

TEST(VulkanOrder, DisjointRangesOfOneBufferAndSharedReadsDoNotOrder) {
  // Both read x and the weights, write neighbouring ranges of one buffer; then a reader of only
  // the first one's output, and a writer of a range that touches the second's by one byte.
  const BufRange x = R(2, 0, 64), p = R(4, 0, 32), q = R(4, 32, 32), pr = R(4, 0, 31),
                 touch = R(4, 63, 8);
  std::vector<Dispatch> ds{D(0, {kW, x}, {p}), D(1, {kW, x}, {q}), D(2, {p}, {R(5, 0, 8)}),
                           D(3, {kW}, {touch}), D(4, {pr}, {R(6, 0, 8)})};
  EXPECT_FALSE(vk::DependsOn(ds[1], ds[0]));
  vk::OrderByLevel(ds);
  EXPECT_EQ(Tags(ds), (std::vector<int>{0, 1, 2, 3, 4}));  // 2, 3, 4 all on the second level
  std::vector<Dispatch> late{D(0, {x}, {p}), D(1, {kW}, {R(7, 0, 8)}), D(2, {p}, {R(5, 0, 8)}),
                             D(3, {kW}, {R(8, 0, 8)})};
  vk::OrderByLevel(late);
  EXPECT_EQ(Tags(late), (std::vector<int>{0, 1, 3, 2}));  // stable within each level
}

TEST(VulkanOrder, ALongChainKeepsItsOrderAndArrayBindingsCount) {
  // A chain through one binding array's second element: each step reads what the one before it
  // wrote, so nothing moves; a reader of none of it goes first.
  std::vector<Dispatch> ds;
  for (int i = 0; i < 5; ++i) {
    Dispatch d;
    d.node = i;
    d.bindings = {{R(9, 0, 16), R(10, uint64_t(i) * 16, 16)}, {R(10, uint64_t(i + 1) * 16, 16)}};
    d.writes = {1};
    ds.push_back(d);
  }
  ds.push_back(D(5, {R(9, 0, 16)}, {R(11, 0, 4)}));
  vk::OrderByLevel(ds);
  EXPECT_EQ(Tags(ds), (std::vector<int>{0, 5, 1, 2, 3, 4}));
}

}  // namespace
}  // namespace es
