#include "core/threadpool.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>

namespace dfl {

namespace {
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}
constexpr uint64_t kStaticBit = uint64_t(1) << 31;
inline uint32_t word_seq(uint64_t w) { return static_cast<uint32_t>(w >> 32); }
inline bool word_static(uint64_t w) { return (w & kStaticBit) != 0; }
inline uint32_t word_count(uint64_t w) { return static_cast<uint32_t>((w >> 16) & 0x7fff); }
inline uint32_t word_next(uint64_t w) { return static_cast<uint32_t>(w & 0xffff); }
// Lane word: [63:32] job sequence, [31:16] end (one past the lane's last chunk), [15:0] next.
inline uint32_t lane_end(uint64_t w) { return static_cast<uint32_t>((w >> 16) & 0xffff); }

// How long the pool's threads spin before they sleep, by whether another process competes for
// their cores. While the scheduler keeps preempting one of them (involuntary context switches,
// getrusage), every thread spins at most kContendedSpin: a spinning worker burns the share of
// its core its next chunk needs, and a caller spinning for a preempted worker's chunk keeps
// its own core from the scheduler, which a sleeping caller hands over (Emerald Rapids guest,
// Gemma-3-270M, a busy loop on one of two CPUs, 5 interleaved rounds each: 256 pauses for
// every wait against 32768, tg64 84 → 104 tok/s and pp16 404 → 441, but the quiet machine lost
// 6–9 %; this rule, tg64 73 → 88 and pp16 394 → 436 loaded, the quiet speed unchanged). Each
// thread checks its own count every kCheckEvery waits, at most every
// kCheckNs, and sets or clears its bit of the pool's mask: contended from kContendedRate
// preemptions a second over the window (there 25–36 per thread on the quiet machine, 150–180
// with the busy loop).
constexpr int kContendedSpin = 256;
constexpr uint32_t kCheckEvery = 64;
constexpr int64_t kCheckNs = 100'000'000;
constexpr double kContendedRate = 80;
struct SpinCheck {
  uint32_t waits = 0;
  int64_t checked_ns = 0;
  long switches = -1;  // involuntary context switches at the last check
};
thread_local SpinCheck t_spin;

long involuntary_switches() {
#ifdef RUSAGE_THREAD
  rusage ru;
  if (getrusage(RUSAGE_THREAD, &ru) == 0) return ru.ru_nivcsw;
#endif
  return -1;
}

// Whether this thread was preempted often in its last window (−1: not checked this time).
int preempted_lately() {
  SpinCheck& s = t_spin;
  if (++s.waits % kCheckEvery != 0) return -1;
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now().time_since_epoch()).count();
  if (now - s.checked_ns < kCheckNs) return -1;
  const long n = involuntary_switches();
  const bool hit = s.switches >= 0 && n >= 0 &&
                   double(n - s.switches) * 1e9 >= kContendedRate * double(now - s.checked_ns);
  s.switches = n;
  s.checked_ns = now;
  return hit ? 1 : 0;
}
}  // namespace

int hardware_threads() { return std::max(1u, std::thread::hardware_concurrency()); }

int64_t ThreadPool::chunk_count(int64_t n, int64_t grain, int n_threads) {
  if (n <= 0) return 0;
  grain = std::max<int64_t>(1, grain);
  const int64_t n_grains = (n + grain - 1) / grain;
  // 16 chunks: a descheduled thread holds up at most the rest of one chunk (1/16 of the op);
  // a 3072-row matmul at M = 1 (~50 µs on 2 threads) still pays only ~20 claims.
  const int64_t target = std::max<int64_t>(kChunks, int64_t(4) * n_threads);
  const int64_t per = (n_grains + std::min<int64_t>(target, kMaxChunks) - 1) /
                      std::min<int64_t>(target, kMaxChunks);
  return (n_grains + per - 1) / per;
}

int64_t ThreadPool::chunk_len(int64_t n, int64_t grain, int n_threads) {
  const int64_t c = chunk_count(n, grain, n_threads);
  if (c == 0) return 0;
  grain = std::max<int64_t>(1, grain);
  const int64_t n_grains = (n + grain - 1) / grain;
  return (n_grains + c - 1) / c * grain;
}

