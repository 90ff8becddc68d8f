// AVX2 kernels for the GGML block weights (Q8_0, Q4_0, Q5_0, Q4_K, Q5_K, Q6_K) in their original
// ggml blocks, one output at a time (the row kernels: ops::matmul on weights that are not
// prepacked, and the greedy screens' exact finish, ggml_row_dot), on machines without AVX-512
// (Zen 1-3, Haswell to Alder Lake). The math is fixed in kernels/ggml_matmul.cc; these compute
// the same bits as the portable and AVX-512 kernels:
//  * weights are unpacked in registers to unsigned bytes and multiplied with the int8
//    activations by vpmaddubsw (u8 × s8 pairs into s16) and vpmaddwd (pairs into s32). No pair
//    saturates: |u| ≤ 63 for every format but Q8_0, and Q8_0 multiplies its signed quants as
//    |w| · sign(q, w) (≤ 2 · 128 · 127 < 2^15), which is Σ (u − 128)·q, the format's dot;
//  * every integer partial sum is exact, so the reduction order inside a block does not matter;
//  * 32-element formats: 8 blocks are reduced together into one vector of 8 block dots (lane
//    b % 8 = block b), scaled and added into the 8 fp32 accumulators with one fma; lanes past
//    the row's last block add 0 · 0 (acc + 0: the lane keeps its bits);
//  * K formats: the sub-block dots are multiplied by their integer scales in the lanes and
//    reduced once per superblock; the fp part is two scalar fmas per superblock.
// Each weight block is unpacked once for all M (≤ kGgmlRowChunk = 32) activation rows. The
// prepacked layouts' tile kernels are cpu/ggml_avx2.cc; the activation quantization is
// cpu/ggml_quant_avx2.cc.
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/ggml_blocks_avx2.h"

namespace dfl::cpu::avx2 {

namespace {

inline float h2f(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

inline int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }

inline float reduce8(const float* a) {
  return ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
}

inline int32_t hsum_epi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

// 16 bytes of packed nibbles → 32 bytes: low nibbles (elements 0..15) then high (16..31).
inline __m256i nibbles32(const uint8_t* qs) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i m = _mm_set1_epi8(0x0F);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m), _mm_and_si128(q, m));
}

// The 8 partial-sum vectors of 8 blocks → the 8 block sums, block b in lane b.
inline __m256i reduce_blocks(const __m256i v[8]) {
  const __m256i a01 = _mm256_hadd_epi32(v[0], v[1]), a23 = _mm256_hadd_epi32(v[2], v[3]);
  const __m256i a45 = _mm256_hadd_epi32(v[4], v[5]), a67 = _mm256_hadd_epi32(v[6], v[7]);
  const __m256i b03 = _mm256_hadd_epi32(a01, a23), b47 = _mm256_hadd_epi32(a45, a67);
  return _mm256_add_epi32(_mm256_permute2x128_si256(b03, b47, 0x20),
                          _mm256_permute2x128_si256(b03, b47, 0x31));
}

template <int T>
constexpr int kBlockBytes = T == kQ80 ? 34 : T == kQ40 ? 18 : 22;

// The weight vector of one block: Q8_0 |w| (its signs in `sgn`), else the unsigned quants.
template <int T>
inline __m256i unpack32(const uint8_t* b, __m256i* sgn) {
  if constexpr (T == kQ80) {
    const __m256i w = load256(b + 2);
    *sgn = w;
    return _mm256_sign_epi8(w, w);
  } else if constexpr (T == kQ40) {
    return nibbles32(b + 2);
  } else {
    return _mm256_or_si256(nibbles32(b + 6), bits_to_16(b + 2));
  }
}

