// AVX-512 activation quantization of the GGML int8 kernels — the same operations, so the same
// bits, as the scalar quantize_act and residual of kernels/ggml_matmul.cc (top comment there):
// per block of ab (32 or 256) elements d = absmax / 127, id = d ? 1 / d : 0,
// q = clamp(rne(x·id), −127, 127); sums of q per 16 and per 32; 256 zero bytes after each row;
// the residual r = x − float(q)·d (one multiply, one subtract: the *_round_ intrinsics keep the
// compiler from fusing them into an fma).
// NaN and ±0 follow the scalar std::max / std::min exactly: max_ps(v, bound) returns its second
// operand for a NaN v, as std::max(bound, v) does.
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/cpu_kernels.h"

namespace dfl::cpu::avx512 {

namespace {

constexpr int kRne = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

inline __m512 abs_ps(__m512 v) {
  return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x7FFFFFFF)));
}

}  // namespace

void quantize_ggml_act(const float* x, int64_t M, int64_t K, int64_t ab, int8_t* q, float* d,
                       int32_t* s16, int32_t* s32) {
  const int64_t ldq = K + 256, nb = K / ab, n16 = K / 16, n32 = K / 32;
  const __m512 lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
  for (int64_t m = 0; m < M; ++m) {
    const float* xr = x + m * K;
    int8_t* qr = q + m * ldq;
    int32_t* sr = s16 + m * n16;
    for (int64_t b = 0; b < nb; ++b) {
      const float* xb = xr + b * ab;
      __m512 amax = _mm512_setzero_ps();
      for (int64_t g = 0; g < ab; g += 16) amax = _mm512_max_ps(abs_ps(_mm512_loadu_ps(xb + g)), amax);
      const float dd = _mm512_reduce_max_ps(amax) / 127.0f;
      const float id = dd != 0.0f ? 1.0f / dd : 0.0f;
      const __m512 idv = _mm512_set1_ps(id);
      for (int64_t g = 0; g < ab; g += 16) {
        __m512 v = _mm512_roundscale_ps(_mm512_mul_round_ps(_mm512_loadu_ps(xb + g), idv, kRne), kRne);
        v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
        const __m512i qi = _mm512_cvtps_epi32(v);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(qr + b * ab + g), _mm512_cvtepi32_epi8(qi));
        sr[(b * ab + g) / 16] = _mm512_reduce_add_epi32(qi);
      }
      d[m * nb + b] = dd;
    }
    std::memset(qr + K, 0, 256);
    for (int64_t b = 0; b < n32; ++b) s32[m * n32 + b] = sr[2 * b] + sr[2 * b + 1];
  }
}

void ggml_act_residual(const float* x, const int8_t* q, const float* d, int64_t M, int64_t K,
                       int64_t ab, float* r) {
  const int64_t ldq = K + 256, nb = K / ab;
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t k = 0; k < K; k += 16) {
      const __m512 qf = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + m * ldq + k))));
      const __m512 dq = _mm512_mul_round_ps(qf, _mm512_set1_ps(d[m * nb + k / ab]), kRne);
      _mm512_storeu_ps(r + m * K + k, _mm512_sub_round_ps(_mm512_loadu_ps(x + m * K + k), dq, kRne));
    }
  }
}

}  // namespace dfl::cpu::avx512
