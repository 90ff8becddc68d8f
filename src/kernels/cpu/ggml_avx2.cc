// AVX2 kernels for the GGML block weights in the prepacked tile layouts (Q8_0 / Q5_0 / Q4_0 as
// kPackedQ32x16, Q4_K as kPackedQ4K16, Q6_K as kPackedQ6K16: 16 outputs per tile, their integer
// dots in the lanes), on machines without AVX-512 (Zen 1-3, Haswell to Alder Lake). The math is
// fixed in kernels/ggml_matmul.cc and these compute the same bits as the portable and AVX-512
// kernels (the integer dots are exact; the fp steps are the AVX-512 tile kernels', per lane).
// Each weight block is unpacked once for all M (≤ kGgmlRowChunk = 32) activation rows. The row
// kernels on the original blocks are cpu/ggml_rows_avx2.cc; the activation quantization is
// cpu/ggml_quant_avx2.cc.
// This file is compiled twice: as itself (namespace avx2), and by ggml_avxvnni.cc with
// DFL_AVX2_VNNI = 1 and the AVX-VNNI flag (namespace avx2_vnni), whose integer dots then run on
// vpdpbusd ymm in int32 and the K formats' scales multiply by vpmulld — exact integers, so the
// same bits.
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/avx2_namespace.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/ggml_blocks_avx2.h"

namespace dfl::cpu::DFL_AVX2_NAMESPACE {

namespace {

// ---- Q8_0 / Q5_0 / Q4_0 in the kPackedQ32x16 layout (cpu/ggml_avx512.cc states it) ----------
// The 16 outputs of a tile are two halves of 8 lanes; per half, the integer dot of each output
// in its lane (no horizontal sums), then exactly the fp steps of the AVX-512 kernel on that
// layout. Q8_0 (u = q + 128 stored) multiplies w = u ^ 0x80 as |w| · sign(q, w) and needs no
// offset correction; Q5_0 / Q4_0 sum 4 vpmaddubsw results in s16 before widening (pairs ≤
// 2·31·127: 4 of them < 2^15).
template <int T>
constexpr int64_t kQ32Qs = T == kQ80 ? 512 : 256;
template <int T>
constexpr int64_t kQ32Qh = T == kQ50 ? 64 : 0;

inline __m256i bcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

inline __m256i widen_sum(__m256i s16) { return _mm256_madd_epi16(s16, _mm256_set1_epi16(1)); }

// Q4_0 / Q5_0: the unsigned values of qs group g of a packed block, as two halves of 8 outputs:
// lo = elements 4g..4g+3, hi = 16 + 4g..; Q5_0 adds 16 · its 5th bit.
template <int T>
inline void q32_nibbles(const uint8_t* bp, int g, __m256i lo[2], __m256i hi[2]) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  for (int h = 0; h < 2; ++h) {
    const __m256i wv = load256(bp + 64 * g + 32 * h);
    lo[h] = _mm256_and_si256(wv, m4);
    hi[h] = _mm256_and_si256(_mm256_srli_epi16(wv, 4), m4);
    if constexpr (T == kQ50) {
      lo[h] = _mm256_or_si256(lo[h], bits_to_16(bp + 256 + 8 * g + 4 * h));
      hi[h] = _mm256_or_si256(hi[h], bits_to_16(bp + 256 + 8 * (4 + g) + 4 * h));
    }
  }
}

// The fp step of halves [h0, h0 + NH) (8 outputs each) of a block for MR rows:
// acc += float(dot − c) · (d · dx), with c the format's offset correction (AVX-VNNI: Q8_0's
// 128 · Σq too); dot[r * NH + i] is row r's half h0 + i.
template <int T, int MR, int NH>
inline void q32x16_epilogue(const GgmlAct& a, int64_t m0, const uint8_t* bp, int64_t b, int h0,
                            const __m256i* dot, float* acc) {
  const int64_t nb = a.K / 32;
  constexpr int kOffsetShift = T == kQ80 ? (DFL_AVX2_VNNI ? 7 : -1) : kShift<T>;
  const float* dp = reinterpret_cast<const float*>(bp + kQ32Qs<T> + kQ32Qh<T>);
  __m256 dh[NH];
  for (int i = 0; i < NH; ++i) dh[i] = _mm256_loadu_ps(dp + 8 * (h0 + i));
  for (int r = 0; r < MR; ++r) {
    __m256i c = _mm256_setzero_si256();
    if constexpr (kOffsetShift >= 0) c = _mm256_set1_epi32(a.s32[(m0 + r) * nb + b] << kOffsetShift);
    const __m256 dx = _mm256_set1_ps(a.d[(m0 + r) * nb + b]);
    for (int i = 0; i < NH; ++i) {
      float* ap = acc + (r * 8 + b % 8) * 16 + 8 * (h0 + i);
      _mm256_storeu_ps(ap, _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(dot[r * NH + i], c)),
                                           _mm256_mul_ps(dh[i], dx), _mm256_loadu_ps(ap)));
    }
  }
}

