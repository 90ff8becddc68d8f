// AVX-512 weight-streaming matmul, y[M, N] = x[M, K] · W[N, K]ᵀ, for small M (1..64+).
//
// Tiling: the N outputs are cut into tiles of kNR = 4 weight rows (a fixed grid from n = 0);
// threads take contiguous runs of tiles. For one tile, row blocks of up to kMR activation rows
// are run one after the other: the first block streams the 4 weight rows from memory, the
// others find them in L1/L2, so each weight is read from DRAM once for all M rows.
// Micro-kernel: MR × 4 accumulators (one zmm per output), each walks K in the same order; the
// 16 lanes of an accumulator are reduced by reduce4(), whose addition tree is the same for all
// four lanes of its result. So output (m, n) is the same sequence of operations whatever M, the
// row block it fell in, its position in the block, or the thread count: batch invariant.
// Tails: K by masked loads (zeros add nothing), N by duplicating the last weight row and masked
// stores, M by instantiating the micro-kernel for MR = 1..kMR (same per-output arithmetic).
#include <immintrin.h>

#include <cstring>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/packed_tile_grid.h"
#include "kernels/cpu/simd_avx512.h"

namespace dfl::cpu::avx512 {

namespace {

constexpr int kNR = 4;

inline int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }

// Four 16-lane accumulators → [Σa, Σb, Σc, Σd]; identical addition tree for each.
inline __m128 reduce4(__m512 a, __m512 b, __m512 c, __m512 d) {
  auto half = [](__m512 v) {
    return _mm256_add_ps(_mm512_castps512_ps256(v),
                         _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  };
  const __m256 a8 = half(a), b8 = half(b), c8 = half(c), d8 = half(d);
  const __m256 ab = _mm256_add_ps(_mm256_permute2f128_ps(a8, b8, 0x20),
                                  _mm256_permute2f128_ps(a8, b8, 0x31));  // [a 4 | b 4]
  const __m256 cd = _mm256_add_ps(_mm256_permute2f128_ps(c8, d8, 0x20),
                                  _mm256_permute2f128_ps(c8, d8, 0x31));  // [c 4 | d 4]
  __m256 h = _mm256_hadd_ps(ab, cd);  // [a01 a23 c01 c23 | b01 b23 d01 d23]
  h = _mm256_hadd_ps(h, h);           // [a c a c | b d b d]
  return _mm_unpacklo_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));  // [a b c d]
}

inline __mmask8 store_mask(int64_t n_valid) { return static_cast<__mmask8>((1u << n_valid) - 1); }

// ---------------------------------------------------------------------------------------------
// BF16 weights: vdpbf16ps on bf16 activations (converted once per call, rows padded to 32).

template <int MR>
void tile_bf16(const uint16_t* xb, int64_t ldx, const uint16_t* w0, int64_t K, int64_t n_valid,
               float* y, int64_t ldy) {
  const uint16_t* wr[kNR];
  for (int j = 0; j < kNR; ++j) wr[j] = w0 + imin(j, n_valid - 1) * K;
  __m512 acc[MR][kNR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < kNR; ++j) acc[i][j] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 32 <= K; k += 32) {
    __m512bh wv[kNR];
    for (int j = 0; j < kNR; ++j) wv[j] = (__m512bh)_mm512_loadu_si512(wr[j] + k);
    for (int i = 0; i < MR; ++i) {
      const __m512bh xv = (__m512bh)_mm512_loadu_si512(xb + i * ldx + k);
      for (int j = 0; j < kNR; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], xv, wv[j]);
    }
  }
  if (k < K) {
    const __mmask32 km = static_cast<__mmask32>((1ull << (K - k)) - 1);
    __m512bh wv[kNR];
    for (int j = 0; j < kNR; ++j) wv[j] = (__m512bh)_mm512_maskz_loadu_epi16(km, wr[j] + k);
    for (int i = 0; i < MR; ++i) {
      const __m512bh xv = (__m512bh)_mm512_loadu_si512(xb + i * ldx + k);  // zero-padded
      for (int j = 0; j < kNR; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], xv, wv[j]);
    }
  }
  const __mmask8 sm = store_mask(n_valid);
  for (int i = 0; i < MR; ++i)
    _mm_mask_storeu_ps(y + i * ldy, sm, reduce4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]));
}

constexpr int kMRbf16 = 6;  // 24 accumulators + 4 weight vectors + 1 activation ≤ 32 zmm

