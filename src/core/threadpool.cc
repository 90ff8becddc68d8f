#include "core/threadpool.h"

#include <linux/membarrier.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csetjmp>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>

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
// Lane word: [63:32] job sequence, [31] redoable, [30:16] end (one past the lane's last chunk),
// [15:0] next.
inline uint32_t lane_end(uint64_t w) { return static_cast<uint32_t>((w >> 16) & 0x7fff); }
constexpr uint64_t kRedoLane = uint64_t(1) << 31;
constexpr uint64_t kRedoJob = 1;  // in claim_
inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// ---- Redoable jobs: revoking a worker that sits on a chunk (threadpool.h) -------------------
// A worker's slot word: [63:2] job sequence, [1:0] one of these.
constexpr uint64_t kRunning = 1, kReported = 2, kRevoked = 3;
inline uint64_t slot_word(uint32_t seq, uint64_t st) { return (uint64_t(seq) << 2) | st; }
inline uint32_t slot_seq(uint64_t w) { return static_cast<uint32_t>(w >> 2); }
constexpr int kMaxRedoChunks = 64;  // a job's finished chunks are one 64-bit mask per thread
// How long the caller waits for a worker's last chunk before it revokes the worker: twice its
// own chunks' mean time, at least this (a running worker finishes well within it).
constexpr int64_t kRevokeMinNs = 10'000;
// A redoable job of many grains is cut into more than the usual 16 chunks, each of at least this
// many grains, up to kMaxRedoChunks (chunk_count).
constexpr int64_t kRedoChunkGrains = 256;

// What the signal handler needs to know about its thread. The handler runs on the revoked
// worker: if that worker is inside a chunk of the job whose claim was revoked, it jumps back to
// run_redoable, abandoning the chunk (after a NoAbandon scope, if it is in one).
struct RedoThread {
  volatile sig_atomic_t in_chunk = 0;
  volatile sig_atomic_t no_abandon = 0;  // NoAbandon depth
  volatile sig_atomic_t pending = 0;     // revoked inside a NoAbandon scope
  const std::atomic<uint64_t>* slot = nullptr;
  uint64_t revoked = 0;  // the slot word that says this thread's current claim is revoked
  sigjmp_buf jump;
};
thread_local RedoThread t_redo __attribute__((tls_model("initial-exec")));

inline bool revoked_here(const RedoThread& r) {
  return r.in_chunk && r.slot && r.slot->load(std::memory_order_seq_cst) == r.revoked;
}

void on_revoke_signal(int) {
  RedoThread& r = t_redo;
  if (!revoked_here(r)) return;  // between chunks, or a claim of another job: nothing to stop
  if (r.no_abandon) {
    r.pending = 1;
    return;
  }
  r.in_chunk = 0;
  siglongjmp(r.jump, 1);
}

// A real-time signal nothing else in this process uses (checked when it is installed).
int revoke_signal() { return SIGRTMIN + 7; }

bool set_up_redo() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return false;  // the sanitizers' signal and longjmp handling is not what the protocol needs
#else
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
  return false;
#endif
#endif
  if (const char* e = std::getenv("DFL_POOL_REDO"); e && std::atoi(e) == 0) return false;
  // PRIVATE_EXPEDITED: Linux 4.14+; a seccomp filter may refuse it too.
  if (syscall(__NR_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) != 0) return false;
  struct sigaction old {};
  if (sigaction(revoke_signal(), nullptr, &old) != 0) return false;
  if ((old.sa_flags & SA_SIGINFO) || (old.sa_handler != SIG_DFL && old.sa_handler != on_revoke_signal))
    return false;  // the embedding program uses this signal
  struct sigaction sa {};
  sa.sa_handler = on_revoke_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_NODEFER | SA_RESTART;  // NODEFER: the jump out leaves the signal unblocked
  return sigaction(revoke_signal(), &sa, nullptr) == 0;
