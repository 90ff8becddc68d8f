// AVX2 parts of ops::matmul_argmax's screen (kernels/ggml_argmax.cc has the math): the pass over
// a row's q1-half (or plane) outputs, 8 lanes at a time — the contract and operations of the
// avx512:: functions of the same names (cpu/argmax_avx512.cc). The passes only bound (their
// margins cover any rounding), so a lane order is free; the candidates come out in increasing
// order from each vector's compare mask.
#include <immintrin.h>

#include <math.h>  // INFINITY (std:: functions are inline: not in ISA files, cpu_kernels.h)

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/screen_tail.h"

namespace dfl::cpu::avx2 {

namespace {

inline __m256 abs_ps(__m256 v) {
  return _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF)));
}

// The bound half-width of 8 outputs: bound·R + bound2·R2 + |y1|·rel.
inline __m256 half_width(__m256 y, __m256 b, __m256 R, __m256 b2, __m256 R2, __m256 rel) {
  return _mm256_add_ps(_mm256_fmadd_ps(b2, R2, _mm256_mul_ps(b, R)), _mm256_mul_ps(abs_ps(y), rel));
}

inline float hmax(__m256 v) {
  __m128 r = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  r = _mm_max_ps(r, _mm_movehl_ps(r, r));
  r = _mm_max_ss(r, _mm_shuffle_ps(r, r, 1));
  return _mm_cvtss_f32(r);
}

// The lanes of mask m (bits of a compare) as indices n + lane into idx, in increasing order.
inline int64_t put_lanes(unsigned m, int64_t n, int32_t* idx, int64_t count) {
  while (m) {
    idx[count++] = static_cast<int32_t>(n + __builtin_ctz(m));
    m &= m - 1;
  }
  return count;
}

}  // namespace

float screen_lower_max(const float* y1, const float* bound, int64_t V, float R, float rel,
                       float huge, bool* bad, const float* bound2, float R2) {
  if (!bound2) {
    bound2 = bound;
    R2 = 0;
  }
  const __m256 vr = _mm256_set1_ps(R), vrel = _mm256_set1_ps(rel), vhuge = _mm256_set1_ps(huge);
  const __m256 vr2 = _mm256_set1_ps(R2);
  __m256 L = _mm256_set1_ps(-INFINITY);
  __m256 ok = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
  int64_t n = 0;
  for (; n + 8 <= V; n += 8) {
    const __m256 y = _mm256_loadu_ps(y1 + n), b = _mm256_loadu_ps(bound + n);
    ok = _mm256_and_ps(ok, _mm256_cmp_ps(abs_ps(y), vhuge, _CMP_LE_OQ));  // false for NaN
    L = _mm256_max_ps(L, _mm256_sub_ps(y, half_width(y, b, vr, _mm256_loadu_ps(bound2 + n), vr2, vrel)));
  }
  float l = hmax(L);
  bool bd = _mm256_movemask_ps(ok) != 0xFF;
  screen_tail::lower_max(y1, bound, bound2, n, V, R, R2, rel, huge, &l, &bd);
  *bad = bd;
  return l;
}

int64_t screen_candidates(const float* y1, const float* bound, int64_t V, float R, float rel,
                          float L, int32_t* idx, int64_t cap, const float* bound2, float R2) {
  if (!bound2) {
    bound2 = bound;
    R2 = 0;
  }
  const __m256 vr = _mm256_set1_ps(R), vrel = _mm256_set1_ps(rel), vl = _mm256_set1_ps(L);
  const __m256 vr2 = _mm256_set1_ps(R2);
  int64_t count = 0, n = 0;
  for (; n + 8 <= V; n += 8) {
    const __m256 y = _mm256_loadu_ps(y1 + n), b = _mm256_loadu_ps(bound + n);
    const unsigned m = unsigned(_mm256_movemask_ps(_mm256_cmp_ps(
        _mm256_add_ps(y, half_width(y, b, vr, _mm256_loadu_ps(bound2 + n), vr2, vrel)), vl, _CMP_GE_OQ)));
    if (!m) continue;
    if (count + __builtin_popcount(m) > cap) return -1;
    count = put_lanes(m, n, idx, count);
  }
  return screen_tail::candidates(y1, bound, bound2, n, V, R, R2, rel, L, idx, count, cap);
}

int64_t screen_row(const float* y1, const float* bound, int64_t V, float R, float rel, float huge,
                   bool* bad, int32_t* idx, float* hi, int64_t cap, const float* bound2, float R2) {
  const float* b2p = bound2 ? bound2 : bound;
  const float r2 = bound2 ? R2 : 0.0f;
  const __m256 vr = _mm256_set1_ps(R), vrel = _mm256_set1_ps(rel), vhuge = _mm256_set1_ps(huge);
  const __m256 vr2 = _mm256_set1_ps(r2);
  const int64_t nv = V / 8 * 8;
  // The running threshold starts at the lower max of the first 1024 outputs and is raised every
  // 128 vectors: always ≤ the final L, so what it keeps is a superset of the candidates.
  float seed = -INFINITY;
  {
    bool ignored;
    const int64_t s = nv < 1024 ? nv : 1024;
    if (s > 0) seed = screen_lower_max(y1, bound, s, R, rel, huge, &ignored, bound2, R2);
  }
  __m256 L = _mm256_set1_ps(seed), Lrun = L;
  __m256 ok = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
  int64_t count = 0;
  bool overflow = false;
  for (int64_t n = 0; n < nv; n += 8) {
    const __m256 y = _mm256_loadu_ps(y1 + n);
    const __m256 h = half_width(y, _mm256_loadu_ps(bound + n), vr, _mm256_loadu_ps(b2p + n), vr2, vrel);
    ok = _mm256_and_ps(ok, _mm256_cmp_ps(abs_ps(y), vhuge, _CMP_LE_OQ));  // false for NaN
    L = _mm256_max_ps(L, _mm256_sub_ps(y, h));
    const __m256 up = _mm256_add_ps(y, h);
    unsigned m = unsigned(_mm256_movemask_ps(_mm256_cmp_ps(up, Lrun, _CMP_GE_OQ)));
    if (m && !overflow) {
      if (count + __builtin_popcount(m) > cap) {
        overflow = true;
      } else {
        alignas(32) float ups[8];
        _mm256_store_ps(ups, up);
        while (m) {
          const int lane = __builtin_ctz(m);
          idx[count] = static_cast<int32_t>(n + lane);
          hi[count++] = ups[lane];
          m &= m - 1;
        }
      }
    }
    if ((n & 1023) == 1016) Lrun = _mm256_set1_ps(hmax(L));
  }
  float l = hmax(L);
  bool bd = _mm256_movemask_ps(ok) != 0xFF;
  screen_tail::lower_max(y1, bound, b2p, nv, V, R, r2, rel, huge, &l, &bd);  // the tail
  *bad = bd;
  if (bd) return -1;
  if (overflow) return screen_candidates(y1, bound, V, R, rel, l, idx, cap, bound2, R2);
  return screen_tail::keep(y1, bound, b2p, nv, V, R, r2, rel, l, idx, hi, count, cap);
}

}  // namespace dfl::cpu::avx2