// x [M, K] → bf16 rows (RNE, as vcvtne2ps2bf16: cvtne2ps_bf16), zero-padded to Kp.
void to_bf16_rows(const float* x, int64_t M, int64_t K, int64_t Kp, uint16_t* xb) {
  const bool hw = avx512_bf16_usable();
  for (int64_t m = 0; m < M; ++m) {
    const float* xr = x + m * K;
    uint16_t* dst = xb + m * Kp;
    for (int64_t k = 0; k < Kp; k += 32) {
      const int64_t r = K - k;
      const __mmask16 m0 = r >= 16 ? 0xffff : r <= 0 ? 0 : static_cast<__mmask16>((1u << r) - 1);
      const __mmask16 m1 = r >= 32 ? 0xffff : r <= 16 ? 0 : static_cast<__mmask16>((1u << (r - 16)) - 1);
      const __m512 lo = _mm512_maskz_loadu_ps(m0, xr + k);
      const __m512 hi = _mm512_maskz_loadu_ps(m1, xr + k + 16);
      _mm512_storeu_si512(dst + k, cvtne2ps_bf16(hi, lo, hw));
    }
  }
}

// x [M, K] → fp32 copies of its bf16 roundings (the same RNE as to_bf16_rows), zero-padded to Kp,
// rows xs floats apart.
void to_bf16_fp32_rows(const float* x, int64_t M, int64_t K, int64_t Kp, int64_t xs, float* xf) {
  const bool hw = avx512_bf16_usable();
  for (int64_t m = 0; m < M; ++m) {
    const float* xr = x + m * K;
    float* dst = xf + m * xs;
    for (int64_t k = 0; k < Kp; k += 16) {
      const int64_t r = K - k;
      const __mmask16 mk = r >= 16 ? 0xffff : r <= 0 ? 0 : static_cast<__mmask16>((1u << r) - 1);
      const __m256i b = cvtneps_bf16(_mm512_maskz_loadu_ps(mk, xr + k), hw);
      _mm512_storeu_ps(dst + k, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16)));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// BF16 weights in the kPackedAmxBf16 layout (AVX-512 without AMX; the grid: cpu/packed_tile_grid.h):
// one 64-byte row is a vdpbf16ps operand whose lane n holds output n's pair. MR rows × G tiles
// per micro-kernel (MR·G ≤ 24 accumulators; G tiles are G weight streams, enough independent
// chains at M = 1).

// acc[i][g] → y[i][n0 + 16g ..], the outputs past N left out (lanes = outputs).
template <int MR, int G>
inline void store_tiles(const __m512 (&acc)[MR][G], int64_t n0, int64_t N, float* y, int64_t ldy) {
  for (int g = 0; g < G; ++g) {
    const int64_t nb = n0 + 16 * g, nv = imin(16, N - nb);
    if (nv <= 0) break;
    const __mmask16 mk = nv >= 16 ? 0xffff : static_cast<__mmask16>((1u << nv) - 1);
    for (int i = 0; i < MR; ++i) _mm512_mask_storeu_ps(y + i * ldy + nb, mk, acc[i][g]);
  }
}

// The greedy screen's gathered candidate tiles (bf16_rows_finish), listed one by one where
// StridedTiles steps over neighbours.
template <int G>
struct ListedTiles {
  const uint16_t* w[G];
  const uint16_t* operator[](int g) const { return w[g]; }
};

// One activation row per tile (MR = 1: tile g takes row x[g] — the screen's finish), where
// SharedRows gives every tile the same rows.
template <class T, int G>
struct RowPerTile {
  static constexpr bool kPerTile = true;
  const T* x[G];
  const T* row(int, int g) const { return x[g]; }
};

template <int MR, int G, class Tiles = StridedTiles, class Rows = SharedRows<uint16_t>>
void packed_bf16_tiles(Rows rows, Tiles tiles, int64_t n_kc, int64_t n0, int64_t N, float* y,
                       int64_t ldy, Pull pull = {}) {
  static_assert(MR * G <= 24, "accumulators");
  static_assert(!Rows::kPerTile || MR == 1, "a row per tile: one row block");
  __m512 acc[MR][G];
  for (int i = 0; i < MR; ++i)
    for (int g = 0; g < G; ++g) acc[i][g] = _mm512_setzero_ps();
  for (int64_t kc = 0; kc < n_kc; ++kc) {
    const int64_t ko = kc * kPackTile;
    for (int kp = 0; kp < 16; ++kp) {
      __m512bh wv[G];
      for (int g = 0; g < G; ++g) {
        wv[g] = (__m512bh)_mm512_loadu_si512(tiles[g] + ko + kp * 32);
        if (pull.tiles >> g & 1)
          _mm_prefetch(reinterpret_cast<const char*>(pull.w + g * pull.ts + ko + kp * 32), _MM_HINT_T1);
      }
      // the pair as one 32-bit broadcast load (rows are 64-byte aligned scratch, pairs 4-aligned)
      auto pair = [&](int i, int g) {
        return (__m512bh)_mm512_set1_epi32(
            *reinterpret_cast<const int32_t*>(rows.row(i, g) + kc * 32 + 2 * kp));
      };
      for (int i = 0; i < MR; ++i) {
        if constexpr (Rows::kPerTile) {
          for (int g = 0; g < G; ++g) acc[i][g] = _mm512_dpbf16_ps(acc[i][g], wv[g], pair(i, g));
        } else {
          const __m512bh xv = pair(i, 0);
          for (int g = 0; g < G; ++g) acc[i][g] = _mm512_dpbf16_ps(acc[i][g], wv[g], xv);
        }
      }
    }
  }
  store_tiles<MR, G>(acc, n0, N, y, ldy);
}

// The row dispatchers: packed_bf16_rows takes mr 1..6, fma_rows 1..16 (a larger mr computes
// nothing).

template <int G>
void packed_bf16_rows(int64_t mr, const uint16_t* xb, int64_t Kp, const uint16_t* wt, int64_t n_kc,
                      int64_t n0, int64_t N, float* y, int64_t ldy, Pull pull) {
  switch (mr) {
#define DFL_PB16(r) \
  case r: if constexpr (r * G <= 24) return packed_bf16_tiles<r, G>(SharedRows<uint16_t>{xb, Kp}, StridedTiles{wt, n_kc * kPackTile}, n_kc, n0, N, y, ldy, pull); break;
    DFL_PB16(1) DFL_PB16(2) DFL_PB16(3) DFL_PB16(4) DFL_PB16(5) DFL_PB16(6)
#undef DFL_PB16
    default: break;
  }
}

// ---------------------------------------------------------------------------------------------
// The same products on fp32 FMA, for cores whose vdpbf16ps issues at a fraction of their FMA rate
// (Intel without AMX: 1.4 G/s against 5.9 G/s vfmadd zmm per core on Emerald Rapids). A packed
// dword holds a pair (k even: low half, k odd: high half), widened to fp32 exactly (w << 16,
// w & 0xffff0000). Per pair, odd then even, each a fused multiply-add of an exact bf16 × bf16
// product: the sequence Intel's SDM defines for vdpbf16ps (its denormal flushing aside: x holds
// no bf16 denormals — the RNE conversion flushes them — and weights or sums below 2^-126 do not
// occur in checkpoints), hence the same bits (tested). x comes as fp32 copies of the
// bf16-rounded activations (xf), broadcast from memory into the FMAs; MR rows share each widened
// weight vector. Each output is one accumulator walking k in order, whatever M or the grouping.

// Weight prefetch distance, in bf16 elements (4 KiB: 4 k-chunks ahead in each tile's stream).
// Emerald Rapids, 151936×1024 on 2 threads: M = 1 10.4 → 9.4 ms (at the read bandwidth), M = 16
// 24.4 → 20.4 ms; 2, 8 or 16 KiB no better (0.6B verify t(16) 91–93 ms at 2–4 KiB, 96–103 at
// 8–16 KiB).
constexpr int64_t kFmaPrefetch = 2048;

}  // namespace

