// ThreadPool: every index covered exactly once (odd sizes, grains), the chunking is a pure
// function of (n, threads), every thread runs RunOnAll once, and an oversubscribed pool (more
// threads than cores: the caller yields while it waits) still completes many small regions; the
// caller runs the chunks whose worker has not started, each with the chunk's own index.
#include "edgeseek/internal/core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace es {
namespace {

TEST(ThreadPool, ParallelForCoversEachIndexOnce) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 2, 7, 31, 1000, 1023}) {
      for (int64_t grain : {1, 3, 8, 64}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        pool.ParallelFor(
            n,
            [&](int64_t b, int64_t e, int) {
              EXPECT_EQ(b % grain, 0) << "chunks start at multiples of the grain";
              for (int64_t i = b; i < e; ++i) hits[size_t(i)].fetch_add(1);
            },
            grain);
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

// A worker that has not started its chunk (asleep, or not scheduled: another process on the
// core) no longer holds the region up: the caller claims and runs that chunk. Each chunk runs
// exactly once and always with its own index, whichever thread runs it, so results stay a
// function of (n, threads). Tiny chunks: the caller, done with chunk 0 at once, usually claims
// some before the workers (which take a mutex first) do; without claiming it never ran one.
TEST(ThreadPool, CallerRunsChunksNotStartedYet) {
  ThreadPool pool(4);
  const std::thread::id caller = std::this_thread::get_id();
  int stolen = 0;
  for (int region = 0; region < 500; ++region) {
    std::atomic<int> runs[4] = {0, 0, 0, 0};
    std::atomic<bool> on_caller[4] = {false, false, false, false};
    pool.ParallelFor(4, [&](int64_t b, int64_t e, int t) {
      ASSERT_EQ(e - b, 1);
      ASSERT_EQ(b, t) << "chunk b ran with another index";
      runs[t].fetch_add(1);
      if (std::this_thread::get_id() == caller) on_caller[t] = true;
    });
    for (int t = 0; t < 4; ++t) ASSERT_EQ(runs[t].load(), 1) << "region " << region;
    for (int t = 1; t < 4; ++t) stolen += on_caller[t] ? 1 : 0;
  }
  EXPECT_GT(stolen, 0);
}

}  // namespace
}  // namespace es
