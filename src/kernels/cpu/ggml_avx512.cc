// AVX-512 VNNI kernels for the GGML block weights (Q8_0, Q4_0, Q5_0, Q4_K, Q5_K, Q6_K). The math
// is fixed in kernels/ggml_matmul.cc; these compute the same bits:
//  * weights are unpacked in registers to unsigned bytes (Q8_0: q + 128) and multiplied with
//    the int8 activations by vpdpbusd — every integer partial sum is exact, so the reduction
//    order inside a block does not matter;
//  * 32-element formats: 8 blocks (one 256-element group) are reduced together into one vector
//    of 8 block dots (lane b % 8 = block b), scaled and added into the 8 fp32 accumulators with
//    one masked fma;
//  * K formats: the sub-block dots are multiplied by their integer scales in the lanes and
//    reduced once per superblock; the fp part is two scalar fmas per superblock.
// Each weight block is unpacked once for all M (≤ kGgmlRowChunk = 32) activation rows.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/ggml_blocks_avx512.h"
#include "kernels/cpu/simd_avx512.h"

namespace dfl::cpu::avx512 {

namespace {

inline int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }

inline float reduce8(const float* a) {
  return ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
}

template <int T>
constexpr int kBlockBytes = T == int(DType::kQ8_0) ? 34 : T == int(DType::kQ4_0) ? 18 : 22;
template <int T>
constexpr int kShift = T == int(DType::kQ8_0) ? 7 : T == int(DType::kQ4_0) ? 3 : 4;  // log2 off

// 4 vectors of 16 int32 partial sums (vector i: blocks 2i in lanes 0-7, 2i+1 in lanes 8-15) →
// the 8 block sums, block b in lane b.
inline __m256i reduce_blocks(const __m512i v[4]) {
  const __m512i a = _mm512_add_epi32(_mm512_unpacklo_epi32(v[0], v[1]), _mm512_unpackhi_epi32(v[0], v[1]));
  const __m512i b = _mm512_add_epi32(_mm512_unpacklo_epi32(v[2], v[3]), _mm512_unpackhi_epi32(v[2], v[3]));
  const __m512i c = _mm512_add_epi32(_mm512_unpacklo_epi64(a, b), _mm512_unpackhi_epi64(a, b));
  const __m256i lo = _mm512_castsi512_si256(c), hi = _mm512_extracti64x4_epi64(c, 1);
  const __m128i e = _mm_add_epi32(_mm256_castsi256_si128(lo), _mm256_extracti128_si256(lo, 1));
  const __m128i o = _mm_add_epi32(_mm256_castsi256_si128(hi), _mm256_extracti128_si256(hi, 1));
  return _mm256_set_m128i(_mm_unpackhi_epi32(e, o), _mm_unpacklo_epi32(e, o));
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
      __m512i wv[4];
      alignas(32) float wd[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (int i = 0; i < 4; ++i) {
        const __m256i lo = 2 * i < nbg ? unpack32<T>(gb + 2 * i * BB) : _mm256_setzero_si256();
        const __m256i hi = 2 * i + 1 < nbg ? unpack32<T>(gb + (2 * i + 1) * BB) : _mm256_setzero_si256();
        wv[i] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
      }
      for (int i = 0; i < nbg; ++i) wd[i] = h2f(gb + i * BB);
      const __m256 wdv = _mm256_load_ps(wd);
      const __mmask8 mk = static_cast<__mmask8>((1u << nbg) - 1);
      for (int64_t m = 0; m < M; ++m) {
        const int8_t* xq = a.q + m * ldq + 256 * g;
        __m512i v[4];
        for (int i = 0; i < 4; ++i)
          v[i] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv[i],
                                     _mm512_loadu_si512(xq + 64 * i));
        __m256i dots = reduce_blocks(v);
        const __m256i bs = _mm256_maskz_loadu_epi32(mk, a.s32 + m * nb + 8 * g);
        dots = _mm256_sub_epi32(dots, _mm256_slli_epi32(bs, kShift<T>));
        const __m256 sc = _mm256_mul_ps(wdv, _mm256_maskz_loadu_ps(mk, a.d + m * nb + 8 * g));
        acc[m] = _mm256_mask3_fmadd_ps(_mm256_cvtepi32_ps(dots), sc, acc[m], mk);
      }
    }
    for (int64_t m = 0; m < M; ++m) {
      alignas(32) float l[8];
      _mm256_store_ps(l, acc[m]);
      put_y(y, w.n_out, m, n, reduce8(l), a.pair);
    }
  }
}

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
      int sc[8], mn[8];
      for (int j = 0; j < 8; ++j) k4_scale_min(blk + 4, j, &sc[j], &mn[j]);
      const uint8_t* qs = blk + (Q5 ? 48 : 16);
      __m256i qh;
      if (Q5) qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16));
      __m512i wv[4], scv[4];
      for (int c = 0; c < 4; ++c) {
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * c));
        __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
        if (Q5) {
          lo = _mm256_or_si256(lo, _mm256_maskz_mov_epi8(
                                       _mm256_test_epi8_mask(qh, _mm256_set1_epi8(static_cast<char>(1 << (2 * c)))), b16));
          hi = _mm256_or_si256(hi, _mm256_maskz_mov_epi8(
                                       _mm256_test_epi8_mask(qh, _mm256_set1_epi8(static_cast<char>(1 << (2 * c + 1)))), b16));
        }
        wv[c] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
        scv[c] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi32(sc[2 * c])),
                                    _mm256_set1_epi32(sc[2 * c + 1]), 1);
      }
      for (int64_t m = 0; m < M; ++m) {
        const int8_t* xs = a.q + m * ldq + 256 * s;
        __m512i t = _mm512_setzero_si512();
        for (int c = 0; c < 4; ++c) {
          const __m512i dp = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv[c],
                                                 _mm512_loadu_si512(xs + 64 * c));
          t = _mm512_add_epi32(t, _mm512_mullo_epi32(dp, scv[c]));
        }
        const int32_t isum = _mm512_reduce_add_epi32(t);
        const int32_t* s32 = a.s32 + m * (K / 32) + 8 * s;
        int32_t msum = 0;
        for (int j = 0; j < 8; ++j) msum += mn[j] * s32[j];
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
  __m512i idx[4];
  for (int t = 0; t < 4; ++t)
    idx[t] = _mm512_set_epi32(4 * t + 3, 4 * t + 3, 4 * t + 3, 4 * t + 3, 4 * t + 2, 4 * t + 2,
                              4 * t + 2, 4 * t + 2, 4 * t + 1, 4 * t + 1, 4 * t + 1, 4 * t + 1,
                              4 * t, 4 * t, 4 * t, 4 * t);
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* row = static_cast<const uint8_t*>(w.data) + n * ns * BB;
    alignas(32) float acc[kGgmlRowChunk][8] = {};
    for (int64_t s = 0; s < ns; ++s) {
      const uint8_t* blk = row + s * BB;
      const float d = h2f(blk + 208);
      const __m512i scall = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 192)));
      __m512i wv[4], scv[4];
      for (int t = 0; t < 4; ++t) {
        wv[t] = q6k_values64(blk, t);
        scv[t] = _mm512_permutexvar_epi32(idx[t], scall);
      }
      for (int64_t m = 0; m < M; ++m) {
        const int8_t* xs = a.q + m * ldq + 256 * s;
        __m512i t = _mm512_setzero_si512();
        for (int c = 0; c < 4; ++c) {
          const __m512i dp = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv[c],
                                                 _mm512_loadu_si512(xs + 64 * c));
          t = _mm512_add_epi32(t, _mm512_mullo_epi32(dp, scv[c]));
        }
        const __m512i ss = _mm512_loadu_si512(a.s16 + m * (K / 16) + 16 * s);
        const int32_t corr = _mm512_reduce_add_epi32(_mm512_mullo_epi32(ss, scall));
        const int32_t isum = _mm512_reduce_add_epi32(t) - 32 * corr;
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
    case DType::kQ8_0: return range32<int(DType::kQ8_0)>(a, M, w, y, n0, n1);
    case DType::kQ4_0: return range32<int(DType::kQ4_0)>(a, M, w, y, n0, n1);
    case DType::kQ5_0: return range32<int(DType::kQ5_0)>(a, M, w, y, n0, n1);
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
  DFL_ASSERT(ggml_supported(int(w.dtype)));
  float y = 0.0f;
  range_any(a1, 1, one, &y, 0, 1);
  return y;
}