namespace {

// The two forms a 64-byte row of a packed tile takes, as the two fp32 vectors of 16 outputs
// that it feeds, in the order each output adds them, and which x element each multiplies:
//   Bf16Pairs (kPackedAmxBf16): output n's pair (k even, k odd), widened exactly; the odd
//     product first (vdpbf16ps's order); x: the fp32 copies of its bf16 roundings;
//   F16Rows (kPackedF16x16): k even's 16 outputs then k odd's, widened exactly by vcvtph2ps;
//     in k order; x: fp32 as given.
struct Bf16Pairs {
  static constexpr int kFirstX = 1, kSecondX = 0;
  static void widen(const uint16_t* wp, __m512& first, __m512& second) {
    const __m512i wv = _mm512_loadu_si512(wp);
    first = _mm512_castsi512_ps(_mm512_and_si512(wv, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
    second = _mm512_castsi512_ps(_mm512_slli_epi32(wv, 16));
  }
};
struct F16Rows {
  static constexpr int kFirstX = 0, kSecondX = 1;
  static void widen(const uint16_t* wp, __m512& first, __m512& second) {
    first = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wp)));
    second = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wp + 16)));
  }
};

template <int MR, int G, class Form = Bf16Pairs, class Tiles = StridedTiles, class Rows = SharedRows<float>>
void fma_tiles(Rows rows, Tiles tiles, int64_t n_kc, int64_t n0, int64_t N, float* y, int64_t ldy,
               Pull pull = {}) {
  static_assert(MR * G + 2 * G <= 28, "accumulators + widened weights + 2 broadcasts in 32 zmm");
  static_assert(!Rows::kPerTile || MR == 1, "a row per tile: one row block");
  constexpr int X1 = Form::kFirstX, X2 = Form::kSecondX;
  __m512 acc[MR][G];
  for (int i = 0; i < MR; ++i)
    for (int g = 0; g < G; ++g) acc[i][g] = _mm512_setzero_ps();
  for (int64_t kc = 0; kc < n_kc; ++kc) {
    const int64_t ko = kc * kPackTile;
#pragma GCC unroll 16
    for (int kp = 0; kp < 16; ++kp) {
      __m512 w1[G], w2[G];
      for (int g = 0; g < G; ++g) {
        const uint16_t* wp = tiles[g] + ko + kp * 32;
        Form::widen(wp, w1[g], w2[g]);
        _mm_prefetch(reinterpret_cast<const char*>(wp + kFmaPrefetch), _MM_HINT_T0);
        if (pull.tiles >> g & 1)
          _mm_prefetch(reinterpret_cast<const char*>(pull.w + g * pull.ts + ko + kp * 32), _MM_HINT_T1);
      }
      for (int i = 0; i < MR; ++i) {
        if constexpr (Rows::kPerTile) {
          for (int g = 0; g < G; ++g) {
            const float* xp = rows.row(i, g) + kc * 32 + 2 * kp;
            acc[i][g] = _mm512_fmadd_ps(w1[g], _mm512_set1_ps(xp[X1]), acc[i][g]);
            acc[i][g] = _mm512_fmadd_ps(w2[g], _mm512_set1_ps(xp[X2]), acc[i][g]);
          }
        } else {
          const float* xp = rows.row(i, 0) + kc * 32 + 2 * kp;
          const __m512 x1 = _mm512_set1_ps(xp[X1]), x2 = _mm512_set1_ps(xp[X2]);
          for (int g = 0; g < G; ++g) {
            acc[i][g] = _mm512_fmadd_ps(w1[g], x1, acc[i][g]);
            acc[i][g] = _mm512_fmadd_ps(w2[g], x2, acc[i][g]);
          }
        }
      }
    }
  }
  store_tiles<MR, G>(acc, n0, N, y, ldy);
}