// Group g of q32_unpack's u.
template <int T>
inline void q32_group(const uint8_t* bp, int g, __m256i out[4]) {
  __m256i lo[2], hi[2];
  q32_nibbles<T>(bp, g, lo, hi);
  out[0] = lo[0], out[1] = hi[0], out[2] = lo[1], out[3] = hi[1];
}

// Q4_0 / Q5_0: the unsigned values of a packed block, once for all its row groups:
// u[4 g + 2 h] = lo, u[4 g + 2 h + 1] = hi of qs group g, half h (q32_nibbles).
template <int T>
inline void q32_unpack(const uint8_t* bp, __m256i u[16]) {
  for (int g = 0; g < 4; ++g) q32_group<T>(bp, g, u + 4 * g);
}

// u: the block unpacked by q32_unpack (Q4_0 / Q5_0), or nullptr: each group unpacked here (one
// row group: a stack round trip costs more than it saves; unused for Q8_0).
template <int T, int MR>
void q32x16_block(const GgmlAct& a, int64_t m0, const uint8_t* bp, int64_t b, const __m256i* u, float* acc) {
  const int64_t ldq = a.K + 256;
#if !DFL_AVX2_VNNI
  if constexpr (T != kQ80) {
    __m256i dot[MR][2];
    if (u) {
      // Several row groups (u unpacked once): lo and hi products go into one s16 sum per row and
      // half, pairs ≤ 2·31·127 (Q5_0), so 4 of them (2 groups) before each widening; Q4_0
      // (≤ 2·15·127) takes all 8.
      constexpr int kGroupsPerWiden = T == kQ40 ? 4 : 2;
      __m256i s16[MR][2];
      for (int r = 0; r < MR; ++r)
        for (int h = 0; h < 2; ++h) dot[r][h] = s16[r][h] = _mm256_setzero_si256();
      for (int g = 0; g < 4; ++g) {
        const __m256i* lohi = u + 4 * g;  // [h][lo, hi]
        for (int r = 0; r < MR; ++r) {
          const int8_t* xq = a.q + (m0 + r) * ldq + 32 * b + 4 * g;
          const __m256i ql = bcast4(xq), qh = bcast4(xq + 16);
          for (int h = 0; h < 2; ++h)
            s16[r][h] = _mm256_add_epi16(s16[r][h], _mm256_add_epi16(_mm256_maddubs_epi16(lohi[2 * h], ql),
                                                                     _mm256_maddubs_epi16(lohi[2 * h + 1], qh)));
        }
        if ((g + 1) % kGroupsPerWiden == 0)
          for (int r = 0; r < MR; ++r)
            for (int h = 0; h < 2; ++h) {
              dot[r][h] = _mm256_add_epi32(dot[r][h], widen_sum(s16[r][h]));
              s16[r][h] = _mm256_setzero_si256();
            }
      }
    } else {
      // One row group: the weights unpacked in registers, lo and hi summed apart in s16 (4 each:
      // ≤ 4·2·31·127 < 2^15), widened once.
      __m256i slo[MR][2], shi[MR][2];
      for (int r = 0; r < MR; ++r)
        for (int h = 0; h < 2; ++h) slo[r][h] = shi[r][h] = _mm256_setzero_si256();
      for (int g = 0; g < 4; ++g) {
        __m256i lo[2], hi[2];
        q32_nibbles<T>(bp, g, lo, hi);
        for (int r = 0; r < MR; ++r) {
          const int8_t* xq = a.q + (m0 + r) * ldq + 32 * b + 4 * g;
          const __m256i ql = bcast4(xq), qh = bcast4(xq + 16);
          for (int h = 0; h < 2; ++h) {
            slo[r][h] = _mm256_add_epi16(slo[r][h], _mm256_maddubs_epi16(lo[h], ql));
            shi[r][h] = _mm256_add_epi16(shi[r][h], _mm256_maddubs_epi16(hi[h], qh));
          }
        }
      }
      for (int r = 0; r < MR; ++r)
        for (int h = 0; h < 2; ++h) dot[r][h] = _mm256_add_epi32(widen_sum(slo[r][h]), widen_sum(shi[r][h]));
    }
    q32x16_epilogue<T, MR, 2>(a, m0, bp, b, 0, &dot[0][0], acc);
    return;
  }
#endif
  __m256i dot[MR][2];
  for (int r = 0; r < MR; ++r) dot[r][0] = dot[r][1] = _mm256_setzero_si256();
  // AVX-VNNI: vpdpbusd on the stored unsigned bytes (Q8_0: q + 128), 4 products per int32 lane,
  // the offset's Σ off in the epilogue. AVX2: Q8_0 as |w| · sign(q, w) (no offset).
  if constexpr (T == kQ80) {
#if !DFL_AVX2_VNNI
    const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
#endif
    for (int g = 0; g < 8; ++g) {
#if DFL_AVX2_VNNI
      const __m256i u0 = load256(bp + 64 * g), u1 = load256(bp + 64 * g + 32);
#else
      const __m256i w0 = _mm256_xor_si256(load256(bp + 64 * g), flip);
      const __m256i w1 = _mm256_xor_si256(load256(bp + 64 * g + 32), flip);
      const __m256i u0 = _mm256_sign_epi8(w0, w0), u1 = _mm256_sign_epi8(w1, w1);
#endif
      for (int r = 0; r < MR; ++r) {
        const __m256i q = bcast4(a.q + (m0 + r) * ldq + 32 * b + 4 * g);
#if DFL_AVX2_VNNI
        dot[r][0] = _mm256_dpbusd_avx_epi32(dot[r][0], u0, q);
        dot[r][1] = _mm256_dpbusd_avx_epi32(dot[r][1], u1, q);
#else
        dot[r][0] = _mm256_add_epi32(dot[r][0], dot32(u0, _mm256_sign_epi8(q, w0)));
        dot[r][1] = _mm256_add_epi32(dot[r][1], dot32(u1, _mm256_sign_epi8(q, w1)));
#endif
      }
    }
  } else {
#if DFL_AVX2_VNNI
    for (int g = 0; g < 4; ++g) {
      __m256i own[4];  // [h][lo, hi]: unpacked here when the caller did not (u = nullptr)
      const __m256i* lohi = u ? u + 4 * g : own;
      if (!u) q32_group<T>(bp, g, own);
      for (int r = 0; r < MR; ++r) {
        const int8_t* xq = a.q + (m0 + r) * ldq + 32 * b + 4 * g;
        const __m256i ql = bcast4(xq), qh = bcast4(xq + 16);
        for (int h = 0; h < 2; ++h)
          dot[r][h] = _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(dot[r][h], lohi[2 * h], ql),
                                              lohi[2 * h + 1], qh);
      }
    }
#endif
  }
  q32x16_epilogue<T, MR, 2>(a, m0, bp, b, 0, &dot[0][0], acc);
}