// ---- Q4_K repacked for 16 outputs per lane group (ops.h kPackedQ4K16) ---------------------------
// Per tile of 16 outputs, per superblock (kQ4K16SuperBytes bytes):
//   qs   [4 c][8 g][16 o][4]  = the ggml qs bytes 32c + 4g .. 32c + 4g + 3 of output o (low
//                              nibbles: sub-block 2c, high nibbles: sub-block 2c + 1)
//   sc   [8 j][16 o] u8, m [8 j][16 o] u8, d [16 o] f32, dmin [16 o] f32
// Lane o of every vector is output o: the integer dots of a sub-block come out per output with
// no horizontal reduction, then isum / msum and the fp steps are exactly those of the portable
// kernel (kernels/ggml_matmul.cc).
namespace {

constexpr int64_t kQ4KQs = 2048, kQ4KSc = 2048, kQ4KM = 2048 + 128, kQ4KD = 2048 + 256,
                  kQ4KDmin = 2048 + 256 + 64;

// Superblocks of the packed K formats prefetched ahead (every line, into L1), as the
// 32-element kernels below do with their blocks. Gemma head shape 262144×768, M = 1, 2 threads:
// none 4.57 ms Q4_K / 7.70 ms Q6_K; 1 ahead 3.24 / 5.96; 2 ahead 3.16 / 6.44; 4 ahead 2.91 / 6.57.
constexpr int64_t kPrefetchSupers = 1;

// The activation rows of one call for the superblock formats, superblock-major as Q32Panel
// (cpu_kernels.h): for superblock s, row m: q [s][m][256], sums [s][m][kKPanelSums(q6k)] (Q4_K:
// the 8 Σ of 32 as 4 int16 pairs, Σ_2c in the low half of pair c, Σ_2c+1 in the high — the
// vpdpwssd operand of the mins' part, |Σ| ≤ 32·127; Q6_K: the 16 Σ of 16 as int32), d [s][m].
// Built once per call by k_panel().
struct KPanel {
  const int8_t* q;
  const int32_t* sums;
  const float* d;
};
constexpr int64_t kKPanelSums(bool q6k) { return q6k ? 8 : 4; }

// One set of buffers per form (Q4_K / Q6_K), so a call can hold both (matmul_packed_many).
KPanel k_panel(const GgmlAct& a, int64_t M, bool q6k) {
  const int64_t ns = a.K / 256, ldq = a.K + 256;
  thread_local std::vector<int8_t> qs[2];
  thread_local std::vector<int32_t> sums_s[2];
  thread_local std::vector<float> ds[2];
  std::vector<int8_t>& q = qs[q6k];
  std::vector<int32_t>& sums = sums_s[q6k];
  std::vector<float>& d = ds[q6k];
  const int64_t per = kKPanelSums(q6k);
  if (q.size() < size_t(M * ns * 256)) q.resize(size_t(M * ns * 256));
  if (sums.size() < size_t(M * ns * per)) sums.resize(size_t(M * ns * per));
  if (d.size() < size_t(M * ns)) d.resize(size_t(M * ns));
  for (int64_t s = 0; s < ns; ++s)
    for (int64_t m = 0; m < M; ++m) {
      std::memcpy(q.data() + (s * M + m) * 256, a.q + m * ldq + 256 * s, 256);
      int32_t* dst = sums.data() + (s * M + m) * per;
      const int32_t* src = q6k ? a.s16 + m * (a.K / 16) + 16 * s : a.s32 + m * (a.K / 32) + 8 * s;
      for (int c = 0; c < per; ++c)
        dst[c] = int32_t((uint32_t(src[2 * c]) & 0xffffu) | (uint32_t(src[2 * c + 1]) << 16));
      d[size_t(s * M + m)] = a.d[m * ns + s];
    }
  return KPanel{q.data(), sums.data(), d.data()};
}

// p: the panel advanced to superblock s, row m0.
// Rows per q4k16_super group: 8 (24 int32 accumulators in flight; Zen 5 had measured 8 no
// faster than 4, Emerald Rapids 640×2048 at M = 16 (32 int8x2 rows): 194–200 → 151–194 µs,
// 262144×768 27–37 → 21–25 ms, once the mins' part ran on vpdpwssd).
constexpr int kQ4KRows = 8;

template <int MR>
void q4k16_super(const KPanel& p, const uint8_t* sb, int64_t s, float* acc /* [MR][8][16] */) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  __m512i isum[MR];
  for (int r = 0; r < MR; ++r) isum[r] = _mm512_setzero_si512();
  for (int c = 0; c < 4; ++c) {
    __m512i dlo[MR], dhi[MR];
    for (int r = 0; r < MR; ++r) dlo[r] = dhi[r] = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int g = 0; g < 8; ++g) {
      const __m512i wv = _mm512_loadu_si512(sb + (c * 8 + g) * 64);
      const __m512i lo = _mm512_and_si512(wv, m4);
      const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(wv, 4), m4);
#pragma GCC unroll 8
      for (int r = 0; r < MR; ++r) {
        const int8_t* xq = p.q + 256 * r + 64 * c + 4 * g;
        dlo[r] = _mm512_dpbusd_epi32(dlo[r], lo, bcast4(xq));
        dhi[r] = _mm512_dpbusd_epi32(dhi[r], hi, bcast4(xq + 32));
      }
    }
    const __m512i sclo = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sb + kQ4KSc + 32 * c)));
    const __m512i schi = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sb + kQ4KSc + 32 * c + 16)));
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r)
      isum[r] = _mm512_add_epi32(isum[r], _mm512_add_epi32(_mm512_mullo_epi32(dlo[r], sclo),
                                                           _mm512_mullo_epi32(dhi[r], schi)));
  }
  // The mins' part: Σ_j m_j·(Σ of sub-block j's 32 x), after the dots (fewer live registers), two
  // sub-blocks per vpdpwssd: lane o holds (m_2c, m_2c+1) of output o as int16 (m ≤ 63), the row's
  // pair of sums (the panel's) is broadcast — exact, the integers of 8 vpmulld.
  __m512i mv[4];
  for (int c = 0; c < 4; ++c) {
    const uint8_t* mp = sb + kQ4KM + 32 * c;
    mv[c] = _mm512_or_si512(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(mp))),
                            _mm512_slli_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(mp + 16))), 16));
  }
  const __m512 d = _mm512_loadu_ps(reinterpret_cast<const float*>(sb + kQ4KD));
  const __m512 dmin = _mm512_loadu_ps(reinterpret_cast<const float*>(sb + kQ4KDmin));
  for (int r = 0; r < MR; ++r) {
    const int32_t* pairs = p.sums + kKPanelSums(false) * r;
    __m512i msum = _mm512_setzero_si512();
    for (int c = 0; c < 4; ++c) msum = _mm512_dpwssd_epi32(msum, mv[c], _mm512_set1_epi32(pairs[c]));
    const __m512 dx = _mm512_set1_ps(p.d[r]);
    float* ap = acc + (r * 8 + s % 8) * 16;
    __m512 v = lane_acc(ap, s);
    v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[r]), _mm512_mul_ps(d, dx), v);
    v = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(msum), _mm512_mul_ps(dmin, dx), v);
    _mm512_storeu_ps(ap, v);
  }
}