template <int G, class Form>
void fma_rows(int64_t mr, const float* xf, int64_t xs, const uint16_t* wt, int64_t n_kc,
              int64_t n0, int64_t N, float* y, int64_t ldy, Pull pull) {
  switch (mr) {
#define DFL_FMA_ROWS(r) \
  case r: if constexpr (r * G + 2 * G <= 28) return fma_tiles<r, G, Form>(SharedRows<float>{xf, xs}, StridedTiles{wt, n_kc * kPackTile}, n_kc, n0, N, y, ldy, pull); break;
    DFL_FMA_ROWS(1) DFL_FMA_ROWS(2) DFL_FMA_ROWS(3) DFL_FMA_ROWS(4)
    DFL_FMA_ROWS(5) DFL_FMA_ROWS(6) DFL_FMA_ROWS(7) DFL_FMA_ROWS(8)
    DFL_FMA_ROWS(9) DFL_FMA_ROWS(10) DFL_FMA_ROWS(11) DFL_FMA_ROWS(12)
    DFL_FMA_ROWS(13) DFL_FMA_ROWS(14) DFL_FMA_ROWS(15) DFL_FMA_ROWS(16)
#undef DFL_FMA_ROWS
    default: break;
  }
}

template <class Form>
void matmul_packed_fma(const float* x, int64_t M, const PackedPart* parts, int n_parts, int64_t K,
                       ThreadPool& pool, float* xf) {
  const int64_t Kp = (K + 31) / 32 * 32, n_kc = Kp / 32;
  const int64_t xs = fma_x_stride(K);
  // Tiles per group by M (MR·G + 2G ≤ 28): more weight streams for few rows; beyond 8 rows one
  // tile × up to 16 rows, so a 16-row verify block is one pass over each weight (2 widening ops
  // per 32 FMAs, and the DRAM stream spread over all of the compute). Emerald Rapids, Qwen3-0.6B
  // verify t(16): 65.7 ms against 70.0 for two passes of 8 rows × 2 tiles (even with the pull
  // into L2). Only who computes what, never the arithmetic.
  const int G = M <= 1 ? 8 : M <= 2 ? 6 : M <= 4 ? 4 : M <= 8 ? 2 : 1;
  const int64_t MR = G == 8 ? 1 : G == 6 ? 2 : G == 4 ? 4 : G == 2 ? 8 : 16;
  walk_packed_tiles(M, parts, n_parts, n_kc, G, MR, xf, xs,
                    [&](float* dst) {
                      if constexpr (std::is_same_v<Form, Bf16Pairs>)
                        to_bf16_fp32_rows(x, M, K, Kp, xs, dst);
                      else
                        copy_fp32_rows(x, M, K, Kp, xs, dst);
                    },
                    pool,
                    [&](int g, int64_t mr, const float* xr, const uint16_t* wt, int64_t n0, int64_t N, float* yr,
                        Pull pull) {
                      switch (g) {
                        case 8: return fma_rows<8, Form>(mr, xr, xs, wt, n_kc, n0, N, yr, N, pull);
                        case 6: return fma_rows<6, Form>(mr, xr, xs, wt, n_kc, n0, N, yr, N, pull);
                        case 4: return fma_rows<4, Form>(mr, xr, xs, wt, n_kc, n0, N, yr, N, pull);
                        case 2: return fma_rows<2, Form>(mr, xr, xs, wt, n_kc, n0, N, yr, N, pull);
                        default: return fma_rows<1, Form>(mr, xr, xs, wt, n_kc, n0, N, yr, N, pull);
                      }
                    });
}

