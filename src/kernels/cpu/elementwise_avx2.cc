// AVX2 row-wise and element-wise ops, for machines without AVX-512: the operations of
// cpu/elementwise_avx512.cc on 8 lanes (each output element computed as kernels/ref does it;
// rms_norm's sum of squares in 16 fp32 lanes reduced by one fixed tree per row — batch
// invariant, not bit-equal to the double reference). exp8 / tanh8 are exp16 / tanh16 of
// cpu/simd_avx512.h with the scale by 2^n done on the exponent bits.
#include <immintrin.h>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/simd_avx2.h"

namespace dfl::cpu::avx2 {

namespace {

// All-ones in the first n (0..8) lanes.
inline __m256i lanes8(int64_t n) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n < 8 ? n : 8)), idx);
}

inline __m256 load(const float* p, int64_t n) {
  return n >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, lanes8(n));
}

inline void store(float* p, int64_t n, __m256 v) {
  if (n >= 8)
    _mm256_storeu_ps(p, v);
  else
    _mm256_maskstore_ps(p, lanes8(n), v);
}

// tanh as tanh16 (odd polynomial below 0.625, 1 - 2 / (e^(2|x|) + 1) above; sign by bit; NaN
// passes through).
inline __m256 tanh8(__m256 x) {
  const __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(0x80000000u)));
  const __m256 a = _mm256_andnot_ps(sign, x);
  const __m256 s = _mm256_mul_ps(a, a);
  __m256 p = _mm256_set1_ps(0.002292744816f);
  p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(-0.008343945516f));
  p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(0.02176891865f));
  p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(-0.05395925958f));
  p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(0.1333330356f));
  p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(-0.3333333317f));
  const __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(a, s), p, a);
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 c = _mm256_min_ps(_mm256_set1_ps(9.5f), a);
  const __m256 e = exp8(_mm256_add_ps(c, c));
  const __m256 large = _mm256_sub_ps(one, _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, one)));
  const __m256 is_small = _mm256_cmp_ps(a, _mm256_set1_ps(0.625f), _CMP_LT_OQ);
  const __m256 t = _mm256_or_ps(_mm256_blendv_ps(large, small, is_small), _mm256_and_ps(sign, x));
  return _mm256_blendv_ps(t, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

inline float sum_squares(const float* x, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 u = _mm256_loadu_ps(x + i), w = _mm256_loadu_ps(x + i + 8);
    a0 = _mm256_fmadd_ps(u, u, a0);
    a1 = _mm256_fmadd_ps(w, w, a1);
  }
  for (; i < n; i += 8) {
    const __m256 u = load(x + i, n - i);
    a0 = _mm256_fmadd_ps(u, u, a0);
  }
  return hsum8(_mm256_add_ps(a0, a1));
}

inline void scale_by(const float* x, const float* w, int64_t n, float inv, float* y) {
  const __m256 iv = _mm256_set1_ps(inv);
  for (int64_t i = 0; i < n; i += 8)
    store(y + i, n - i, _mm256_mul_ps(_mm256_mul_ps(load(x + i, n - i), iv), load(w + i, n - i)));
}

}  // namespace

void rms_norm(const float* x, const float* w, int64_t n_rows, int64_t dim, float eps, float* y) {
  for (int64_t r = 0; r < n_rows; ++r) {
    const float ss = sum_squares(x + r * dim, dim);
    const float inv = 1.0f / __builtin_sqrtf(ss / static_cast<float>(dim) + eps);
    scale_by(x + r * dim, w, dim, inv, y + r * dim);
  }
}

void add_rms_norm(float* res, const float* x, const float* w, int64_t n_rows, int64_t dim,
                  float eps, float* y) {
  for (int64_t r = 0; r < n_rows; ++r) {
    float* rr = res + r * dim;
    const float* xr = x + r * dim;
    __m256 a0 = _mm256_setzero_ps();
    for (int64_t i = 0; i < dim; i += 8) {
      const __m256 v = _mm256_add_ps(load(rr + i, dim - i), load(xr + i, dim - i));
      store(rr + i, dim - i, v);
      a0 = _mm256_fmadd_ps(v, v, a0);
    }
    const float ss = hsum8(a0);
    const float inv = 1.0f / __builtin_sqrtf(ss / static_cast<float>(dim) + eps);
    scale_by(rr, w, dim, inv, y + r * dim);
  }
}

void silu_mul(const float* gate, const float* up, int64_t n, float* out) {
  const __m256 one = _mm256_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 8) {
    const __m256 g = load(gate + i, n - i);
    const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), g));
    const __m256 s = _mm256_div_ps(g, _mm256_add_ps(one, e));
    store(out + i, n - i, _mm256_mul_ps(s, load(up + i, n - i)));
  }
}

void add_inplace(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; i += 8)
    store(y + i, n - i, _mm256_add_ps(load(y + i, n - i), load(x + i, n - i)));
}

// gelu_tanh(g)·up = g / (1 + e^(-2u)) · up, u = √(2/π)·g·(1 + 0.044715·g²), as the portable one.
void gelu_tanh_mul(const float* gate, const float* up, int64_t n, float* out) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 k0 = _mm256_set1_ps(0.7978845608028654f);
  const __m256 k1 = _mm256_set1_ps(0.7978845608028654f * 0.044715f);
  const __m256 m2 = _mm256_set1_ps(-2.0f);
  for (int64_t i = 0; i < n; i += 8) {
    const __m256 g = load(gate + i, n - i);
    const __m256 u = _mm256_mul_ps(g, _mm256_add_ps(_mm256_mul_ps(_mm256_mul_ps(g, g), k1), k0));
    const __m256 e = exp8(_mm256_mul_ps(m2, u));
    const __m256 y = _mm256_div_ps(g, _mm256_add_ps(one, e));
    store(out + i, n - i, _mm256_mul_ps(y, load(up + i, n - i)));
  }
}

void softcap(float* x, int64_t n, float cap) {
  const __m256 c = _mm256_set1_ps(cap);
  for (int64_t i = 0; i < n; i += 8)
    store(x + i, n - i, _mm256_mul_ps(c, tanh8(_mm256_div_ps(load(x + i, n - i), c))));
}

void scale_inplace(float* x, int64_t n, float s) {
  const __m256 sv = _mm256_set1_ps(s);
  for (int64_t i = 0; i < n; i += 8) store(x + i, n - i, _mm256_mul_ps(load(x + i, n - i), sv));
}

void rope_neox(float* x, int64_t n_rows, int64_t row_stride, int64_t n_heads, int64_t head_dim,
               int64_t n_rot, const float* cos, const float* sin) {
  const int64_t half = n_rot / 2;
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* c = cos + r * half;
    const float* s = sin + r * half;
    for (int64_t h = 0; h < n_heads; ++h) {
      float* v = x + r * row_stride + h * head_dim;
      for (int64_t i = 0; i < half; i += 8) {
        const int64_t k = half - i;
        const __m256 a = load(v + i, k), b = load(v + i + half, k);
        const __m256 cc = load(c + i, k), ss = load(s + i, k);
        // Same two roundings per output as the reference (no FMA contraction).
        store(v + i, k, _mm256_sub_ps(_mm256_mul_ps(a, cc), _mm256_mul_ps(b, ss)));
        store(v + i + half, k, _mm256_add_ps(_mm256_mul_ps(b, cc), _mm256_mul_ps(a, ss)));
      }
    }
  }
}

}  // namespace dfl::cpu::avx2
