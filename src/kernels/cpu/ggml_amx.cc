// AMX-INT8 kernel of the repacked 32-element GGML formats (ops.h kPackedQ32x16: Q8_0, Q5_0,
// Q4_0) for multi-row calls (verify blocks, prefill). Same bits as cpu/ggml_avx512.cc's VNNI
// kernel and the portable one (the math: kernels/ggml_matmul.cc, top comment).
//
// The packed weight block — [8 (k/4)][16 (n)][4 (k%4)] unsigned bytes u for Q8_0, nibbles of
// the same shape for Q5_0 / Q4_0 — is the B operand; 16 activation rows of one 32-block
// (GgmlAct.q, row stride K + 256) are the A operand. One block's tile products give the exact
// int32 dots dv = Σ (u − off)·q of 16 rows × 16 outputs (the VNNI kernel's Σ u·q − off·Σ q: the
// same integer): Q8_0 as tdpbsud on its stored bytes plus tdpbssd of A with a constant −128
// tile into the same C; Q4_0 / Q5_0 as tdpbssd on their signed unpacked values. Then per row
// exactly the VNNI kernel's fp steps:
//   lane[b % 8] = fma(float(dv), d_w · d_x, lane[b % 8])
// and y = ((l0 + l4) + (l1 + l5)) + ((l2 + l6) + (l3 + l7)). The lanes are independent, so the
// blocks run lane by lane (b = l, l + 8, ...: each lane's blocks still in k order) with the
// lane's 16 row accumulators in registers. Tile products are software pipelined against the
// vector epilogue (while block i is finished, the product of block i + 2 is in flight and that
// of i + 1 is being stored), A / B / C tiles alternating by step parity: AMX tiles are not
// renamed. Where the time goes and what was measured: docs/KERNELS.md.
//
// Contract (caller: kernels/ggml_matmul.cc): M ≤ kGgmlAmxMaxRows; a.q has round_up(M, 16)
// readable rows, the rows past M zeroed (tiles always load 16 rows; the extra rows' results are
// never used). Only call when amx_usable() && cpu_features().amx_int8.
#include <immintrin.h>

#include <cstring>
#include <type_traits>

#include "core/error.h"
#include "kernels/cpu/amx_tiles.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/simd_avx512.h"