// Per row, the 8 lane accumulators of 16 outputs, acc[m][lane][16], reduced as ((l0 + l4) +
// (l1 + l5)) + ((l2 + l6) + (l3 + l7)) into y[m * ldy + 0..n_valid) (put_y's pair rule).
inline __m256 lane_sum(const float* ap) {
  __m256 l[8];
  for (int i = 0; i < 8; ++i) l[i] = _mm256_loadu_ps(ap + 16 * i);
  return _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(l[0], l[4]), _mm256_add_ps(l[1], l[5])),
                       _mm256_add_ps(_mm256_add_ps(l[2], l[6]), _mm256_add_ps(l[3], l[7])));
}

void store_lane_sums(const float* acc, int64_t M, int64_t n_valid, float* y, int64_t ldy, int64_t pair) {
  for (int64_t m = 0; m < M; ++m) {
    alignas(32) float v[16];
    _mm256_store_ps(v, lane_sum(acc + m * 8 * 16));
    _mm256_store_ps(v + 8, lane_sum(acc + m * 8 * 16 + 8));
    for (int64_t o = 0; o < n_valid && o < 16; ++o) put_y(y, ldy, m, o, v[o], pair);
  }
}

// ---- Q4_K / Q6_K in the kPackedQ4K16 / kPackedQ6K16 layouts (cpu/ggml_avx512.cc states them) --
// Outputs in the lanes as above (two halves of 8 per tile). The integer scales are applied by
// vpmaddwd on s16 sums, so no 32-bit multiplies: Q4_K sums its 8 vpmaddubsw of a sub-block in
// s16 (pairs ≤ 2·15·127, 8 of them < 2^15) and widens them times [sc, sc]; the min term is
// vpmaddwd of [m_j, m_j+1] with the activation sums [Σq_j, Σq_j+1] (|Σ| ≤ 32·127 fits s16).
// Q6_K: 2 vpmaddubsw per s16 sum (pairs ≤ 2·63·127), widened times [sc, sc]; its −32 offset as
// −32 · Σ_j sc_j · Σq_j, the same integer as Σ_j sc_j · (dot_j − 32 · Σq_j).
constexpr int64_t kQ4KSc = 2048, kQ4KM = 2048 + 128, kQ4KD = 2048 + 256, kQ4KDmin = 2048 + 256 + 64;
constexpr int64_t kQ6KQh = 2048, kQ6KSc = 3072, kQ6KD = 3072 + 256;

