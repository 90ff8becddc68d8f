// The packed 16-output tiles (cpu/packed_tile_grid.h) on AVX2 + FMA, in 8-output halves: the
// fp32-FMA kernel of cpu/matmul_avx512.cc for both forms, per output the same operations in the
// same order, so the same bits as AVX-512 whatever M, the grouping or the thread count:
//  * BF16 (kPackedAmxBf16): x rounded to bf16 as the instruction rounds it (RNE, NaN quieted, a
//    denormal input to ±0), then per k pair in order the odd product and then the even one,
//    each a fused multiply-add of exact bf16 values in fp32 (w & 0xffff0000, w << 16): also the
//    bits of vdpbf16ps on Intel;
//  * F16 (kPackedF16x16): per k in order one fused multiply-add of the f16 weight (vcvtph2ps,
//    exact) with x in fp32.
// Why: the row-dot kernel (cpu/matmul_avx2.cc) reduces 8 k-lanes per output and re-reads its x
// rows for every 4 outputs; here the lanes are outputs, x is broadcast, and a widened weight
// vector serves every row of a pass (docs/BENCHMARKS.md).
#include <immintrin.h>

#include <cstring>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/packed_tile_grid.h"

namespace dfl::cpu::avx2 {

namespace {

// 8 floats → fp32 copies of their bf16 roundings: the bits of avx512 bf16_round_lanes(daz = true)
// (cpu/simd_avx512.h), i.e. of vcvtneps2bf16.
inline __m256 round_to_bf16(__m256 x) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i hi = _mm256_srli_epi32(u, 16);
  __m256i r = _mm256_srli_epi32(
      _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), _mm256_and_si256(hi, _mm256_set1_epi32(1))), 16);
  // |u| > +inf as int32 (|u| ≤ 0x7fffffff, so the signed compare is the unsigned one): NaN, quieted.
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                         _mm256_set1_epi32(0x7f800000));
  r = _mm256_blendv_epi8(r, _mm256_or_si256(hi, _mm256_set1_epi32(0x40)), nan);
  const __m256i denormal = _mm256_cmpeq_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7f800000)),
                                              _mm256_setzero_si256());
  r = _mm256_blendv_epi8(r, _mm256_and_si256(hi, _mm256_set1_epi32(0x8000)), denormal);
  return _mm256_castsi256_ps(_mm256_slli_epi32(r, 16));
}

// x [M, K] → fp32 copies of its bf16 roundings, zero-padded to Kp, rows xs floats apart.
void to_bf16_fp32_rows(const float* x, int64_t M, int64_t K, int64_t Kp, int64_t xs, float* xf) {
  for (int64_t m = 0; m < M; ++m) {
    const float* xr = x + m * K;
    float* dst = xf + m * xs;
    int64_t k = 0;
    for (; k + 8 <= K; k += 8) _mm256_storeu_ps(dst + k, round_to_bf16(_mm256_loadu_ps(xr + k)));
    if (k < K) {
      alignas(32) float tail[8] = {};
      std::memcpy(tail, xr + k, static_cast<size_t>(K - k) * sizeof(float));
      _mm256_storeu_ps(dst + k, round_to_bf16(_mm256_load_ps(tail)));
      k += 8;
    }
    for (; k < Kp; k += 8) _mm256_storeu_ps(dst + k, _mm256_setzero_ps());
  }
}

// Weight prefetch distance in 16-bit elements (4 KiB: 4 k-chunks ahead in each tile's stream), as
// the AVX-512 form's.
constexpr int64_t kFmaPrefetch = 2048;