namespace dfl::cpu::amx {

namespace {

constexpr int kQ8_0 = static_cast<int>(DType::kQ8_0);
constexpr int kQ5_0 = static_cast<int>(DType::kQ5_0);
constexpr int kQ4_0 = static_cast<int>(DType::kQ4_0);

template <int T>
constexpr int64_t kQs = T == kQ8_0 ? 512 : 256;  // packed quant bytes of one block
template <int T>
constexpr int64_t kQh = T == kQ5_0 ? 64 : 0;      // Q5_0's 5th bits
template <int T>
constexpr int64_t kBlockBytes = kQs<T> + kQh<T> + 64;  // + 16 fp32 weight scales
template <int T>
constexpr int kShift = T == kQ4_0 ? 3 : 4;  // log2 of the offset of Q4_0 / Q5_0 u

inline int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }

// The step lambdas of tile_rows must inline: out of line, the row accumulators they capture
// live on the stack (a load and a store per row and block; 2048×640 M = 16: 250 vs 213 µs).
#define DFL_INLINE __attribute__((always_inline))

// The signed B operand (8 rows × 64 bytes) of packed Q4_0 / Q5_0 block bp, written into ub:
// q = u − off unpacked from the nibbles (rows 0..3: elements 4g + i = low nibbles, rows 4..7:
// 16 + 4g + i).
template <int T>
inline void b_operand(const uint8_t* bp, uint8_t* ub) {
  static_assert(T != kQ8_0, "Q8_0's B operand is its packed bytes");
  {
    const __m512i m4 = _mm512_set1_epi8(0x0F), off = _mm512_set1_epi8(1 << kShift<T>);
    for (int g = 0; g < 4; ++g) {
      const __m512i wv = _mm512_loadu_si512(bp + 64 * g);
      __m512i lo = _mm512_and_si512(wv, m4), hi = _mm512_and_si512(_mm512_srli_epi16(wv, 4), m4);
      if constexpr (T == kQ5_0) {  // q = nibble + 16 · 5th bit − 16: minus 16 where the bit is 0
        lo = _mm512_mask_sub_epi8(lo, _knot_mask64(avx512::fifth_bit_mask(bp + 256, g)), lo, off);
        hi = _mm512_mask_sub_epi8(hi, _knot_mask64(avx512::fifth_bit_mask(bp + 256, 4 + g)), hi, off);
      } else {
        lo = _mm512_sub_epi8(lo, off);
        hi = _mm512_sub_epi8(hi, off);
      }
      _mm512_store_si512(ub + 64 * g, lo);
      _mm512_store_si512(ub + 64 * (4 + g), hi);
    }
  }
}

// Parity P of the step ring: A in tmm(P), B in tmm(2 + P), C in tmm(4 + P); tmm6 holds the
// constant −128 B tile. Q8_0 takes its stored u = q + 128 straight from the packed bytes
// (tdpbsud) and adds A·(−128) into the same C tile (tdpbssd): C = Σ q·(u − 128), exact, with
// neither a vector-built B (a vector store that a tile load reads soon after stalls it) nor a
// per-row correction in the epilogue. Q4_0 / Q5_0: tdpbssd on their signed unpacked values.
// (The tile intrinsics take literal tile numbers.)
template <int P, bool Q8>
void block_product(const int8_t* xa, int64_t ldq, const uint8_t* bo);
template <int P>
void store_product(int32_t (*c)[16]);
#define DFL_GGML_PRODUCT(P, A, B, C)                                                       \
  template <>                                                                              \
  inline void block_product<P, true>(const int8_t* xa, int64_t ldq, const uint8_t* bo) {   \
    _tile_loadd(A, xa, ldq);                                                               \
    _tile_loadd(B, bo, 64);                                                                \
    _tile_zero(C);                                                                         \
    _tile_dpbsud(C, A, B);                                                                 \
    _tile_dpbssd(C, A, 6);                                                                 \
  }                                                                                        \
  template <>                                                                              \
  inline void block_product<P, false>(const int8_t* xa, int64_t ldq, const uint8_t* bo) {  \
    _tile_loadd(A, xa, ldq);                                                               \
    _tile_loadd(B, bo, 64);                                                                \
    _tile_zero(C);                                                                         \
    _tile_dpbssd(C, A, B);                                                                 \
  }                                                                                        \
  template <>                                                                              \
  inline void store_product<P>(int32_t (*c)[16]) {                                         \
    _tile_stored(C, c, 64);                                                                \
  }
DFL_GGML_PRODUCT(0, 0, 2, 4)
DFL_GGML_PRODUCT(1, 1, 3, 5)
#undef DFL_GGML_PRODUCT

// Step i's block: lane-major (lanes 0..7, blocks l, l + 8, ... of each). A table made once per
// call (computing it per step took integer divisions).
constexpr int64_t kMaxBlocks = 4096;  // K ≤ 131072
void lane_major_order(int64_t nb, int16_t* seq) {
  int64_t i = 0;
  for (int64_t l = 0; l < 8; ++l)
    for (int64_t b = l; b < nb; b += 8) seq[i++] = static_cast<int16_t>(b);
}

// Block b's fp step for the R rows (their lane's accumulators acc, in registers: a function of
// its own, not a lambda — an accumulator captured by reference has its address taken, and the
// "memory" clobber of GCC's _tile_stored then kept it on the stack, a load and a store per row
// and block); after the lane's last block its sums go to lanes.
template <int T, int R>
DFL_INLINE inline void finish_block(__m512 (&acc)[R], const uint8_t* tile, int64_t b, int64_t nb,
                                    const float* xd, const int32_t (*cb)[16],
                                    float (*lanes)[8][16]) {
  const __m512 dw =
      _mm512_loadu_ps(reinterpret_cast<const float*>(tile + b * kBlockBytes<T> + kQs<T> + kQh<T>));
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    const __m512 sc = _mm512_mul_ps(dw, _mm512_set1_ps(xd[r * nb + b]));
    acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(cb[r])), sc, acc[r]);
  }
  if (b + 8 >= nb) {  // the lane's last block
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      _mm512_store_ps(lanes[r][b % 8], acc[r]);
      acc[r] = _mm512_setzero_ps();
    }
  }
}

