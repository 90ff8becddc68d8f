// AVX-512 issue-rate probe (bench_vnni_peak.cc): runs `iters` groups of 12 independent
// instructions of one kind on registers (no memory operands), so the time per instruction is
// the core's throughput for that kind, not a latency. Only call where cpu_isa() is kAvx512.
#pragma once

#include <cstdint>

namespace dfl::bench {

enum class VnniProbe {
  kDpbusdZmm,   // vpdpbusd zmm (u8 × s8 → s32, 64 multiply-adds): the GGML int8 kernels
  kDpbusdYmm,   // the same on ymm (32 multiply-adds)
  kDpbf16Zmm,   // vdpbf16ps zmm (32 bf16 multiply-adds): the bf16 kernels
  kAddChain,    // dependent 64-bit integer adds, 1 cycle each: the clock the others run at
};

// Instructions executed: 12 · iters (kAddChain: 4 · iters).
void vnni_peak_probe(VnniProbe kind, int64_t iters);

}  // namespace dfl::bench
