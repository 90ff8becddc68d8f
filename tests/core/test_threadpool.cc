// ThreadPool: the chunking is a pure function of (n, grain) (for pools of up to 4 threads), every
// chunk runs exactly once, a thread never runs two chunks at once (so `tid` indexes per-thread
// scratch), run_on_all runs once per thread, and mixing the two kinds of job (stale workers
// waking into a newer job) stays correct — with spinning and with sleeping waits. Redoable jobs:
// the caller does not wait for a worker stalled inside a chunk, the stalled worker never runs
// another instruction of that chunk, and outputs stay right when jobs of every kind mix with
// revocations.
#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "core/threadpool.h"

namespace dfl {
namespace {

std::vector<std::pair<int64_t, int64_t>> expected_chunks(int64_t n, int64_t grain, int nt, bool redoable = false) {
  std::vector<std::pair<int64_t, int64_t>> c;
  const int64_t count = ThreadPool::chunk_count(n, grain, nt, redoable);
  const int64_t len = ThreadPool::chunk_len(n, grain, nt, redoable);
  for (int64_t i = 0; i < count; ++i) c.emplace_back(i * len, std::min(n, (i + 1) * len));
  return c;
}

TEST(ThreadPool, ChunkingDependsOnlyOnNAndGrain) {
  for (bool redoable : {false, true}) {
    for (int64_t n : {1, 2, 7, 63, 64, 65, 100, 192, 1000, 4096, 9496, 16384, 151936, 1 << 22}) {
      for (int64_t grain : {1, 2, 4, 7, 16, 64}) {
        const auto ref = expected_chunks(n, grain, 1, redoable);
        for (int nt : {2, 3, 4}) EXPECT_EQ(expected_chunks(n, grain, nt, redoable), ref) << n << " " << grain;
        // Covers [0, n) exactly, grain-aligned, non-empty, at most 16 chunks (more than threads);
        // a redoable job of many grains: up to 64 chunks of at least 256 grains.
        ASSERT_FALSE(ref.empty());
        const int64_t n_grains = (n + grain - 1) / grain;
        const int64_t most = redoable ? std::max<int64_t>(16, std::min<int64_t>(64, n_grains / 256)) : 16;
        EXPECT_EQ(ref.front().first, 0);
        EXPECT_EQ(ref.back().second, n);
        for (size_t i = 0; i < ref.size(); ++i) {
          EXPECT_LT(ref[i].first, ref[i].second);
          EXPECT_EQ(ref[i].first % grain, 0);
          if (i) {
            EXPECT_EQ(ref[i].first, ref[i - 1].second);
          }
          if (ref.size() > 16 && i + 1 < ref.size()) {
            EXPECT_GE(ref[i].second - ref[i].first, 256 * grain);
          }
        }
        EXPECT_LE(static_cast<int64_t>(ref.size()), std::min<int64_t>(n_grains, most));
        EXPECT_GE(static_cast<int64_t>(ref.size()), std::min<int64_t>(n_grains, most / 2));
      }
    }
  }
  // Gemma-3-270M's greedy head plane (16,384 tiles): 64 chunks when redoable, 16 otherwise.
  EXPECT_EQ(ThreadPool::chunk_count(16384, 1, 2, true), 64);
  EXPECT_EQ(ThreadPool::chunk_count(16384, 1, 2), 16);
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


// A worker stalls inside a chunk of a redoable job (as if descheduled): the caller revokes it,
// runs the chunk itself and returns; the worker, released later, never writes again.
TEST(ThreadPool, RedoableJobDoesNotWaitForAStalledWorker) {
  if (!ThreadPool::redo_supported()) GTEST_SKIP() << "revocation unavailable here (membarrier)";
  ThreadPool pool(2);
  pool.set_revoke_when_quiet(true);
  std::vector<int> out(64, -1);
  std::atomic<bool> stalled{false}, release{false};
  std::atomic<int> after_stall{0};
  const auto t0 = std::chrono::steady_clock::now();
  pool.parallel_for_redoable(64, [&](int64_t b, int64_t e, int tid) {
    for (int64_t i = b; i < e; ++i) out[size_t(i)] = int(3 * i);
    if (tid == 0) {  // hold the caller until the worker is inside a chunk
      for (int k = 0; k < 20000 && !stalled.load(); ++k) std::this_thread::sleep_for(std::chrono::microseconds(50));
      return;
    }
    if (stalled.exchange(true)) return;
    for (int k = 0; k < 100000 && !release.load(); ++k) std::this_thread::sleep_for(std::chrono::microseconds(100));
    after_stall.fetch_add(1);
    for (int64_t i = b; i < e; ++i) out[size_t(i)] = -7;  // a late write: must never land
  });
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(stalled.load()) << "the worker never took a chunk";
  EXPECT_LT(secs, 5.0) << "the caller waited for the stalled worker";
  EXPECT_GE(pool.revocations(), 1u);
  for (int64_t i = 0; i < 64; ++i) ASSERT_EQ(out[size_t(i)], int(3 * i)) << i;
  release.store(true);
  // The revoked worker is back in service: jobs of every kind need it again.
  for (int rep = 0; rep < 50; ++rep) {
    std::vector<std::atomic<int>> hit(100);
    pool.parallel_for(100, [&](int64_t b, int64_t e, int) { for (int64_t i = b; i < e; ++i) hit[size_t(i)]++; });
    for (auto& h : hit) ASSERT_EQ(h.load(), 1);
    std::atomic<int> ran{0};
    pool.run_on_all([&](int) { ran++; });
    ASSERT_EQ(ran.load(), 2);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(after_stall.load(), 0) << "the revoked worker ran on inside its chunk";
  for (int64_t i = 0; i < 64; ++i) ASSERT_EQ(out[size_t(i)], int(3 * i)) << i;
}

// Revoked inside a NoAbandon scope: the worker finishes the scope, then stops at its end.
TEST(ThreadPool, RevokedWorkerFinishesItsNoAbandonScopeThenStops) {
  if (!ThreadPool::redo_supported()) GTEST_SKIP() << "revocation unavailable here (membarrier)";
  ThreadPool pool(2);
  pool.set_revoke_when_quiet(true);
  std::atomic<bool> stalled{false}, release{false};
  std::atomic<int> scope_done{0}, after_scope{0};
  pool.parallel_for_redoable(64, [&](int64_t, int64_t, int tid) {
    if (tid == 0) {
      for (int k = 0; k < 20000 && !stalled.load(); ++k) std::this_thread::sleep_for(std::chrono::microseconds(50));
      return;
    }
    if (stalled.exchange(true)) return;
    // The scope may outlive the job (and this closure): it uses only what it loaded before.
    std::atomic<bool>* go = &release;
    std::atomic<int>* finished = &scope_done;
    {
      ThreadPool::NoAbandon keep;
      for (int k = 0; k < 100000 && !go->load(); ++k) std::this_thread::sleep_for(std::chrono::microseconds(100));
      finished->fetch_add(1);
    }
    after_scope.fetch_add(1);
  });
  ASSERT_TRUE(stalled.load());
  EXPECT_GE(pool.revocations(), 1u);
  EXPECT_EQ(scope_done.load(), 0) << "the caller waited for the scope";
  release.store(true);
  for (int k = 0; k < 5000 && scope_done.load() == 0; ++k) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(scope_done.load(), 1) << "the scope was cut short";
  EXPECT_EQ(after_scope.load(), 0) << "the worker ran past the scope's end";
}

// Redoable, plain and run_on_all jobs back to back, with stalls inside chunks and revocation on:
// every output right after every job, and no late write from an earlier job into the reused
// buffer (each job writes its own values).
TEST(ThreadPool, RedoableJobsMixedWithOthersStayExact) {
  for (int spin : {1 << 12, 0}) {
    for (int nt : {2, 3}) {
      ThreadPool pool(nt);
      pool.set_spin(spin);
      pool.set_revoke_when_quiet(true);
      std::vector<int> out(20000);
      for (int rep = 0; rep < 300; ++rep) {
        // (every 7th: a job of up to 64 redoable chunks of ~260 items)
        const int64_t n = rep % 7 == 6 ? 16384 + rep : 40 + rep % 250;
        std::atomic<bool> stalled{false};
        auto body = [&](int64_t b, int64_t e, int tid) {
          for (int64_t i = b; i < e; ++i) out[size_t(i)] = int(i) * 1000 + rep;
          const auto t = std::chrono::steady_clock::now();  // ~10 µs a chunk: the workers get some
          while (std::chrono::steady_clock::now() - t < std::chrono::microseconds(10)) {
          }
          if (rep % 4 != 1) return;
          if (tid == 0) {  // hold the caller (up to 50 ms) until a worker stalls in a chunk
            for (int k = 0; k < 1000 && !stalled.load(); ++k) std::this_thread::sleep_for(std::chrono::microseconds(50));
          } else if (!stalled.exchange(true)) {
            std::this_thread::sleep_for(std::chrono::microseconds(300));  // a worker's first chunk
          }
        };
        if (rep % 5 == 4) {
          std::atomic<int> ran{0};
          pool.run_on_all([&](int) { ran++; });
          ASSERT_EQ(ran.load(), nt);
          continue;
        }
        if (rep % 3 == 0)
          pool.parallel_for(n, body, 1 + rep % 3);
        else
          pool.parallel_for_redoable(n, body, 1 + rep % 3);
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out[size_t(i)], int(i) * 1000 + rep) << "rep " << rep << " i " << i;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      if (ThreadPool::redo_supported()) {
        EXPECT_GT(pool.revocations(), 0u) << "nt " << nt;
      }
    }
  }
}

// Steering (as the caller's preemption checks would drive it): anchored where it is, moved on
// round robin, the workers kept off the caller's CPU each time, and every mask back once quiet.
TEST(ThreadPool, SteeringPinsTheCallerKeepsWorkersOffItAndRestoresTheMasks) {
  cpu_set_t start;
  ASSERT_EQ(sched_getaffinity(0, sizeof start, &start), 0);
  if (CPU_COUNT(&start) < 2) GTEST_SKIP() << "one CPU: nothing to steer";
  if (const char* e = std::getenv("DFL_POOL_STEER"); e && std::atoi(e) == 0) GTEST_SKIP() << "DFL_POOL_STEER=0";
  ThreadPool pool(2);
  auto masks = [&] {  // each thread's own mask
    std::vector<cpu_set_t> m(2);
    pool.run_on_all([&](int tid) { sched_getaffinity(0, sizeof(cpu_set_t), &m[size_t(tid)]); });
    return m;
  };
  masks();  // the worker is up
  auto only = [](const cpu_set_t& m) {
    EXPECT_EQ(CPU_COUNT(&m), 1);
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &m)) return c;
    return -1;
  };
  auto all_but = [&](int c) {
    cpu_set_t r = start;
    CPU_CLR(c, &r);
    return r;
  };
  pool.steer_caller(true, false);  // contended, the caller not preempted: it stays
  std::vector<cpu_set_t> m = masks();
  const int here = only(m[0]);
  ASSERT_TRUE(CPU_ISSET(here, &start));
  cpu_set_t want = all_but(here);
  EXPECT_TRUE(CPU_EQUAL(&m[1], &want)) << "the worker is kept off the caller's CPU";
  pool.steer_caller(true, true);  // the caller preempted there: the next CPU of the mask
  m = masks();
  int next = here;
  do next = (next + 1) % CPU_SETSIZE; while (!CPU_ISSET(next, &start));
  EXPECT_EQ(only(m[0]), next);
  want = all_but(next);
  EXPECT_TRUE(CPU_EQUAL(&m[1], &want));
  pool.steer_caller(false, false);  // no longer contended: the starting masks
  m = masks();
  EXPECT_TRUE(CPU_EQUAL(&m[0], &start));
  EXPECT_TRUE(CPU_EQUAL(&m[1], &start));
  {  // a pool that ends while its caller is pinned gives the mask back
    ThreadPool other(2);
    other.run_on_all([](int) {});
    other.steer_caller(true, false);
  }
  cpu_set_t after;
  ASSERT_EQ(sched_getaffinity(0, sizeof after, &after), 0);
  EXPECT_TRUE(CPU_EQUAL(&after, &start));
}

}  // namespace
}  // namespace dfl
