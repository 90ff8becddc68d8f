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

#include "kernels/cpu/cpu_kernels.h"

namespace dfl::cpu::amx {

namespace {

struct alignas(64) TileConfig {
  uint8_t palette_id;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};

void configure_tiles() {
  TileConfig c{};
  c.palette_id = 1;
  for (int t = 0; t < 8; ++t) {
    c.rows[t] = 16;
    c.colsb[t] = 64;
  }
  _tile_loadconfig(&c);
}

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

void matmul_bf16(const float* x, int64_t M, const WeightMatrix& w, float* y, ThreadPool& pool,
                 uint16_t* xb) {
  const int64_t N = w.n_out, K = w.n_in;
  const int64_t Kp = (K + 31) / 32 * 32, n_kc = Kp / 32;
  const int64_t n_mb = (M + 15) / 16;
  // x → bf16 rows (zero-padded to whole 16-row blocks); threaded for prefill-sized inputs.
  auto convert = [&](int64_t m_begin, int64_t m_end, int) {
  for (int64_t m = m_begin; m < m_end; ++m) {
    uint16_t* dst = xb + m * Kp;
    for (int64_t k = 0; k < Kp; k += 32) {
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
