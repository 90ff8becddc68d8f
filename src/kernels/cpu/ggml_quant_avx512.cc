// AVX-512 activation quantization of the GGML int8 kernels: the same bits as the portable
// quantize_act of kernels/ggml_matmul.cc (the rule is stated there), 16 elements per vector:
// the block absmax (a max: exact in any order), d = amax / 127 and id = 1 / d as scalars,
// q = clamp(rne(x · id), −127, 127), the int8 pack, the integer sums per 16 and 32, and the
// residual r = x − float(q) · d (a product, then a difference: no fma) when asked for.
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/cpu_kernels.h"

namespace dfl::cpu::avx512 {

void quantize_ggml_rows(const float* x, int64_t M, int64_t K, int64_t ab, int8_t* q, float* d,
                        int32_t* s16, int32_t* s32, float* resid) {
  const int64_t ldq = K + 256, nab = K / ab, n16 = K / 16;
  const __m512 lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
  const __m512 sign = _mm512_castsi512_ps(_mm512_set1_epi32(0x7FFFFFFF));
  for (int64_t m = 0; m < M; ++m) {
    const float* xr = x + m * K;
    int8_t* qr = q + m * ldq;
    int32_t* sr = s16 + m * n16;
    for (int64_t b = 0; b < nab; ++b) {
      const float* xb = xr + b * ab;
      __m512 amax = _mm512_setzero_ps();
      for (int64_t k = 0; k < ab; k += 16)
        amax = _mm512_max_ps(amax, _mm512_and_ps(_mm512_loadu_ps(xb + k), sign));
      const float dd = _mm512_reduce_max_ps(amax) / 127.0f;
      const float id = dd != 0.0f ? 1.0f / dd : 0.0f;
      const __m512 idv = _mm512_set1_ps(id), ddv = _mm512_set1_ps(dd);
      for (int64_t k = 0; k < ab; k += 16) {
        const __m512 xv = _mm512_loadu_ps(xb + k);
        __m512 v = _mm512_roundscale_ps(_mm512_mul_ps(xv, idv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
        const __m512i qi = _mm512_cvtps_epi32(v);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(qr + b * ab + k), _mm512_cvtepi32_epi8(qi));
        sr[(b * ab + k) / 16] = _mm512_reduce_add_epi32(qi);
        if (resid) _mm512_storeu_ps(resid + m * K + b * ab + k, _mm512_sub_ps(xv, _mm512_mul_ps(v, ddv)));
      }
      d[m * nab + b] = dd;
    }
    std::memset(qr + K, 0, 256);
    for (int64_t b = 0; b < K / 32; ++b) s32[m * (K / 32) + b] = sr[2 * b] + sr[2 * b + 1];
  }
}

}  // namespace dfl::cpu::avx512