// The two forms of a 64-byte tile row, per 8-output half h: the two fp32 vectors it feeds, in
// the order each output adds them, and which x element (of the step's two) each multiplies.
struct Bf16Pairs {  // output n's (k even, k odd) pair; the odd product first
  static constexpr int kFirstX = 1, kSecondX = 0;
  static __m256 first(const uint16_t* wp, int h) {
    return _mm256_castsi256_ps(_mm256_and_si256(raw(wp, h), _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
  }
  static __m256 second(const uint16_t* wp, int h) { return _mm256_castsi256_ps(_mm256_slli_epi32(raw(wp, h), 16)); }
  static __m256i raw(const uint16_t* wp, int h) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wp + 16 * h));
  }
};
struct F16Rows {  // k even's 16 outputs, then k odd's
  static constexpr int kFirstX = 0, kSecondX = 1;
  static __m256 first(const uint16_t* wp, int h) { return half(wp + 8 * h); }
  static __m256 second(const uint16_t* wp, int h) { return half(wp + 16 + 8 * h); }
  static __m256 half(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
};

// MR rows × G tiles (2G halves of 8 outputs): acc[i][h] is row i's outputs n0 + 8h .. + 7.
// Registers (16 ymm): MR·2G accumulators, plus for G = 1 the two halves' widened weights and one
// broadcast (rows outer), else the MR broadcasts of one x element and one weight vector (halves
// outer).
template <int MR, int G, class Form>
void fma_tiles(const float* xf, int64_t xs, const uint16_t* w, int64_t ts, int64_t n_kc, int64_t n0,
               int64_t N, float* y, int64_t ldy, Pull pull) {
  constexpr int H = 2 * G, X1 = Form::kFirstX, X2 = Form::kSecondX;
  static_assert(G == 1 ? 2 * MR + 3 <= 16 : MR * H + MR + 1 <= 16, "ymm registers");
  __m256 acc[MR][H];
  for (int i = 0; i < MR; ++i)
    for (int h = 0; h < H; ++h) acc[i][h] = _mm256_setzero_ps();
  for (int64_t kc = 0; kc < n_kc; ++kc) {
    const int64_t ko = kc * kPackTile;
#pragma GCC unroll 16
    for (int kp = 0; kp < 16; ++kp) {
      const uint16_t* wp = w + ko + kp * 32;  // tile g's row at wp + g·ts
      for (int g = 0; g < G; ++g) {
        _mm_prefetch(reinterpret_cast<const char*>(wp + g * ts + kFmaPrefetch), _MM_HINT_T0);
        if (pull.tiles >> g & 1)
          _mm_prefetch(reinterpret_cast<const char*>(pull.w + g * pull.ts + ko + kp * 32), _MM_HINT_T1);
      }
      auto row = [&](int h) { return wp + (h / 2) * ts; };  // half h is half h % 2 of that row
      const float* xp = xf + kc * 32 + 2 * kp;
      if constexpr (G == 1) {
        const __m256 a0 = Form::first(wp, 0), a1 = Form::first(wp, 1);
        for (int i = 0; i < MR; ++i) {
          const __m256 xv = _mm256_broadcast_ss(xp + i * xs + X1);
          acc[i][0] = _mm256_fmadd_ps(a0, xv, acc[i][0]);
          acc[i][1] = _mm256_fmadd_ps(a1, xv, acc[i][1]);
        }
        const __m256 b0 = Form::second(wp, 0), b1 = Form::second(wp, 1);
        for (int i = 0; i < MR; ++i) {
          const __m256 xv = _mm256_broadcast_ss(xp + i * xs + X2);
          acc[i][0] = _mm256_fmadd_ps(b0, xv, acc[i][0]);
          acc[i][1] = _mm256_fmadd_ps(b1, xv, acc[i][1]);
        }
      } else {
        __m256 xv[MR];
        for (int i = 0; i < MR; ++i) xv[i] = _mm256_broadcast_ss(xp + i * xs + X1);
        for (int h = 0; h < H; ++h) {
          const __m256 a = Form::first(row(h), h % 2);
          for (int i = 0; i < MR; ++i) acc[i][h] = _mm256_fmadd_ps(a, xv[i], acc[i][h]);
        }
        for (int i = 0; i < MR; ++i) xv[i] = _mm256_broadcast_ss(xp + i * xs + X2);
        for (int h = 0; h < H; ++h) {
          const __m256 b = Form::second(row(h), h % 2);
          for (int i = 0; i < MR; ++i) acc[i][h] = _mm256_fmadd_ps(b, xv[i], acc[i][h]);
        }
      }
    }
  }
  for (int h = 0; h < H; ++h) {  // the outputs past N left out
    const int64_t nb = n0 + 8 * h, nv = min64(8, N - nb);
    if (nv <= 0) break;
    for (int i = 0; i < MR; ++i) {
      if (nv == 8) {
        _mm256_storeu_ps(y + i * ldy + nb, acc[i][h]);
      } else {
        alignas(32) float part[8];
        _mm256_store_ps(part, acc[i][h]);
        std::memcpy(y + i * ldy + nb, part, static_cast<size_t>(nv) * sizeof(float));
      }
    }
  }
}

// The micro-kernel for mr rows (1..kMaxRows, within G's register budget) of G tiles.
constexpr int kMaxRows = 6;
template <int G>
constexpr bool fits(int mr) { return G == 1 ? mr <= kMaxRows : mr * 2 * G + mr + 1 <= 16; }

template <int G, class Form>
void fma_rows(int64_t mr, const float* xf, int64_t xs, const uint16_t* wt, int64_t n_kc, int64_t n0,
              int64_t N, float* y, int64_t ldy, Pull pull) {
  switch (mr) {
#define DFL_AVX2_FMA_ROWS(r) \
  case r: if constexpr (fits<G>(r)) return fma_tiles<r, G, Form>(xf, xs, wt, n_kc * kPackTile, n_kc, n0, N, y, ldy, pull); break;
    DFL_AVX2_FMA_ROWS(1) DFL_AVX2_FMA_ROWS(2) DFL_AVX2_FMA_ROWS(3)
    DFL_AVX2_FMA_ROWS(4) DFL_AVX2_FMA_ROWS(5) DFL_AVX2_FMA_ROWS(6)
#undef DFL_AVX2_FMA_ROWS
    default: break;
  }
}

template <class Form>
void matmul_packed_fma(const float* x, int64_t M, const WeightMatrix* const* ws, float* const* ys, int n,
                       ThreadPool& pool, float* xf) {
  constexpr int kMaxParts = 4;
  DFL_ASSERT(n >= 1 && n <= kMaxParts);
  const int64_t K = ws[0]->n_in, Kp = (K + 31) / 32 * 32, n_kc = Kp / 32, xs = fma_x_stride(K);
  PackedPart parts[kMaxParts];
  for (int i = 0; i < n; ++i) {
    DFL_ASSERT(ws[i]->n_in == K);
    parts[i] = PackedPart{static_cast<const uint16_t*>(ws[i]->packed), ws[i]->n_out, ys[i]};
  }
  // Tiles per micro-kernel by M: up to 8 accumulator chains for few rows (an FMA's latency is 4
  // cycles, two issue per cycle); from 4 rows one tile, in passes of at most kMaxRows rows of
  // equal size (7 rows: 4 + 3, not 6 + 1 — a 1-row pass of one tile is latency-bound).
  const int G = M <= 1 ? 4 : M <= 2 ? 3 : M <= 3 ? 2 : 1;
  const int64_t passes = (M + kMaxRows - 1) / kMaxRows;
  const int64_t MR = G > 1 ? M : (M + passes - 1) / passes;
  walk_packed_tiles(M, parts, n, n_kc, G, MR, xf, xs,
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
                        case 4: return fma_rows<4, Form>(mr, xr, xs, wt, n_kc, n0, N, yr, N, pull);
                        case 3: return fma_rows<3, Form>(mr, xr, xs, wt, n_kc, n0, N, yr, N, pull);
                        case 2: return fma_rows<2, Form>(mr, xr, xs, wt, n_kc, n0, N, yr, N, pull);
                        default: return fma_rows<1, Form>(mr, xr, xs, wt, n_kc, n0, N, yr, N, pull);
                      }
                    });
}