template <int T>
void range32(const GgmlAct& a, int64_t M, const WeightMatrix& w, float* y, int64_t n0, int64_t n1) {
  constexpr int BB = kBlockBytes<T>;
  const int64_t K = w.n_in, nb = K / 32, ng = (nb + 7) / 8, ldq = K + 256;
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* row = static_cast<const uint8_t*>(w.data) + n * nb * BB;
    __m256 acc[kGgmlRowChunk];
    for (int64_t m = 0; m < M; ++m) acc[m] = _mm256_setzero_ps();
    for (int64_t g = 0; g < ng; ++g) {
      const int nbg = static_cast<int>(imin(8, nb - 8 * g));
      const uint8_t* gb = row + 8 * g * BB;
      __m256i wv[8], sg[8];
      alignas(32) float wd[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (int i = 0; i < 8; ++i) {
        sg[i] = _mm256_setzero_si256();
        wv[i] = i < nbg ? unpack32<T>(gb + i * BB, &sg[i]) : _mm256_setzero_si256();
      }
      for (int i = 0; i < nbg; ++i) wd[i] = h2f(gb + i * BB);
      const __m256 wdv = _mm256_load_ps(wd);
      for (int64_t m = 0; m < M; ++m) {
        const int8_t* xq = a.q + m * ldq + 256 * g;
        __m256i v[8];
        for (int i = 0; i < 8; ++i) {
          const __m256i q = load256(xq + 32 * i);
          v[i] = dot32(wv[i], T == kQ80 ? _mm256_sign_epi8(q, sg[i]) : q);
        }
        __m256i dots = reduce_blocks(v);
        // The row's block sums and scales of this group (a partial group through a zeroed copy:
        // vpmaskmov loads are slow on Zen).
        const int32_t* bsp = a.s32 + m * nb + 8 * g;
        const float* dxp = a.d + m * nb + 8 * g;
        alignas(32) int32_t bst[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        alignas(32) float dxt[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        if (nbg < 8) {
          for (int i = 0; i < nbg; ++i) {
            bst[i] = bsp[i];
            dxt[i] = dxp[i];
          }
          bsp = bst;
          dxp = dxt;
        }
        if constexpr (T != kQ80) {
          const __m256i bs = load256(bsp);
          dots = _mm256_sub_epi32(dots, _mm256_slli_epi32(bs, kShift<T>));
        }
        const __m256 sc = _mm256_mul_ps(wdv, _mm256_loadu_ps(dxp));
        acc[m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dots), sc, acc[m]);
      }
    }
    for (int64_t m = 0; m < M; ++m) {
      alignas(32) float l[8];
      _mm256_store_ps(l, acc[m]);
      put_y(y, w.n_out, m, n, reduce8(l), a.pair);
    }
  }
}

inline void k4_scale_min(const uint8_t* s, int j, int* sc, int* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
    *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// Q4_K (Q5 = false) and Q5_K (Q5 = true).
template <bool Q5>
void range_k45(const GgmlAct& a, int64_t M, const WeightMatrix& w, float* y, int64_t n0, int64_t n1) {
  constexpr int BB = Q5 ? 176 : 144;
  const int64_t K = w.n_in, ns = K / 256, ldq = K + 256;
  const __m256i m4 = _mm256_set1_epi8(0x0F), b16 = _mm256_set1_epi8(16);
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* row = static_cast<const uint8_t*>(w.data) + n * ns * BB;
    alignas(32) float acc[kGgmlRowChunk][8] = {};
    for (int64_t s = 0; s < ns; ++s) {
      const uint8_t* blk = row + s * BB;
      const float d = h2f(blk), dmin = h2f(blk + 2);
      int sc[8];
      alignas(32) int32_t mn[8];
      for (int j = 0; j < 8; ++j) k4_scale_min(blk + 4, j, &sc[j], &mn[j]);
      const __m256i mnv = _mm256_load_si256(reinterpret_cast<const __m256i*>(mn));
      const uint8_t* qs = blk + (Q5 ? 48 : 16);
      __m256i qh = _mm256_setzero_si256();
      if (Q5) qh = load256(blk + 16);
      __m256i wv[8], scv[8];
      for (int c = 0; c < 4; ++c) {
        const __m256i q = load256(qs + 32 * c);
        __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
        if (Q5) {
          const __m256i bl = _mm256_set1_epi8(static_cast<char>(1 << (2 * c)));
          const __m256i bh = _mm256_set1_epi8(static_cast<char>(1 << (2 * c + 1)));
          lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, bl), bl), b16));
          hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, bh), bh), b16));
        }
        wv[2 * c] = lo;
        wv[2 * c + 1] = hi;
        scv[2 * c] = _mm256_set1_epi16(static_cast<int16_t>(sc[2 * c]));
        scv[2 * c + 1] = _mm256_set1_epi16(static_cast<int16_t>(sc[2 * c + 1]));
      }
      for (int64_t m = 0; m < M; ++m) {
        const int8_t* xs = a.q + m * ldq + 256 * s;
        __m256i t = _mm256_setzero_si256();
        for (int j = 0; j < 8; ++j)  // pairs ≤ 2·31·127, × scale ≤ 63: no overflow
          t = _mm256_add_epi32(t, _mm256_madd_epi16(_mm256_maddubs_epi16(wv[j], load256(xs + 32 * j)), scv[j]));
        const int32_t isum = hsum_epi32(t);
        const __m256i s32 = load256(a.s32 + m * (K / 32) + 8 * s);
        const int32_t msum = hsum_epi32(_mm256_mullo_epi32(mnv, s32));
        const float dx = a.d[m * ns + s];
        float& l = acc[m][s % 8];
        l = __builtin_fmaf(static_cast<float>(isum), d * dx, l);
        l = __builtin_fmaf(-static_cast<float>(msum), dmin * dx, l);
      }
    }
    for (int64_t m = 0; m < M; ++m) put_y(y, w.n_out, m, n, reduce8(acc[m]), a.pair);
  }
}

