// AVX-512 row-wise and element-wise ops. Each output element is computed with the same
// operations, in the same order, as kernels/ref (rms_norm's sum of squares excepted: 16 fp32
// lanes reduced by one fixed tree, per row — batch invariant, not bit-equal to the double ref).
#include <immintrin.h>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/simd_avx512.h"

namespace dfl::cpu::avx512 {

namespace {

inline float sum_squares(const float* x, int64_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 u = _mm512_loadu_ps(x + i), w = _mm512_loadu_ps(x + i + 16);
    a0 = _mm512_fmadd_ps(u, u, a0);
    a1 = _mm512_fmadd_ps(w, w, a1);
  }
  for (; i < n; i += 16) {
    const __m512 u = _mm512_maskz_loadu_ps(lanes16(n - i), x + i);
    a0 = _mm512_fmadd_ps(u, u, a0);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
}

inline void scale_by(const float* x, const float* w, int64_t n, float inv, float* y) {
  const __m512 iv = _mm512_set1_ps(inv);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = lanes16(n - i);
    const __m512 v = _mm512_mul_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), iv),
                                   _mm512_maskz_loadu_ps(m, w + i));
    _mm512_mask_storeu_ps(y + i, m, v);
  }
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
    __m512 a0 = _mm512_setzero_ps();
    for (int64_t i = 0; i < dim; i += 16) {
      const __mmask16 m = lanes16(dim - i);
      const __m512 v = _mm512_add_ps(_mm512_maskz_loadu_ps(m, rr + i), _mm512_maskz_loadu_ps(m, xr + i));
      _mm512_mask_storeu_ps(rr + i, m, v);
      a0 = _mm512_fmadd_ps(v, v, a0);
    }
    // Same lane assignment and tree as sum_squares() would give only for dim < 32; we keep
    // one accumulator here, so add_rms_norm is its own (batch-invariant) function.
    const float ss = _mm512_reduce_add_ps(a0);
    const float inv = 1.0f / __builtin_sqrtf(ss / static_cast<float>(dim) + eps);
    scale_by(rr, w, dim, inv, y + r * dim);
  }
}

// Index of the first maximum, as the scalar rule of ops::argmax: best = 0, then i replaces best
// iff x[i] > x[best] (so NaN never wins, and a NaN at 0 is never replaced). Per lane: the first
// index of the lane's maximum (strictly greater replaces); then the largest lane value and, among
// the lanes holding it, the smallest index. (Every lane starts at -inf with no index, so lanes
// that only see -inf or NaN drop out; x[0] is lane 0's first candidate.)
int64_t argmax(const float* x, int64_t n) {
  if (n <= 0 || x[0] != x[0]) return 0;
  __m512 best = _mm512_set1_ps(-__builtin_inff());
  __m512i bidx = _mm512_set1_epi32(-1);
  __m512i idx = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i step = _mm512_set1_epi32(16);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = lanes16(n - i);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    const __mmask16 gt = _mm512_mask_cmp_ps_mask(m, v, best, _CMP_GT_OQ);
    best = _mm512_mask_mov_ps(best, gt, v);
    bidx = _mm512_mask_mov_epi32(bidx, gt, idx);
    idx = _mm512_add_epi32(idx, step);
  }
  alignas(64) float bv[16];
  alignas(64) int32_t bi[16];
  _mm512_store_ps(bv, best);
  _mm512_store_si512(bi, bidx);
  int64_t out = 0;  // every lane at -inf (all elements -inf, or x[0] = -inf and the rest NaN)
  float top = -__builtin_inff();
  bool found = false;
  for (int l = 0; l < 16; ++l) {
    if (bi[l] < 0) continue;
    if (!found || bv[l] > top || (bv[l] == top && bi[l] < out)) {
      top = bv[l];
      out = bi[l];
      found = true;
    }
  }
  return out;
}