#endif
}

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
// with the busy loop; the window is 50 ms so that the caller's steering, one step a check,
// settles within a few tenths of a second; a quiet window misread as contended costs little:
// a revocation only where a worker is late anyway, the caller pinned where it already runs).
// The baseline is taken at a thread's first wait. Where a late worker can be revoked (redoable jobs: the kernels that
// carry a forward pass), the cap is off: a worker that keeps spinning keeps its share of the
// shared core and picks up the next op at once, and the caller no longer waits for its chunk
// (same machine and load, 4 alternating rounds each, Gemma tg64 57–79 tok/s before revocation,
// 62–80 with it and the cap, 76–85 with it and no cap; with the worker on the busy core, 92–95
// with the cap against 100–108 without).
constexpr int kContendedSpin = 256;
constexpr uint32_t kCheckEvery = 64;
constexpr int64_t kCheckNs = 50'000'000;
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
  const bool first = s.switches < 0;  // the baseline is taken at the thread's first wait
  if (!first && ++s.waits % kCheckEvery != 0) return -1;
  const int64_t now = now_ns();
  if (!first && now - s.checked_ns < kCheckNs) return -1;
  const long n = involuntary_switches();
  const bool hit = !first && n >= 0 &&
                   double(n - s.switches) * 1e9 >= kContendedRate * double(now - s.checked_ns);
  s.switches = n >= 0 ? n : 0;  // (−1: not counted here; then never contended)
  s.checked_ns = now;
  return hit ? 1 : 0;
}
}  // namespace

int hardware_threads() { return std::max(1u, std::thread::hardware_concurrency()); }

namespace {
// The starting mask back on thread `tid` of this process — if it still is one: a caller that
// has exited may have left its id to another process's thread (checked through /proc/self/task:
// an id recycled inside this process only gets this process's mask).
void restore_mask(int tid, const cpu_set_t& all) {
  char path[48];
  std::snprintf(path, sizeof path, "/proc/self/task/%d", tid);
  if (access(path, F_OK) == 0) sched_setaffinity(tid, sizeof all, &all);
}
}  // namespace

bool ThreadPool::redo_supported() {
  static const bool ok = set_up_redo();
  return ok;
}

bool ThreadPool::in_abandonable_chunk() { return t_redo.in_chunk && !t_redo.no_abandon; }

ThreadPool::NoAbandon::NoAbandon() { t_redo.no_abandon = t_redo.no_abandon + 1; }

ThreadPool::NoAbandon::~NoAbandon() {
  RedoThread& r = t_redo;
  r.no_abandon = r.no_abandon - 1;
  if (r.no_abandon == 0 && r.pending) {
    r.pending = 0;
    if (revoked_here(r)) {
      r.in_chunk = 0;
      siglongjmp(r.jump, 1);
    }
  }
}

int64_t ThreadPool::chunk_count(int64_t n, int64_t grain, int n_threads, bool redoable) {
  if (n <= 0) return 0;
  grain = std::max<int64_t>(1, grain);
  const int64_t n_grains = (n + grain - 1) / grain;
  // 16 chunks: a descheduled thread holds up at most the rest of one chunk (1/16 of the op);
  // a 3072-row matmul at M = 1 (~50 µs on 2 threads) still pays only ~20 claims.
  int64_t target = std::max<int64_t>(kChunks, int64_t(4) * n_threads);
  // A redoable job of many grains gets up to 64 chunks of at least kRedoChunkGrains: the
  // caller's patience with a preempted worker is two chunks' time, and the chunk it redoes is
  // one (Gemma-3-270M's greedy head plane, 16,384 tiles: 260 µs chunks at 16, 65 µs at 64).
  if (redoable) target = std::max(target, std::min<int64_t>(kMaxRedoChunks, n_grains / kRedoChunkGrains));
  const int64_t per = (n_grains + std::min<int64_t>(target, kMaxChunks) - 1) /
                      std::min<int64_t>(target, kMaxChunks);
  return (n_grains + per - 1) / per;
}

