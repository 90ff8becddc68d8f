// AMX-BF16 matmul for BF16 weights prepacked by prepack_weight() (ops.h kPackedAmxBf16).
//
// Tiles: tmm0 = 16 activation rows × 32 k (bf16), tmm1..3 = weight tiles (16 k-pairs × 16 n × 2,
// the VNNI layout the packer writes), tmm4..7 = fp32 accumulators of up to four 16-column
// output tiles. Activation rows are zero-padded to a multiple of 16, so every call, whatever
// M, runs the same instruction sequence on each 16×16 output tile: row m of the result is
// computed by the same tdpbf16ps chain over k whether it sits in row 0 or row 13 of its tile,
// and whatever the tile grouping per thread (batch invariance is checked by the tests).
// M = 1 wastes tile rows but is bound by weight bandwidth anyway; M = 16 costs the same
// weight stream and 1/8 of a 16-cycle tdpbf16ps per 1 KiB weight tile.
#include <immintrin.h>

#include "kernels/cpu/amx_tiles.h"
#include "kernels/cpu/cpu_kernels.h"

namespace dfl::cpu::amx {

namespace {


inline int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }

constexpr int64_t kTileElems = 16 * 32;  // bf16 elements of one packed 16 n × 32 k tile

template <int G>
void run_group(const uint16_t* xb, int64_t Kp, int64_t mb, const uint16_t* wp, int64_t t0,
               int64_t n_kc, int64_t M, int64_t N, float* y) {
  _tile_zero(4);
  if constexpr (G > 1) _tile_zero(5);
  if constexpr (G > 2) _tile_zero(6);
  if constexpr (G > 3) _tile_zero(7);
  const uint16_t* xa = xb + mb * 16 * Kp;
  const uint16_t* b0 = wp + t0 * n_kc * kTileElems;
  const int64_t ts = n_kc * kTileElems;  // stride between n-tiles
  for (int64_t kc = 0; kc < n_kc; ++kc) {
    _tile_loadd(0, xa + kc * 32, Kp * 2);
    const uint16_t* b = b0 + kc * kTileElems;
    _tile_loadd(1, b, 64);
    if constexpr (G > 1) _tile_loadd(2, b + ts, 64);
    if constexpr (G > 2) _tile_loadd(3, b + 2 * ts, 64);
    _tile_dpbf16ps(4, 0, 1);
    if constexpr (G > 1) _tile_dpbf16ps(5, 0, 2);
    if constexpr (G > 2) _tile_dpbf16ps(6, 0, 3);
    if constexpr (G > 3) {
      _tile_loadd(1, b + 3 * ts, 64);
      _tile_dpbf16ps(7, 0, 1);
    }
  }
  alignas(64) float c[4][16][16];
  _tile_stored(4, c[0], 64);
  if constexpr (G > 1) _tile_stored(5, c[1], 64);
  if constexpr (G > 2) _tile_stored(6, c[2], 64);
  if constexpr (G > 3) _tile_stored(7, c[3], 64);
  const int64_t rows = imin(16, M - mb * 16);
  for (int g = 0; g < G; ++g) {
    const int64_t n0 = (t0 + g) * 16;
    const int64_t nv = imin(16, N - n0);
    const __mmask16 mk = nv >= 16 ? 0xffff : static_cast<__mmask16>((1u << nv) - 1);
    for (int64_t r = 0; r < rows; ++r)
      _mm512_mask_storeu_ps(y + (mb * 16 + r) * N + n0, mk, _mm512_load_ps(c[g][r]));
  }
}

// ---- prefill-sized M: cache-blocked 2×2 tiles -------------------------------------------------
//
// For M ≥ kBlockedMinRows the weight panel of 4 n-tiles over all K (run_group) no longer fits
// close to the core, and every 16-row block re-streams it from L2. Here a thread walks its
// n-tiles in blocks of kNB tiles and K in chunks of kKC 32-wide steps; inside, 2 m-blocks × 2
// n-tiles of accumulators (tmm4..7) take 2 A + 2 B tile loads per 4 tdpbf16ps, the B chunk of an
// n-tile pair (kKC KiB each) stays in L1 across all m-blocks, and partial sums wait in an fp32
// block buffer between K chunks (a store and reload are exact). Each output element therefore
// sees the same zero start and the same tdpbf16ps sequence over k as in run_group: results are
// bit-identical to the small-M path (batch invariance holds across the switch).
constexpr int64_t kNB = 16;  // n-tiles per block (256 columns)
constexpr int64_t kKC = 8;   // 32-wide k steps per chunk (256 k)
constexpr int64_t kMC = 32;  // m-blocks per pass (512 rows): a prompt of ≤ 512 tokens streams the weights once

template <int MB, int NB>
void run_block_tile(const uint16_t* xt, int64_t mb, const uint16_t* wp, int64_t t, int64_t n_kc,
                    int64_t kc0, int64_t kc1, float* cb, int64_t tl) {
  // C tile (mb + i, tl + j) → tmm4 + 2 i + j, stored contiguous at cb + ((mb+i)·kNB + tl+j)·256.
  float* c00 = cb + (mb * kNB + tl) * 256;
  constexpr int64_t kNextM = kNB * 256;
  if (kc0 == 0) {
    _tile_zero(4);
    if constexpr (NB > 1) _tile_zero(5);
    if constexpr (MB > 1) _tile_zero(6);
    if constexpr (MB > 1 && NB > 1) _tile_zero(7);
  } else {
    _tile_loadd(4, c00, 64);
    if constexpr (NB > 1) _tile_loadd(5, c00 + 256, 64);
    if constexpr (MB > 1) _tile_loadd(6, c00 + kNextM, 64);
    if constexpr (MB > 1 && NB > 1) _tile_loadd(7, c00 + kNextM + 256, 64);
  }
  const uint16_t* a0 = xt + mb * n_kc * kTileElems;
  const uint16_t* b0 = wp + t * n_kc * kTileElems;
  const int64_t ts = n_kc * kTileElems;  // next m-block (A) / next n-tile (B)
  for (int64_t kc = kc0; kc < kc1; ++kc) {
    _tile_loadd(0, a0 + kc * kTileElems, 64);
    if constexpr (MB > 1) _tile_loadd(1, a0 + ts + kc * kTileElems, 64);
    _tile_loadd(2, b0 + kc * kTileElems, 64);
    if constexpr (NB > 1) _tile_loadd(3, b0 + ts + kc * kTileElems, 64);
    _tile_dpbf16ps(4, 0, 2);
    if constexpr (NB > 1) _tile_dpbf16ps(5, 0, 3);
    if constexpr (MB > 1) _tile_dpbf16ps(6, 1, 2);
    if constexpr (MB > 1 && NB > 1) _tile_dpbf16ps(7, 1, 3);
  }
  _tile_stored(4, c00, 64);
  if constexpr (NB > 1) _tile_stored(5, c00 + 256, 64);
  if constexpr (MB > 1) _tile_stored(6, c00 + kNextM, 64);
  if constexpr (MB > 1 && NB > 1) _tile_stored(7, c00 + kNextM + 256, 64);
}

// n-tiles [t_begin, t_end) of the output, all M rows in passes of kMC m-blocks. xt: activations as A tiles
// [n_mb][n_kc][16 rows][32] bf16 (one tile = 1 KiB contiguous: a tile load touches one page);
// cb: n_mb × kNB C tiles of 16×16 fp32.
void run_blocked(const uint16_t* xt, int64_t n_mb, const uint16_t* wp, int64_t n_kc,
                 int64_t t_begin, int64_t t_end, int64_t M, int64_t N, float* y, float* cb) {
  for (int64_t mc0 = 0; mc0 < n_mb; mc0 += kMC)
  for (int64_t nb0 = t_begin; nb0 < t_end; nb0 += kNB) {
    const int64_t nb1 = imin(t_end, nb0 + kNB);
    const int64_t mc1 = imin(n_mb, mc0 + kMC);
    for (int64_t kc0 = 0; kc0 < n_kc; kc0 += kKC) {
      const int64_t kc1 = imin(n_kc, kc0 + kKC);
      for (int64_t t = nb0; t < nb1; t += 2) {
        const bool two_n = t + 1 < nb1;
        for (int64_t mb = mc0; mb < mc1; mb += 2) {
          const bool two_m = mb + 1 < mc1;
          const int64_t tl = t - nb0;
          if (two_m && two_n) run_block_tile<2, 2>(xt, mb, wp, t, n_kc, kc0, kc1, cb, tl);
          else if (two_m) run_block_tile<2, 1>(xt, mb, wp, t, n_kc, kc0, kc1, cb, tl);
          else if (two_n) run_block_tile<1, 2>(xt, mb, wp, t, n_kc, kc0, kc1, cb, tl);
          else run_block_tile<1, 1>(xt, mb, wp, t, n_kc, kc0, kc1, cb, tl);
        }
      }
    }
    for (int64_t m = mc0 * 16; m < imin(M, mc1 * 16); ++m)
      for (int64_t t = nb0; t < nb1; ++t) {
        const int64_t n0 = t * 16, nv = imin(16, N - n0);
        const __mmask16 mk = nv >= 16 ? 0xffff : static_cast<__mmask16>((1u << nv) - 1);
        _mm512_mask_storeu_ps(y + m * N + n0, mk,
                              _mm512_load_ps(cb + ((m / 16) * kNB + (t - nb0)) * 256 + (m % 16) * 16));
      }
  }
}

}  // namespace

