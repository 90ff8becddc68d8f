// Internal helpers shared by the AVX-512 kernel files. Include only from *_avx512.cc and
// *_amx.cc files: everything here is `static inline` in an anonymous namespace, so no AVX-512 code can leak into
// a symbol the baseline code links against.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/cpu_features.h"
#include "kernels/visibility.h"

namespace dfl::cpu::avx512 {
namespace {

// Every 64-byte line of [p, p + bytes) prefetched into L1 (weight streams that the hardware
// prefetcher alone leaves below the bandwidth).
static inline void prefetch_lines(const void* p, int64_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (int64_t o = 0; o < bytes; o += 64) _mm_prefetch(c + o, _MM_HINT_T0);
}
// The same lines kL2PrefetchBytes further on into L2: a second, longer prefetch stream, so
// that enough misses are in flight while the kernel also computes (AMD EPYC Zen 4, 2 threads,
// Gemma head 262144×768 at M = 16: Q4_K 38–43 → 27 ms, Q6_K 56–63 → 42–46 ms).
constexpr int64_t kL2PrefetchBytes = 16384;
static inline void prefetch_lines_l2(const void* p, int64_t bytes) {
  const char* c = static_cast<const char*>(p) + kL2PrefetchBytes;
  for (int64_t o = 0; o < bytes; o += 64) _mm_prefetch(c + o, _MM_HINT_T1);
}

// The 4 int8 values at p in every 32-bit lane: the activation operand of a vpdpbusd whose lanes
// are 16 outputs (the packed int8 kernels).
static inline __m512i bcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// f(std::integral_constant<int, R>) for R = min(mr, Max), Max ≤ 8: the micro-kernels' row count
// is a template parameter (row groups of up to 8, so 8 int32 chains stay in flight).
template <int Max = 8, class F>
static inline void with_rows(int64_t mr, F&& f) {
  static_assert(Max >= 1 && Max <= 8, "row groups of 1..8");
  const int r = static_cast<int>(mr < Max ? mr : Max);
  if constexpr (Max >= 8) if (r == 8) return f(std::integral_constant<int, 8>{});
  if constexpr (Max >= 7) if (r == 7) return f(std::integral_constant<int, 7>{});
  if constexpr (Max >= 6) if (r == 6) return f(std::integral_constant<int, 6>{});
  if constexpr (Max >= 5) if (r == 5) return f(std::integral_constant<int, 5>{});
  if constexpr (Max >= 4) if (r == 4) return f(std::integral_constant<int, 4>{});
  if constexpr (Max >= 3) if (r == 3) return f(std::integral_constant<int, 3>{});
  if constexpr (Max >= 2) if (r == 2) return f(std::integral_constant<int, 2>{});
  return f(std::integral_constant<int, 1>{});
}

// Independent int32 accumulators per row for a micro-kernel of MR rows: vpdpbusd has a 4-cycle
// latency and issues 2 per cycle (AMD Zen 5; Intel the same or less), so at least 8 chains must
// be in flight; a row group of MR rows splits each row's dot into this many partial sums (exact
// integers: the split changes no bits).
template <int MR>
constexpr int kDotChains = MR >= 8 ? 1 : MR >= 4 ? 2 : MR >= 2 ? 4 : 8;

// The GGML int8 kernels' lane accumulators acc[m][8][16]: block b adds into lane b % 8, so
// block b < 8 is the lane's first visit and starts from +0 (what the zeroed buffer held: the
// same bits) without reading it; only lanes that no block visits (fewer than 8 blocks) are
// zeroed up front. (Zeroing every lane of every 16-output tile cost 5 % of a Gemma-3-270M
// verify block at M = 16: 16 KiB per tile.)
static inline __m512 lane_acc(const float* ap, int64_t b) {
  return b < 8 ? _mm512_setzero_ps() : _mm512_loadu_ps(ap);
}
static inline void zero_unvisited_lanes(float* acc, int64_t M, int64_t n_blocks) {
  if (n_blocks >= 8) return;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t l = n_blocks; l < 8; ++l) _mm512_storeu_ps(acc + (m * 8 + l) * 16, _mm512_setzero_ps());
}

// The GGML int8 kernels' final sum (kernels/ggml_matmul.cc): per row, the 8 fp32 lane
// accumulators of 16 outputs, acc[m][lane][16], reduced as ((l0 + l4) + (l1 + l5)) + ((l2 + l6) +
// (l3 + l7)) into y[m * ldy + 0..15] (the first n_valid outputs).
// Rows are global rows row0 + m (y points at row row0): under pair (GgmlAct::pair) the residual
// rows add into row m − pair — in registers when acc holds both halves (row0 = 0, M = 2·pair:
// one store per output row), else into the row already in y.
static inline __m512 lane_sum(const float* ap) {
  __m512 l[8];
  for (int i = 0; i < 8; ++i) l[i] = _mm512_loadu_ps(ap + 16 * i);
  return _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(l[0], l[4]), _mm512_add_ps(l[1], l[5])),
                       _mm512_add_ps(_mm512_add_ps(l[2], l[6]), _mm512_add_ps(l[3], l[7])));
}
static inline void store_lane_sums(const float* acc, int64_t M, int64_t n_valid, float* y, int64_t ldy,
                                   int64_t row0 = 0, int64_t pair = 0) {
  const __mmask16 mk = static_cast<__mmask16>(n_valid >= 16 ? 0xFFFF : (1u << n_valid) - 1);
  if (pair && row0 == 0 && M == 2 * pair) {
    for (int64_t m = 0; m < pair; ++m)
      _mm512_mask_storeu_ps(y + m * ldy, mk,
                            _mm512_add_ps(lane_sum(acc + m * 8 * 16), lane_sum(acc + (m + pair) * 8 * 16)));
    return;
  }
  for (int64_t m = 0; m < M; ++m) {
    const __m512 r = lane_sum(acc + m * 8 * 16);
    if (pair && row0 + m >= pair) {
      float* yo = y + (m - pair) * ldy;
      _mm512_mask_storeu_ps(yo, mk, _mm512_add_ps(_mm512_maskz_loadu_ps(mk, yo), r));
    } else {
      _mm512_mask_storeu_ps(y + m * ldy, mk, r);
    }
  }
}

