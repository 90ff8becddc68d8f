// AMX-INT8 tile-op probe (bench_amx_tiles.cc): runs `iters` tile operations of one kind on
// L1-resident data. Only call where amx_usable() && cpu_features().amx_int8.
#pragma once

#include <cstdint>

namespace dfl::bench {

enum class AmxProbe {
  kIndependentProducts,  // tdpbssd into 4 C tiles in turn, A and B changing every product
  kSharedB,              // two A tiles × one B tile, into 2 C tiles in turn
  kSharedA,              // one A tile × two B tiles, into 2 C tiles in turn
  kDependentProducts,    // tdpbssd into one C tile, the same A and B: its latency
  kKernelStep,           // tile load A, load B, zero C, tdpbssd, tile store C: one kernel step
  kEpilogue,             // no tile op: the 32-element kernels' fp step of one block, 16 rows
                         // (load a C row, convert, scale product, fma into the row's register)
  kStepAndEpilogue,      // kKernelStep, then the fp step on the C that the step before stored
};

// k_bytes: the A tile's bytes per row (32: one GGML 32-block; 64: the widest tile).
// iters: a multiple of 4.
void amx_tile_probe(AmxProbe kind, int k_bytes, int64_t iters);

}  // namespace dfl::bench