ThreadPool::ThreadPool(int n_threads)
    : n_threads_(std::max(1, std::min(n_threads, 1 << 12))), lanes_(new Lane[size_t(n_threads_)]) {
  if (const char* e = std::getenv("DFL_POOL_SPIN")) spin_.store(std::atoi(e));
  for (int t = 1; t < n_threads_; ++t) workers_.emplace_back([this, t] { worker_loop(t); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_seq_cst);
  generation_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::worker_loop(int tid) {
  uint32_t seen = 0, last_static = 0;
  for (;;) {
    uint32_t g = generation_.load(std::memory_order_acquire);
    if (g == seen) {
      const int spin = spin_limit(tid);
      for (int i = 0; i < spin && g == seen; ++i) {
        cpu_relax();
        g = generation_.load(std::memory_order_acquire);
      }
      while (g == seen) {
        // Dekker pairing with publish(): either it sees sleepers_ > 0 and notifies, or our
        // wait() sees the new generation and returns at once (both sides are seq_cst).
        sleepers_.fetch_add(1, std::memory_order_seq_cst);
        generation_.wait(seen, std::memory_order_seq_cst);
        sleepers_.fetch_sub(1, std::memory_order_relaxed);
        g = generation_.load(std::memory_order_acquire);
      }
    }
    seen = g;
    if (stop_.load(std::memory_order_relaxed)) return;
    work(tid, last_static);
  }
}

// The job claim_ names (at least as new as the generation this worker woke for): a static one
// runs here once; a dynamic one is claimed through the lanes (run_lanes).
void ThreadPool::work(int tid, uint32_t& last_static) {
  const uint64_t w = claim_.load(std::memory_order_acquire);
  if (word_static(w)) {
    // A static job: run once per job, on workers 1..count (the caller is thread 0).
    if (word_seq(w) == last_static || static_cast<uint32_t>(tid) > word_count(w)) return;
    last_static = word_seq(w);
    (*all_fn_)(tid);
    finish(word_count(w), 1);
    return;
  }
  run_lanes(tid);
}

// Claims chunks of the current dynamic job, own lane first, then the others' (stealing), until
// every lane is dry. A lane word may still hold a finished job (every claim then fails) or a
// newer one than the job this thread woke for (its chunks are as valid to take): the descriptor
// is read only after a successful claim, when the job cannot finish without us, and once one
// claim succeeded every later one is of the same job (it cannot end before we report).
void ThreadPool::run_lanes(int tid) {
  uint32_t ran = 0;  // chunks run and not yet reported to done_ (one atomic add per thread and job)
  for (int i = 0; i < n_threads_; ++i) {
    std::atomic<uint64_t>& lane = lanes_[size_t((tid + i) % n_threads_)].word;
    for (;;) {
      const uint64_t lw = lane.fetch_add(1, std::memory_order_acq_rel);
      if (word_next(lw) >= lane_end(lw)) break;
      run_chunk(word_next(lw), tid);
      ++ran;
    }
  }
  if (ran) finish(static_cast<uint32_t>(count_), ran);
}

void ThreadPool::run_chunk(uint32_t chunk, int tid) {
  const int64_t b = static_cast<int64_t>(chunk) * len_;
  const int64_t e = std::min(n_, b + len_);
  (*range_fn_)(b, e, tid);
}

void ThreadPool::finish(uint32_t count, uint32_t chunks) {
  const uint32_t d = done_.fetch_add(chunks, std::memory_order_seq_cst) + chunks;
  // Dekker pairing with wait_done(): it sets caller_sleeping_ then re-reads done_.
  if (d == count && caller_sleeping_.load(std::memory_order_seq_cst)) done_.notify_all();
}

void ThreadPool::publish(bool is_static, int64_t count) {
  ++seq_;
  done_.store(0, std::memory_order_relaxed);
  if (!is_static) {
    // Lane l: chunks [l·count/T, (l+1)·count/T), contiguous. Release: a thread whose claim
    // succeeds on this word also sees the descriptor and done_ (it may skip claim_).
    count_ = count;
    for (int l = 0; l < n_threads_; ++l) {
      const uint64_t b = uint64_t(count) * uint64_t(l) / uint64_t(n_threads_);
      const uint64_t e = uint64_t(count) * uint64_t(l + 1) / uint64_t(n_threads_);
      lanes_[size_t(l)].word.store((uint64_t(seq_) << 32) | (e << 16) | b, std::memory_order_release);
    }
  }
  const uint64_t w = (static_cast<uint64_t>(seq_) << 32) |
                     (is_static ? kStaticBit | (static_cast<uint64_t>(count) << 16) : 0);
  claim_.store(w, std::memory_order_release);           // publishes the descriptor and done_
  generation_.fetch_add(1, std::memory_order_seq_cst);  // wakes the workers
  if (sleepers_.load(std::memory_order_seq_cst) > 0) generation_.notify_all();
}

int ThreadPool::spin_limit(int tid) {
  const int p = preempted_lately();
  const uint64_t bit = uint64_t(1) << (tid % 64);
  if (p == 1) contended_.fetch_or(bit, std::memory_order_relaxed);
  if (p == 0 && (contended_.load(std::memory_order_relaxed) & bit)) contended_.fetch_and(~bit, std::memory_order_relaxed);
  const int spin = spin_.load(std::memory_order_relaxed);
  return contended_.load(std::memory_order_relaxed) ? std::min(spin, kContendedSpin) : spin;
}

void ThreadPool::wait_done(uint32_t target) {
  const int spin = spin_limit(0);
  for (int i = 0; i < spin; ++i) {
    if (done_.load(std::memory_order_acquire) == target) return;
    cpu_relax();
  }
  caller_sleeping_.store(1, std::memory_order_seq_cst);
  for (uint32_t d; (d = done_.load(std::memory_order_seq_cst)) != target;)
    done_.wait(d, std::memory_order_seq_cst);
  caller_sleeping_.store(0, std::memory_order_relaxed);
}

void ThreadPool::run_on_all(const std::function<void(int tid)>& fn) {
  if (n_threads_ == 1) {
    fn(0);
    return;
  }
  all_fn_ = &fn;
  publish(true, n_threads_ - 1);
  fn(0);
  wait_done(static_cast<uint32_t>(n_threads_ - 1));
}

void ThreadPool::parallel_for(int64_t n, const RangeFn& fn, int64_t grain) {
  if (n <= 0) return;
  const int64_t count = chunk_count(n, grain, n_threads_);
  if (n_threads_ == 1 || count <= 1) {
    fn(0, n, 0);
    return;
  }
  range_fn_ = &fn;
  n_ = n;
  len_ = chunk_len(n, grain, n_threads_);
  publish(false, count);
  run_lanes(0);
  wait_done(static_cast<uint32_t>(count));
}

}  // namespace dfl