// 8 lanes of s16 pairs (a[o], b[o]) from 8 bytes each (unsigned or signed).
inline __m256i pairs16(const uint8_t* a, const uint8_t* b, bool is_signed) {
  const __m128i v = _mm_unpacklo_epi8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(a)),
                                      _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b)));
  return is_signed ? _mm256_cvtepi8_epi16(v) : _mm256_cvtepu8_epi16(v);
}

// The K formats' sub-block dots times their integer scales: s16 pair sums × [sc, sc] pairs by
// vpmaddwd, or (AVX-VNNI) int32 sums × sc by vpmulld — the same integers (|dot·sc| < 2^22).
#if DFL_AVX2_VNNI
inline __m256i scales32(const uint8_t* sc, bool is_signed) {  // 8 scales, one per int32 lane
  const __m128i v = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc));
  return is_signed ? _mm256_cvtepi8_epi32(v) : _mm256_cvtepu8_epi32(v);
}
inline __m256i scaled(__m256i dot, __m256i sc) { return _mm256_mullo_epi32(dot, sc); }
#else
inline __m256i scaled(__m256i dot, __m256i sc) { return _mm256_madd_epi16(dot, sc); }
#endif

inline __m256i bcast_pair16(int32_t lo, int32_t hi) {
  return _mm256_set1_epi32(static_cast<int32_t>((static_cast<uint32_t>(hi) << 16) |
                                                (static_cast<uint32_t>(lo) & 0xFFFFu)));
}

// Q4_K's unsigned values of a superblock, once for all its row groups: u[64 h + 16 c + 2 g] =
// lo, + 1 = hi (the vectors q4k16_super unpacks in its loop).
inline void q4k16_unpack(const uint8_t* sb, __m256i* u) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  for (int h = 0; h < 2; ++h)
    for (int cg = 0; cg < 32; ++cg) {
      const __m256i wv = load256(sb + cg * 64 + 32 * h);
      u[64 * h + 2 * cg] = _mm256_and_si256(wv, m4);
      u[64 * h + 2 * cg + 1] = _mm256_and_si256(_mm256_srli_epi16(wv, 4), m4);
    }
}