// ---------------------------------------------------------------------------------------------
// F32 / F16 / F8_E4M3 weights: dequantized to fp32 in registers, fp32 FMA with fp32 x.

enum class WKind { kF32, kF16, kF8 };

// 16 weights at p[k..k+16) (masked: lanes ≥ popcount(m) are 0), as fp32. F8 values come out
// scaled by 2^-8 (e4m3 bits placed in an fp16: subnormals stay exact); the caller folds 256 into
// the block scale.
template <WKind W>
inline __m512 load_w16(const void* p, int64_t k, __mmask16 m, bool masked) {
  if constexpr (W == WKind::kF32) {
    const float* f = static_cast<const float*>(p) + k;
    return masked ? _mm512_maskz_loadu_ps(m, f) : _mm512_loadu_ps(f);
  } else if constexpr (W == WKind::kF16) {
    const uint16_t* h = static_cast<const uint16_t*>(p) + k;
    const __m256i v = masked ? _mm256_maskz_loadu_epi16(m, h)
                             : _mm256_loadu_si256(reinterpret_cast<const __m256i*>(h));
    return _mm512_cvtph_ps(v);
  } else {
    const uint8_t* b = static_cast<const uint8_t*>(p) + k;
    const __m128i v8 = masked ? _mm_maskz_loadu_epi8(m, b)
                              : _mm_loadu_si128(reinterpret_cast<const __m128i*>(b));
    const __m256i v = _mm256_cvtepu8_epi16(v8);
    const __m256i sign = _mm256_slli_epi16(_mm256_and_si256(v, _mm256_set1_epi16(0x80)), 8);
    const __m256i mag = _mm256_slli_epi16(_mm256_and_si256(v, _mm256_set1_epi16(0x7f)), 7);
    return _mm512_cvtph_ps(_mm256_or_si256(sign, mag));
  }
}

template <WKind W, int MR>
void tile_fp32w(const float* x, int64_t ldx, const WeightMatrix& w, int64_t n0, int64_t n_valid,
                float* y, int64_t ldy) {
  const int64_t K = w.n_in;
  const int64_t esz = W == WKind::kF32 ? 4 : W == WKind::kF16 ? 2 : 1;
  const char* base = static_cast<const char*>(w.data);
  const void* wr[kNR];
  const float* srow[kNR] = {nullptr, nullptr, nullptr, nullptr};
  const int64_t grid_cols = W == WKind::kF8 ? (K + w.scale_block_in - 1) / w.scale_block_in : 0;
  for (int j = 0; j < kNR; ++j) {
    const int64_t n = n0 + imin(j, n_valid - 1);
    wr[j] = base + n * K * esz;
    if (W == WKind::kF8 && w.scale) srow[j] = w.scale + (n / w.scale_block_out) * grid_cols;
  }
  __m512 acc[MR][kNR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < kNR; ++j) acc[i][j] = _mm512_setzero_ps();
  // K is walked in scale blocks (F8) or in one block; the scale is hoisted out of the inner loop.
  const int64_t kb_step = W == WKind::kF8 ? w.scale_block_in : K;
  for (int64_t kb = 0; kb < K; kb += kb_step) {
    const int64_t ke = imin(K, kb + kb_step);
    __m512 sc[kNR];
    if constexpr (W == WKind::kF8)
      for (int j = 0; j < kNR; ++j)
        sc[j] = _mm512_set1_ps((srow[j] ? srow[j][kb / kb_step] : 1.0f) * 256.0f);
    int64_t k = kb;
    if constexpr (W == WKind::kF8) {
      // 32 weights per step: one widening and one fp16 rebuild per 32 (the per-output FMA
      // sequence is the same as 16 at a time: low half, then high half).
      for (; k + 32 <= ke; k += 32) {
        __m512 wl[kNR], wh[kNR];
        for (int j = 0; j < kNR; ++j) {
          const __m512i v = _mm512_cvtepu8_epi16(
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint8_t*>(wr[j]) + k)));
          const __m512i h = _mm512_or_si512(
              _mm512_and_si512(_mm512_slli_epi16(v, 8), _mm512_set1_epi16(static_cast<short>(0x8000))),
              _mm512_and_si512(_mm512_slli_epi16(v, 7), _mm512_set1_epi16(0x3f80)));
          wl[j] = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_castsi512_si256(h)), sc[j]);
          wh[j] = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1)), sc[j]);
        }
        for (int i = 0; i < MR; ++i) {
          const __m512 xl = _mm512_loadu_ps(x + i * ldx + k);
          for (int j = 0; j < kNR; ++j) acc[i][j] = _mm512_fmadd_ps(xl, wl[j], acc[i][j]);
          const __m512 xh = _mm512_loadu_ps(x + i * ldx + k + 16);
          for (int j = 0; j < kNR; ++j) acc[i][j] = _mm512_fmadd_ps(xh, wh[j], acc[i][j]);
        }
      }
    }
    for (; k < ke; k += 16) {
      const bool masked = k + 16 > ke;
      const __mmask16 km = masked ? static_cast<__mmask16>((1u << (ke - k)) - 1) : 0xffff;
      __m512 wv[kNR];
      for (int j = 0; j < kNR; ++j) {
        wv[j] = load_w16<W>(wr[j], k, km, masked);
        if constexpr (W == WKind::kF8) wv[j] = _mm512_mul_ps(wv[j], sc[j]);
      }
      for (int i = 0; i < MR; ++i) {
        const float* xr = x + i * ldx + k;
        const __m512 xv = masked ? _mm512_maskz_loadu_ps(km, xr) : _mm512_loadu_ps(xr);
        for (int j = 0; j < kNR; ++j) acc[i][j] = _mm512_fmadd_ps(xv, wv[j], acc[i][j]);
      }
    }
  }
  const __mmask8 sm = store_mask(n_valid);
  for (int i = 0; i < MR; ++i)
    _mm_mask_storeu_ps(y + i * ldy, sm, reduce4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]));
}