void silu_mul(const float* gate, const float* up, int64_t n, float* out) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = lanes16(n - i);
    const __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
    const __m512 e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), g));
    const __m512 s = _mm512_div_ps(g, _mm512_add_ps(one, e));
    _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(s, _mm512_maskz_loadu_ps(m, up + i)));
  }
}

void add_inplace(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = lanes16(n - i);
    _mm512_mask_storeu_ps(y + i, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, y + i), _mm512_maskz_loadu_ps(m, x + i)));
  }
}

// gelu_tanh(g)·up with gelu_tanh(g) = g·σ(2u) = g / (1 + e^(-2u)), u = √(2/π)·g·(1 + 0.044715·g²):
// the same operations as the portable version, with the vector exp.
void gelu_tanh_mul(const float* gate, const float* up, int64_t n, float* out) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 k0 = _mm512_set1_ps(0.7978845608028654f);
  const __m512 k1 = _mm512_set1_ps(0.7978845608028654f * 0.044715f);
  const __m512 m2 = _mm512_set1_ps(-2.0f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = lanes16(n - i);
    const __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
    const __m512 u = _mm512_mul_ps(g, _mm512_add_ps(_mm512_mul_ps(_mm512_mul_ps(g, g), k1), k0));
    const __m512 e = exp16(_mm512_mul_ps(m2, u));
    const __m512 y = _mm512_div_ps(g, _mm512_add_ps(one, e));
    _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(y, _mm512_maskz_loadu_ps(m, up + i)));
  }
}

void softcap(float* x, int64_t n, float cap) {
  const __m512 c = _mm512_set1_ps(cap);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = lanes16(n - i);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    _mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(c, tanh16(_mm512_div_ps(v, c))));
  }
}

// core/dtype.h's f32_to_bf16 in integer lanes (simd_avx512.h bf16_round_lanes). ys = 2 writes
// every other uint16 from y (a masked 16-bit store).
void to_bf16(const float* x, int64_t n, uint16_t* y, int64_t ys) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = lanes16(n - i);
    const __m512i r = bf16_round_lanes(_mm512_maskz_loadu_epi32(m, x + i), false);
    if (ys == 1) {
      _mm256_mask_storeu_epi16(y + i, m, _mm512_cvtepi32_epi16(r));
    } else {  // lane l's low half is uint16 2l from y + 2i
      const int64_t c = n - i < 16 ? n - i : 16;
      const __mmask32 even = static_cast<__mmask32>((c == 16 ? ~0u : (1u << (2 * c)) - 1) & 0x55555555u);
      _mm512_mask_storeu_epi16(y + 2 * i, even, r);
    }
  }
}

void scale_inplace(float* x, int64_t n, float s) {
  const __m512 sv = _mm512_set1_ps(s);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = lanes16(n - i);
    _mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), sv));
  }
}

void rope_neox(float* x, int64_t n_rows, int64_t row_stride, int64_t n_heads, int64_t head_dim,
               int64_t n_rot, const float* cos, const float* sin) {
  const int64_t half = n_rot / 2;
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* c = cos + r * half;
    const float* s = sin + r * half;
    for (int64_t h = 0; h < n_heads; ++h) {
      float* v = x + r * row_stride + h * head_dim;
      for (int64_t i = 0; i < half; i += 16) {
        const __mmask16 m = lanes16(half - i);
        const __m512 a = _mm512_maskz_loadu_ps(m, v + i), b = _mm512_maskz_loadu_ps(m, v + i + half);
        const __m512 cc = _mm512_maskz_loadu_ps(m, c + i), ss = _mm512_maskz_loadu_ps(m, s + i);
        // Same two roundings per output as the reference (no FMA contraction).
        _mm512_mask_storeu_ps(v + i, m, _mm512_sub_ps(_mm512_mul_ps(a, cc), _mm512_mul_ps(b, ss)));
        _mm512_mask_storeu_ps(v + i + half, m, _mm512_add_ps(_mm512_mul_ps(b, cc), _mm512_mul_ps(a, ss)));
      }
    }
  }
}

}  // namespace dfl::cpu::avx512