// Both K kernels walk one 8-output half (h) of the tile at a time: the accumulators of one half
// fit the 16 ymm registers, both halves' did not (they spilled to the stack on every step: Q4_K
// decoded at 10 GB/s, `perf annotate`). Per output the same integers and the same two fp steps.
// kPre: the values come from q4k16_unpack's u.
template <int MR, bool kPre>
void q4k16_super(const GgmlAct& a, int64_t m0, const uint8_t* sb, int64_t s, int64_t ns, const __m256i* u,
                 float* acc) {
  const int64_t ldq = a.K + 256, n32 = a.K / 32;
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const float* dp = reinterpret_cast<const float*>(sb + kQ4KD);
  const float* mp = reinterpret_cast<const float*>(sb + kQ4KDmin);
  for (int h = 0; h < 2; ++h) {
    __m256i isum[MR], msum[MR];
    for (int r = 0; r < MR; ++r) isum[r] = msum[r] = _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
      __m256i dlo[MR], dhi[MR];
      for (int r = 0; r < MR; ++r) dlo[r] = dhi[r] = _mm256_setzero_si256();
      for (int g = 0; g < 8; ++g) {
        __m256i lo, hi;
        if constexpr (kPre) {
          lo = u[64 * h + 16 * c + 2 * g];
          hi = u[64 * h + 16 * c + 2 * g + 1];
        } else {
          const __m256i wv = load256(sb + (c * 8 + g) * 64 + 32 * h);
          lo = _mm256_and_si256(wv, m4);
          hi = _mm256_and_si256(_mm256_srli_epi16(wv, 4), m4);
        }
        for (int r = 0; r < MR; ++r) {
          const int8_t* xq = a.q + (m0 + r) * ldq + 256 * s + 64 * c + 4 * g;
          const __m256i ql = bcast4(xq), qh = bcast4(xq + 32);
#if DFL_AVX2_VNNI  // int32 per output (4 products a step), times the scale below
          dlo[r] = _mm256_dpbusd_avx_epi32(dlo[r], lo, ql);
          dhi[r] = _mm256_dpbusd_avx_epi32(dhi[r], hi, qh);
#else
          dlo[r] = _mm256_add_epi16(dlo[r], _mm256_maddubs_epi16(lo, ql));
          dhi[r] = _mm256_add_epi16(dhi[r], _mm256_maddubs_epi16(hi, qh));
#endif
        }
      }
      const uint8_t* sc = sb + kQ4KSc + 32 * c + 8 * h;  // sub-blocks 2c (sc), 2c + 1 (sc + 16)
      const uint8_t* mn = sb + kQ4KM + 32 * c + 8 * h;
#if DFL_AVX2_VNNI
      const __m256i sclo = scales32(sc, false), schi = scales32(sc + 16, false);
#else
      const __m256i sclo = pairs16(sc, sc, false), schi = pairs16(sc + 16, sc + 16, false);
#endif
      const __m256i mpair = pairs16(mn, mn + 16, false);
      for (int r = 0; r < MR; ++r) {
        isum[r] = _mm256_add_epi32(isum[r], _mm256_add_epi32(scaled(dlo[r], sclo), scaled(dhi[r], schi)));
        const int32_t* b32 = a.s32 + (m0 + r) * n32 + 8 * s + 2 * c;
        msum[r] = _mm256_add_epi32(msum[r], _mm256_madd_epi16(mpair, bcast_pair16(b32[0], b32[1])));
      }
    }
    for (int r = 0; r < MR; ++r) {
      const __m256 dx = _mm256_set1_ps(a.d[(m0 + r) * ns + s]);
      float* ap = acc + (r * 8 + s % 8) * 16 + 8 * h;
      __m256 v = _mm256_loadu_ps(ap);
      v = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r]), _mm256_mul_ps(_mm256_loadu_ps(dp + 8 * h), dx), v);
      v = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum[r]), _mm256_mul_ps(_mm256_loadu_ps(mp + 8 * h), dx), v);
      _mm256_storeu_ps(ap, v);
    }
  }
}

// The 6-bit values of element group g (0..3) of one kPackedQ6K16 ql vector with its qh bits.
inline __m256i q6k16_values(__m256i qlv, __m256i qhv, int g) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i lo = g < 2 ? _mm256_and_si256(qlv, m4) : _mm256_and_si256(_mm256_srli_epi16(qlv, 4), m4);
  const __m256i hb = g == 0 ? _mm256_slli_epi16(qhv, 4)
                     : g == 1 ? _mm256_slli_epi16(qhv, 2)
                     : g == 2 ? qhv
                              : _mm256_srli_epi16(qhv, 2);
  return _mm256_or_si256(lo, _mm256_and_si256(hb, _mm256_set1_epi8(0x30)));
}

