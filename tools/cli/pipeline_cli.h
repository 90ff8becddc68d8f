// `--pipeline-parallel N` for run / bench / serve under `mpirun -np N` (dist/pipeline_lm.h,
// docs/DISTRIBUTED.md): ranks 0..N-2 become stage workers, the last rank runs the command with a
// pipeline target behind its engine.
#pragma once

#include <vector>

#include "args.h"
#include "engine/engine.h"

namespace dfl::cli {

const std::vector<FlagSpec>& pipeline_flags();  // --pipeline-parallel --pp-layers --pp-timeout
// `f` with pipeline_flags() appended.
std::vector<FlagSpec> with_pipeline_flags(std::vector<FlagSpec> f);

// With --pipeline-parallel on a worker rank: serves the driver until it stops, then returns
// true (the command returns 0 and prints nothing). False everywhere else.
bool run_pipeline_worker(const Args& args, int32_t threads);

// With --pipeline-parallel on the driver rank: eo.load_target loads the last stage and drives the
// others. Without the flag: nothing.
void add_pipeline_target(const Args& args, EngineOptions& eo);

}  // namespace dfl::cli
