// ThreadPool: every index covered exactly once (odd sizes, grains), the chunking is a pure
// function of (n, threads), every thread runs RunOnAll once, and an oversubscribed pool (more
// threads than cores: the caller yields while it waits) still completes many small regions.
#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "edgeseek/core/thread_pool.h"

namespace es {
namespace {

TEST(ThreadPool, ParallelForCoversEachIndexOnce) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 2, 7, 31, 1000, 1023}) {
      for (int64_t grain : {1, 3, 8, 64}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        pool.ParallelFor(n, [&](int64_t b, int64_t e, int) {
          EXPECT_EQ(b % grain, 0) << "chunks start at multiples of the grain";
          for (int64_t i = b; i < e; ++i) hits[size_t(i)].fetch_add(1);
        }, grain);
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(hits[size_t(i)].load(), 1) << "n=" << n << " grain=" << grain << " i=" << i;
      }
    }
  }
}

TEST(ThreadPool, ChunkOwnerDependsOnlyOnSizeAndThreads) {
  ThreadPool pool(3);
  auto owners = [&] {
    std::vector<int> owner(101, -1);
    pool.ParallelFor(101, [&](int64_t b, int64_t e, int t) {
      for (int64_t i = b; i < e; ++i) owner[size_t(i)] = t;
    });
    return owner;
  };
  const std::vector<int> first = owners();
  for (int rep = 0; rep < 20; ++rep) EXPECT_EQ(owners(), first);
}

TEST(ThreadPool, RunOnAllRunsOncePerThread) {
  ThreadPool pool(4);
  std::vector<std::atomic<int>> ran(4);
  pool.RunOnAll([&](int t, int n) {
    EXPECT_EQ(n, 4);
    ran[size_t(t)].fetch_add(1);
  });
  for (auto& r : ran) EXPECT_EQ(r.load(), 1);
}

TEST(ThreadPool, OversubscribedPoolCompletesManyRegions) {
  ThreadPool pool(16);  // far more threads than this test machine's cores
  std::atomic<int64_t> sum{0};
  for (int region = 0; region < 500; ++region)
    pool.ParallelFor(64, [&](int64_t b, int64_t e, int) { sum.fetch_add(e - b); });
  EXPECT_EQ(sum.load(), 500 * 64);
}

}  // namespace
}  // namespace es
