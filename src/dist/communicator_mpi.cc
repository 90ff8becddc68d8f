// Communicator over MPI (compiled when CMake found MPI).
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <unistd.h>

#include "core/error.h"
#include "dist/communicator.h"

namespace dfl::dist {

namespace {

bool g_live = false;  // MPI initialised and not finished
int g_rank = 0, g_size = 1;

std::string mpi_error(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int n = 0;
  MPI_Error_string(code, buf, &n);
  return std::string(buf, size_t(n));
}

void check(int code, const char* what, int peer) {
  if (code != MPI_SUCCESS)
    throw Error(str("rank ", g_rank, ": MPI ", what, " with rank ", peer, " failed: ", mpi_error(code)));
}

void on_exit() {
  if (!g_live) return;
  if (g_size == 1) {  // no peer waits on this process
    g_live = false;
    MPI_Finalize();
    return;
  }
  std::fprintf(stderr, "dflash[rank %d]: exiting before the pipeline finished: aborting the job\n", g_rank);
  std::fflush(stderr);
  std::signal(SIGALRM, SIG_DFL);
  alarm(5);
  MPI_Abort(MPI_COMM_WORLD, 1);
}

extern "C" void on_term(int sig) {
  char msg[160];
  const int n = std::snprintf(msg, sizeof msg,
                              "dflash[rank %d]: stopped by signal %d (another rank failed or the job "
                              "was killed)\n", g_rank, sig);
  if (n > 0) (void)!write(2, msg, size_t(n));
  _exit(1);
}

// The watchdog: a thread outside MPI that ends this process when a bounded wait overruns its
// deadline by 2 s, for the case where a wait never returns to check its own timeout (a call
// stuck inside MPI, e.g. on shared memory a stopped peer holds). mpirun then ends the others.
std::atomic<double> g_deadline{0};  // steady-clock seconds; 0 = no bounded wait in progress
std::atomic<int> g_peer{-1};

double steady_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void start_watchdog() {
  std::thread([] {
    while (true) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      const double d = g_deadline.load(std::memory_order_relaxed);
      if (d > 0 && steady_s() > d) {
        char msg[200];
        const int n = std::snprintf(msg, sizeof msg,
                                    "dflash[rank %d]: stuck waiting for rank %d past --pp-timeout: "
                                    "ending this rank (the job ends with it)\n", g_rank, g_peer.load());
        if (n > 0) (void)!write(2, msg, size_t(n));
        _exit(1);
      }
    }
  }).detach();
}

// Polls `done` until it returns true or the deadline passes (timeout_s < 0: never). For the
// first 2 ms it polls back to back, yielding the core between polls (a step's message usually
// comes within that); then it sleeps between polls with a pause growing to 1 ms, so an idle rank
// (a worker waiting for requests, a stage waiting for the others) leaves the cores free.
template <class Done>
bool wait_until(Done&& done, double timeout_s, double& waited) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  if (timeout_s >= 0) g_deadline.store(steady_s() + timeout_s + 2.0, std::memory_order_relaxed);
  auto pause = std::chrono::microseconds(50);
  bool ok = false;
  while (true) {
    if (done()) {
      ok = true;
      break;
    }
    const double el = std::chrono::duration<double>(Clock::now() - t0).count();
    if (timeout_s >= 0 && el > timeout_s) break;
    if (el < 2e-3) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(pause);
      if (pause < std::chrono::microseconds(1000)) pause *= 2;
    }
  }
  g_deadline.store(0, std::memory_order_relaxed);
  waited += std::chrono::duration<double>(Clock::now() - t0).count();
  return ok;
}

}  // namespace

bool Communicator::available() { return true; }

Communicator& Communicator::world() {
  static Communicator* c = [] {
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
      int provided = 0;
      check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "init", -1);
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    auto* w = new Communicator();
    MPI_Comm_rank(MPI_COMM_WORLD, &w->rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &w->size_);
    g_rank = w->rank_;
    g_size = w->size_;
    g_live = true;
    std::atexit(on_exit);
    std::signal(SIGTERM, on_term);
    std::signal(SIGINT, on_term);
    start_watchdog();
    return w;
  }();
  return *c;
}

void Communicator::send(int dst, int tag, const void* data, size_t bytes, double timeout_s) {
  DFL_CHECK(!finished_, "MPI send after the end of the job");
  DFL_CHECK(bytes <= size_t(INT32_MAX), "rank ", rank_, ": a message of ", bytes, " bytes is too large");
  g_peer = dst;
  MPI_Request req;
  check(MPI_Isend(data, int(bytes), MPI_BYTE, dst, tag, MPI_COMM_WORLD, &req), "send", dst);
  int code = MPI_SUCCESS;
  const bool ok = wait_until([&] {
    int flag = 0;
    code = MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
    return code != MPI_SUCCESS || flag;
  }, timeout_s, wait_s_);
  check(code, "send", dst);
  if (!ok) {
    MPI_Cancel(&req);
    throw Error(str("rank ", rank_, ": sending ", bytes, " bytes to rank ", dst, " timed out after ",
                    timeout_s, " s (is rank ", dst, " alive?)"));
  }
  bytes_sent_ += int64_t(bytes);
  ++messages_sent_;
}

void Communicator::recv(int src, int tag, std::vector<uint8_t>& out, double timeout_s) {
  DFL_CHECK(!finished_, "MPI receive after the end of the job");
  g_peer = src;
  MPI_Status st;
  int code = MPI_SUCCESS;
  const bool ok = wait_until([&] {
    int flag = 0;
    code = MPI_Iprobe(src, tag, MPI_COMM_WORLD, &flag, &st);
    return code != MPI_SUCCESS || flag;
  }, timeout_s, wait_s_);
  check(code, "probe", src);
  if (!ok)
    throw Error(str("rank ", rank_, ": no message from rank ", src, " within ", timeout_s,
                    " s (--pp-timeout): the pipeline is stuck or rank ", src, " died"));
  int n = 0;
  check(MPI_Get_count(&st, MPI_BYTE, &n), "count", src);
  out.resize(size_t(n));
  // The body may still be on its way (a large message, or a sender that stopped mid-transfer):
  // the receive is bounded too.
  MPI_Request req;
  check(MPI_Irecv(out.data(), n, MPI_BYTE, src, tag, MPI_COMM_WORLD, &req), "receive", src);
  const bool got = wait_until([&] {
    int flag = 0;
    code = MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
    return code != MPI_SUCCESS || flag;
  }, timeout_s < 0 ? 120.0 : timeout_s, wait_s_);
  check(code, "receive", src);
  if (!got)
    throw Error(str("rank ", rank_, ": receiving ", n, " bytes from rank ", src, " timed out (rank ",
                    src, " stopped mid-message?)"));
}

void Communicator::finish() {
  if (finished_) return;
  finished_ = true;
  g_live = false;
  MPI_Finalize();
}

// MPI_Abort can block when several ranks abort at once; SIGALRM (default action: terminate)
// then ends this process anyway, and mpirun ends the others on seeing it die.
void arm_exit_watchdog() {
  std::signal(SIGALRM, SIG_DFL);
  alarm(5);
}

void Communicator::abort(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  g_live = false;
  arm_exit_watchdog();
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace dfl::dist