// Mask of the 5th bits of Q5_0 qs group g of a kPackedQ32x16 block (cpu/ggml_avx512.cc: 8 u64
// after the qs bytes; bit 4o + i = the 5th bit of byte 4o + i of the group's 64 — low nibbles
// for g < 4, high for g ≥ 4).
static inline __mmask64 fifth_bit_mask(const uint8_t* qh, int g) {
  uint64_t m;
  std::memcpy(&m, qh + 8 * g, 8);
  return static_cast<__mmask64>(m);
}

// The 6-bit values of the kPackedQ6K16 layout (cpu/ggml_avx512.cc): element group g (0..3) of
// one ql vector (low nibbles for g < 2, high for g ≥ 2) with its 2 bits 2g, 2g + 1 of qh as
// bits 4..5.
static inline __m512i q6k16_values(__m512i qlv, __m512i qhv, int g) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i lo = g < 2 ? _mm512_and_si512(qlv, m4) : _mm512_and_si512(_mm512_srli_epi16(qlv, 4), m4);
  __m512i hb;
  switch (g) {
    case 0: hb = _mm512_slli_epi16(qhv, 4); break;
    case 1: hb = _mm512_slli_epi16(qhv, 2); break;
    case 2: hb = qhv; break;
    default: hb = _mm512_srli_epi16(qhv, 2); break;
  }
  return _mm512_or_si512(lo, _mm512_and_si512(hb, _mm512_set1_epi8(0x30)));
}

// e^x for 16 lanes, |rel err| ≲ 2e-7; inputs below -87.3 give tiny positives (callers mask
// lanes that must be exactly 0), above 88.3 saturate.
static inline __m512 exp16(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.3f)), _mm512_set1_ps(88.3f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  // exp(r) on |r| ≤ ln2/2: Taylor/minimax degree 6.
  __m512 p = _mm512_set1_ps(1.3888949e-3f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3333847e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1666670e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666667e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

// tanh for 16 lanes, ≈ 1-2 ulp (tests/kernels/test_elementwise.cc measures it). |x| < 0.625:
// odd polynomial x + x³·P(x²) (Chebyshev fit of degree 5 in x², truncation < 1e-9 relative);
// above: 1 - 2 / (e^(2|x|) + 1) with |x| clamped to 9.5 (tanh = 1 in fp32 from 9.01); sign
// restored by bit (tanh(-0) = -0). NaN in, NaN out.
static inline __m512 tanh16(__m512 x) {
  const __m512 sign = _mm512_castsi512_ps(_mm512_set1_epi32(static_cast<int>(0x80000000u)));
  const __m512 a = _mm512_andnot_ps(sign, x);
  const __m512 s = _mm512_mul_ps(a, a);
  __m512 p = _mm512_set1_ps(0.002292744816f);
  p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(-0.008343945516f));
  p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(0.02176891865f));
  p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(-0.05395925958f));
  p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(0.1333330356f));
  p = _mm512_fmadd_ps(p, s, _mm512_set1_ps(-0.3333333317f));
  const __m512 small = _mm512_fmadd_ps(_mm512_mul_ps(a, s), p, a);
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 e = exp16(_mm512_add_ps(_mm512_min_ps(_mm512_set1_ps(9.5f), a),
                                       _mm512_min_ps(_mm512_set1_ps(9.5f), a)));
  const __m512 large = _mm512_sub_ps(one, _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, one)));
  const __mmask16 is_small = _mm512_cmp_ps_mask(a, _mm512_set1_ps(0.625f), _CMP_LT_OQ);
  const __m512 t = _mm512_or_ps(_mm512_mask_blend_ps(is_small, large, small), _mm512_and_ps(sign, x));
  return _mm512_mask_mov_ps(t, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
}