// Q6_K's 6-bit values of a superblock, once for all its row groups: u[64 h + 32 hq + 8 g + lg]
// (the vectors q6k16_super unpacks in its loop).
inline void q6k16_unpack(const uint8_t* sb, __m256i* u) {
  for (int h = 0; h < 2; ++h)
    for (int hq = 0; hq < 2; ++hq)
      for (int g = 0; g < 4; ++g)
        for (int lg = 0; lg < 8; ++lg)
          u[64 * h + 32 * hq + 8 * g + lg] =
              q6k16_values(load256(sb + ((hq * 2 + g % 2) * 8 + lg) * 64 + 32 * h),
                           load256(sb + kQ6KQh + (hq * 8 + lg) * 64 + 32 * h), g);
}

// kPre: the values come from q6k16_unpack's u.
template <int MR, bool kPre>
void q6k16_super(const GgmlAct& a, int64_t m0, const uint8_t* sb, int64_t s, int64_t ns, const __m256i* u6,
                 float* acc) {
  const int64_t ldq = a.K + 256, n16 = a.K / 16;
  const float* dp = reinterpret_cast<const float*>(sb + kQ6KD);
  for (int h = 0; h < 2; ++h) {  // one 8-output half at a time (above q4k16_super)
    __m256i isum[MR], corr[MR];
    for (int r = 0; r < MR; ++r) isum[r] = corr[r] = _mm256_setzero_si256();
    for (int hq = 0; hq < 2; ++hq) {
      for (int g = 0; g < 4; ++g) {
        for (int half = 0; half < 2; ++half) {  // sub-block j = 8hq + 2g + half: lg = 4 half .. +3
          const int j = 8 * hq + 2 * g + half;
          __m256i d0[MR], d1[MR];  // lg pairs (0, 1) and (2, 3) of the sub-block
          for (int r = 0; r < MR; ++r) d0[r] = d1[r] = _mm256_setzero_si256();
          for (int l4 = 0; l4 < 4; ++l4) {
            const int lg = 4 * half + l4;
            const __m256i u = kPre ? u6[64 * h + 32 * hq + 8 * g + lg]
                                   : q6k16_values(load256(sb + ((hq * 2 + g % 2) * 8 + lg) * 64 + 32 * h),
                                                  load256(sb + kQ6KQh + (hq * 8 + lg) * 64 + 32 * h), g);
            const int e = 128 * hq + 32 * g + 4 * lg;
            for (int r = 0; r < MR; ++r) {
              const __m256i q = bcast4(a.q + (m0 + r) * ldq + 256 * s + e);
#if DFL_AVX2_VNNI  // one int32 sum per output (no s16 limit to split around)
              d0[r] = _mm256_dpbusd_avx_epi32(d0[r], u, q);
#else
              __m256i& dd = l4 < 2 ? d0[r] : d1[r];
              dd = _mm256_add_epi16(dd, _mm256_maddubs_epi16(u, q));
#endif
            }
          }
          const uint8_t* sc = sb + kQ6KSc + 16 * j + 8 * h;
#if DFL_AVX2_VNNI
          const __m256i scv = scales32(sc, true);
          for (int r = 0; r < MR; ++r) isum[r] = _mm256_add_epi32(isum[r], scaled(d0[r], scv));
#else
          const __m256i scv = pairs16(sc, sc, true);
          for (int r = 0; r < MR; ++r)
            isum[r] = _mm256_add_epi32(isum[r], _mm256_add_epi32(scaled(d0[r], scv), scaled(d1[r], scv)));
#endif
        }
      }
    }
    // Σ_j sc_j · Σq_j over the 16 sub-blocks, two at a time.
    for (int jj = 0; jj < 16; jj += 2) {
      const uint8_t* sc = sb + kQ6KSc + 16 * jj + 8 * h;
      const __m256i sp = pairs16(sc, sc + 16, true);
      for (int r = 0; r < MR; ++r) {
        const int32_t* s16 = a.s16 + (m0 + r) * n16 + 16 * s + jj;
        corr[r] = _mm256_add_epi32(corr[r], _mm256_madd_epi16(sp, bcast_pair16(s16[0], s16[1])));
      }
    }
    for (int r = 0; r < MR; ++r) {
      const __m256 dx = _mm256_set1_ps(a.d[(m0 + r) * ns + s]);
      float* ap = acc + (r * 8 + s % 8) * 16 + 8 * h;
      const __m256i is = _mm256_sub_epi32(isum[r], _mm256_slli_epi32(corr[r], 5));
      _mm256_storeu_ps(ap, _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), _mm256_mul_ps(_mm256_loadu_ps(dp + 8 * h), dx),
                                           _mm256_loadu_ps(ap)));
    }
  }
}