// The panel advanced to superblock s, rows from m0.
inline KPanel k_panel_at(const KPanel& p, int64_t M, int64_t s, int64_t m0, bool q6k) {
  const int64_t i = s * M + m0;
  return KPanel{p.q + 256 * i, p.sums + kKPanelSums(q6k) * i, p.d + i};
}

void q4k16_tiles(const KPanel& p, int64_t M, const WeightMatrix& w, float* y, int64_t pair, int64_t t0,
                 int64_t t1) {
  const int64_t ns = w.n_in / 256;
  alignas(64) float acc[kGgmlRowChunk * 8 * 16];
  for (int64_t t = t0; t < t1; ++t) {
    const uint8_t* tile = static_cast<const uint8_t*>(w.packed) + t * ns * kQ4K16SuperBytes;
    zero_unvisited_lanes(acc, M, ns);
    for (int64_t s = 0; s < ns; ++s) {
      const uint8_t* sb = tile + s * kQ4K16SuperBytes;
      prefetch_lines(sb + kPrefetchSupers * kQ4K16SuperBytes, kQ4K16SuperBytes);
      prefetch_lines_l2(sb, kQ4K16SuperBytes);
      for (int64_t m0 = 0; m0 < M; m0 += kQ4KRows) {
        float* ac = acc + m0 * 8 * 16;
        const KPanel ps = k_panel_at(p, M, s, m0, false);
        with_rows<kQ4KRows>(M - m0, [&](auto R) { q4k16_super<R.value>(ps, sb, s, ac); });
      }
    }
    store_lane_sums(acc, M, w.n_out - t * 16, y + t * 16, w.n_out, 0, pair);
  }
}

}  // namespace

