#include "core/threadpool.h"

#include <algorithm>

namespace dfl {

int hardware_threads() { return std::max(1u, std::thread::hardware_concurrency()); }

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
  for (int t = 1; t < n_threads_; ++t) workers_.emplace_back([this, t] { worker_loop(t); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
    ++generation_;
  }
  cv_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::worker_loop(int tid) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int)>* job = nullptr;
    // Spin briefly before sleeping: ops come back to back during a forward pass.
    for (int spin = 0; spin < 20000; ++spin) {
      if (__atomic_load_n(&generation_, __ATOMIC_ACQUIRE) != seen) break;
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
    }
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return generation_ != seen; });
      seen = generation_;
      if (stop_) return;
      job = job_;
    }
    (*job)(tid);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::run_on_all(const std::function<void(int tid)>& fn) {
  if (n_threads_ == 1) {
    fn(0);
    return;
  }
  pending_.store(n_threads_ - 1, std::memory_order_release);
  {
    std::lock_guard<std::mutex> lk(mu_);
    job_ = &fn;
    __atomic_add_fetch(&generation_, 1, __ATOMIC_RELEASE);
  }
  cv_.notify_all();
  fn(0);
  while (pending_.load(std::memory_order_acquire) != 0) {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
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
