// The one wrapper over MPI (OpenMPI from Debian; optional at build time: without it every call
// but available() throws a dfl::Error saying so). Point-to-point messages of bytes, each wait
// bounded by a timeout, so a dead or stuck peer ends the job with a clear error instead of a hang.
//
// Errors: MPI_COMM_WORLD uses MPI_ERRORS_RETURN; a failed call or a timeout throws dfl::Error
// naming the rank, the peer and the operation. A process that exits without finish() (an error
// path, an exception) aborts the whole job (MPI_Abort) at exit, so no rank waits on a dead one;
// SIGTERM (what mpirun sends the survivors when a rank dies) prints one line and exits 1.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dfl::dist {

// Message tags: the driver's per-step command to every worker and the workers' counters sent
// back at the end; the activation relay uses one tag per micro-batch group (activation_tag in
// stage_protocol.h, 100 and up).
enum Tag : int { kTagCommand = 11, kTagStats = 13 };

class Communicator {
 public:
  // True when this build has MPI.
  static bool available();
  // MPI_Init (once) and the world communicator; throws without MPI.
  static Communicator& world();

  int rank() const { return rank_; }
  int size() const { return size_; }
  // Sends `bytes` to `dst`; waits until the buffer may be reused, at most timeout_s seconds.
  void send(int dst, int tag, const void* data, size_t bytes, double timeout_s);
  // Receives the next message from `src` with `tag` into `out` (resized to it); timeout_s < 0
  // waits without limit (an idle worker waiting for the next step).
  void recv(int src, int tag, std::vector<uint8_t>& out, double timeout_s);
  // Ends MPI cleanly (the job's normal end); later calls are errors.
  void finish();
  // Ends every rank now with exit code `code` (after printing the reason on this one).
  [[noreturn]] void abort(int code);

  int64_t bytes_sent() const { return bytes_sent_; }
  int64_t messages_sent() const { return messages_sent_; }
  double wait_seconds() const { return wait_s_; }  // time spent blocked in recv/send

 private:
  Communicator() = default;
  int rank_ = 0, size_ = 1;
  bool finished_ = false;
  int64_t bytes_sent_ = 0, messages_sent_ = 0;
  double wait_s_ = 0;
};

}  // namespace dfl::dist