void matmul_q4k16(const GgmlAct& a, int64_t M, const WeightMatrix& w, float* y, ThreadPool& pool) {
  const KPanel p = k_panel(a, M, false);
  pool.parallel_for_redoable((w.n_out + 15) / 16,
                             [&](int64_t t0, int64_t t1, int) { q4k16_tiles(p, M, w, y, a.pair, t0, t1); });
}

}  // namespace dfl::cpu::avx512

// ---- Q8_0 / Q5_0 / Q4_0 repacked for 16 outputs per lane group (ops.h kPackedQ32x16) ----------
// Per tile of 16 outputs, per 32-block (kQ32x16BlockBytes(T) bytes):
//   Q8_0: u [8 g][16 o][4] (q + 128, elements 4g..4g+3), d [16] f32
//   Q5_0 / Q4_0: qs [4 g][16 o][4] (the ggml qs bytes 4g..4g+3: low nibbles = elements 4g + i,
//         high = 16 + 4g + i), Q5_0 only: qh [8 (lo g0..3, hi g0..3)] u64 masks (bit 4o + i =
//         the 5th bit of that group's byte 4o + i), d [16] f32
// Integer dots per output in the lanes, then exactly the fp steps of the portable int8 kernel.
namespace dfl::cpu::avx512 {
namespace {

template <int T>
constexpr int64_t kQ32Qs = T == int(DType::kQ8_0) ? 512 : 256;
template <int T>
constexpr int64_t kQ32Qh = T == int(DType::kQ5_0) ? 64 : 0;

// The dots start from p.nc = −(Σx << log2 of the weight offset): the same exact integers as
// subtracting it after, one broadcast load instead of a shift, a move and a subtraction.
// Each row's dot runs as C = kDotChains<MR> partial sums (step i of the 8 goes to chain i % C).
template <int T, int MR>
void q32x16_block(const int8_t* xq /* [MR][32] */, const int32_t* nc, const float* dx,
                  const uint8_t* bp, int64_t b, float* acc) {
  constexpr int C = kDotChains<MR>;
  __m512i dot[MR][C];
  for (int r = 0; r < MR; ++r) {
    dot[r][0] = _mm512_set1_epi32(nc[r]);
    for (int c = 1; c < C; ++c) dot[r][c] = _mm512_setzero_si512();
  }
  if (T == int(DType::kQ8_0)) {
#pragma GCC unroll 8
    for (int g = 0; g < 8; ++g) {
      const __m512i wv = _mm512_loadu_si512(bp + 64 * g);
#pragma GCC unroll 8
      for (int r = 0; r < MR; ++r)
        dot[r][g % C] = _mm512_dpbusd_epi32(dot[r][g % C], wv, bcast4(xq + 32 * r + 4 * g));
    }
  } else {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i b16 = _mm512_set1_epi8(16);
#pragma GCC unroll 4
    for (int g = 0; g < 4; ++g) {
      const __m512i wv = _mm512_loadu_si512(bp + 64 * g);
      __m512i lo = _mm512_and_si512(wv, m4), hi = _mm512_and_si512(_mm512_srli_epi16(wv, 4), m4);
      if (T == int(DType::kQ5_0)) {  // u = nibble + 16 · 5th bit
        lo = _mm512_mask_add_epi8(lo, fifth_bit_mask(bp + 256, g), lo, b16);
        hi = _mm512_mask_add_epi8(hi, fifth_bit_mask(bp + 256, 4 + g), hi, b16);
      }
#pragma GCC unroll 8
      for (int r = 0; r < MR; ++r) {
        const int c0 = (2 * g) % C, c1 = (2 * g + 1) % C;
        dot[r][c0] = _mm512_dpbusd_epi32(dot[r][c0], lo, bcast4(xq + 32 * r + 4 * g));
        dot[r][c1] = _mm512_dpbusd_epi32(dot[r][c1], hi, bcast4(xq + 32 * r + 4 * g + 16));
      }
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int w = C / 2; w >= 1; w /= 2)
      for (int c = 0; c < w; ++c) dot[r][c] = _mm512_add_epi32(dot[r][c], dot[r][c + w]);
  const __m512 d = _mm512_loadu_ps(reinterpret_cast<const float*>(bp + kQ32Qs<T> + kQ32Qh<T>));
  for (int r = 0; r < MR; ++r) {
    float* ap = acc + (r * 8 + b % 8) * 16;
    _mm512_storeu_ps(ap, _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[r][0]), _mm512_mul_ps(d, _mm512_set1_ps(dx[r])),
                                         lane_acc(ap, b)));
  }
}

// Every line of a weight block this far ahead into L1 (the tile-major layout is one linear
// stream per thread). Measured on the Gemma head (262144×640, M = 1, 2 threads): one line per
// block 4 blocks ahead (the former prefetch) 7.3 ms Q8_0 / 5.3 ms Q5_0, every line 4 / 6 / 8 / 16
// blocks ahead 5.2 / 5.3 / 5.4 / 6.2 ms Q8_0 and 3.6 / 3.1 / 3.1 / 2.9 ms Q5_0.
constexpr int64_t kPrefetchBlocks32 = 6;

template <int T>
void q32x16_tiles(const Q32Panel& p, int64_t M, const WeightMatrix& w, float* y, int64_t pair,
                  int64_t t0, int64_t t1) {
  const int64_t nb = w.n_in / 32, BB = kQ32Qs<T> + kQ32Qh<T> + 64;
  alignas(64) float acc[kGgmlRowChunk * 8 * 16];
  for (int64_t t = t0; t < t1; ++t) {
    const uint8_t* tile = static_cast<const uint8_t*>(w.packed) + t * nb * BB;
    zero_unvisited_lanes(acc, M, nb);
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* bp = tile + b * BB;
      prefetch_lines(bp + kPrefetchBlocks32 * BB, BB);
      prefetch_lines_l2(bp, BB);
      const int8_t* xq = p.q + b * M * 32;
      const int32_t* nc = p.nc + b * M;
      const float* dx = p.dx + b * M;
      for (int64_t m0 = 0; m0 < M; m0 += 8)
        with_rows(M - m0, [&](auto R) {
          q32x16_block<T, R.value>(xq + 32 * m0, nc + m0, dx + m0, bp, b, acc + m0 * 8 * 16);
        });
    }
    store_lane_sums(acc, M, w.n_out - t * 16, y + t * 16, w.n_out, 0, pair);
  }
}

}  // namespace