void range_q6k(const GgmlAct& a, int64_t M, const WeightMatrix& w, float* y, int64_t n0, int64_t n1) {
  constexpr int BB = 210;
  const int64_t K = w.n_in, ns = K / 256, ldq = K + 256;
  const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* row = static_cast<const uint8_t*>(w.data) + n * ns * BB;
    alignas(32) float acc[kGgmlRowChunk][8] = {};
    for (int64_t s = 0; s < ns; ++s) {
      const uint8_t* blk = row + s * BB;
      const float d = h2f(blk + 208);
      const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 192));
      const __m256i sclo = _mm256_cvtepi8_epi32(sc8), schi = _mm256_cvtepi8_epi32(_mm_srli_si128(sc8, 8));
      // 32-element chunk c = 2t + hh (t: 64-element quarter, h = t / 2, odd = t % 2): low
      // nibbles of ql[64h + 32hh ..] (odd: high nibbles), high bits (qh[32h ..] >> 2g) & 3 with
      // g = 2·odd + hh; sub-blocks 2c (chunk bytes 0-15) and 2c + 1 (16-31).
      __m256i wv[8], scv[8];
      for (int c = 0; c < 8; ++c) {
        const int t = c / 2, hh = c % 2, h = t / 2, odd = t % 2, g = 2 * odd + hh;
        const __m256i ql = load256(blk + 64 * h + 32 * hh);
        const __m256i lo = odd ? _mm256_and_si256(_mm256_srli_epi16(ql, 4), m4) : _mm256_and_si256(ql, m4);
        const __m256i qh = load256(blk + 128 + 32 * h);
        const __m256i hs = g == 0 ? _mm256_slli_epi16(qh, 4)
                           : g == 1 ? _mm256_slli_epi16(qh, 2)
                           : g == 2 ? qh
                                    : _mm256_srli_epi16(qh, 2);
        wv[c] = _mm256_or_si256(lo, _mm256_and_si256(hs, m30));
        scv[c] = _mm256_set_m128i(_mm_set1_epi16(static_cast<int8_t>(blk[192 + 2 * c + 1])),
                                  _mm_set1_epi16(static_cast<int8_t>(blk[192 + 2 * c])));
      }
      for (int64_t m = 0; m < M; ++m) {
        const int8_t* xs = a.q + m * ldq + 256 * s;
        __m256i t = _mm256_setzero_si256();
        for (int c = 0; c < 8; ++c)  // pairs ≤ 2·63·127, × |scale| ≤ 128: no overflow
          t = _mm256_add_epi32(t, _mm256_madd_epi16(_mm256_maddubs_epi16(wv[c], load256(xs + 32 * c)), scv[c]));
        const int32_t* ss = a.s16 + m * (K / 16) + 16 * s;
        const __m256i corr = _mm256_add_epi32(_mm256_mullo_epi32(load256(ss), sclo),
                                              _mm256_mullo_epi32(load256(ss + 8), schi));
        const int32_t isum = hsum_epi32(_mm256_sub_epi32(t, _mm256_slli_epi32(corr, 5)));
        const float dx = a.d[m * ns + s];
        float& l = acc[m][s % 8];
        l = __builtin_fmaf(static_cast<float>(isum), d * dx, l);
      }
    }
    for (int64_t m = 0; m < M; ++m) put_y(y, w.n_out, m, n, reduce8(acc[m]), a.pair);
  }
}

// Outputs [n0, n1) of any supported dtype (cpu::ggml_supported) by its row kernel.
void range_any(const GgmlAct& a, int64_t M, const WeightMatrix& w, float* y, int64_t n0, int64_t n1) {
  switch (w.dtype) {
    case DType::kQ8_0: return range32<kQ80>(a, M, w, y, n0, n1);
    case DType::kQ4_0: return range32<kQ40>(a, M, w, y, n0, n1);
    case DType::kQ5_0: return range32<kQ50>(a, M, w, y, n0, n1);
    case DType::kQ4_K: return range_k45<false>(a, M, w, y, n0, n1);
    case DType::kQ5_K: return range_k45<true>(a, M, w, y, n0, n1);
    case DType::kQ6_K: return range_q6k(a, M, w, y, n0, n1);
    default: return;
  }
}

}  // namespace

void matmul_ggml(const GgmlAct& a, int64_t M, const WeightMatrix& w, float* y, ThreadPool& pool) {
  pool.parallel_for_redoable(
      w.n_out, [&](int64_t n0, int64_t n1, int) { range_any(a, M, w, y, n0, n1); }, 16);
}

float ggml_row_dot(const GgmlAct& a, const WeightMatrix& w, int64_t n) {
  WeightMatrix one = w;  // row n alone: the kernels write y[0]
  one.data = static_cast<const uint8_t*>(w.data) + n * dtype_row_bytes(w.dtype, w.n_in);
  one.n_out = 1;
  GgmlAct a1 = a;
  a1.pair = 0;
  float y = 0.0f;
  range_any(a1, 1, one, &y, 0, 1);
  return y;
}

}  // namespace dfl::cpu::avx2