constexpr int kMRfp32 = 6;

template <WKind W>
void run_fp32w(const float* x, int64_t M, const WeightMatrix& w, float* y, ThreadPool& pool) {
  // F8 holds 8 dequantized weight vectors per step: 4 rows keep everything in 32 zmm.
  constexpr int kMR = W == WKind::kF8 ? 4 : kMRfp32;
  const int64_t N = w.n_out, K = w.n_in;
  const int64_t n_tiles = (N + kNR - 1) / kNR;
  pool.parallel_for(
      n_tiles,
      [&](int64_t t0, int64_t t1, int) {
        for (int64_t t = t0; t < t1; ++t) {
          const int64_t n0 = t * kNR, nv = imin(kNR, N - n0);
          for (int64_t m0 = 0; m0 < M; m0 += kMR) {
            const float* xr = x + m0 * K;
            float* yr = y + m0 * N + n0;
            switch (imin(kMR, M - m0)) {
              case 1: tile_fp32w<W, 1>(xr, K, w, n0, nv, yr, N); break;
              case 2: tile_fp32w<W, 2>(xr, K, w, n0, nv, yr, N); break;
              case 3: tile_fp32w<W, 3>(xr, K, w, n0, nv, yr, N); break;
              case 4: tile_fp32w<W, 4>(xr, K, w, n0, nv, yr, N); break;
              case 5: tile_fp32w<W, (kMR >= 5 ? 5 : 1)>(xr, K, w, n0, nv, yr, N); break;
              default: tile_fp32w<W, kMR>(xr, K, w, n0, nv, yr, N); break;
            }
          }
        }
      },
      8);
}

}  // namespace

void matmul_bf16(const float* x, int64_t M, const WeightMatrix& w, float* y, ThreadPool& pool,
                 uint16_t* xb) {
  const int64_t N = w.n_out, K = w.n_in;
  const int64_t Kp = (K + 31) / 32 * 32;
  to_bf16_rows(x, M, K, Kp, xb);
  const uint16_t* wd = static_cast<const uint16_t*>(w.data);
  const int64_t n_tiles = (N + kNR - 1) / kNR;
  pool.parallel_for(
      n_tiles,
      [&](int64_t t0, int64_t t1, int) {
        for (int64_t t = t0; t < t1; ++t) {
          const int64_t n0 = t * kNR, nv = imin(kNR, N - n0);
          const uint16_t* w0 = wd + n0 * K;
          for (int64_t m0 = 0; m0 < M; m0 += kMRbf16) {
            const uint16_t* xr = xb + m0 * Kp;
            float* yr = y + m0 * N + n0;
            switch (imin(kMRbf16, M - m0)) {
              case 1: tile_bf16<1>(xr, Kp, w0, K, nv, yr, N); break;
              case 2: tile_bf16<2>(xr, Kp, w0, K, nv, yr, N); break;
              case 3: tile_bf16<3>(xr, Kp, w0, K, nv, yr, N); break;
              case 4: tile_bf16<4>(xr, Kp, w0, K, nv, yr, N); break;
              case 5: tile_bf16<5>(xr, Kp, w0, K, nv, yr, N); break;
              default: tile_bf16<6>(xr, Kp, w0, K, nv, yr, N); break;
            }
          }
        }
      },
      8);
}

