// AMX-INT8 kernel of the Q8 format (ops.h kPackedQ8) for multi-row calls (verify blocks, prefill).
//
// The Q8 weight tile — one 64-wide block of 16 rows, [16 (k/4)][16 (n)][4 (k%4)] u8 — is exactly
// the B operand of tdpbsud (signed A bytes × unsigned B bytes, int32 accumulation), and 16
// activation rows of one block (int8, row stride n_blocks·64 bytes) are its A operand. So one
// tdpbsud gives the 16×16 exact int32 block dot products Σ x_q·u for 16 rows × 16 outputs, work
// that takes the VNNI kernel 16 vpdpbusd per row. Then, per row, exactly as cpu/q8_avx512.cc:
//   dot = Σ x_q·u + c      (c = −128·Σ x_q cancels the +128 offset of u; integers: exact)
//   acc = acc + float(dot) * (x_scale * w_scale)      (mul, mul, add: no fma)
// with the blocks in k order. The integer dot is the same number whichever unit sums it, and the
// fp sequence is the same per output, so results are bit-identical to the VNNI and portable
// kernels — for any M, row position in a tile, thread count (ops.h Q8 contract; tested).
//
// Per 16-output tile and block of up to 16 rows, the blocks are software pipelined: A and B
// tiles alternate between tmm0/1 and tmm2/3, four C tiles (tmm4..7) and four 1 KiB C buffers
// form a ring; while the vector units finish block b (int32 rows → fp32 accumulators), the
// product of block b + 2 is in flight and that of b + 1 is being stored. (Without the pipeline
// the tile round trip serialized with the fp32 part and AMX lost to VNNI below M = 16.) Tiles
// are configured with min(M, 16) rows, so a small call loads, multiplies and stores only its
// rows; for M > 16 the last partial block loads 16 rows (the caller's buffer is padded to a
// multiple of 16: kernels/q8.cc) and never uses the extra ones.
#include <immintrin.h>

#include <type_traits>

#include "kernels/cpu/amx_tiles.h"
#include "kernels/cpu/cpu_kernels.h"

