// The AVX2 activation quantization of the GGML int8 kernels (cpu_kernels.h quantize_ggml_act,
// ggml_act_residual): the same bits as the scalar quantize_act of kernels/ggml_matmul.cc —
// per block absmax / 127, q = RNE(x · (1 / d)) clamped to ±127, Σq per 16 and per 32, and the
// int8x2 residual x − d·q. (AVX-512: cpu/ggml_quant_avx512.cc.)
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/simd_avx2.h"

namespace dfl::cpu::avx2 {

namespace {
constexpr int kRne = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

inline __m256 abs_ps(__m256 v) {
  return _mm256_castsi256_ps(_mm256_and_si256(_mm256_castps_si256(v), _mm256_set1_epi32(0x7FFFFFFF)));
}
}  // namespace

void quantize_ggml_act(const float* x, int64_t M, int64_t K, int64_t ab, int8_t* q, float* d,
                       int32_t* s16, int32_t* s32) {
  const int64_t ldq = K + 256, nb = K / ab, n16 = K / 16, n32 = K / 32;
  const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t m = 0; m < M; ++m) {
    const float* xr = x + m * K;
    int8_t* qr = q + m * ldq;
    int32_t* sr = s16 + m * n16;
    for (int64_t b = 0; b < nb; ++b) {
      const float* xb = xr + b * ab;
      // max_ps(v, amax) keeps amax for a NaN v, as std::max(amax, v) does.
      __m256 amax = _mm256_setzero_ps();
      for (int64_t k = 0; k < ab; k += 8) amax = _mm256_max_ps(abs_ps(_mm256_loadu_ps(xb + k)), amax);
      const float dd = hmax8(amax) / 127.0f;
      const float id = dd != 0.0f ? 1.0f / dd : 0.0f;
      d[m * nb + b] = dd;
      const __m256 idv = _mm256_set1_ps(id);
      for (int64_t k = 0; k < ab; k += 32) {
        __m256i c[4];
        for (int j = 0; j < 4; ++j) {
          __m256 v = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(xb + k + 8 * j), idv), kRne);
          v = _mm256_min_ps(_mm256_max_ps(v, lo), hi);  // NaN → −127, as the scalar clamp
          c[j] = _mm256_cvtps_epi32(v);
        }
        const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(c[0], c[1]), _mm256_packs_epi32(c[2], c[3]));
        const __m256i qv = _mm256_permutevar8x32_epi32(p, order);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(qr + b * ab + k), qv);
        // Σ q per 16 bytes: vpsadbw of u = q + 128, minus 16 · 128 (exact).
        const __m256i sad = _mm256_sad_epu8(_mm256_xor_si256(qv, _mm256_set1_epi8(int8_t(0x80))),
                                            _mm256_setzero_si256());
        alignas(32) int64_t s4[4];
        _mm256_store_si256(reinterpret_cast<__m256i*>(s4), sad);
        const int64_t g = (b * ab + k) / 16;
        sr[g] = static_cast<int32_t>(s4[0] + s4[1]) - 16 * 128;
        sr[g + 1] = static_cast<int32_t>(s4[2] + s4[3]) - 16 * 128;
      }
    }
    std::memset(qr + K, 0, 256);
    for (int64_t b = 0; b < n32; ++b) s32[m * n32 + b] = sr[2 * b] + sr[2 * b + 1];
  }
}

void ggml_act_residual(const float* x, const int8_t* q, const float* d, int64_t M, int64_t K,
                       int64_t ab, float* r) {
  const int64_t ldq = K + 256, nb = K / ab;
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t k = 0; k < K; k += 8) {
      const __m256 qf = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
          _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + m * ldq + k))));
      const __m256 dq = _mm256_mul_ps(qf, _mm256_set1_ps(d[m * nb + k / ab]));
      _mm256_storeu_ps(r + m * K + k, _mm256_sub_ps(_mm256_loadu_ps(x + m * K + k), dq));
    }
  }
}

}  // namespace dfl::cpu::avx2