void matmul_bf16_packed_many(const float* x, int64_t M, const WeightMatrix* const* ws, float* const* ys,
                             int n, ThreadPool& pool, uint16_t* xb, bool fma) {
  constexpr int kMaxParts = 4;
  DFL_ASSERT(n >= 1 && n <= kMaxParts);  // (not DFL_CHECK: its message template would be a shared instantiation)
  const int64_t K = ws[0]->n_in;
  PackedPart parts[kMaxParts];
  for (int i = 0; i < n; ++i) {
    DFL_ASSERT(ws[i]->n_in == K);
    parts[i] = PackedPart{static_cast<const uint16_t*>(ws[i]->packed), ws[i]->n_out, ys[i]};
  }
  if (fma) return matmul_packed_fma<Bf16Pairs>(x, M, parts, n, K, pool, reinterpret_cast<float*>(xb));
  const int64_t Kp = (K + 31) / 32 * 32, n_kc = Kp / 32;
  // Tiles per micro-kernel by M (MR·G ≤ 24; rows in blocks of ≤ 6): more weight streams for few
  // rows. The grouping only decides who computes what, never the arithmetic.
  const int G = M <= 3 ? 8 : M <= 4 ? 6 : 4;
  const int64_t MRmax = G == 8 ? 3 : G == 6 ? 4 : 6;
  walk_packed_tiles(M, parts, n, n_kc, G, MRmax, xb, Kp, [&](uint16_t* dst) { to_bf16_rows(x, M, K, Kp, dst); },
                    pool,
                    [&](int g, int64_t mr, const uint16_t* xr, const uint16_t* wt, int64_t n0, int64_t N, float* yr,
                        Pull pull) {
                      switch (g) {
                        case 8: return packed_bf16_rows<8>(mr, xr, Kp, wt, n_kc, n0, N, yr, N, pull);
                        case 6: return packed_bf16_rows<6>(mr, xr, Kp, wt, n_kc, n0, N, yr, N, pull);
                        case 4: return packed_bf16_rows<4>(mr, xr, Kp, wt, n_kc, n0, N, yr, N, pull);
                        default: return packed_bf16_rows<1>(mr, xr, Kp, wt, n_kc, n0, N, yr, N, pull);
                      }
                    });
}

void matmul_f16_packed_many(const float* x, int64_t M, const WeightMatrix* const* ws, float* const* ys, int n,
                            ThreadPool& pool, float* xf) {
  constexpr int kMaxParts = 4;
  DFL_ASSERT(n >= 1 && n <= kMaxParts);
  PackedPart parts[kMaxParts];
  for (int i = 0; i < n; ++i) {
    DFL_ASSERT(ws[i]->n_in == ws[0]->n_in);
    parts[i] = PackedPart{static_cast<const uint16_t*>(ws[i]->packed), ws[i]->n_out, ys[i]};
  }
  matmul_packed_fma<F16Rows>(x, M, parts, n, ws[0]->n_in, pool, xf);
}

void matmul_bf16_packed(const float* x, int64_t M, const WeightMatrix& w, float* y, ThreadPool& pool,
                        uint16_t* xb, bool fma) {
  const WeightMatrix* ws[1] = {&w};
  float* ys[1] = {y};
  matmul_bf16_packed_many(x, M, ws, ys, 1, pool, xb, fma);
}

namespace {

// 16 rows of 16 dwords → its 16 columns: c[j] lane i = r[i] lane j (unpacks within 128-bit
// lanes, then a 4 × 4 transpose of the lanes).
inline void transpose16x16(const __m512i r[16], __m512i c[16]) {
  __m512i t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);      // lane L: r0[4L] r1[4L] r0[4L+1] r1[4L+1]
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);  // ... [4L+2], [4L+3]
  }
  for (int i = 0; i < 4; ++i) {  // u[4i + e] lane L: rows 4i..4i+3 at column 4L + e
    u[4 * i + 0] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int e = 0; e < 4; ++e) {
    const __m512i v0 = _mm512_shuffle_i32x4(u[e], u[4 + e], 0x44), v1 = _mm512_shuffle_i32x4(u[e], u[4 + e], 0xEE);
    const __m512i v2 = _mm512_shuffle_i32x4(u[8 + e], u[12 + e], 0x44), v3 = _mm512_shuffle_i32x4(u[8 + e], u[12 + e], 0xEE);
    c[e] = _mm512_shuffle_i32x4(v0, v2, 0x88);
    c[4 + e] = _mm512_shuffle_i32x4(v0, v2, 0xDD);
    c[8 + e] = _mm512_shuffle_i32x4(v1, v3, 0x88);
    c[12 + e] = _mm512_shuffle_i32x4(v1, v3, 0xDD);
  }
}

// The packed tile of 16 weight rows given by index (row-major 16-bit rows K apart at `w`), zero
// past K — what prepacking makes of 16 neighbours: BF16 (f16 = false) dst [n_kc][16 k-pairs][16 n][2]
// (kPackedAmxBf16), F16 [n_kc][32 k][16 n] (kPackedF16x16: each pair row's halves split apart).
void gather_tile16(const uint16_t* w, int64_t K, const int32_t* rows16, int64_t n_kc, bool f16, uint16_t* dst) {
  // (within a 64-byte pair row [16 n][2]: the even elements, then the odd ones)
  const __m512i split = _mm512_set_epi16(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1,
                                         30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  for (int64_t kc = 0; kc < n_kc; ++kc) {
    const int64_t rem = K - kc * 32;
    const __mmask32 mk = rem >= 32 ? ~__mmask32(0) : static_cast<__mmask32>((uint32_t(1) << rem) - 1);
    __m512i r[16], c[16];
    for (int i = 0; i < 16; ++i) r[i] = _mm512_maskz_loadu_epi16(mk, w + int64_t(rows16[i]) * K + kc * 32);
    transpose16x16(r, c);
    for (int kp = 0; kp < 16; ++kp)
      _mm512_storeu_si512(dst + kc * kPackTile + kp * 32, f16 ? _mm512_permutexvar_epi16(split, c[kp]) : c[kp]);
  }
}

}  // namespace