namespace dfl::cpu::amx {

namespace {

constexpr int kTileBytes = 16 * 64;  // one 16-row × 64-k Q8 weight tile
constexpr int kPrefetchBlocks = 4;    // weight tiles prefetched ahead (as the VNNI kernel)
static_assert(kQ8Block == 64 && kQ8TileN == 16, "one AMX tile per Q8 block tile");

inline int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }

// Block b of the activation rows (xa, row stride ldx) × one weight tile (wb): the exact int32
// products Σ x_q·u into C tile tmm(4 + J) (A in tmm(J % 2), B in tmm(2 + J % 2)); store_product
// writes that C tile out.
template <int J>
void block_product(const int8_t* xa, int64_t ldx, const uint8_t* wb);
template <int J>
void store_product(int32_t (*c)[16]);
// (The tile intrinsics take literal tile numbers.)
#define DFL_Q8_PRODUCT(J, A, B, C)                                                    \
  template <>                                                                         \
  inline void block_product<J>(const int8_t* xa, int64_t ldx, const uint8_t* wb) {    \
    _tile_loadd(A, xa, ldx);                                                          \
    _tile_loadd(B, wb, 64);                                                           \
    _tile_zero(C);                                                                    \
    _tile_dpbsud(C, A, B);                                                            \
  }                                                                                   \
  template <>                                                                         \
  inline void store_product<J>(int32_t (*c)[16]) {                                    \
    _tile_stored(C, c, 64);                                                           \
  }
DFL_Q8_PRODUCT(0, 0, 2, 4)
DFL_Q8_PRODUCT(1, 1, 3, 5)
DFL_Q8_PRODUCT(2, 0, 2, 6)
DFL_Q8_PRODUCT(3, 1, 3, 7)
#undef DFL_Q8_PRODUCT

// Rows [m0, m0 + R) × the 16 outputs of one weight tile column (wt, dt), all blocks, software
// pipelined so the AMX unit and the vector units overlap within the reorder window: while the
// fp32 part of block b runs, the product of block b + 2 is in flight and that of b + 1 is being
// stored (four C tiles and four C buffers in a ring, indexed b % 4).
template <int R>
void tile_rows(const Q8Act& a, int64_t m0, const uint8_t* wt, const float* dt, int64_t nb,
               int64_t n_valid, float* y, int64_t ldy) {
  const int64_t ldx = nb * kQ8Block;
  const int8_t* xq = a.q + m0 * ldx;
  const float* xd = a.d + m0 * nb;
  const int32_t* xc = a.c + m0 * nb;
  __m512 acc[R];
  for (int i = 0; i < R; ++i) acc[i] = _mm512_setzero_ps();
  alignas(64) int32_t c[4][16][16];
  auto product = [&](auto jc, int64_t b) {
    constexpr int J = decltype(jc)::value;
    const char* pf = reinterpret_cast<const char*>(wt + (b + kPrefetchBlocks) * kTileBytes);
    for (int l = 0; l < 16; ++l) _mm_prefetch(pf + 64 * l, _MM_HINT_T0);
    if (J % 2 == 0) _mm_prefetch(reinterpret_cast<const char*>(dt + (b + kPrefetchBlocks) * 16), _MM_HINT_T0);
    block_product<J>(xq + b * kQ8Block, ldx, wt + b * kTileBytes);
  };
  auto fp = [&](int64_t b, int32_t (*cb)[16]) {
    const __m512 dw = _mm512_loadu_ps(dt + b * 16);
    for (int i = 0; i < R; ++i) {
      const __m512i t = _mm512_add_epi32(_mm512_load_si512(cb[i]), _mm512_set1_epi32(xc[i * nb + b]));
      const __m512 sc = _mm512_mul_ps(_mm512_set1_ps(xd[i * nb + b]), dw);
      acc[i] = _mm512_add_ps(acc[i], _mm512_mul_ps(_mm512_cvtepi32_ps(t), sc));
    }
  };
  // Step b (J = b % 4): issue the product of b + 2, store that of b + 1, finish b.
  auto step = [&](auto jc, int64_t b) {
    constexpr int J = decltype(jc)::value;
    if (b + 2 < nb) product(std::integral_constant<int, (J + 2) % 4>{}, b + 2);
    if (b + 1 < nb) store_product<(J + 1) % 4>(c[(J + 1) % 4]);
    fp(b, c[J]);
  };
  product(std::integral_constant<int, 0>{}, 0);
  if (nb > 1) product(std::integral_constant<int, 1>{}, 1);
  store_product<0>(c[0]);
  for (int64_t b = 0; b < nb; b += 4) {
    step(std::integral_constant<int, 0>{}, b);
    if (b + 1 < nb) step(std::integral_constant<int, 1>{}, b + 1);
    if (b + 2 < nb) step(std::integral_constant<int, 2>{}, b + 2);
    if (b + 3 < nb) step(std::integral_constant<int, 3>{}, b + 3);
  }
  const __mmask16 sm = n_valid >= 16 ? 0xffff : static_cast<__mmask16>((1u << n_valid) - 1);
  for (int i = 0; i < R; ++i) _mm512_mask_storeu_ps(y + i * ldy, sm, acc[i]);
}

// Row-count dispatch (the per-row arithmetic does not depend on R).
void run_rows(int64_t R, const Q8Act& a, int64_t m0, const uint8_t* wt, const float* dt,
              int64_t nb, int64_t nv, float* y, int64_t ldy) {
  switch (R) {
#define DFL_Q8_ROWS(r) \
  case r: return tile_rows<r>(a, m0, wt, dt, nb, nv, y, ldy);
    DFL_Q8_ROWS(1) DFL_Q8_ROWS(2) DFL_Q8_ROWS(3) DFL_Q8_ROWS(4) DFL_Q8_ROWS(5) DFL_Q8_ROWS(6)
    DFL_Q8_ROWS(7) DFL_Q8_ROWS(8) DFL_Q8_ROWS(9) DFL_Q8_ROWS(10) DFL_Q8_ROWS(11)
    DFL_Q8_ROWS(12) DFL_Q8_ROWS(13) DFL_Q8_ROWS(14) DFL_Q8_ROWS(15)
#undef DFL_Q8_ROWS
    default: return tile_rows<16>(a, m0, wt, dt, nb, nv, y, ldy);
  }
}

// A tiles (tmm0/1) and C tiles (tmm4..7) of `rows` rows, B tiles (tmm2/3) of 16: a call with
// M < 16 loads, multiplies and stores only its M rows.
void configure_q8_tiles(int rows) {
  const uint8_t r = static_cast<uint8_t>(rows);
  configure_tiles({r, r, 16, 16, r, r, r, r}, {64, 64, 64, 64, 64, 64, 64, 64});
}

}  // namespace

void matmul_q8(const Q8Act& a, int64_t M, const WeightMatrix& w, float* y, ThreadPool& pool) {
  const int64_t N = w.n_out, nb = a.n_blocks;
  const uint8_t* wq = static_cast<const uint8_t*>(w.data);
  const int64_t n_tiles = (N + 15) / 16;
  pool.parallel_for(
      n_tiles,
      [&](int64_t t0, int64_t t1, int) {
        configure_q8_tiles(static_cast<int>(imin(16, M)));
        for (int64_t t = t0; t < t1; ++t) {
          const int64_t n0 = t * 16, nv = imin(16, N - n0);
          const uint8_t* wt = wq + t * nb * kTileBytes;
          const float* dt = w.scale + t * nb * 16;
          for (int64_t m0 = 0; m0 < M; m0 += 16)
            run_rows(imin(16, M - m0), a, m0, wt, dt, nb, nv, y + m0 * N + n0, N);
        }
        _tile_release();
      },
      1);
}

}  // namespace dfl::cpu::amx
