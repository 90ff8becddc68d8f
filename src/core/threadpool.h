// Persistent fork-join thread pool. Created once (per engine), reused by every op: no thread is
// created per op. parallel_for splits [0, n) into contiguous chunks, one per worker, and the
// calling thread does chunk 0 itself.
//
// Contract: fn(begin, end, tid) must not throw. Chunking depends only on (n, n_threads), so a
// kernel whose per-element math doesn't depend on the chunk is bit-identical across runs.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace dfl {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int n_threads() const { return n_threads_; }

  using RangeFn = std::function<void(int64_t begin, int64_t end, int tid)>;
  // Runs fn over [0, n) split into n_threads() contiguous chunks (aligned to `grain`).
  void parallel_for(int64_t n, const RangeFn& fn, int64_t grain = 1);
  // Runs fn(tid) once on each of the n_threads() threads.
  void run_on_all(const std::function<void(int tid)>& fn);

 private:
  void worker_loop(int tid);

  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  const std::function<void(int)>* job_ = nullptr;
  uint64_t generation_ = 0;
  std::atomic<int> pending_{0};
  bool stop_ = false;
};

// Number of hardware threads, at least 1.
int hardware_threads();

}  // namespace dfl