// Rows [m0, m0 + R) × the 16 outputs of one packed tile (all nb blocks): the 8 lane sums per
// row into lanes[R][8][16]. next_tile (or nullptr): the following tile, prefetched block by
// block. Step i: issue the product of block seq[i + 2], store that of seq[i + 1], finish
// seq[i] (the lane's R accumulators in registers); Q4_0 / Q5_0 unpack the B operand of step
// i + 4 into a ring of four, so a tile load reads bytes stored two steps before.
template <int T, int R>
void tile_rows(const GgmlAct& a, int64_t m0, const uint8_t* tile, int64_t nb,
               const uint8_t* next_tile, const int16_t* seq, uint8_t* bcache, bool fill,
               float (*lanes)[8][16]) {
  constexpr int64_t BB = kBlockBytes<T>;
  constexpr bool kQ8 = T == kQ8_0;
  const int64_t ldq = a.K + 256, n = nb;
  const int8_t* xq = a.q + m0 * ldq;
  const float* xd = a.d + m0 * nb;
  alignas(64) int32_t c[2][16][16];
  alignas(64) uint8_t ub[4][512];
  __m512 acc[R];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  // Q4_0 / Q5_0: block seq[i]'s B operand — the ring slot, or its place in the tile's cache.
  auto operand = [&](int64_t i) DFL_INLINE -> uint8_t* {
    return bcache ? bcache + 512 * seq[i] : ub[i % 4];
  };
  auto unpack = [&](int64_t i) DFL_INLINE {
    if constexpr (!kQ8) {
      if (i < n && (!bcache || fill)) b_operand<T>(tile + seq[i] * BB, operand(i));
    }
  };
  auto product = [&](auto pc, int64_t i) DFL_INLINE {
    const int64_t b = seq[i];
    if (next_tile) {
      const char* pf = reinterpret_cast<const char*>(next_tile + b * BB);
      for (int64_t o = 0; o < BB; o += 64) _mm_prefetch(pf + o, _MM_HINT_T1);
    }
    block_product<decltype(pc)::value, kQ8>(xq + 32 * b, ldq, kQ8 ? tile + b * BB : operand(i));
  };
  using P0 = std::integral_constant<int, 0>;
  using P1 = std::integral_constant<int, 1>;
  auto step = [&](auto pc, int64_t i) DFL_INLINE {
    constexpr int P = decltype(pc)::value;
    // Block seq[i + 4] of this tile into L1 (its tile load is two steps after this one's): the
    // B tile loads were waiting on L2 (Gemma head Q8_0 at 16 rows 8.8-9.0 -> 7.7-7.8 ms).
    if (i + 4 < n) {
      const char* l1 = reinterpret_cast<const char*>(tile + seq[i + 4] * BB);
      for (int64_t o = 0; o < BB; o += 64) _mm_prefetch(l1 + o, _MM_HINT_T0);
    }
    unpack(i + 4);
    if (i + 2 < n) product(pc, i + 2);
    if (i + 1 < n) store_product<1 - P>(c[1 - P]);
  };
  for (int64_t i = 0; i < 4; ++i) unpack(i);
  product(P0{}, 0);
  if (n > 1) product(P1{}, 1);
  store_product<0>(c[0]);
  for (int64_t i = 0; i < n; i += 2) {
    step(P0{}, i);
    finish_block<T, R>(acc, tile, seq[i], nb, xd, c[0], lanes);
    if (i + 1 < n) {
      step(P1{}, i + 1);
      finish_block<T, R>(acc, tile, seq[i + 1], nb, xd, c[1], lanes);
    }
  }
  for (int64_t l = nb; l < 8; ++l)  // lanes without blocks (K < 256)
    for (int r = 0; r < R; ++r) _mm512_store_ps(lanes[r][l], _mm512_setzero_ps());
}