// The kernels of the packed layouts behind one driver: run<MR, kPre>(a, m0, block, b, n_blocks,
// u, acc) adds rows m0 .. m0 + MR − 1 of block b into acc. Where kUnpacks, unpack(bp, u) puts a
// block's weights in the registers' form (u: 16 vectors, a K superblock 128) once for all its
// row groups, and run<MR, true> reads them from u (packed_tiles does this when there are several
// row groups); run<MR, false> unpacks in registers.
template <int T>
struct Q32Kernel {
  static constexpr int kRows = 4;  // rows per call (packed_tiles)
  static constexpr bool kUnpacks = T != kQ80;
  static void unpack(const uint8_t* bp, __m256i* u) { q32_unpack<T>(bp, u); }
  template <int MR, bool kPre>
  static void run(const GgmlAct& a, int64_t m0, const uint8_t* bp, int64_t b, int64_t, const __m256i* u,
                  float* acc) {
    q32x16_block<T, MR>(a, m0, bp, b, kPre ? u : nullptr, acc);
  }
};
struct Q4KKernel {
  static constexpr int kRows = 4;
  static constexpr bool kUnpacks = true;
  static void unpack(const uint8_t* bp, __m256i* u) { q4k16_unpack(bp, u); }
  template <int MR, bool kPre>
  static void run(const GgmlAct& a, int64_t m0, const uint8_t* bp, int64_t b, int64_t nb, const __m256i* u,
                  float* acc) {
    q4k16_super<MR, kPre>(a, m0, bp, b, nb, u, acc);
  }
};
struct Q6KKernel {
  static constexpr int kRows = 4;
  static constexpr bool kUnpacks = true;
  static void unpack(const uint8_t* bp, __m256i* u) { q6k16_unpack(bp, u); }
  template <int MR, bool kPre>
  static void run(const GgmlAct& a, int64_t m0, const uint8_t* bp, int64_t b, int64_t nb, const __m256i* u,
                  float* acc) {
    q6k16_super<MR, kPre>(a, m0, bp, b, nb, u, acc);
  }
};

// Every 64-byte line of [p, p + bytes) prefetched into L1 (hint T0) or L2 (T1): the packed
// tiles are one linear stream per thread, which the hardware prefetcher alone leaves below the
// read bandwidth (as on AVX-512: cpu/simd_avx512.h prefetch_lines).
// (Two functions, not a template over the hint: GCC types the hint as enum _mm_hint, clang as
// an int macro.)
inline void prefetch_lines_l1(const uint8_t* p, int64_t bytes) {
  for (int64_t o = 0; o < bytes; o += 64) _mm_prefetch(reinterpret_cast<const char*>(p + o), _MM_HINT_T0);
}
inline void prefetch_lines_l2(const uint8_t* p, int64_t bytes) {
  for (int64_t o = 0; o < bytes; o += 64) _mm_prefetch(reinterpret_cast<const char*>(p + o), _MM_HINT_T1);
}

