// Communicator over MPI (compiled when CMake found MPI).
#include <mpi.h>

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
int g_rank = 0;

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
  std::fprintf(stderr, "dflash[rank %d]: exiting before the pipeline finished: aborting the job\n", g_rank);
  std::fflush(stderr);
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

// Polls `done` until it returns true or the deadline passes (timeout_s < 0: never). Spins
// briefly, then sleeps with a growing pause (up to 1 ms) so idle ranks leave the cores free.
template <class Done>
bool wait_until(Done&& done, double timeout_s, double& waited) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  int spins = 0;
  auto pause = std::chrono::microseconds(20);
  bool ok = false;
  while (true) {
    if (done()) {
      ok = true;
      break;
    }
    const double el = std::chrono::duration<double>(Clock::now() - t0).count();
    if (timeout_s >= 0 && el > timeout_s) break;
    if (++spins > 200) {
      std::this_thread::sleep_for(pause);
      if (pause < std::chrono::microseconds(1000)) pause *= 2;
    }
  }
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
    g_live = true;
    std::atexit(on_exit);
    std::signal(SIGTERM, on_term);
    std::signal(SIGINT, on_term);
    return w;
  }();
  return *c;
}

void Communicator::send(int dst, int tag, const void* data, size_t bytes, double timeout_s) {
  DFL_CHECK(!finished_, "MPI send after the end of the job");
  DFL_CHECK(bytes <= size_t(INT32_MAX), "rank ", rank_, ": a message of ", bytes, " bytes is too large");
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
  check(MPI_Recv(out.data(), n, MPI_BYTE, src, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "receive", src);
}

void Communicator::finish() {
  if (finished_) return;
  finished_ = true;
  g_live = false;
  MPI_Finalize();
}

void Communicator::abort(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  g_live = false;
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace dfl::dist
