// ThreadPool: the chunking is a pure function of (n, grain) (for pools of up to 4 threads), every
// chunk runs exactly once, a thread never runs two chunks at once (so `tid` indexes per-thread
// scratch), run_on_all runs once per thread, and mixing the two kinds of job (stale workers
// waking into a newer job) stays correct — with spinning and with sleeping waits.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "core/threadpool.h"

namespace dfl {
namespace {

std::vector<std::pair<int64_t, int64_t>> expected_chunks(int64_t n, int64_t grain, int nt) {
  std::vector<std::pair<int64_t, int64_t>> c;
  const int64_t count = ThreadPool::chunk_count(n, grain, nt), len = ThreadPool::chunk_len(n, grain, nt);
  for (int64_t i = 0; i < count; ++i) c.emplace_back(i * len, std::min(n, (i + 1) * len));
  return c;
}

TEST(ThreadPool, ChunkingDependsOnlyOnNAndGrain) {
  for (int64_t n : {1, 2, 7, 63, 64, 65, 100, 192, 1000, 9496, 151936, 1 << 22}) {
    for (int64_t grain : {1, 2, 4, 7, 16, 64}) {
      const auto ref = expected_chunks(n, grain, 1);
      for (int nt : {2, 3, 4}) EXPECT_EQ(expected_chunks(n, grain, nt), ref) << n << " " << grain;
      // Covers [0, n) exactly, grain-aligned, non-empty, at most 16 chunks (more than threads).
      ASSERT_FALSE(ref.empty());
      EXPECT_LE(ref.size(), 16u);
      EXPECT_EQ(ref.front().first, 0);
      EXPECT_EQ(ref.back().second, n);
      for (size_t i = 0; i < ref.size(); ++i) {
        EXPECT_LT(ref[i].first, ref[i].second);
        EXPECT_EQ(ref[i].first % grain, 0);
        if (i) EXPECT_EQ(ref[i].first, ref[i - 1].second);
      }
      const int64_t n_grains = (n + grain - 1) / grain;
      EXPECT_LE(static_cast<int64_t>(ref.size()), std::min<int64_t>(n_grains, 16));
      EXPECT_GE(static_cast<int64_t>(ref.size()), std::min<int64_t>(n_grains, 8));
    }
  }
  // Big pools still get several chunks per thread.
  EXPECT_GE(ThreadPool::chunk_count(1 << 20, 1, 64), 4 * 64);
  EXPECT_EQ(ThreadPool::chunk_count(0, 16, 2), 0);
}

void check_parallel_for(ThreadPool& pool, int64_t n, int64_t grain) {
  const int nt = pool.n_threads();
  std::vector<int> hit(static_cast<size_t>(n), 0);
  std::vector<std::atomic<int>> busy(static_cast<size_t>(nt));
  std::mutex mu;
  std::set<std::pair<int64_t, int64_t>> seen;
  std::atomic<bool> overlap{false}, bad_tid{false};
  pool.parallel_for(n, [&](int64_t b, int64_t e, int tid) {
    if (tid < 0 || tid >= nt) {
      bad_tid = true;
      return;
    }
    if (busy[tid].fetch_add(1) != 0) overlap = true;
    for (int64_t i = b; i < e; ++i) hit[i]++;
    {
      std::lock_guard<std::mutex> l(mu);
      seen.emplace(b, e);
    }
    busy[tid].fetch_sub(1);
  }, grain);
  ASSERT_FALSE(bad_tid);
  ASSERT_FALSE(overlap) << "a tid ran two chunks at once";
  for (int h : hit) ASSERT_EQ(h, 1);
  if (nt == 1) {
    ASSERT_EQ(seen.size(), 1u);
    EXPECT_EQ(*seen.begin(), std::make_pair(int64_t(0), n));
  } else {
    const auto want = expected_chunks(n, grain, nt);
    const std::vector<std::pair<int64_t, int64_t>> got(seen.begin(), seen.end());
    ASSERT_EQ(got, want);
  }
}

TEST(ThreadPool, ParallelForRunsTheFixedChunksOnce) {
  for (int spin : {1 << 15, 0}) {
    for (int nt : {1, 2, 3, 5}) {
      ThreadPool pool(nt);
      pool.set_spin(spin);
      for (int rep = 0; rep < 30; ++rep)
        for (int64_t n : {1, 5, 64, 100, 1000, 4099})
          for (int64_t grain : {1, 4, 16}) check_parallel_for(pool, n, grain);
    }
  }
}

TEST(ThreadPool, RunOnAllRunsOncePerThread) {
  for (int spin : {1 << 15, 0}) {
    for (int nt : {1, 2, 3, 6}) {
      ThreadPool pool(nt);
      pool.set_spin(spin);
      for (int rep = 0; rep < 200; ++rep) {
        std::vector<std::atomic<int>> ran(static_cast<size_t>(nt));
        pool.run_on_all([&](int tid) { ran[tid].fetch_add(1); });
        for (auto& r : ran) ASSERT_EQ(r.load(), 1);
      }
    }
  }
}

// Jobs of both kinds back to back, some with a slow chunk or a slow thread (a worker that wakes
// late meets a newer job): every job still runs completely and exactly once.
TEST(ThreadPool, MixedJobsWithLateWorkers) {
  for (int spin : {1 << 12, 0}) {
    for (int nt : {2, 3, 8}) {  // 8 threads oversubscribe the test machine
      ThreadPool pool(nt);
      pool.set_spin(spin);
      for (int rep = 0; rep < 400; ++rep) {
        if (rep % 3 == 0) {
          std::vector<std::atomic<int>> ran(static_cast<size_t>(nt));
          pool.run_on_all([&](int tid) {
            if (rep % 7 == 0 && tid == nt - 1) std::this_thread::sleep_for(std::chrono::microseconds(200));
            ran[tid].fetch_add(1);
          });
          for (auto& r : ran) ASSERT_EQ(r.load(), 1);
        } else {
          const int64_t n = 50 + rep % 200;
          std::vector<std::atomic<int>> hit(static_cast<size_t>(n));
          pool.parallel_for(n, [&](int64_t b, int64_t e, int tid) {
            if (rep % 5 == 0 && tid != 0 && b == 0) std::this_thread::sleep_for(std::chrono::microseconds(300));
            for (int64_t i = b; i < e; ++i) hit[i].fetch_add(1);
          }, 1 + rep % 4);
          for (auto& h : hit) ASSERT_EQ(h.load(), 1);
        }
      }
    }
  }
}

// A worker that sleeps inside a chunk: the job still completes, every chunk once (which thread
// takes the others is up to the scheduler, so it is not asserted).
TEST(ThreadPool, SlowThreadInsideAChunk) {
  ThreadPool pool(3);
  std::atomic<int> total{0};
  std::atomic<bool> slept{false};
  pool.parallel_for(64, [&](int64_t b, int64_t e, int tid) {
    if (tid != 0 && !slept.exchange(true)) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    total.fetch_add(static_cast<int>(e - b));
  });
  EXPECT_EQ(total.load(), 64);
}

// Lanes: each thread starts on its own contiguous lane and steals when it is dry. The worker
// sleeps in its first chunk, which is in its lane (chunks 8..15 of 16 = [32, 64)); the caller
// runs its lane and steals every other chunk of the worker's meanwhile.
TEST(ThreadPool, ThreadsStartOnTheirOwnLaneAndStealTheRest) {
  ThreadPool pool(2);
  ASSERT_EQ(ThreadPool::chunk_count(64, 1, 2), 16);
  std::mutex mu;
  std::vector<int64_t> by_caller, by_worker;
  std::atomic<bool> slept{false};
  pool.parallel_for(64, [&](int64_t b, int64_t, int tid) {
    if (tid != 0 && !slept.exchange(true)) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::lock_guard<std::mutex> l(mu);
    (tid == 0 ? by_caller : by_worker).push_back(b);
  });
  EXPECT_GE(by_caller.size(), 15u);
  EXPECT_EQ(by_caller.size() + by_worker.size(), 16u);
  for (int64_t b : by_worker) EXPECT_GE(b, 32) << "the worker's first chunk is in its own lane";
  for (size_t i = 0; i < 8 && i < by_caller.size(); ++i)
    EXPECT_EQ(by_caller[i], int64_t(4 * i)) << "the caller runs its own lane first, in order";
}

}  // namespace
}  // namespace dfl