void matmul_q32x16(const GgmlAct& a, int64_t M, const WeightMatrix& w, float* y, ThreadPool& pool) {
  const int shift = w.dtype == DType::kQ8_0 ? kShift<int(DType::kQ8_0)>
                    : w.dtype == DType::kQ5_0 ? kShift<int(DType::kQ5_0)> : kShift<int(DType::kQ4_0)>;
  const Q32Panel p = q32_panel(a, M, -(1 << shift), 1.0f);
  pool.parallel_for_redoable((w.n_out + 15) / 16, [&](int64_t t0, int64_t t1, int) {
    switch (w.dtype) {
      case DType::kQ8_0: return q32x16_tiles<int(DType::kQ8_0)>(p, M, w, y, a.pair, t0, t1);
      case DType::kQ5_0: return q32x16_tiles<int(DType::kQ5_0)>(p, M, w, y, a.pair, t0, t1);
      case DType::kQ4_0: return q32x16_tiles<int(DType::kQ4_0)>(p, M, w, y, a.pair, t0, t1);
      default: return;
    }
  });
}

}  // namespace dfl::cpu::avx512

// ---- Q6_K repacked for 16 outputs per lane group (ops.h kPackedQ6K16) ---------------------------
// Per tile of 16 outputs, per superblock (kQ6K16SuperBytes):
//   ql [2 h][2 p][8 lg][16 o][4] = ggml ql bytes 64h + 32p + 4lg .. +3 of output o
//   qh [2 h][8 lg][16 o][4]      = ggml qh bytes 32h + 4lg .. +3
//   sc [16 j][16 o] i8, d [16 o] f32
// Element e = 128h + 32g + 4lg + i takes the low (g < 2) or high (g ≥ 2) nibble of ql[h][g % 2]
// and bits 2g, 2g + 1 of qh[h]; its sub-block is j = e / 16.
namespace dfl::cpu::avx512 {
namespace {

template <int MR>
void q6k16_super(const KPanel& p, const uint8_t* sb, int64_t s, float* acc) {
  __m512i isum[MR];
  for (int r = 0; r < MR; ++r) isum[r] = _mm512_setzero_si512();
  for (int h = 0; h < 2; ++h) {
    for (int g = 0; g < 4; ++g) {
      for (int half = 0; half < 2; ++half) {  // sub-block j = 8h + 2g + half: lg = 4 half .. +3
        const int j = 8 * h + 2 * g + half;
        __m512i dj[MR];
        for (int r = 0; r < MR; ++r) dj[r] = _mm512_setzero_si512();
        for (int l4 = 0; l4 < 4; ++l4) {
          const int lg = 4 * half + l4;
          const __m512i qlv = _mm512_loadu_si512(sb + ((h * 2 + g % 2) * 8 + lg) * 64);
          const __m512i qhv = _mm512_loadu_si512(sb + 2048 + (h * 8 + lg) * 64);
          const __m512i u = q6k16_values(qlv, qhv, g);
          const int e = 128 * h + 32 * g + 4 * lg;
#pragma GCC unroll 8
          for (int r = 0; r < MR; ++r)
            dj[r] = _mm512_dpbusd_epi32(dj[r], u, bcast4(p.q + 256 * r + e));
        }
        const __m512i scv = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sb + 3072 + 16 * j)));
#pragma GCC unroll 8
        for (int r = 0; r < MR; ++r) isum[r] = _mm512_add_epi32(isum[r], _mm512_mullo_epi32(dj[r], scv));
      }
    }
  }
  // The offset: u = q + 32, so Σ_j sc_j·(dot_j − 32·Σ_j) = isum − 32·Σ_j sc_j·Σ_j, the second sum
  // two sub-blocks per vpdpwssd (lane o: (sc_2i, sc_2i+1) of output o as int16, the row's pair of
  // sums broadcast) — exact, the integers of the per-sub-block subtraction.
  __m512i scp[8];
  for (int i = 0; i < 8; ++i) {
    const uint8_t* sp = sb + 3072 + 32 * i;
    scp[i] = _mm512_or_si512(
        _mm512_and_si512(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sp))), _mm512_set1_epi32(0xffff)),
        _mm512_slli_epi32(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sp + 16))), 16));
  }
  for (int r = 0; r < MR; ++r) {
    const int32_t* pairs = p.sums + kKPanelSums(true) * r;
    __m512i corr = _mm512_setzero_si512();
    for (int i = 0; i < 8; ++i) corr = _mm512_dpwssd_epi32(corr, scp[i], _mm512_set1_epi32(pairs[i]));
    isum[r] = _mm512_sub_epi32(isum[r], _mm512_slli_epi32(corr, 5));
  }
  const __m512 d = _mm512_loadu_ps(reinterpret_cast<const float*>(sb + 3072 + 256));
  for (int r = 0; r < MR; ++r) {
    const __m512 dx = _mm512_set1_ps(p.d[r]);
    float* ap = acc + (r * 8 + s % 8) * 16;
    _mm512_storeu_ps(ap, _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[r]), _mm512_mul_ps(d, dx), lane_acc(ap, s)));
  }
}

