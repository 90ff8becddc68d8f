#include "core/threadpool.h"

#include <algorithm>

namespace dfl {

namespace {
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}
}  // namespace

int hardware_threads() { return std::max(1u, std::thread::hardware_concurrency()); }

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
  for (int t = 1; t < n_threads_; ++t) workers_.emplace_back([this, t] { worker_loop(t); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_seq_cst);
  generation_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::worker_loop(int tid) {
  uint32_t seen = 0;
  for (;;) {
    uint32_t g = generation_.load(std::memory_order_acquire);
    if (g == seen) {
      const int spin = spin_.load(std::memory_order_relaxed);
      for (int i = 0; i < spin && g == seen; ++i) {
        cpu_relax();
        g = generation_.load(std::memory_order_acquire);
      }
      while (g == seen) {
        // Dekker pairing with run_on_all: either it sees sleepers_ > 0 and notifies, or our
        // wait() sees the new generation and returns at once (both sides are seq_cst).
        sleepers_.fetch_add(1, std::memory_order_seq_cst);
        generation_.wait(seen, std::memory_order_seq_cst);
        sleepers_.fetch_sub(1, std::memory_order_relaxed);
        g = generation_.load(std::memory_order_acquire);
      }
    }
    seen = g;
    if (stop_.load(std::memory_order_relaxed)) return;
    (*job_)(tid);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::run_on_all(const std::function<void(int tid)>& fn) {
  if (n_threads_ == 1) {
    fn(0);
    return;
  }
  job_ = &fn;
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_seq_cst);  // publishes job_ and pending_
  if (sleepers_.load(std::memory_order_seq_cst) > 0) generation_.notify_all();
  fn(0);
  for (int i = 0; pending_.load(std::memory_order_acquire) != 0; ++i) {
    cpu_relax();
    if (i > (1 << 16)) std::this_thread::yield();  // a worker was descheduled (oversubscribed)
  }
}

void ThreadPool::parallel_for(int64_t n, const RangeFn& fn, int64_t grain) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t n_grains = (n + grain - 1) / grain;
  const int nt = static_cast<int>(std::min<int64_t>(n_threads_, n_grains));
  if (nt <= 1) {
    fn(0, n, 0);
    return;
  }
  const int64_t per = (n_grains + nt - 1) / nt;
  run_on_all([&](int tid) {
    const int64_t b = std::min(n, tid * per * grain);
    const int64_t e = std::min(n, (tid + 1) * per * grain);
    if (b < e) fn(b, e, tid);
  });
}

}  // namespace dfl