int64_t ThreadPool::chunk_len(int64_t n, int64_t grain, int n_threads, bool redoable) {
  const int64_t c = chunk_count(n, grain, n_threads, redoable);
  if (c == 0) return 0;
  grain = std::max<int64_t>(1, grain);
  const int64_t n_grains = (n + grain - 1) / grain;
  return (n_grains + c - 1) / c * grain;
}

ThreadPool::ThreadPool(int n_threads)
    : n_threads_(std::max(1, std::min(n_threads, 1 << 12))),
      lanes_(new Lane[size_t(n_threads_)]),
      slots_(new Slot[size_t(n_threads_)]) {
  if (const char* e = std::getenv("DFL_POOL_SPIN")) spin_.store(std::atoi(e));
  if (n_threads_ > 1) redo_supported();  // installs the handler before any worker can be revoked
  cpu_set_t cpus;
  if (sched_getaffinity(0, sizeof cpus, &cpus) == 0) {
    cpus_.resize(sizeof cpus);
    std::memcpy(cpus_.data(), &cpus, sizeof cpus);
  }
  for (int t = 1; t < n_threads_; ++t) workers_.emplace_back([this, t] { worker_loop(t); });
}

ThreadPool::~ThreadPool() {
  if (steered_caller_ != 0) {  // the pinned caller gets its starting mask back
    cpu_set_t all;
    std::memcpy(&all, cpus_.data(), sizeof all);
    restore_mask(steered_caller_, all);
  }
  stop_.store(true, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_seq_cst);
  generation_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::worker_loop(int tid) {
  uint32_t seen = 0, last_static = 0;
  slots_[size_t(tid)].os_tid.store(static_cast<int>(syscall(SYS_gettid)), std::memory_order_relaxed);
  if (redo_supported()) {  // the creating thread may block signals; this one must take ours
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, revoke_signal());
    pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
  }
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
  if (w & kRedoJob) return run_redoable(tid, word_seq(w));
  run_lanes(tid);
}

// Claims chunks of the current dynamic job, own lane first, then the others' (stealing), until
// every lane is dry. A lane word may still hold a finished job (every claim then fails) or a
// newer one than the job this thread woke for (its chunks are as valid to take): the descriptor
// is read only after a successful claim, when the job cannot finish without us, and once one
// claim succeeded every later one is of the same job (it cannot end before we report).
void ThreadPool::run_lanes(int tid) {
  uint32_t ran = 0;  // chunks run and not yet reported to done_ (one atomic add per thread and job)
  bool redo_job = false;
  for (int i = 0; i < n_threads_ && !redo_job; ++i) {
    std::atomic<uint64_t>& lane = lanes_[size_t((tid + i) % n_threads_)].word;
    for (;;) {
      // A newer, redoable job, which this thread has not registered for (run_redoable), is
      // left alone: looked at first, and a chunk claimed in a race with its publication is left
      // to its caller, which finds it unfinished. (Not after a claim of our own job, which
      // cannot end before we report.)
      if (ran == 0 && (lane.load(std::memory_order_relaxed) & kRedoLane)) {
        redo_job = true;
        break;
      }
      const uint64_t lw = lane.fetch_add(1, std::memory_order_acq_rel);
      if (word_next(lw) >= lane_end(lw)) break;
      if ((redo_job = (lw & kRedoLane) != 0)) break;
      run_chunk(word_next(lw), tid);
      ++ran;
    }
  }
  if (ran) finish(static_cast<uint32_t>(count_), ran);
}

