// Persistent fork-join thread pool. Created once (per engine), reused by every op: no thread is
// created per op. parallel_for splits [0, n) into contiguous chunks, one per thread, and the
// calling thread does chunk 0 itself (it is thread 0; workers are 1..n_threads-1).
//
// Wake-up latency: a job is published by bumping an atomic generation counter; workers spin on
// it (with `pause`) for a while after each job — ops of a forward pass come back to back, so
// they usually catch the next job within a microsecond — and only then sleep on the counter
// (futex via std::atomic::wait). The caller spins until all workers have finished.
//
// Contract: fn(begin, end, tid) must not throw and must not call back into the same pool. One
// thread at a time submits jobs. Chunking depends only on (n, grain, n_threads), so a kernel
// whose per-element math doesn't depend on the chunk is bit-identical across runs.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
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

  // How long (in `pause` iterations) an idle worker spins before sleeping. 0 = sleep at once
  // (use when the machine is oversubscribed).
  void set_spin(int iterations) { spin_.store(iterations, std::memory_order_relaxed); }

 private:
  void worker_loop(int tid);

  int n_threads_;
  std::vector<std::thread> workers_;
  const std::function<void(int)>* job_ = nullptr;  // written before generation_ is bumped
  alignas(64) std::atomic<uint32_t> generation_{0};
  alignas(64) std::atomic<int> pending_{0};
  alignas(64) std::atomic<int> sleepers_{0};
  std::atomic<int> spin_{1 << 15};
  std::atomic<bool> stop_{false};
};

// Number of hardware threads, at least 1.
int hardware_threads();

}  // namespace dfl
