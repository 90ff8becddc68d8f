// What one AMX-INT8 tile operation costs on this machine (ns per operation, L1-resident data):
// the floor under the GGML AMX kernels (cpu/ggml_amx.cc, cpu/kquant_ggml_amx.cc), which issue one
// 16-row × 16-output product per 32-element block (A rows of 32 bytes, half of what a tile takes:
// Arg 32 against Arg 64 shows whether that halves the work per product or not), then finish each
// product with a vector fp step per row (epilogue: that step alone; step_and_epilogue: both, in
// the kernels' two-tile ring — their sum or their max says whether the tile unit and the vector
// units overlap).
//   build/bench/bench_amx_tiles
#include <benchmark/benchmark.h>

#include "amx_tile_probe.h"
#include "core/cpu_features.h"

namespace dfl::bench {
namespace {

void BM_AmxTile(benchmark::State& state, AmxProbe kind) {
  if (!amx_usable() || !cpu_features().amx_int8) {
    state.SkipWithError("no usable AMX-INT8 on this machine");
    return;
  }
  const int k_bytes = static_cast<int>(state.range(0));
  constexpr int64_t kIters = 1 << 16;
  for (auto _ : state) amx_tile_probe(kind, k_bytes, kIters);
  // seconds per tile operation (printed with an SI prefix: 15n = 15 ns)
  state.counters["s_per_op"] = benchmark::Counter(
      static_cast<double>(kIters) * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

BENCHMARK_CAPTURE(BM_AmxTile, independent_products, AmxProbe::kIndependentProducts)
    ->Arg(32)->Arg(64)->UseRealTime();
BENCHMARK_CAPTURE(BM_AmxTile, shared_b, AmxProbe::kSharedB)->Arg(32)->Arg(64)->UseRealTime();
BENCHMARK_CAPTURE(BM_AmxTile, shared_a, AmxProbe::kSharedA)->Arg(32)->Arg(64)->UseRealTime();
BENCHMARK_CAPTURE(BM_AmxTile, dependent_products, AmxProbe::kDependentProducts)
    ->Arg(32)->Arg(64)->UseRealTime();
BENCHMARK_CAPTURE(BM_AmxTile, kernel_step, AmxProbe::kKernelStep)->Arg(32)->Arg(64)->UseRealTime();
BENCHMARK_CAPTURE(BM_AmxTile, epilogue, AmxProbe::kEpilogue)->Arg(32)->UseRealTime();
BENCHMARK_CAPTURE(BM_AmxTile, step_and_epilogue, AmxProbe::kStepAndEpilogue)->Arg(32)->UseRealTime();

}  // namespace
}  // namespace dfl::bench

BENCHMARK_MAIN();
