// AVX2 + FMA + F16C weight-streaming matmul for machines without AVX-512: every weight dtype
// (F32, BF16, F16, F8_E4M3 + block scales) is widened to fp32 in registers and multiplied with
// fp32 activations. Same tiling and batch-invariance argument as matmul_avx512.cc: 4 weight
// rows per tile, MR ≤ 3 activation rows per micro-kernel, one accumulator per output, one
// reduce4() tree for every output. K tails: x is a zero-padded copy; the weight tail is copied
// into a zero-padded stack buffer. With more than one row block over BF16 / F16 weights, each
// tile's 4 rows are widened to fp32 once into per-thread scratch (exact: the same values).
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/cpu_kernels.h"

namespace dfl::cpu::avx2 {

namespace {

constexpr int kNR = 4;
constexpr int kMR = 3;  // 12 accumulators + 4 weights ≤ 16 ymm

inline int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }

inline __m128 reduce4(__m256 a, __m256 b, __m256 c, __m256 d) {
  const __m256 ab = _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
  const __m256 cd = _mm256_add_ps(_mm256_permute2f128_ps(c, d, 0x20), _mm256_permute2f128_ps(c, d, 0x31));
  __m256 h = _mm256_hadd_ps(ab, cd);
  h = _mm256_hadd_ps(h, h);
  return _mm_unpacklo_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

// 8 weights as fp32 from a pointer to 8 elements of dtype DT (F8: scaled by 2^-8).
template <DType DT>
inline __m256 load_w8(const void* p) {
  if constexpr (DT == DType::kF32) {
    return _mm256_loadu_ps(static_cast<const float*>(p));
  } else if constexpr (DT == DType::kBF16) {
    const __m128i h = _mm_loadu_si128(static_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  } else if constexpr (DT == DType::kF16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(static_cast<const __m128i*>(p)));
  } else {  // F8_E4M3
    const __m128i v = _mm_cvtepu8_epi16(_mm_loadl_epi64(static_cast<const __m128i*>(p)));
    const __m128i sign = _mm_slli_epi16(_mm_and_si128(v, _mm_set1_epi16(0x80)), 8);
    const __m128i mag = _mm_slli_epi16(_mm_and_si128(v, _mm_set1_epi16(0x7f)), 7);
    return _mm256_cvtph_ps(_mm_or_si128(sign, mag));
  }
}

// One weight row of K elements of dtype DT as fp32 at dst (exact for BF16 / F16).
template <DType DT>
void widen_row(const char* src, int64_t K, int64_t esz, float* dst) {
  int64_t k = 0;
  for (; k + 8 <= K; k += 8) _mm256_storeu_ps(dst + k, load_w8<DT>(src + k * esz));
  if (k < K) {
    alignas(32) unsigned char tl[32] = {};
    std::memcpy(tl, src + k * esz, static_cast<size_t>((K - k) * esz));
    _mm256_storeu_ps(dst + k, load_w8<DT>(tl));
  }
}

// The tile's MR × kNR outputs over k in [kb, ke) into acc (one fp32 FMA chain per output and
// lane, k ascending). The weight dtype is a template parameter so that the loop holds the 12
// accumulators, the MR activation vectors and one weight vector in the 16 ymm registers (a
// dtype switch per step had spilled the accumulators: `perf annotate`, the AVX2 prefill).
template <int MR, DType DT>
inline void tile_steps(const float* xp, int64_t ldx, const char* const* wr, int64_t esz, int64_t kb, int64_t ke,
                       const __m256* sc, __m256 (&acc)[MR][kNR]) {
  int64_t k = kb;
  for (; k + 8 <= ke; k += 8) {
    __m256 xv[MR];
    for (int i = 0; i < MR; ++i) xv[i] = _mm256_loadu_ps(xp + i * ldx + k);
    for (int j = 0; j < kNR; ++j) {
      __m256 wv = load_w8<DT>(wr[j] + k * esz);
      if constexpr (DT == DType::kF8E4M3) wv = _mm256_mul_ps(wv, sc[j]);
      for (int i = 0; i < MR; ++i) acc[i][j] = _mm256_fmadd_ps(xv[i], wv, acc[i][j]);
    }
  }
  if (k >= ke) return;
  // The last partial 8-chunk: the weights through a zero-padded copy; x beyond ke inside it is
  // either the next scale block or zero padding: masked.
  alignas(32) unsigned char tail[32];
  const int64_t valid = ke - k;
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256 xm = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(valid)), lanes));
  __m256 xv[MR];
  for (int i = 0; i < MR; ++i) xv[i] = _mm256_and_ps(_mm256_loadu_ps(xp + i * ldx + k), xm);
  for (int j = 0; j < kNR; ++j) {
    std::memset(tail, 0, sizeof(tail));
    std::memcpy(tail, wr[j] + k * esz, static_cast<size_t>(valid * esz));
    __m256 wv = load_w8<DT>(tail);
    if constexpr (DT == DType::kF8E4M3) wv = _mm256_mul_ps(wv, sc[j]);
    for (int i = 0; i < MR; ++i) acc[i][j] = _mm256_fmadd_ps(xv[i], wv, acc[i][j]);
  }
}