void q6k16_tiles(const KPanel& p, int64_t M, const WeightMatrix& w, float* y, int64_t pair, int64_t t0,
                 int64_t t1) {
  const int64_t ns = w.n_in / 256;
  alignas(64) float acc[kGgmlRowChunk * 8 * 16];
  for (int64_t t = t0; t < t1; ++t) {
    const uint8_t* tile = static_cast<const uint8_t*>(w.packed) + t * ns * kQ6K16SuperBytes;
    zero_unvisited_lanes(acc, M, ns);
    for (int64_t s = 0; s < ns; ++s) {
      const uint8_t* sb = tile + s * kQ6K16SuperBytes;
      prefetch_lines(sb + kPrefetchSupers * kQ6K16SuperBytes, kQ6K16SuperBytes);
      prefetch_lines_l2(sb, kQ6K16SuperBytes);
      for (int64_t m0 = 0; m0 < M; m0 += 8) {
        float* ac = acc + m0 * 8 * 16;
        const KPanel ps = k_panel_at(p, M, s, m0, true);
        with_rows(M - m0, [&](auto R) { q6k16_super<R.value>(ps, sb, s, ac); });
      }
    }
    store_lane_sums(acc, M, w.n_out - t * 16, y + t * 16, w.n_out, 0, pair);
  }
}

}  // namespace

