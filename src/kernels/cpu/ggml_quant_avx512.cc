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
#include <vector>

#include "core/threadpool.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/simd_avx512.h"

namespace dfl::cpu::avx512 {

namespace {

constexpr int kRne = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

inline __m512 abs_ps(__m512 v) {
  return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x7FFFFFFF)));
}

// Σ q of one 16-byte group: the bytes as u = q + 128 summed by vpsadbw, minus 16 · 128 (exact).
inline int32_t group_sum(__m128i qb) {
  const __m128i s = _mm_sad_epu8(_mm_xor_si128(qb, _mm_set1_epi8(int8_t(0x80))), _mm_setzero_si128());
  return static_cast<int32_t>(_mm_cvtsi128_si64(s) + _mm_extract_epi64(s, 1)) - 16 * 128;
}

// The 4 group sums of 64 bytes (groups of 16) into s[0..3], as group_sum does them.
inline void group_sums4(__m512i qb, int32_t* s) {
  const __m512i sad = _mm512_sad_epu8(_mm512_xor_si512(qb, _mm512_set1_epi8(int8_t(0x80))),
                                      _mm512_setzero_si512());  // 8 sums of 8 bytes
  const __m512i pair = _mm512_add_epi64(sad, _mm512_shuffle_epi32(sad, _MM_PERM_BADC));
  const __m256i sums = _mm512_cvtepi64_epi32(_mm512_maskz_compress_epi64(0x55, pair));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(s),
                   _mm_sub_epi32(_mm256_castsi256_si128(sums), _mm_set1_epi32(16 * 128)));
}

}  // namespace

void quantize_ggml_act(const float* x, int64_t M, int64_t K, int64_t ab, int8_t* q, float* d,
                       int32_t* s16, int32_t* s32) {
  const int64_t ldq = K + 256, nb = K / ab, n16 = K / 16, n32 = K / 32;
  const __m512 lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
  float* inv;  // 1 / d per block of the row: the thread's own buffer
  {
    // (A redoable chunk: a worker must not be stopped inside calloc, which the first touch of
    // the thread_local calls, or inside malloc.)
    ThreadPool::NoAbandon grow;
    thread_local std::vector<float> inv_buf;
    if (static_cast<int64_t>(inv_buf.size()) < nb) inv_buf.resize(static_cast<size_t>(nb));
    inv = inv_buf.data();
  }
  for (int64_t m = 0; m < M; ++m) {
    const float* xr = x + m * K;
    int8_t* qr = q + m * ldq;
    int32_t* sr = s16 + m * n16;
    float* dr = d + m * nb;
    // Block maxima, then d = amax / 127 and 1 / d for 16 blocks at a time (IEEE division:
    // the scalar code's bits).
    for (int64_t b = 0; b < nb; ++b) {
      const float* xb = xr + b * ab;
      __m512 amax = _mm512_setzero_ps();
      for (int64_t g = 0; g < ab; g += 16) amax = _mm512_max_ps(abs_ps(_mm512_loadu_ps(xb + g)), amax);
      dr[b] = _mm512_reduce_max_ps(amax);
    }
    for (int64_t b = 0; b < nb; b += 16) {
      const __mmask16 mk = lanes16(nb - b);
      const __m512 dd = _mm512_div_ps(_mm512_maskz_loadu_ps(mk, dr + b), _mm512_set1_ps(127.0f));
      const __mmask16 nz = _mm512_cmp_ps_mask(dd, _mm512_setzero_ps(), _CMP_NEQ_UQ);
      _mm512_mask_storeu_ps(dr + b, mk, dd);
      _mm512_mask_storeu_ps(inv + b, mk, _mm512_maskz_div_ps(nz, _mm512_set1_ps(1.0f), dd));
    }
    // q per group of 16, the group sums 4 groups at a time.
    for (int64_t k = 0; k < K; k += 64) {
      const int ng = K - k >= 64 ? 4 : static_cast<int>((K - k) / 16);
      __m128i qb[4];
      for (int j = 0; j < ng; ++j) {
        const int64_t kk = k + 16 * j;
        const __m512 idv = _mm512_set1_ps(inv[kk / ab]);
        __m512 v = _mm512_roundscale_ps(_mm512_mul_round_ps(_mm512_loadu_ps(xr + kk), idv, kRne), kRne);
        v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
        qb[j] = _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(v));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(qr + kk), qb[j]);
      }
      if (ng == 4) {
        __m512i all = _mm512_castsi128_si512(qb[0]);
        all = _mm512_inserti32x4(all, qb[1], 1);
        all = _mm512_inserti32x4(all, qb[2], 2);
        all = _mm512_inserti32x4(all, qb[3], 3);
        group_sums4(all, sr + k / 16);
      } else {
        for (int j = 0; j < ng; ++j) sr[k / 16 + j] = group_sum(qb[j]);
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
    for (int64_t k = 0; k < K; k += 16) {
      const __m512 qf = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + m * ldq + k))));
      const __m512 dq = _mm512_mul_round_ps(qf, _mm512_set1_ps(d[m * nb + k / ab]), kRne);
      _mm512_storeu_ps(r + m * K + k, _mm512_sub_round_ps(_mm512_loadu_ps(x + m * K + k), dq, kRne));
    }
  }
}

}  // namespace dfl::cpu::avx512