// 8 rows of 8 dwords → its 8 columns (c[j] lane i = r[i] lane j).
inline void transpose8x8(const __m256 r[8], __m256 c[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 2; ++i) {
    u[4 * i + 0] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
    u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
  for (int e = 0; e < 4; ++e) {
    c[e] = _mm256_permute2f128_ps(u[e], u[4 + e], 0x20);
    c[4 + e] = _mm256_permute2f128_ps(u[e], u[4 + e], 0x31);
  }
}

// The packed tile of 16 weight rows given by index (row-major 16-bit rows K apart at `w`), zero
// past K — what prepacking makes of 16 neighbours (avx512 gather_tile16): BF16 dst [n_kc][16
// k-pairs][16 n][2] (kPackedAmxBf16), F16 [n_kc][32 k][16 n] (kPackedF16x16). A k-pair of one row
// is one dword, so a chunk of 32 k is a 16 × 16 dword transpose (four 8 × 8).
void gather_tile16(const uint16_t* w, int64_t K, const int32_t* rows16, int64_t n_kc, bool f16, uint16_t* dst) {
  // F16: per 128-bit lane of 4 pairs, the even elements to its low 8 bytes, the odd to its high.
  const __m256i split = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15,
                                         0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
  alignas(32) uint16_t tail[16][32];
  for (int64_t kc = 0; kc < n_kc; ++kc) {
    const int64_t rem = K - kc * 32;
    const uint16_t* src[16];
    for (int i = 0; i < 16; ++i) src[i] = w + int64_t(rows16[i]) * K + kc * 32;
    if (rem < 32) {  // the last, partial chunk from zero-padded copies
      for (int i = 0; i < 16; ++i) {
        std::memset(tail[i], 0, sizeof(tail[i]));
        std::memcpy(tail[i], src[i], static_cast<size_t>(rem) * sizeof(uint16_t));
        src[i] = tail[i];
      }
    }
    __m256 c[4][8];  // [n half · 2 + kp half][kp % 8]: lanes n % 8
    for (int nh = 0; nh < 2; ++nh)
      for (int kh = 0; kh < 2; ++kh) {
        __m256 r[8];
        for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(reinterpret_cast<const float*>(src[8 * nh + i] + 16 * kh));
        transpose8x8(r, c[2 * nh + kh]);
      }
    uint16_t* out = dst + kc * kPackTile;
    for (int kp = 0; kp < 16; ++kp) {
      const __m256i a = _mm256_castps_si256(c[kp / 8][kp % 8]), b = _mm256_castps_si256(c[2 + kp / 8][kp % 8]);
      if (!f16) {  // pair row kp: [16 n][2]
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + kp * 32), a);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + kp * 32 + 16), b);
        continue;
      }
      // rows k = 2kp (the even elements of n 0..15) and 2kp + 1 (the odd ones)
      const __m256i sa = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(a, split), 0xD8);  // [even n0..7 | odd n0..7]
      const __m256i sb = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(b, split), 0xD8);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + kp * 32), _mm256_permute2x128_si256(sa, sb, 0x20));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + kp * 32 + 16), _mm256_permute2x128_si256(sa, sb, 0x31));
    }
  }
}