// 16-output tiles [t0, t1) of a packed weight of nb blocks of BB bytes per tile: every block
// once for all M rows, in groups of Kernel::kRows = 4 rows (since the K kernels walk one
// 8-output half at a time; Emerald Rapids at M = 16, 32 int8x2 rows, 640×2048: Q6_K 690 → 470
// µs, Q4_K 390 → 360, with AVX-VNNI Q5_0 485 → 336; Q8_0 unchanged). Each block's lines are
// pulled into L1 `ahead` blocks early (about 2–3 KiB) and into L2 16 KiB early.
template <class Kernel, bool kPre>
void packed_tiles_with(const GgmlAct& a, int64_t M, const WeightMatrix& w, float* y, int64_t t0, int64_t t1,
                       int64_t nb, int64_t BB) {
  alignas(32) float acc[kGgmlRowChunk * 8 * 16];
  __m256i u[kPre ? 128 : 1];  // kPre: the block unpacked once for all row groups (Q32: 16 vectors)
  const int64_t ahead = (3072 + BB - 1) / BB;
  for (int64_t t = t0; t < t1; ++t) {
    const uint8_t* tile = static_cast<const uint8_t*>(w.packed) + t * nb * BB;
    for (int64_t i = 0; i < M * 8 * 16; ++i) acc[i] = 0.0f;
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* bp = tile + b * BB;
      prefetch_lines_l1(bp + ahead * BB, BB);
      prefetch_lines_l2(bp + 16384, BB);
      if constexpr (kPre) Kernel::unpack(bp, u);
      for (int64_t m0 = 0; m0 < M; m0 += Kernel::kRows) {
        float* ac = acc + m0 * 8 * 16;
        switch (M - m0 < Kernel::kRows ? M - m0 : Kernel::kRows) {
          case 1: Kernel::template run<1, kPre>(a, m0, bp, b, nb, u, ac); break;
          case 2: Kernel::template run<2, kPre>(a, m0, bp, b, nb, u, ac); break;
          case 3: if constexpr (Kernel::kRows >= 3) Kernel::template run<3, kPre>(a, m0, bp, b, nb, u, ac); break;
          default: if constexpr (Kernel::kRows >= 4) Kernel::template run<4, kPre>(a, m0, bp, b, nb, u, ac); break;
        }
      }
    }
    store_lane_sums(acc, M, w.n_out - t * 16, y + t * 16, w.n_out, a.pair);
  }
}

// The weights unpacked once per block where the kernel can and there are several row groups
// (AVX2 Q5_0 at 32 int8x2 rows, 2048×640: 520–570 → 350–390 µs; one row group keeps the
// in-register unpack, which the stack round trip made ~8 % slower).
template <class Kernel>
void packed_tiles(const GgmlAct& a, int64_t M, const WeightMatrix& w, float* y, int64_t t0, int64_t t1,
                  int64_t nb, int64_t BB) {
  if (Kernel::kUnpacks && M > Kernel::kRows)
    packed_tiles_with<Kernel, Kernel::kUnpacks>(a, M, w, y, t0, t1, nb, BB);
  else
    packed_tiles_with<Kernel, false>(a, M, w, y, t0, t1, nb, BB);
}

}  // namespace

void matmul_q32x16(const GgmlAct& a, int64_t M, const WeightMatrix& w, float* y, ThreadPool& pool) {
  const int64_t nb = w.n_in / 32;
  pool.parallel_for_redoable((w.n_out + 15) / 16, [&](int64_t t0, int64_t t1, int) {
    switch (w.dtype) {
      case DType::kQ8_0:
        return packed_tiles<Q32Kernel<kQ80>>(a, M, w, y, t0, t1, nb, kQ32Qs<kQ80> + kQ32Qh<kQ80> + 64);
      case DType::kQ5_0:
        return packed_tiles<Q32Kernel<kQ50>>(a, M, w, y, t0, t1, nb, kQ32Qs<kQ50> + kQ32Qh<kQ50> + 64);
      case DType::kQ4_0:
        return packed_tiles<Q32Kernel<kQ40>>(a, M, w, y, t0, t1, nb, kQ32Qs<kQ40> + kQ32Qh<kQ40> + 64);
      default: return;
    }
  });
}

void matmul_q4k16(const GgmlAct& a, int64_t M, const WeightMatrix& w, float* y, ThreadPool& pool) {
  pool.parallel_for_redoable((w.n_out + 15) / 16, [&](int64_t t0, int64_t t1, int) {
    packed_tiles<Q4KKernel>(a, M, w, y, t0, t1, w.n_in / 256, kQ4K16SuperBytes);
  });
}

void matmul_q6k16(const GgmlAct& a, int64_t M, const WeightMatrix& w, float* y, ThreadPool& pool) {
  pool.parallel_for_redoable((w.n_out + 15) / 16, [&](int64_t t0, int64_t t1, int) {
    packed_tiles<Q6KKernel>(a, M, w, y, t0, t1, w.n_in / 256, kQ6K16SuperBytes);
  });
}

}  // namespace dfl::cpu::avx2 (or avx2_vnni)
