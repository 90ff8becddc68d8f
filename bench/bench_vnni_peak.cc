// What one core issues per second of the instructions the int8 and bf16 kernels are built from
// (register operands, 12 independent chains): the compute ceiling the GGML VNNI kernels are
// measured against (docs/KERNELS.md). instr_per_s for each kind; the add chain's rate is the
// clock (1 cycle per dependent add), so instr_per_s ÷ clock = instructions per cycle. DotGroup:
// the vpdpbusd rate of the GGML kernels' loop shape without and with their per-block fp step.
//   build/bench/bench_vnni_peak                 (one core)
//   build/bench/bench_vnni_peak --benchmark_filter=Dpbusd/zmm & build/bench/bench_vnni_peak ...
//     (two at once, pinned with taskset: whether the two vCPUs share a core)
#include <benchmark/benchmark.h>

#include "core/cpu_features.h"
#include "vnni_peak_probe.h"

namespace dfl::bench {
namespace {

void BM_Peak(benchmark::State& state, VnniProbe kind) {
  if (cpu_isa() != IsaLevel::kAvx512) {
    state.SkipWithError("needs AVX-512");
    return;
  }
  if (kind == VnniProbe::kDpbf16Zmm && !avx512_bf16_usable()) {
    state.SkipWithError("needs AVX512_BF16");
    return;
  }
  const bool vnni = kind != VnniProbe::kDpbf16Zmm && kind != VnniProbe::kFmaZmm && kind != VnniProbe::kAddChain;
  if (vnni && !avx512_vnni_usable()) {
    state.SkipWithError("needs AVX512_VNNI");
    return;
  }
  constexpr int64_t kIters = 1 << 20;
  const int64_t per_iter = probe_instructions_per_iter(kind);
  for (auto _ : state) vnni_peak_probe(kind, kIters);
  state.counters["instr_per_s"] = benchmark::Counter(
      static_cast<double>(kIters * per_iter) * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate);
}

BENCHMARK_CAPTURE(BM_Peak, Dpbusd/zmm, VnniProbe::kDpbusdZmm)->UseRealTime();
BENCHMARK_CAPTURE(BM_Peak, Dpbusd/ymm, VnniProbe::kDpbusdYmm)->UseRealTime();
BENCHMARK_CAPTURE(BM_Peak, Dpbf16/zmm, VnniProbe::kDpbf16Zmm)->UseRealTime();
BENCHMARK_CAPTURE(BM_Peak, Fma/zmm, VnniProbe::kFmaZmm)->UseRealTime();
BENCHMARK_CAPTURE(BM_Peak, Dpbusd/zmm_bcast_load, VnniProbe::kDpbusdBcast)->UseRealTime();
BENCHMARK_CAPTURE(BM_Peak, AddChain/clock, VnniProbe::kAddChain)->UseRealTime();
BENCHMARK_CAPTURE(BM_Peak, Dpbusd/one_chain, VnniProbe::kDpbusdChain)->UseRealTime();
BENCHMARK_CAPTURE(BM_Peak, DotGroup/bare, VnniProbe::kDotGroupBare)->UseRealTime();
BENCHMARK_CAPTURE(BM_Peak, DotGroup/block_epilogue, VnniProbe::kDotGroupEpilogue)->UseRealTime();

}  // namespace
}  // namespace dfl::bench

BENCHMARK_MAIN();
