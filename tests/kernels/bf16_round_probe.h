// The AVX-512 kernels' fp32 → bf16 conversions (cpu/simd_avx512.h cvtneps_bf16 / cvtne2ps_bf16)
// exposed to tests/kernels/test_no_bf16.cc, whose own file is compiled for baseline x86-64.
// Call only where cpu_isa() == IsaLevel::kAvx512; hw = the instruction (only where
// cpu_features().avx512bf16), else the integer form.
#pragma once

#include <cstdint>

namespace dfl::test {

// n a multiple of 32: one[i] = bf16 of x[i] by the 16-lane form, two[i] by the two-source form.
void bf16_round_probe(const float* x, int64_t n, uint16_t* one, uint16_t* two, bool hw);

}  // namespace dfl::test
