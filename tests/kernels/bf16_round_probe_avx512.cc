// tests/kernels/bf16_round_probe.h, compiled with the AVX-512 flags (tests/kernels/CMakeLists.txt).
#include "bf16_round_probe.h"

#include <immintrin.h>

#include "kernels/cpu/simd_avx512.h"

namespace dfl::test {

void bf16_round_probe(const float* x, int64_t n, uint16_t* one, uint16_t* two, bool hw) {
  for (int64_t i = 0; i < n; i += 32) {
    const __m512 lo = _mm512_loadu_ps(x + i), hi = _mm512_loadu_ps(x + i + 16);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(one + i), cpu::avx512::cvtneps_bf16(lo, hw));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(one + i + 16), cpu::avx512::cvtneps_bf16(hi, hw));
    _mm512_storeu_si512(two + i, cpu::avx512::cvtne2ps_bf16(hi, lo, hw));
  }
}

}  // namespace dfl::test