template <int T>
void run_rows(int64_t R, const GgmlAct& a, int64_t m0, const uint8_t* tile, int64_t nb,
              const uint8_t* next, const int16_t* seq, uint8_t* bcache, bool fill,
              float (*lanes)[8][16]) {
  switch (R) {
#define DFL_GGML_ROWS(r) \
  case r: return tile_rows<T, r>(a, m0, tile, nb, next, seq, bcache, fill, lanes);
    DFL_GGML_ROWS(1) DFL_GGML_ROWS(2) DFL_GGML_ROWS(3) DFL_GGML_ROWS(4) DFL_GGML_ROWS(5)
    DFL_GGML_ROWS(6) DFL_GGML_ROWS(7) DFL_GGML_ROWS(8) DFL_GGML_ROWS(9) DFL_GGML_ROWS(10)
    DFL_GGML_ROWS(11) DFL_GGML_ROWS(12) DFL_GGML_ROWS(13) DFL_GGML_ROWS(14) DFL_GGML_ROWS(15)
#undef DFL_GGML_ROWS
    default: return tile_rows<T, 16>(a, m0, tile, nb, next, seq, bcache, fill, lanes);
  }
}

// A tiles (tmm0/1): 16 rows × 32 bytes (one block of k); B (tmm2/3, and the −128 tile tmm6):
// 8 rows × 64 bytes; C (tmm4/5): 16 × 16 int32.
void configure_ggml_tiles() {
  configure_tiles({16, 16, 8, 8, 16, 16, 8, 16}, {32, 32, 64, 64, 64, 64, 64, 64});
  alignas(64) static const uint8_t kMinus128[512] = {
#define DFL_X8 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80
#define DFL_X64 DFL_X8, DFL_X8, DFL_X8, DFL_X8, DFL_X8, DFL_X8, DFL_X8, DFL_X8
      DFL_X64, DFL_X64, DFL_X64, DFL_X64, DFL_X64, DFL_X64, DFL_X64, DFL_X64
#undef DFL_X64
#undef DFL_X8
  };
  _tile_loadd(6, kMinus128, 64);
}

// The unpacked B operands of one tile (K ≤ 32 · kCacheBlocks), per thread.
constexpr int64_t kCacheBlocks = 128;
alignas(64) thread_local uint8_t g_bcache[kCacheBlocks * 512];

template <int T>
void q32x16_tiles(const GgmlAct& a, int64_t M, const WeightMatrix& w, float* y, int64_t t0,
                  int64_t t1) {
  const int64_t nb = w.n_in / 32, N = w.n_out, n_tiles = (N + 15) / 16;
  DFL_ASSERT(nb <= kMaxBlocks && M <= kGgmlAmxMaxRows);
  const uint8_t* packed = static_cast<const uint8_t*>(w.packed);
  alignas(64) float lanes[kGgmlAmxMaxRows][8][16];  // all rows: the int8x2 halves summed in registers
  int16_t seq[kMaxBlocks];
  lane_major_order(nb, seq);
  // Q4_0 / Q5_0 with several 16-row groups: the first group's unpacked B operands are kept
  // for the others (read steps later: no store-to-tile-load stall).
  uint8_t* bcache = T != kQ8_0 && M > 16 && nb <= kCacheBlocks ? g_bcache : nullptr;
  for (int64_t t = t0; t < t1; ++t) {
    const uint8_t* tile = packed + t * nb * kBlockBytes<T>;
    const uint8_t* next = t + 1 < n_tiles ? tile + nb * kBlockBytes<T> : nullptr;
    const int64_t n0 = t * 16;
    for (int64_t m0 = 0; m0 < M; m0 += 16) {
      const int64_t R = imin(16, M - m0);
      run_rows<T>(R, a, m0, tile, nb, m0 == 0 ? next : nullptr, seq, bcache, m0 == 0, lanes + m0);
    }
    avx512::store_lane_sums(&lanes[0][0][0], M, N - n0, y + n0, N, 0, a.pair);
  }
}

}  // namespace

void matmul_q32x16(const GgmlAct& a, int64_t M, const WeightMatrix& w, float* y, ThreadPool& pool) {
  pool.parallel_for(
      (w.n_out + 15) / 16,
      [&](int64_t t0, int64_t t1, int) {
        configure_ggml_tiles();
        switch (w.dtype) {
          case DType::kQ8_0: q32x16_tiles<kQ8_0>(a, M, w, y, t0, t1); break;
          case DType::kQ5_0: q32x16_tiles<kQ5_0>(a, M, w, y, t0, t1); break;
          case DType::kQ4_0: q32x16_tiles<kQ4_0>(a, M, w, y, t0, t1); break;
          default: break;
        }
        _tile_release();
      },
      1);
}

}  // namespace dfl::cpu::amx