void matmul_q6k16(const GgmlAct& a, int64_t M, const WeightMatrix& w, float* y, ThreadPool& pool) {
  const KPanel p = k_panel(a, M, true);
  pool.parallel_for_redoable((w.n_out + 15) / 16,
                             [&](int64_t t0, int64_t t1, int) { q6k16_tiles(p, M, w, y, a.pair, t0, t1); });
}

}  // namespace dfl::cpu::avx512

// ---- several packed weights of one input in one pool job (ops::matmul_same_input) ------------
namespace dfl::cpu::avx512 {

bool matmul_packed_many(const GgmlAct& a, int64_t M, const WeightMatrix* const* ws, float* const* ys,
                        int n, ThreadPool& pool) {
  if (n < 1 || n > kPackedManyMax) return false;
  bool q32 = false, q4k = false, q6k = false, q5 = false, q4 = false;
  for (int i = 0; i < n; ++i) {
    q32 |= ws[i]->packed_format == kPackedQ32x16;
    q5 |= ws[i]->packed_format == kPackedQ32x16 && ws[i]->dtype == DType::kQ5_0;
    q4 |= ws[i]->packed_format == kPackedQ32x16 && ws[i]->dtype == DType::kQ4_0;
    q4k |= ws[i]->packed_format == kPackedQ4K16;
    q6k |= ws[i]->packed_format == kPackedQ6K16;
    if (ws[i]->packed_format != kPackedQ32x16 && ws[i]->packed_format != kPackedQ4K16 &&
        ws[i]->packed_format != kPackedQ6K16)
      return false;
  }
  // The panels of every form the group holds, built once. A 32-element panel's chain starts
  // nc depend on the format's offset (kShift): one nc array per format, the q and dx shared.
  Q32Panel p32[3] = {};  // Q8_0, Q5_0, Q4_0
  thread_local std::vector<int32_t> nc_more[2];
  if (q32) {
    p32[0] = q32_panel(a, M, -(1 << kShift<int(DType::kQ8_0)>), 1.0f);
    const int shifts[2] = {kShift<int(DType::kQ5_0)>, kShift<int(DType::kQ4_0)>};
    const int64_t nb = a.K / 32;
    const bool present[2] = {q5, q4};
    for (int j = 0; j < 2; ++j) {
      if (!present[j]) continue;
      std::vector<int32_t>& nc = nc_more[j];
      if (nc.size() < size_t(nb * M)) nc.resize(size_t(nb * M));
      for (int64_t b = 0; b < nb; ++b)  // as q32_panel: nc [b][m] = corr_mul · Σ
        for (int64_t m = 0; m < M; ++m) nc[size_t(b * M + m)] = -(1 << shifts[j]) * a.s32[m * nb + b];
      p32[1 + j] = Q32Panel{p32[0].q, nc.data(), p32[0].dx};
    }
  }
  const KPanel pk4 = q4k ? k_panel(a, M, false) : KPanel{};
  const KPanel pk6 = q6k ? k_panel(a, M, true) : KPanel{};
  int64_t first[kPackedManyMax + 1] = {0};  // part i's tiles are [first[i], first[i + 1])
  for (int i = 0; i < n; ++i) first[i + 1] = first[i] + (ws[i]->n_out + 15) / 16;
  pool.parallel_for_redoable(first[n], [&](int64_t t0, int64_t t1, int) {
    for (int i = 0; i < n; ++i) {
      const int64_t b = std::max(t0, first[i]) - first[i], e = std::min(t1, first[i + 1]) - first[i];
      if (b >= e) continue;
      const WeightMatrix& w = *ws[i];
      if (w.packed_format == kPackedQ4K16) {
        q4k16_tiles(pk4, M, w, ys[i], a.pair, b, e);
      } else if (w.packed_format == kPackedQ6K16) {
        q6k16_tiles(pk6, M, w, ys[i], a.pair, b, e);
      } else {
        switch (w.dtype) {
          case DType::kQ8_0: q32x16_tiles<int(DType::kQ8_0)>(p32[0], M, w, ys[i], a.pair, b, e); break;
          case DType::kQ5_0: q32x16_tiles<int(DType::kQ5_0)>(p32[1], M, w, ys[i], a.pair, b, e); break;
          case DType::kQ4_0: q32x16_tiles<int(DType::kQ4_0)>(p32[2], M, w, ys[i], a.pair, b, e); break;
          default: break;
        }
      }
    }
  });
  return true;
}

}  // namespace dfl::cpu::avx512
