// AVX-512 parts of ops::matmul_argmax's screen (kernels/ggml_argmax.cc has the math): the pass
// over a row's q1-half outputs (screen_row; the two-pass form it falls back to) and the exact
// finish of a Q8_0 candidate. The finish makes
// the bits of ggml_portable_dot (and so of every kernel): the block dots are exact integers
// however they are summed, and the fp32 steps are the same — lane b % 8 gets
// fma(float(dot_b), f16(d_b)·dx_b, lane), then ((l0 + l4) + (l1 + l5)) + ((l2 + l6) + (l3 + l7)).
// The passes only bound (their margins cover any rounding), so their order is free.
#include <immintrin.h>

#include <math.h>  // INFINITY (std:: functions are inline: not in ISA files, cpu_kernels.h)

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/screen_tail.h"

namespace dfl::cpu::avx512 {

namespace {

inline __m512 abs_ps(__m512 v) {
  return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x7FFFFFFF)));
}

// The bound half-width of 16 outputs: bound·R + bound2·R2 + |y1|·rel.
inline __m512 half_width(__m512 y, __m512 b, __m512 R, __m512 b2, __m512 R2, __m512 rel) {
  return _mm512_add_ps(_mm512_fmadd_ps(b2, R2, _mm512_mul_ps(b, R)), _mm512_mul_ps(abs_ps(y), rel));
}


}  // namespace

float screen_lower_max(const float* y1, const float* bound, int64_t V, float R, float rel,
                       float huge, bool* bad, const float* bound2, float R2) {
  if (!bound2) {
    bound2 = bound;
    R2 = 0;
  }
  const __m512 vr = _mm512_set1_ps(R), vrel = _mm512_set1_ps(rel), vhuge = _mm512_set1_ps(huge);
  const __m512 vr2 = _mm512_set1_ps(R2);
  __m512 L = _mm512_set1_ps(-INFINITY);
  __mmask16 ok = 0xFFFF;
  int64_t n = 0;
  for (; n + 16 <= V; n += 16) {
    const __m512 y = _mm512_loadu_ps(y1 + n), b = _mm512_loadu_ps(bound + n);
    ok &= _mm512_cmp_ps_mask(abs_ps(y), vhuge, _CMP_LE_OQ);  // false for NaN
    L = _mm512_max_ps(L, _mm512_sub_ps(y, half_width(y, b, vr, _mm512_loadu_ps(bound2 + n), vr2, vrel)));
  }
  float l = _mm512_reduce_max_ps(L);
  bool b = ok != 0xFFFF;
  screen_tail::lower_max(y1, bound, bound2, n, V, R, R2, rel, huge, &l, &b);
  *bad = b;
  return l;
}

int64_t screen_candidates(const float* y1, const float* bound, int64_t V, float R, float rel,
                          float L, int32_t* idx, int64_t cap, const float* bound2, float R2) {
  if (!bound2) {
    bound2 = bound;
    R2 = 0;
  }
  const __m512 vr = _mm512_set1_ps(R), vrel = _mm512_set1_ps(rel), vl = _mm512_set1_ps(L);
  const __m512 vr2 = _mm512_set1_ps(R2);
  const __m512i step = _mm512_set1_epi32(16);
  __m512i ids = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  int64_t count = 0, n = 0;
  for (; n + 16 <= V; n += 16, ids = _mm512_add_epi32(ids, step)) {
    const __m512 y = _mm512_loadu_ps(y1 + n), b = _mm512_loadu_ps(bound + n);
    const __mmask16 m = _mm512_cmp_ps_mask(
        _mm512_add_ps(y, half_width(y, b, vr, _mm512_loadu_ps(bound2 + n), vr2, vrel)), vl, _CMP_GE_OQ);
    if (!m) continue;
    const int c = __builtin_popcount(m);
    if (count + c > cap) return -1;
    _mm512_mask_compressstoreu_epi32(idx + count, m, ids);
    count += c;
  }
  return screen_tail::candidates(y1, bound, bound2, n, V, R, R2, rel, L, idx, count, cap);
}

int64_t screen_row(const float* y1, const float* bound, int64_t V, float R, float rel, float huge,
                   bool* bad, int32_t* idx, float* hi, int64_t cap, const float* bound2, float R2) {
  const float* b2p = bound2 ? bound2 : bound;
  const float r2 = bound2 ? R2 : 0.0f;
  const __m512 vr = _mm512_set1_ps(R), vrel = _mm512_set1_ps(rel), vhuge = _mm512_set1_ps(huge);
  const __m512 vr2 = _mm512_set1_ps(r2);
  const __m512i step = _mm512_set1_epi32(16);
  const int64_t nv = V / 16 * 16;
  // The running threshold starts at the lower max of the first 1024 outputs and is raised every
  // 64 vectors: always ≤ the final L, so what it keeps is a superset of the candidates.
  float seed = -INFINITY;
  {
    bool ignored;
    const int64_t s = nv < 1024 ? nv : 1024;
    if (s > 0) seed = screen_lower_max(y1, bound, s, R, rel, huge, &ignored, bound2, R2);
  }
  __m512 L = _mm512_set1_ps(seed), Lrun = L;
  __m512i ids = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  __mmask16 ok = 0xFFFF;
  int64_t count = 0;
  bool overflow = false;
  for (int64_t n = 0; n < nv; n += 16, ids = _mm512_add_epi32(ids, step)) {
    const __m512 y = _mm512_loadu_ps(y1 + n);
    const __m512 h = half_width(y, _mm512_loadu_ps(bound + n), vr, _mm512_loadu_ps(b2p + n), vr2, vrel);
    ok &= _mm512_cmp_ps_mask(abs_ps(y), vhuge, _CMP_LE_OQ);  // false for NaN
    L = _mm512_max_ps(L, _mm512_sub_ps(y, h));
    const __m512 up = _mm512_add_ps(y, h);
    const __mmask16 m = _mm512_cmp_ps_mask(up, Lrun, _CMP_GE_OQ);
    if (m && !overflow) {
      const int c = __builtin_popcount(m);
      if (count + c > cap) {
        overflow = true;
      } else {
        _mm512_mask_compressstoreu_epi32(idx + count, m, ids);
        _mm512_mask_compressstoreu_ps(hi + count, m, up);
        count += c;
      }
    }
    if ((n & 1023) == 1008) Lrun = _mm512_set1_ps(_mm512_reduce_max_ps(L));
  }
  float l = _mm512_reduce_max_ps(L);
  bool b = ok != 0xFFFF;
  screen_tail::lower_max(y1, bound, b2p, nv, V, R, r2, rel, huge, &l, &b);  // the tail
  *bad = b;
  if (b) return -1;
  if (overflow) return screen_candidates(y1, bound, V, R, rel, l, idx, cap, bound2, R2);
  return screen_tail::keep(y1, bound, b2p, nv, V, R, r2, rel, l, idx, hi, count, cap);
}

float q8_0_row_dot(const uint8_t* row, const int8_t* q, const float* dx, int64_t nb) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = row + b * 34;
    const __m512i w = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2)));
    const __m512i x = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + b * 32)));
    const int32_t dot = _mm512_reduce_add_epi32(_mm512_madd_epi16(w, x));
    uint16_t h;
    __builtin_memcpy(&h, blk, 2);
    const float d = _cvtsh_ss(h) * dx[b];
    acc[b % 8] = __builtin_fmaf(static_cast<float>(dot), d, acc[b % 8]);
  }
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

}  // namespace dfl::cpu::avx512