// widened (BF16 / F16 weights, several row blocks): the tile's kNR weight rows already widened
// to fp32 (row j at widened + j * ldw), read instead of w's (the same values, so the same bits).
template <int MR, DType DT>
void tile(const float* xp, int64_t ldx, const WeightMatrix& w, int64_t esz, int64_t n0,
          int64_t n_valid, float* y, int64_t ldy, const float* widened, int64_t ldw) {
  const int64_t K = w.n_in;
  constexpr bool f8 = DT == DType::kF8E4M3;
  const char* wr[kNR];
  const float* srow[kNR] = {nullptr, nullptr, nullptr, nullptr};
  const int64_t grid_cols = f8 ? (K + w.scale_block_in - 1) / w.scale_block_in : 0;
  for (int j = 0; j < kNR; ++j) {
    const int64_t n = n0 + imin(j, n_valid - 1);
    wr[j] = widened ? reinterpret_cast<const char*>(widened + imin(j, n_valid - 1) * ldw)
                    : static_cast<const char*>(w.data) + n * K * esz;
    if (f8 && w.scale) srow[j] = w.scale + (n / w.scale_block_out) * grid_cols;
  }
  __m256 acc[MR][kNR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < kNR; ++j) acc[i][j] = _mm256_setzero_ps();
  if constexpr (f8) {
    for (int64_t kb = 0; kb < K; kb += w.scale_block_in) {
      __m256 sc[kNR];
      for (int j = 0; j < kNR; ++j) sc[j] = _mm256_set1_ps((srow[j] ? srow[j][kb / w.scale_block_in] : 1.0f) * 256.0f);
      tile_steps<MR, DT>(xp, ldx, wr, esz, kb, imin(K, kb + w.scale_block_in), sc, acc);
    }
  } else if (widened) {
    tile_steps<MR, DType::kF32>(xp, ldx, wr, 4, 0, K, nullptr, acc);
  } else {
    tile_steps<MR, DT>(xp, ldx, wr, esz, 0, K, nullptr, acc);
  }
  for (int i = 0; i < MR; ++i) {
    alignas(16) float r[4];
    _mm_store_ps(r, reduce4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]));
    for (int j = 0; j < n_valid; ++j) y[i * ldy + j] = r[j];
  }
}

template <int MR>
void tile_any(const float* xp, int64_t ldx, const WeightMatrix& w, int64_t esz, int64_t n0,
              int64_t n_valid, float* y, int64_t ldy, const float* widened, int64_t ldw) {
  switch (w.dtype) {
    case DType::kF32: return tile<MR, DType::kF32>(xp, ldx, w, esz, n0, n_valid, y, ldy, widened, ldw);
    case DType::kBF16: return tile<MR, DType::kBF16>(xp, ldx, w, esz, n0, n_valid, y, ldy, widened, ldw);
    case DType::kF16: return tile<MR, DType::kF16>(xp, ldx, w, esz, n0, n_valid, y, ldy, widened, ldw);
    default: return tile<MR, DType::kF8E4M3>(xp, ldx, w, esz, n0, n_valid, y, ldy, widened, ldw);
  }
}

}  // namespace

int64_t fp32w_widen_floats(int64_t M, const WeightMatrix& w, int n_threads) {
  if (M <= kMR || (w.dtype != DType::kBF16 && w.dtype != DType::kF16)) return 0;
  return static_cast<int64_t>(n_threads) * kNR * ((w.n_in + 7) / 8 * 8);
}

void matmul_fp32w(const float* x, int64_t M, const WeightMatrix& w, float* y, ThreadPool& pool,
                  float* xp, float* wbuf) {
  const int64_t N = w.n_out, K = w.n_in;
  const int64_t Kp = (K + 7) / 8 * 8;
  for (int64_t m = 0; m < M; ++m) {
    std::memcpy(xp + m * Kp, x + m * K, K * sizeof(float));
    for (int64_t k = K; k < Kp; ++k) xp[m * Kp + k] = 0.0f;
  }
  const int64_t esz = w.dtype == DType::kF32 ? 4 : w.dtype == DType::kF8E4M3 ? 1 : 2;
  const int64_t n_tiles = (N + kNR - 1) / kNR;
  // Several row blocks over BF16 / F16 weights: widen the tile's rows once (per thread) instead
  // of once per row block.
  const bool widen = fp32w_widen_floats(M, w, 1) > 0;
  pool.parallel_for_redoable(
      n_tiles,
      [&](int64_t t0, int64_t t1, int tid) {
        float* wt = widen ? wbuf + static_cast<int64_t>(tid) * kNR * Kp : nullptr;
        for (int64_t t = t0; t < t1; ++t) {
          const int64_t n0 = t * kNR, nv = imin(kNR, N - n0);
          if (widen) {
            for (int64_t j = 0; j < nv; ++j) {  // (widen: BF16 or F16 weights only)
              const char* src = static_cast<const char*>(w.data) + (n0 + j) * K * esz;
              if (w.dtype == DType::kBF16)
                widen_row<DType::kBF16>(src, K, esz, wt + j * Kp);
              else
                widen_row<DType::kF16>(src, K, esz, wt + j * Kp);
            }
          }
          for (int64_t m0 = 0; m0 < M; m0 += kMR) {
            const float* xr = xp + m0 * Kp;
            float* yr = y + m0 * N + n0;
            switch (imin(kMR, M - m0)) {
              case 1: tile_any<1>(xr, Kp, w, esz, n0, nv, yr, N, wt, Kp); break;
              case 2: tile_any<2>(xr, Kp, w, esz, n0, nv, yr, N, wt, Kp); break;
              default: tile_any<3>(xr, Kp, w, esz, n0, nv, yr, N, wt, Kp); break;
            }
          }
        }
      },
      8);
}

}  // namespace dfl::cpu::avx2