void pack_bf16(const WeightMatrix& w, uint16_t* dst, int64_t t_begin, int64_t t_end) {
  const int64_t N = w.n_out, K = w.n_in, n_kc = (K + 31) / 32;
  const uint16_t* src = static_cast<const uint16_t*>(w.data);
  for (int64_t t = t_begin; t < t_end; ++t)
    for (int64_t kc = 0; kc < n_kc; ++kc) {
      uint16_t* tile = dst + (t * n_kc + kc) * kTileElems;
      for (int64_t kp = 0; kp < 16; ++kp)
        for (int64_t j = 0; j < 16; ++j)
          for (int64_t e = 0; e < 2; ++e) {
            const int64_t n = t * 16 + j, k = kc * 32 + kp * 2 + e;
            tile[(kp * 16 + j) * 2 + e] = (n < N && k < K) ? src[n * K + k] : 0;
          }
    }
}

int64_t matmul_bf16_block_floats(int64_t M) { return (M + 31) / 32 * 32 * kNB * 16; }

void matmul_bf16(const float* x, int64_t M, const WeightMatrix& w, float* y, ThreadPool& pool,
                 uint16_t* xb, float* cb) {
  const int64_t N = w.n_out, K = w.n_in;
  const int64_t Kp = (K + 31) / 32 * 32, n_kc = Kp / 32;
  const int64_t n_mb = (M + 15) / 16;
  // x → bf16 rows (zero-padded to whole 16-row blocks); threaded for prefill-sized inputs.
  // Row layout [m][Kp] for run_group; A-tile layout [mb][kc][16][32] for the blocked path.
  const bool blocked = M >= kAmxBlockedMinRows;
  auto convert = [&](int64_t m_begin, int64_t m_end, int) {
  for (int64_t m = m_begin; m < m_end; ++m) {
    for (int64_t k = 0; k < Kp; k += 32) {
      uint16_t* dst = blocked ? xb + ((m / 16) * n_kc + k / 32) * kTileElems + (m % 16) * 32 - k
                              : xb + m * Kp;
      const int64_t r = m < M ? K - k : 0;
      const __mmask16 m0 = r >= 16 ? 0xffff : r <= 0 ? 0 : static_cast<__mmask16>((1u << r) - 1);
      const __mmask16 m1 = r >= 32 ? 0xffff : r <= 16 ? 0 : static_cast<__mmask16>((1u << (r - 16)) - 1);
      const float* xr = x + (m < M ? m : 0) * K + k;
      const __m512 lo = _mm512_maskz_loadu_ps(m0, xr);
      const __m512 hi = _mm512_maskz_loadu_ps(m1, xr + 16);
      _mm512_storeu_si512(dst + k, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
    }
  }
  };
  if (n_mb * 16 * Kp >= (int64_t(1) << 18))
    pool.parallel_for(n_mb * 16, convert, 16);
  else
    convert(0, n_mb * 16, 0);
  const uint16_t* wp = static_cast<const uint16_t*>(w.packed);
  const int64_t n_tiles = (N + 15) / 16;
  if (blocked) {
    const int64_t per_thread = matmul_bf16_block_floats(M);
    pool.parallel_for(
        n_tiles,
        [&](int64_t b, int64_t e, int tid) {
          configure_tiles();
          run_blocked(xb, n_mb, wp, n_kc, b, e, M, N, y, cb + tid * per_thread);
          _tile_release();
        },
        2);
    return;
  }
  pool.parallel_for(
      n_tiles,
      [&](int64_t b, int64_t e, int) {
        configure_tiles();
        for (int64_t t0 = b; t0 < e; t0 += 4) {
          const int64_t g = imin(4, e - t0);
          for (int64_t mb = 0; mb < n_mb; ++mb) {
            switch (g) {
              case 1: run_group<1>(xb, Kp, mb, wp, t0, n_kc, M, N, y); break;
              case 2: run_group<2>(xb, Kp, mb, wp, t0, n_kc, M, N, y); break;
              case 3: run_group<3>(xb, Kp, mb, wp, t0, n_kc, M, N, y); break;
              default: run_group<4>(xb, Kp, mb, wp, t0, n_kc, M, N, y); break;
            }
          }
        }
        _tile_release();
      },
      4);
}

}  // namespace dfl::cpu::amx
