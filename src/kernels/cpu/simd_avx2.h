// Internal helpers shared by the AVX2 kernel files. Include only from *_avx2.cc (and the files
// that compile one of them again, *_avxvnni.cc): everything here is `static inline` in an
// anonymous namespace, so no AVX2 code can leak into a symbol the baseline code links against.
#pragma once

#include <immintrin.h>

namespace dfl::cpu::avx2 {
namespace {

// The sum of the 8 lanes by one fixed tree: (0+4, 1+5, 2+6, 3+7), then pairs, then the last two.
static inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// The largest of the 8 lanes (NaN-free inputs).
static inline float hmax8(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// e^x, |rel err| ≲ 2e-7: exp16 of cpu/simd_avx512.h on 8 lanes, the scale by 2^n done on the
// exponent bits. x is clamped to [-87.3, 88.3] (n = round(x·log2 e) in [-126, 127], so 2^n is a
// normal number): inputs below give tiny positives (callers mask lanes that must be exactly 0),
// above saturate. e^0 = 1 exactly.
static inline __m256 exp8(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.3f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.3888949e-3f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3333847e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1666670e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666667e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

}  // namespace
}  // namespace dfl::cpu::avx2
