// The GGML block helpers shared by the AVX2 GGUF kernel files (cpu/ggml_rows_avx2.cc: the
// original blocks; cpu/ggml_avx2.cc: the prepacked tiles, compiled a second time as avx2_vnni
// by cpu/ggml_avxvnni.cc). Include only from those files: everything here is in an anonymous
// namespace of the file's own AVX2 namespace (cpu/avx2_namespace.h), so each file has its own
// copy built with its own ISA flags (cpu/cpu_kernels.h's rule).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "core/dtype.h"
#include "kernels/cpu/avx2_namespace.h"

namespace dfl::cpu::DFL_AVX2_NAMESPACE {
namespace {

inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// 32 unsigned bytes × 32 int8 → 8 int32 partial sums.
inline __m256i dot32(__m256i u, __m256i q) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, q), _mm256_set1_epi16(1));
}

// Byte i = 16 where bit i of the 32-bit word at p is set, else 0 (the Q5 fifth bits).
inline __m256i bits_to_16(const uint8_t* p) {
  uint32_t h;
  std::memcpy(&h, p, 4);
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(h)),
      _mm256_setr_epi64x(0x0000000000000000, 0x0101010101010101, 0x0202020202020202,
                         0x0303030303030303));
  const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ULL));
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit),
                          _mm256_set1_epi8(16));
}

constexpr int kQ80 = int(DType::kQ8_0), kQ40 = int(DType::kQ4_0), kQ50 = int(DType::kQ5_0);
template <int T>
constexpr int kShift = T == kQ40 ? 3 : 4;  // log2 of the offset (Q8_0: none, it is |w|·sign)

}  // namespace
}  // namespace dfl::cpu::DFL_AVX2_NAMESPACE