// A worker's part in redoable job `seq`: register as running, claim chunks as run_lanes does,
// note each finished chunk in the slot, report. A revoked worker stops: at its next check, or
// in the signal handler, which jumps back here (sigsetjmp) out of the chunk.
void ThreadPool::run_redoable(int tid, uint32_t seq) {
  Slot& s = slots_[size_t(tid)];
  s.done.store(0, std::memory_order_relaxed);
  // Before any claim (seq_cst, as the caller's claims and slot reads): a caller that drained
  // the lanes and sees no running slot knows no thread holds a chunk.
  s.state.store(slot_word(seq, kRunning), std::memory_order_seq_cst);
  RedoThread& r = t_redo;
  r.slot = &s.state;
  r.revoked = slot_word(seq, kRevoked);
  if (sigsetjmp(r.jump, 0) != 0) return;  // revoked inside a chunk
  uint64_t done = 0;
  bool ended = false;  // a lane of a newer job: ours is over
  for (int i = 0; i < n_threads_ && !ended; ++i) {
    std::atomic<uint64_t>& lane = lanes_[size_t((tid + i) % n_threads_)].word;
    uint64_t lw = lane.load(std::memory_order_acquire);
    for (;;) {
      // Claims by compare-and-swap on our job's word only: a newer job's chunks (ours ended
      // without us: revoked between chunks, or every chunk done) are left untouched.
      if (word_seq(lw) != seq) {
        ended = true;
        break;
      }
      if (word_next(lw) >= lane_end(lw)) break;
      if (!lane.compare_exchange_weak(lw, lw + 1, std::memory_order_acq_rel, std::memory_order_acquire)) continue;
      r.in_chunk = 1;
      std::atomic_signal_fence(std::memory_order_seq_cst);
      if (s.state.load(std::memory_order_seq_cst) != slot_word(seq, kRunning)) {
        r.in_chunk = 0;  // revoked before the chunk began (the handler saw in_chunk == 0)
        return;
      }
      run_chunk(word_next(lw), tid);
      std::atomic_signal_fence(std::memory_order_seq_cst);
      r.in_chunk = 0;
      done |= uint64_t(1) << word_next(lw);
      s.done.store(done, std::memory_order_release);
      lw = lane.load(std::memory_order_acquire);
    }
  }
  uint64_t want = slot_word(seq, kRunning);
  if (s.state.compare_exchange_strong(want, slot_word(seq, kReported), std::memory_order_seq_cst)) {
    bell_.fetch_add(1, std::memory_order_seq_cst);
    // Dekker pairing with wait_redoable(): it sets caller_sleeping_ then re-reads bell_.
    if (caller_sleeping_.load(std::memory_order_seq_cst)) bell_.notify_all();
  }
}

