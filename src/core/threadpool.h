// Persistent fork-join thread pool. Created once (per engine), reused by every op: no thread is
// created per op and no job allocates. The calling thread takes part (it is thread 0; workers are
// 1..n_threads-1).
//
// parallel_for splits [0, n) into chunk_count(n, grain, n_threads) contiguous, grain-aligned
// chunks — more chunks than threads, fixed by (n, grain) alone for pools of up to 4 threads,
// never by timing — and the threads CLAIM them one at a time. Each thread has a lane of
// consecutive chunks (thread t: chunks [t·count/T, (t+1)·count/T)) with its own claim counter on
// its own cache line; when its lane is dry it claims from the others' (stealing). So a thread
// streams one contiguous range and its claims touch a line no other core writes until someone
// steals (one shared counter cost ~200 ns a claim on a 2-core Xeon: docs/BENCHMARKS.md). A
// thread that another process has descheduled just claims fewer chunks: the op does not wait
// for it unless it is in the middle of a chunk. fn(begin, end, tid) gets the claiming thread's
// tid, so `tid` still indexes per-thread scratch (a thread runs one chunk at a time). A kernel whose
// per-element math doesn't depend on the chunk or the thread is bit-identical across runs and
// thread counts (src/kernels/ops.h).
//
// run_on_all runs fn(tid) exactly once on each thread (static: for per-thread streams, e.g. the
// memory-bandwidth probe); it does wait for every thread. Kernels that deal tasks round-robin
// should use parallel_for over the task index instead (dynamic).
//
// Waiting, on both sides: bounded spin (`pause`) then futex sleep (std::atomic::wait). Idle
// workers spin set_spin() iterations after each job (ops of a forward pass come back to back);
// the caller spins at most as long for the last chunks, then sleeps until the last one is done —
// it does not keep a core busy that a descheduled worker needs. While the scheduler keeps
// preempting one of the pool's threads (another process on its core: involuntary context
// switches, measured per thread about every 50 ms), every thread spins only briefly.
//
// Redoable jobs (parallel_for_redoable): a worker the scheduler deschedules inside a chunk holds
// the whole op for the rest of its time slice (a few ms) — the loss under load. For an fn whose
// chunks can be abandoned and run again, the caller instead REVOKES a worker that sits on a
// chunk while the pool is being preempted: it marks the worker's claim revoked, sends the worker
// a signal and waits on membarrier(PRIVATE_EXPEDITED), after which the worker runs no further
// instruction of the chunk (the signal handler, which runs first, jumps out of it); then the
// caller runs every chunk nobody finished. Which thread runs a chunk never changes its bits.
// The signal is SIGRTMIN + 7 (left alone if the program has a handler for it; under gdb,
// `handle SIG41 nostop noprint`); DFL_POOL_REDO=0 turns revocation off.
//
// Revoking cannot help when the caller itself shares a core: the workers then idle whenever it
// is descheduled. While the pool is being preempted, the caller's checks steer it: pinned where
// it is not preempted, moved on where it is, the workers kept off its CPU; the starting CPU
// masks come back once the preemption stops (DFL_POOL_STEER=0 turns this off).
//
// Contract: fn must not throw and must not call back into the same pool. One thread at a time
// submits jobs.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
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
  // Runs fn over [0, n) in chunk_count(n, grain, n_threads()) grain-aligned chunks, claimed
  // dynamically. With one thread: fn(0, n, 0).
  void parallel_for(int64_t n, const RangeFn& fn, int64_t grain = 1);
  // parallel_for for an fn whose chunks may be abandoned midway and run again (header comment).
  // Beyond parallel_for's contract, fn must
  //   - leave a chunk's outputs, when run again on any thread after a partial run, as one whole
  //     run does: plain stores of values that depend on the inputs only (no +=, no appends, no
  //     counters shared between chunks);
  //   - tolerate being stopped at any instruction for good: no locks, no allocation outside a
  //     NoAbandon scope (nor a first touch of a thread_local with a destructor: that registers
  //     it with calloc), no per-thread state a later chunk trusts without rewriting it.
  // The same as parallel_for where revocation is unavailable (redo_supported()) or the job has
  // more than 64 chunks.
  void parallel_for_redoable(int64_t n, const RangeFn& fn, int64_t grain = 1);
  // A scope inside a redoable chunk that a revoked worker finishes before it stops: e.g.
  // growing a thread_local buffer. It may run on after the job has ended, so it must use only
  // values loaded before it (the job's closure and buffers may be gone) and write nothing but
  // the thread's own state.
  class NoAbandon {
   public:
    NoAbandon();
    ~NoAbandon();
    NoAbandon(const NoAbandon&) = delete;
    NoAbandon& operator=(const NoAbandon&) = delete;
  };
  // Whether the calling thread is inside a redoable chunk where it may be stopped for good (not
  // in a NoAbandon scope): there it must not allocate or lock (tests check every allocation).
  static bool in_abandonable_chunk();
  // Whether this process can revoke: the signal handler is installed and membarrier works, and
  // neither a sanitizer nor DFL_POOL_REDO=0 turned it off.
  static bool redo_supported();
  // Revoke a late worker of a redoable job even when no thread is being preempted (tests);
  // `at_once`: without waiting for it at all — every worker still inside a chunk when the
  // caller has run out of chunks is revoked there (tests of the kernels' redo safety).
  void set_revoke_when_quiet(bool on, bool at_once = false) {
    revoke_when_quiet_.store(on, std::memory_order_relaxed);
    revoke_at_once_.store(on && at_once, std::memory_order_relaxed);
  }
  // Workers revoked so far (tests, benchmarks).
  uint64_t revocations() const { return revocations_.load(std::memory_order_relaxed); }
  // One step of the caller's CPU steering (header comment), as a preemption check that found
  // the pool `contended` and the caller `preempted` would take it. Call from the submitting
  // thread. Public for tests.
  void steer_caller(bool contended, bool preempted);

  // Runs fn(tid) once on each of the n_threads() threads.
  void run_on_all(const std::function<void(int tid)>& fn);

  // How parallel_for cuts [0, n): chunk c is [c*len, min(n, (c+1)*len)) with len = chunk_len;
  // chunk_count chunks. Depends on (n, grain) only while n_threads <= 4 (then on n_threads too,
  // so that big pools still get several chunks per thread).
  // A redoable job of many grains is cut finer (up to 64 chunks of at least 256 grains).
  static int64_t chunk_count(int64_t n, int64_t grain, int n_threads, bool redoable = false);
  static int64_t chunk_len(int64_t n, int64_t grain, int n_threads, bool redoable = false);

  // How long (in `pause` iterations) an idle worker spins before sleeping, and the caller spins
  // for the last chunks before sleeping. 0 = sleep at once (use when the machine is
  // oversubscribed). Default 1 << 15; the environment variable DFL_POOL_SPIN sets it for every
  // pool (measured with one of 2 cores taken, Gemma-3-270M: 2048 keeps 0.57–0.58 of idle speed
  // against 0.55–0.58 at the default, the idle speed equal within noise; docs/BENCHMARKS.md).
  void set_spin(int iterations) { spin_.store(iterations, std::memory_order_relaxed); }

 private:
  // claim_ word: [63:32] job sequence, [31] static job, [30:16] the worker count of a static
  // job, [0] redoable (a dynamic job's chunks are claimed from lanes_; its count is count_).
  static constexpr int kChunks = 16;  // for pools of up to 4 threads; 4 per thread above
  static constexpr int kMaxChunks = 1 << 14;
  void worker_loop(int tid);
  void work(int tid, uint32_t& last_static);
  void run_lanes(int tid);
  void run_chunk(uint32_t chunk, int tid);
  void run_redoable(int tid, uint32_t seq);
  uint64_t wait_redoable(uint32_t seq, uint64_t all, uint64_t mine, int64_t chunk_ns);
  void finish(uint32_t count, uint32_t chunks);
  void publish(bool is_static, int64_t count, bool redoable = false);
  void wait_done(uint32_t target);
  // The spin of thread tid's next wait: spin_, or less while the scheduler preempts one of the
  // pool's threads (threadpool.cc).
  int spin_limit(int tid);

  int n_threads_;
  std::vector<std::thread> workers_;
  // Job descriptor: written by the caller before claim_ is stored (release); stable until done_
  // reaches the job's count.
  const RangeFn* range_fn_ = nullptr;
  const std::function<void(int)>* all_fn_ = nullptr;
  int64_t n_ = 0, len_ = 0, count_ = 0;
  uint32_t seq_ = 0;
  // One claim word per thread ("lane", own cache line): [63:32] job sequence, [31] redoable,
  // [30:16] end, [15:0] next chunk; thread t claims from lane t until it is dry, then from the
  // others.
  struct alignas(64) Lane {
    std::atomic<uint64_t> word{0};
  };
  std::unique_ptr<Lane[]> lanes_;
  // A worker's part in a redoable job (own cache line): state = [63:2] job sequence, [1:0]
  // running / reported / revoked; done = the chunks of that job it finished (bit c: chunk c).
  // Registered (running) before the worker claims; only a running worker can be in a chunk.
  struct alignas(64) Slot {
    std::atomic<uint64_t> state{0};
    std::atomic<uint64_t> done{0};
    std::atomic<int> os_tid{0};  // the worker's kernel thread id (0 until it runs)
  };
  std::unique_ptr<Slot[]> slots_;
  alignas(64) std::atomic<uint32_t> bell_{0};  // rung by a worker that reports a redoable job
  std::atomic<bool> revoke_when_quiet_{false}, revoke_at_once_{false};
  std::atomic<uint64_t> revocations_{0};
  alignas(64) std::atomic<uint64_t> claim_{0};
  alignas(64) std::atomic<uint32_t> done_{0};
  alignas(64) std::atomic<uint32_t> generation_{0};
  alignas(64) std::atomic<int> sleepers_{0};
  std::atomic<int> caller_sleeping_{0};
  std::atomic<int> spin_{1 << 15};
  std::atomic<uint64_t> contended_{0};  // bit t % 64: thread t is being preempted lately
  // Keeping the caller off a shared core (threadpool.cc; caller-only state).
  std::vector<unsigned char> cpus_;  // the creating thread's CPU mask (a cpu_set_t), restored
  int steered_caller_ = 0;           // kernel id of the caller pinned, 0: nothing pinned
  int anchored_cpu_ = -1;            // the CPU it is pinned to
  std::atomic<bool> stop_{false};
};

// Number of hardware threads, at least 1.
int hardware_threads();

}  // namespace dfl