void packed16_rows_finish(const float* x, int64_t M, const WeightMatrix& w, const int32_t* idx,
                          const int64_t* counts, int64_t cap, bool fma, float* y, ThreadPool& pool) {
  const bool f16 = w.dtype == DType::kF16;
  fma = fma || f16;
  const int64_t N = w.n_out, K = w.n_in, Kp = (K + 31) / 32 * 32, n_kc = Kp / 32;
  // Groups of 16 outputs of one row (a short last group repeats its last output), group g of
  // row r at first[r] + g.
  int64_t first[kGgmlRowChunk + 1] = {0};
  DFL_ASSERT(M <= kGgmlRowChunk);
  for (int64_t r = 0; r < M; ++r) first[r + 1] = first[r] + (counts[r] > 0 ? (counts[r] + 15) / 16 : 0);
  if (first[M] == 0) return;
  const int64_t xs = fma ? fma_x_stride(K) : Kp;
  thread_local std::vector<float> xbuf;  // the calling thread's; the pool reads it during the call
  const size_t need = static_cast<size_t>(fma ? M * xs : (M * Kp + 1) / 2);
  if (xbuf.size() < need) xbuf.resize(need);
  const float* xf = xbuf.data();
  const uint16_t* xb = reinterpret_cast<const uint16_t*>(xbuf.data());
  if (f16)
    copy_fp32_rows(x, M, K, Kp, xs, xbuf.data());
  else if (fma)
    to_bf16_fp32_rows(x, M, K, Kp, xs, xbuf.data());
  else
    to_bf16_rows(x, M, K, Kp, reinterpret_cast<uint16_t*>(xbuf.data()));
  const uint16_t* wr = static_cast<const uint16_t*>(w.data);
  constexpr int kG = 8;  // groups per micro-kernel call (8 accumulator chains side by side)
  pool.parallel_for(
      (first[M] + kG - 1) / kG,
      [&](int64_t c0, int64_t c1, int) {
        thread_local std::vector<uint16_t> tiles;  // this thread's kG gathered tiles
        if (tiles.size() < size_t(kG * n_kc * kPackTile)) tiles.resize(size_t(kG * n_kc * kPackTile));
        alignas(64) float tile_y[kG * 16];
        int64_t r = 0;
        for (int64_t ci = c0; ci < c1; ++ci) {
          const int64_t g0 = ci * kG, n = imin(kG, first[M] - g0);
          int32_t outs[kG][16];
          int64_t row_of[kG], valid[kG];
          ListedTiles<kG> lt;
          RowPerTile<float, kG> rf;
          RowPerTile<uint16_t, kG> rb;
          for (int g = 0; g < kG; ++g) {
            const int64_t gi = g0 + imin(g, n - 1);
            while (gi >= first[r + 1]) ++r;
            while (gi < first[r]) --r;
            const int64_t j0 = (gi - first[r]) * 16;
            valid[g] = imin(16, counts[r] - j0);
            row_of[g] = r;
            for (int j = 0; j < 16; ++j) outs[g][j] = idx[r * cap + j0 + imin(j, valid[g] - 1)];
            uint16_t* t = tiles.data() + g * n_kc * kPackTile;
            if (g < n) gather_tile16(wr, K, outs[g], n_kc, f16, t);
            lt.w[g] = g < n ? t : lt.w[0];
            rf.x[g] = xf + r * xs;
            rb.x[g] = xb + r * Kp;
          }
          if (f16)
            fma_tiles<1, kG, F16Rows>(rf, lt, n_kc, 0, kG * 16, tile_y, 0);
          else if (fma)
            fma_tiles<1, kG, Bf16Pairs>(rf, lt, n_kc, 0, kG * 16, tile_y, 0);
          else
            packed_bf16_tiles<1, kG>(rb, lt, n_kc, 0, kG * 16, tile_y, 0);
          for (int64_t g = 0; g < n; ++g)
            for (int64_t j = 0; j < valid[g]; ++j) y[row_of[g] * N + outs[g][j]] = tile_y[16 * g + j];
        }
      },
      1);
}

void matmul_fp32w(const float* x, int64_t M, const WeightMatrix& w, float* y, ThreadPool& pool) {
  switch (w.dtype) {
    case DType::kF32: run_fp32w<WKind::kF32>(x, M, w, y, pool); break;
    case DType::kF16: run_fp32w<WKind::kF16>(x, M, w, y, pool); break;
    case DType::kF8E4M3: run_fp32w<WKind::kF8>(x, M, w, y, pool); break;
    default: break;
  }
}

}  // namespace dfl::cpu::avx512
