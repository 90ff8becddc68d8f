#include "commands.h"
#include "core/error.h"

namespace dfl::cli {
// Replaced by the benchmark implementation (tools/cli/bench/); see issue "CPU speed".
int cmd_bench(int, char**) { throw Error("bench: not available in this build yet"); }
}  // namespace dfl::cli
