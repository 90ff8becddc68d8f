// The GGML block unpacking shared by the AVX-512 GGML kernel files (cpu/ggml_avx512.cc: int8
// activations; cpu/ggml_f32_avx512.cc: fp32 activations). Include only from *_avx512.cc files:
// everything here is in an anonymous namespace, so each file has its own copy (cpu/cpu_kernels.h's
// rule).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "core/dtype.h"

namespace dfl::cpu::avx512 {
namespace {

// The block's fp16 scale at p.
static inline float h2f(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// 16 bytes of packed nibbles → 32 bytes: low nibbles (elements 0..15) then high (16..31).
static inline __m256i nibbles32(const uint8_t* qs) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i m = _mm_set1_epi8(0x0F);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m), _mm_and_si128(q, m));
}

// Unsigned bytes of one 32-element block.
template <int T>
inline __m256i unpack32(const uint8_t* b);
template <>
inline __m256i unpack32<int(DType::kQ8_0)>(const uint8_t* b) {
  return _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2)),
                          _mm256_set1_epi8(static_cast<char>(0x80)));
}
template <>
inline __m256i unpack32<int(DType::kQ4_0)>(const uint8_t* b) {
  return nibbles32(b + 2);
}
template <>
inline __m256i unpack32<int(DType::kQ5_0)>(const uint8_t* b) {
  uint32_t qh;
  std::memcpy(&qh, b + 2, 4);
  return _mm256_or_si256(nibbles32(b + 6), _mm256_maskz_mov_epi8(qh, _mm256_set1_epi8(16)));
}

// Q6_K: the unsigned 6-bit values u (ggml's q + 32) of elements 64t .. 64t + 63 (t = 0..3) of
// the 210-byte block blk, in element order.
static inline __m512i q6k_values64(const uint8_t* blk, int t) {
  const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
  const int h = t / 2, odd = t % 2;
  const __m512i ql = _mm512_loadu_si512(blk + 64 * h);
  const __m512i lo = odd ? _mm512_and_si512(_mm512_srli_epi16(ql, 4), m4) : _mm512_and_si512(ql, m4);
  const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 128 + 32 * h));
  const __m256i qlo = odd ? qh : _mm256_slli_epi16(qh, 4);
  const __m256i qhi = odd ? _mm256_srli_epi16(qh, 2) : _mm256_slli_epi16(qh, 2);
  return _mm512_or_si512(lo, _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(qlo), qhi, 1), m30));
}

// Q4_K / Q5_K: the 6-bit scale and min of sub-block j from the 12 packed bytes at s.
static inline void k4_scale_min(const uint8_t* s, int j, int* sc, int* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
    *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}


}  // namespace
}  // namespace dfl::cpu::avx512
