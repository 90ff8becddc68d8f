// GGML block weights × fp32 activations (ops.h GgmlActivations::kFp32) on AVX-512: each weight
// row dequantized in registers, then fp32 FMA (cpu/ggml_avx512.cc holds the int8 kernels).
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/ggml_blocks_avx512.h"

// ---- fp32 activations (ops.h GgmlActivations::kFp32) -------------------------------------------
// Each weight row is dequantized in registers to exactly ref::dequant_row's values (same fp32
// operations: d·sc then ·q, − dmin·m) into an L1 row buffer, then dotted with every activation
// row: 16 fp32 lanes, lane k % 16, fma in k order, then the fixed tree of ggml_matmul.cc.
namespace dfl::cpu::avx512 {
namespace {

inline __m512 cvt16(const __m128i b, bool is_signed) {
  return _mm512_cvtepi32_ps(is_signed ? _mm512_cvtepi8_epi32(b) : _mm512_cvtepu8_epi32(b));
}

void deq_row(int dt, const uint8_t* row, int64_t K, float* out) {
  const DType t = static_cast<DType>(dt);
  if (t == DType::kQ8_0 || t == DType::kQ4_0 || t == DType::kQ5_0) {
    const int BB = t == DType::kQ8_0 ? 34 : t == DType::kQ4_0 ? 18 : 22;
    for (int64_t b = 0; b < K / 32; ++b) {
      const uint8_t* blk = row + b * BB;
      const __m512 d = _mm512_set1_ps(h2f(blk));
      __m256i q;  // signed int8 quant values
      if (t == DType::kQ8_0) {
        q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
      } else if (t == DType::kQ4_0) {
        q = _mm256_sub_epi8(nibbles32(blk + 2), _mm256_set1_epi8(8));
      } else {
        q = _mm256_sub_epi8(unpack32<int(DType::kQ5_0)>(blk), _mm256_set1_epi8(16));
      }
      // ref: Q8_0 float(q)·d; Q4_0 / Q5_0 d·float(q) — the same product.
      _mm512_storeu_ps(out + 32 * b, _mm512_mul_ps(cvt16(_mm256_castsi256_si128(q), true), d));
      _mm512_storeu_ps(out + 32 * b + 16, _mm512_mul_ps(cvt16(_mm256_extracti128_si256(q, 1), true), d));
    }
    return;
  }
  if (t == DType::kQ4_K || t == DType::kQ5_K) {
    const bool q5 = t == DType::kQ5_K;
    const int BB = q5 ? 176 : 144;
    const __m256i m4 = _mm256_set1_epi8(0x0F), b16 = _mm256_set1_epi8(16);
    for (int64_t s = 0; s < K / 256; ++s) {
      const uint8_t* blk = row + s * BB;
      const float d = h2f(blk), dmin = h2f(blk + 2);
      const uint8_t* qs = blk + (q5 ? 48 : 16);
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16));
      for (int c = 0; c < 4; ++c) {
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * c));
        __m256i half[2] = {_mm256_and_si256(q, m4), _mm256_and_si256(_mm256_srli_epi16(q, 4), m4)};
        for (int hsel = 0; hsel < 2; ++hsel) {
          const int j = 2 * c + hsel;
          if (q5)
            half[hsel] = _mm256_or_si256(half[hsel], _mm256_maskz_mov_epi8(
                _mm256_test_epi8_mask(qh, _mm256_set1_epi8(static_cast<char>(1 << j))), b16));
          int sc, mn;
          k4_scale_min(blk + 4, j, &sc, &mn);
          const __m512 dsc = _mm512_set1_ps(d * static_cast<float>(sc));
          const __m512 dm = _mm512_set1_ps(dmin * static_cast<float>(mn));
          float* o = out + 256 * s + 32 * j;
          _mm512_storeu_ps(o, _mm512_sub_ps(_mm512_mul_ps(dsc, cvt16(_mm256_castsi256_si128(half[hsel]), false)), dm));
          _mm512_storeu_ps(o + 16, _mm512_sub_ps(_mm512_mul_ps(dsc, cvt16(_mm256_extracti128_si256(half[hsel], 1), false)), dm));
        }
      }
    }
    return;
  }
  // Q6_K
  const __m512i o32 = _mm512_set1_epi8(32);
  for (int64_t s = 0; s < K / 256; ++s) {
    const uint8_t* blk = row + s * 210;
    const float d = h2f(blk + 208);
    const auto* sc = reinterpret_cast<const int8_t*>(blk + 192);
    for (int t4 = 0; t4 < 4; ++t4) {
      const __m512i q = _mm512_sub_epi8(q6k_values64(blk, t4), o32);
      const __m128i q0 = _mm512_extracti32x4_epi32(q, 0), q1 = _mm512_extracti32x4_epi32(q, 1),
                    q2 = _mm512_extracti32x4_epi32(q, 2), q3 = _mm512_extracti32x4_epi32(q, 3);
      const __m128i qq[4] = {q0, q1, q2, q3};
      for (int i = 0; i < 4; ++i) {
        const int e = 64 * t4 + 16 * i;
        const __m512 ds = _mm512_set1_ps(d * static_cast<float>(sc[e / 16]));
        _mm512_storeu_ps(out + 256 * s + e, _mm512_mul_ps(ds, cvt16(qq[i], true)));
      }
    }
  }
}