// One row's groups of 16 candidates, G at a time, through the micro-kernel for G tiles.
template <class Form>
void finish_groups(int G, const float* xr, const uint16_t* tiles, int64_t n_kc, float* tile_y) {
  const int64_t ts = n_kc * kPackTile;
  switch (G) {
    case 4: return fma_tiles<1, 4, Form>(xr, 0, tiles, ts, n_kc, 0, 64, tile_y, 0, Pull{});
    case 3: return fma_tiles<1, 3, Form>(xr, 0, tiles, ts, n_kc, 0, 48, tile_y, 0, Pull{});
    case 2: return fma_tiles<1, 2, Form>(xr, 0, tiles, ts, n_kc, 0, 32, tile_y, 0, Pull{});
    default: return fma_tiles<1, 1, Form>(xr, 0, tiles, ts, n_kc, 0, 16, tile_y, 0, Pull{});
  }
}

}  // namespace

void packed16_rows_finish(const float* x, int64_t M, const WeightMatrix& w, const int32_t* idx,
                          const int64_t* counts, int64_t cap, float* y, ThreadPool& pool) {
  const bool f16 = w.dtype == DType::kF16;
  const int64_t N = w.n_out, K = w.n_in, Kp = (K + 31) / 32 * 32, n_kc = Kp / 32, xs = fma_x_stride(K);
  constexpr int kG = 4;  // groups of one row per micro-kernel call (8 accumulator chains)
  // Work items: (row, its first group, how many), at most kG groups each.
  struct Item {
    int64_t row, g0, n;
  };
  thread_local std::vector<Item> items;  // the calling thread's; the pool reads it during the call
  items.clear();
  DFL_ASSERT(M <= kGgmlRowChunk);
  for (int64_t r = 0; r < M; ++r)
    for (int64_t g = 0; counts[r] > 0 && g < (counts[r] + 15) / 16; g += kG)
      items.push_back(Item{r, g, min64(kG, (counts[r] + 15) / 16 - g)});
  if (items.empty()) return;
  thread_local std::vector<float> xbuf;
  if (xbuf.size() < static_cast<size_t>(M * xs)) xbuf.resize(static_cast<size_t>(M * xs));
  if (f16)
    copy_fp32_rows(x, M, K, Kp, xs, xbuf.data());
  else
    to_bf16_fp32_rows(x, M, K, Kp, xs, xbuf.data());
  const float* xf = xbuf.data();
  const Item* it = items.data();
  pool.parallel_for(
      static_cast<int64_t>(items.size()),
      [&, xf, it](int64_t i0, int64_t i1, int) {
        thread_local std::vector<uint16_t> tiles;  // this thread's kG gathered tiles
        if (tiles.size() < size_t(kG * n_kc * kPackTile)) tiles.resize(size_t(kG * n_kc * kPackTile));
        alignas(32) float tile_y[kG * 16];
        for (int64_t i = i0; i < i1; ++i) {
          const Item& item = it[i];
          const int32_t* row_idx = idx + item.row * cap;
          int32_t outs[kG][16];
          int64_t valid[kG];
          for (int64_t g = 0; g < item.n; ++g) {
            const int64_t j0 = (item.g0 + g) * 16;
            valid[g] = min64(16, counts[item.row] - j0);
            for (int j = 0; j < 16; ++j) outs[g][j] = row_idx[j0 + min64(j, valid[g] - 1)];
            gather_tile16(static_cast<const uint16_t*>(w.data), K, outs[g], n_kc, f16, tiles.data() + g * n_kc * kPackTile);
          }
          const float* xr = xf + item.row * xs;
          if (f16)
            finish_groups<F16Rows>(int(item.n), xr, tiles.data(), n_kc, tile_y);
          else
            finish_groups<Bf16Pairs>(int(item.n), xr, tiles.data(), n_kc, tile_y);
          for (int64_t g = 0; g < item.n; ++g)
            for (int64_t j = 0; j < valid[g]; ++j) y[item.row * N + outs[g][j]] = tile_y[16 * g + j];
        }
      },
      1);
}

void matmul_bf16_packed_many(const float* x, int64_t M, const WeightMatrix* const* ws, float* const* ys,
                             int n, ThreadPool& pool, float* xf) {
  matmul_packed_fma<Bf16Pairs>(x, M, ws, ys, n, pool, xf);
}

void matmul_f16_packed_many(const float* x, int64_t M, const WeightMatrix* const* ws, float* const* ys,
                            int n, ThreadPool& pool, float* xf) {
  matmul_packed_fma<F16Rows>(x, M, ws, ys, n, pool, xf);
}

}  // namespace dfl::cpu::avx2