// The caller's wait in redoable job `seq` (its own chunks `mine`, all of them `all`): until no
// worker is running it or every chunk is finished. While the pool is being preempted (or
// revoke_when_quiet), a worker still running after `patience` is revoked: its claim marked,
// the signal sent, and membarrier waited on — after which no revoked worker executes another
// instruction of a chunk. Returns the finished chunks; the caller runs the others.
uint64_t ThreadPool::wait_redoable(uint32_t seq, uint64_t all, uint64_t mine, int64_t chunk_ns) {
  const int spin = spin_limit(0);
  const bool may_revoke = revoke_when_quiet_.load(std::memory_order_relaxed) ||
                          contended_.load(std::memory_order_relaxed) != 0;
  const int64_t patience =
      revoke_at_once_.load(std::memory_order_relaxed) ? 0 : std::max<int64_t>(kRevokeMinNs, 2 * chunk_ns);
  const int64_t since = may_revoke ? now_ns() : 0;
  int spun = 0;
  for (;;) {
    const uint32_t bell = bell_.load(std::memory_order_seq_cst);
    uint64_t done = mine;
    bool running = false;
    for (int t = 1; t < n_threads_; ++t) {
      const uint64_t st = slots_[size_t(t)].state.load(std::memory_order_seq_cst);
      if (slot_seq(st) != seq) continue;  // never registered for this job: holds no chunk of it
      running |= (st & 3) == kRunning;
      done |= slots_[size_t(t)].done.load(std::memory_order_acquire);
    }
    // Every chunk finished: a worker still running holds none (each chunk is claimed once).
    if (!running || (done & all) == all) return done;
    // Wait for a report (the bell; the slots are not re-read meanwhile: a worker writes its
    // slot at every chunk) — or, when revoking, for the patience to run out.
    bool rang = false;
    for (; spun < spin || may_revoke; ++spun) {
      if ((rang = bell_.load(std::memory_order_acquire) != bell)) break;
      if (may_revoke && now_ns() - since >= patience) break;
      cpu_relax();
    }
    if (rang) continue;
    if (may_revoke) {
      int sent = 0;
      for (int t = 1; t < n_threads_; ++t) {
        Slot& s = slots_[size_t(t)];
        uint64_t want = slot_word(seq, kRunning);
        if (!s.state.compare_exchange_strong(want, slot_word(seq, kRevoked), std::memory_order_seq_cst)) continue;
        // (os_tid was stored before the worker registered, which we saw)
        if (syscall(SYS_tgkill, static_cast<int>(getpid()), s.os_tid.load(std::memory_order_relaxed),
                    revoke_signal()) != 0) {
          std::fprintf(stderr, "dflash: thread pool: cannot signal worker %d\n", t);
          std::abort();  // our own live thread: cannot happen; going on could corrupt outputs
        }
        ++sent;
      }
      if (sent) {
        if (syscall(__NR_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) != 0) {
          std::fprintf(stderr, "dflash: thread pool: membarrier failed after registration\n");
          std::abort();
        }
        revocations_.fetch_add(uint64_t(sent), std::memory_order_relaxed);
      }
      continue;  // re-read: the revoked slots no longer count as running
    }
    caller_sleeping_.store(1, std::memory_order_seq_cst);
    if (bell_.load(std::memory_order_seq_cst) == bell) bell_.wait(bell, std::memory_order_seq_cst);
    caller_sleeping_.store(0, std::memory_order_relaxed);
  }
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

void ThreadPool::publish(bool is_static, int64_t count, bool redoable) {
  ++seq_;
  done_.store(0, std::memory_order_relaxed);
  if (!is_static) {
    // Lane l: chunks [l·count/T, (l+1)·count/T), contiguous. Release: a thread whose claim
    // succeeds on this word also sees the descriptor and done_ (it may skip claim_).
    count_ = count;
    for (int l = 0; l < n_threads_; ++l) {
      const uint64_t b = uint64_t(count) * uint64_t(l) / uint64_t(n_threads_);
      const uint64_t e = uint64_t(count) * uint64_t(l + 1) / uint64_t(n_threads_);
      lanes_[size_t(l)].word.store((uint64_t(seq_) << 32) | (redoable ? kRedoLane : 0) | (e << 16) | b,
                                   std::memory_order_release);
    }
  }
  const uint64_t w = (static_cast<uint64_t>(seq_) << 32) |
                     (is_static ? kStaticBit | (static_cast<uint64_t>(count) << 16) : redoable ? kRedoJob : 0);
  claim_.store(w, std::memory_order_release);           // publishes the descriptor and done_
  generation_.fetch_add(1, std::memory_order_seq_cst);  // wakes the workers
  if (sleepers_.load(std::memory_order_seq_cst) > 0) generation_.notify_all();
}

// The caller carries the forward pass: while it shares a core with another process, the
// workers idle whenever it is descheduled, and revoking cannot help. So while the pool is being
// preempted, at each of the caller's checks (about every 50 ms):
//   - the caller not preempted: it stays where it is (pinned to its CPU) and the workers keep
//     off that CPU (pinned to the others), so the scheduler moves neither one of ours nor the
//     other process onto it;
//   - the caller preempted: it moves to the next CPU of the mask (round robin) and the workers
//     keep off that one, until a check finds it in a quiet place;
//   - the pool no longer preempted: the threads get the mask they started with back.
// (Emerald Rapids guest, Gemma-3-270M tg256 with a busy loop pinned to one of the two CPUs,
// 3 alternating rounds: 71–80 tok/s unsteered, 91–98 steered.) DFL_POOL_STEER=0 turns it off.
void ThreadPool::steer_caller(bool contended, bool preempted) {
  if (!contended && steered_caller_ == 0) return;
  static const bool off = [] {
    const char* e = std::getenv("DFL_POOL_STEER");
    return e && std::atoi(e) == 0;
  }();
  if (off || cpus_.size() != sizeof(cpu_set_t)) return;
  cpu_set_t all;
  std::memcpy(&all, cpus_.data(), sizeof all);
  if (CPU_COUNT(&all) < 2) return;
  const int caller = static_cast<int>(syscall(SYS_gettid));
  const int mine = sched_getcpu();
  auto workers = [&](const cpu_set_t& m) {  // (a worker not running yet keeps the mask it inherits)
    for (int t = 1; t < n_threads_; ++t)
      if (const int id = slots_[size_t(t)].os_tid.load(std::memory_order_relaxed); id != 0)
        sched_setaffinity(id, sizeof m, &m);
  };
  if (steered_caller_ != 0 && (!contended || steered_caller_ != caller)) {
    restore_mask(steered_caller_, all);  // (another thread may submit now)
    workers(all);
    steered_caller_ = 0;
    anchored_cpu_ = -1;
  }
  if (!contended || mine < 0 || !CPU_ISSET(mine, &all)) return;
  if (!preempted && anchored_cpu_ == mine) return;  // in place already
  int cpu = mine;  // not preempted: stay; preempted: the next CPU of the mask
  if (preempted) do cpu = (cpu + 1) % CPU_SETSIZE; while (!CPU_ISSET(cpu, &all));
  cpu_set_t one, rest = all;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  CPU_CLR(cpu, &rest);
  if (sched_setaffinity(0, sizeof one, &one) != 0) return;
  workers(rest);
  steered_caller_ = caller;
  anchored_cpu_ = cpu;
}

int ThreadPool::spin_limit(int tid) {
  const int p = preempted_lately();
  const uint64_t bit = uint64_t(1) << (tid % 64);
  if (p == 1) contended_.fetch_or(bit, std::memory_order_relaxed);
  if (p == 0 && (contended_.load(std::memory_order_relaxed) & bit)) contended_.fetch_and(~bit, std::memory_order_relaxed);
  if (p != -1 && tid == 0) steer_caller(contended_.load(std::memory_order_relaxed) != 0, p == 1);
  const int spin = spin_.load(std::memory_order_relaxed);
  const bool cap = !redo_supported() && contended_.load(std::memory_order_relaxed) != 0;
  return cap ? std::min(spin, kContendedSpin) : spin;
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

namespace dfl {

void ThreadPool::parallel_for_redoable(int64_t n, const RangeFn& fn, int64_t grain) {
  if (n <= 0) return;
  const int64_t count = chunk_count(n, grain, n_threads_, true);
  if (n_threads_ == 1 || count <= 1 || count > kMaxRedoChunks || !redo_supported()) {
    parallel_for(n, fn, grain);
    return;
  }
  range_fn_ = &fn;
  n_ = n;
  len_ = chunk_len(n, grain, n_threads_, true);
  publish(false, count, true);
  const uint32_t seq = seq_;
  // The caller's own claims: lane 0, then the others' (our job: every claim is of it).
  const int64_t t0 = now_ns();
  uint64_t mine = 0;
  int64_t ran = 0;
  for (int i = 0; i < n_threads_; ++i) {
    std::atomic<uint64_t>& lane = lanes_[size_t(i)].word;
    for (;;) {
      const uint64_t lw = lane.fetch_add(1, std::memory_order_acq_rel);
      if (word_next(lw) >= lane_end(lw)) break;
      run_chunk(word_next(lw), 0);
      mine |= uint64_t(1) << word_next(lw);
      ++ran;
    }
  }
  const int64_t chunk_ns = ran ? (now_ns() - t0) / ran : 0;
  const uint64_t all = count == 64 ? ~uint64_t(0) : (uint64_t(1) << count) - 1;
  const uint64_t done = wait_redoable(seq, all, mine, chunk_ns);
  for (uint64_t left = all & ~done; left; left &= left - 1) run_chunk(static_cast<uint32_t>(__builtin_ctzll(left)), 0);
}

}  // namespace dfl