inline float reduce16(__m512 v) {
  const __m256 r8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  const __m128 r4 = _mm_add_ps(_mm256_castps256_ps128(r8), _mm256_extractf128_ps(r8, 1));
  const __m128 r2 = _mm_add_ps(r4, _mm_movehl_ps(r4, r4));             // [0+2, 1+3]
  return _mm_cvtss_f32(_mm_add_ss(r2, _mm_movehdup_ps(r2)));          // (0+2) + (1+3)
}

}  // namespace

void matmul_ggml_f32(const float* x, int64_t M, const WeightMatrix& w, float* y, ThreadPool& pool,
                     float* rowbuf_all) {
  const int64_t K = w.n_in;
  const int64_t rb = K / (w.dtype == DType::kQ4_K || w.dtype == DType::kQ5_K || w.dtype == DType::kQ6_K ? 256 : 32) *
                     (w.dtype == DType::kQ8_0 ? 34 : w.dtype == DType::kQ4_0 ? 18 : w.dtype == DType::kQ5_0 ? 22
                      : w.dtype == DType::kQ4_K ? 144 : w.dtype == DType::kQ5_K ? 176 : 210);
  pool.parallel_for_redoable(
      w.n_out,
      [&](int64_t n0, int64_t n1, int tid) {
        float* buf = rowbuf_all + static_cast<int64_t>(tid) * K;
        for (int64_t n = n0; n < n1; ++n) {
          deq_row(static_cast<int>(w.dtype), static_cast<const uint8_t*>(w.data) + n * rb, K, buf);
          int64_t m = 0;
          for (; m + 4 <= M; m += 4) {  // 4 rows share each weight load; per-row order unchanged
            const float* x0 = x + m * K;
            __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            for (int64_t k = 0; k < K; k += 16) {
              const __m512 wv = _mm512_loadu_ps(buf + k);
              a0 = _mm512_fmadd_ps(wv, _mm512_loadu_ps(x0 + k), a0);
              a1 = _mm512_fmadd_ps(wv, _mm512_loadu_ps(x0 + K + k), a1);
              a2 = _mm512_fmadd_ps(wv, _mm512_loadu_ps(x0 + 2 * K + k), a2);
              a3 = _mm512_fmadd_ps(wv, _mm512_loadu_ps(x0 + 3 * K + k), a3);
            }
            y[m * w.n_out + n] = reduce16(a0);
            y[(m + 1) * w.n_out + n] = reduce16(a1);
            y[(m + 2) * w.n_out + n] = reduce16(a2);
            y[(m + 3) * w.n_out + n] = reduce16(a3);
          }
          for (; m < M; ++m) {
            const float* xr = x + m * K;
            __m512 acc = _mm512_setzero_ps();
            for (int64_t k = 0; k < K; k += 16)
              acc = _mm512_fmadd_ps(_mm512_loadu_ps(buf + k), _mm512_loadu_ps(xr + k), acc);
            y[m * w.n_out + n] = reduce16(acc);
          }
        }
      },
      16);
}

}  // namespace dfl::cpu::avx512