// fp32 → bf16 as vcvtneps2bf16 / vcvtne2ps2bf16 round: round to nearest even, NaN quieted
// ((u >> 16) | 0x40), and a denormal input gives a signed zero (the instructions read denormals
// as zero; core/dtype.h's f32_to_bf16, the cache's rounding, keeps them). `hw` =
// avx512_bf16_usable() (core/cpu_features.h), hoisted by the caller: the instruction, else the
// same bits from integer lanes (Cascade Lake / Ice Lake have AVX-512 without AVX512_BF16;
// tests/kernels/test_no_bf16.cc checks the two agree). Every conversion of the AVX-512 kernels
// (the AMX ones aside: amx_usable() implies the instructions)
// goes through these two; vdpbf16ps runs only under ops.h Bf16Dot::kDpbf16, which
// bf16_dot() never returns without the instructions.
// The one integer-lane form of both roundings, bf16 in the low half of each 32-bit lane:
// core/dtype.h's f32_to_bf16 (daz = false: ops::to_bf16, the KV cache) or the instructions'
// (daz = true: a denormal input gives ±0).
static inline __m512i bf16_round_lanes(__m512i u, bool daz) {
  const __m512i hi = _mm512_srli_epi32(u, 16);
  const __m512i rne = _mm512_srli_epi32(
      _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), _mm512_and_si512(hi, _mm512_set1_epi32(1))), 16);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                _mm512_set1_epi32(0x7f800000));
  const __m512i r = _mm512_mask_or_epi32(rne, nan, hi, _mm512_set1_epi32(0x40));
  if (!daz) return r;
  const __mmask16 denormal = _mm512_testn_epi32_mask(u, _mm512_set1_epi32(0x7f800000));
  return _mm512_mask_and_epi32(r, denormal, hi, _mm512_set1_epi32(0x8000));
}
static inline __m256i cvtneps_bf16(__m512 x, bool hw) {
  if (hw) return (__m256i)_mm512_cvtneps_pbh(x);
  return _mm512_cvtepi32_epi16(bf16_round_lanes(_mm512_castps_si512(x), true));
}
// 32 bf16: lo's 16 then hi's 16.
static inline __m512i cvtne2ps_bf16(__m512 hi, __m512 lo, bool hw) {
  if (hw) return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
  return _mm512_inserti64x4(_mm512_zextsi256_si512(cvtneps_bf16(lo, false)), cvtneps_bf16(hi, false), 1);
}

// Mask of the first n (0..16) lanes.
static inline __mmask16 lanes16(long n) {
  return n >= 16 ? static_cast<__mmask16>(0xffff)
                 : n <= 0 ? static_cast<__mmask16>(0) : static_cast<__mmask16>((1u << n) - 1);
}

// The visibility rule of kernels/visibility.h (kv_visible) for 16 cache slots at once: bit j is
// set iff slot j < n (n ≤ 16) holds a key (k_pos[j] >= 0) that a query at qpos may see through
// window w. Slots at or past n are never read.
static inline __mmask16 visible_slots16(const int32_t* k_pos, long n, int32_t qpos, Window w) {
  const __mmask16 in = lanes16(n);
  const __m512i kp = _mm512_maskz_loadu_epi32(in, k_pos);
  __mmask16 m = _mm512_mask_cmpge_epi32_mask(in, kp, _mm512_setzero_si512());
  if (w.left >= 0)  // q - k <= left  ⇔  k >= q - left
    m = _mm512_mask_cmpge_epi32_mask(m, kp, _mm512_set1_epi32(qpos - w.left));
  if (w.right >= 0)  // k - q <= right  ⇔  k <= q + right
    m = _mm512_mask_cmple_epi32_mask(m, kp, _mm512_set1_epi32(qpos + w.right));
  return m;
}

}  // namespace
}  // namespace dfl::cpu::avx512
