// Communicator without MPI (CMake did not find it): the distributed paths refuse clearly.
#include <cstdlib>

#include "core/error.h"
#include "dist/communicator.h"

namespace dfl::dist {

namespace {
[[noreturn]] void no_mpi() {
  throw Error("this dflash was built without MPI: install libopenmpi-dev (Debian) and reconfigure "
              "to use --pipeline-parallel");
}
}  // namespace

bool Communicator::available() { return false; }
Communicator& Communicator::world() { no_mpi(); }
void Communicator::send(int, int, const void*, size_t, double) { no_mpi(); }
void Communicator::recv(int, int, std::vector<uint8_t>&, double) { no_mpi(); }
void Communicator::finish() {}
void Communicator::abort(int code) { std::_Exit(code); }

}  // namespace dfl::dist
