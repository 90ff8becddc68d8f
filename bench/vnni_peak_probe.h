// AVX-512 issue-rate probe (bench_vnni_peak.cc): runs `iters` groups of 12 independent
// instructions of one kind on registers (no memory operands), so the time per instruction is
// the core's throughput for that kind, not a latency; the dot-group kinds run a kernel's loop
// shape instead. Only call where cpu_isa() is kAvx512.
#pragma once

#include <cstdint>

namespace dfl::bench {

enum class VnniProbe {
  kDpbusdZmm,   // vpdpbusd zmm (u8 × s8 → s32, 64 multiply-adds): the GGML int8 kernels
  kDpbusdYmm,   // the same on ymm (32 multiply-adds)
  kDpbf16Zmm,   // vdpbf16ps zmm (32 bf16 multiply-adds): the bf16 kernels
  kFmaZmm,      // vfmadd231ps zmm (16 fp32 multiply-adds): the bf16 kernels' FMA form (Intel)
  kDpbusdBcast, // vpdpbusd zmm on a 4-byte broadcast load per instruction (the kernels' operand),
                // 12 chains: the ceiling of a loop fed from memory
  kAddChain,    // dependent 64-bit integer adds, 1 cycle each: the clock the others run at
                // (not on Intel Golden Cove cores, which fold immediate adds at rename: there
                // the FMA rate ÷ 2 is the clock)
  kDpbusdChain, // ONE chain of dependent vpdpbusd zmm: clock ÷ rate = its latency in cycles
  // The loop shape of the 16-output GGML kernels (cpu/ggml_avx512.cc q32x16_block, 8 rows): per
  // 32-element block, 8 weight vectors × 8 rows of vpdpbusd on 4-byte activation broadcasts
  // from an L1 panel (64 instructions, 8 chains) —
  kDotGroupBare,      // with the integer sums kept: the ceiling of the loop itself
  kDotGroupEpilogue,  // plus the per-(row, block) fp step of the 32-element formats: int → float,
                      // d_w·dx, one fma into a lane accumulator in memory
};

// vpdpbusd (or, for kAddChain, add) instructions executed per iteration.
constexpr int64_t probe_instructions_per_iter(VnniProbe kind) {
  return kind == VnniProbe::kAddChain || kind == VnniProbe::kDpbusdChain ? 4
         : kind == VnniProbe::kDotGroupBare || kind == VnniProbe::kDotGroupEpilogue ? 64
                                                                                     : 12;
}
void vnni_peak_probe(VnniProbe kind, int64_t iters);

}  // namespace dfl::bench
