// AVX-512 VNNI kernels of the Q8 format (ops.h kPackedQ8).
//
// Weights are stored as u8 = q + 128 so they can be the unsigned operand of vpdpbusd; the
// activations are the signed one. Σ u·x = Σ q·x + 128·Σx; the correction c = −128·Σx depends
// only on the activation block and is the start value of the block's int32 accumulator.
//
// Layout: tiles of 16 rows; per 64-block one 1 KiB tile, row r of the tile (r = k/4) holding
// 4 consecutive k of each of the 16 rows (one row per 32-bit lane). So vpdpbusd(acc, tile row r,
// broadcast of x[4r..4r+3]) adds 4 products to each of the 16 row sums: after the 16 rows of
// the tile, lane j holds the exact int32 dot product of row j with the activation block — no
// horizontal reductions, and a thread streams one contiguous region (weights and scales),
// prefetched ahead (prefetch_tile). Per (activation row, 16 outputs, block):
//   acc = acc + float(dot) * (x_scale * w_scale)      (mul, mul, add: no fma)
// The integer dot is exact whatever the summation order (|dot| ≤ 64·127·255 < 2³¹), and the fp
// part is one fixed sequence per output over the blocks in k order, so row m's result is the
// same for any M, micro-kernel height, thread count — and the same as the portable code in
// kernels/q8.cc.
#include <immintrin.h>

#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/simd_avx512.h"

namespace dfl::cpu::avx512 {

namespace {

constexpr int kMR = 8;  // activation rows per micro-kernel (with_rows<kMR>, simd_avx512.h)
constexpr int kTileBytes = 16 * 64;  // one 16-row × 64-k block tile
// The weight stream is prefetched twice: every line kPrefetchBlocks 1 KiB tiles ahead into L1,
// and kPrefetchL2 tiles ahead into L2 (AMD EPYC Zen 4, 2 threads, lm_head 151936×1024: M = 8
// 8.2 → 6.0 ms, M = 16 10.7 → 9.0 ms with the L2 stream; the L1 prefetch alone cannot keep
// enough misses in flight once the kernel also computes).
constexpr int kPrefetchBlocks = 4;
constexpr int kPrefetchL2 = 32;
static_assert(kQ8Block == 64 && kQ8TileN == 16, "one zmm of bytes per tile row");

inline int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }

inline void prefetch_tile(const uint8_t* wb) {
  const char* l1 = reinterpret_cast<const char*>(wb + kPrefetchBlocks * kTileBytes);
  const char* l2 = reinterpret_cast<const char*>(wb + kPrefetchL2 * kTileBytes);
  for (int l = 0; l < 16; ++l) _mm_prefetch(l1 + 64 * l, _MM_HINT_T0);
  for (int l = 0; l < 16; ++l) _mm_prefetch(l2 + 64 * l, _MM_HINT_T1);
}

// Rows m0 .. m0+MR-1 of the activations × one 16-row weight tile column (all blocks).
// S: independent int32 accumulators per row (so short M still has enough chains in flight).
template <int MR>
void tile_q8(const Q8Act& a, int64_t m0, const uint8_t* wt, const float* dt, int64_t nb,
             int64_t n_valid, float* y, int64_t ldy) {
  constexpr int S = MR >= 4 ? 1 : 4 / MR;
  const int64_t ldx = nb * kQ8Block;
  const int8_t* xq = a.q + m0 * ldx;
  const float* xd = a.d + m0 * nb;
  const int32_t* xc = a.c + m0 * nb;
  __m512 acc[MR];
  for (int i = 0; i < MR; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* wb = wt + b * kTileBytes;
    prefetch_tile(wb);
    _mm_prefetch(reinterpret_cast<const char*>(dt + (b + kPrefetchBlocks) * 16), _MM_HINT_T0);
    __m512i s[MR][S];
    for (int i = 0; i < MR; ++i) {
      s[i][0] = _mm512_set1_epi32(xc[i * nb + b]);
      for (int u = 1; u < S; ++u) s[i][u] = _mm512_setzero_si512();
    }
#pragma GCC unroll 16
    for (int r = 0; r < 16; ++r) {
      const __m512i wv = _mm512_loadu_si512(wb + 64 * r);
      for (int i = 0; i < MR; ++i)
        s[i][r % S] = _mm512_dpbusd_epi32(s[i][r % S], wv, bcast4(xq + i * ldx + b * kQ8Block + 4 * r));
    }
    const __m512 dw = _mm512_loadu_ps(dt + b * 16);
    for (int i = 0; i < MR; ++i) {
      __m512i t = s[i][0];
      if constexpr (S == 2) t = _mm512_add_epi32(t, s[i][1]);
      if constexpr (S == 4)
        t = _mm512_add_epi32(_mm512_add_epi32(t, s[i][1]), _mm512_add_epi32(s[i][2], s[i][3]));
      const __m512 sc = _mm512_mul_ps(_mm512_set1_ps(xd[i * nb + b]), dw);
      acc[i] = _mm512_add_ps(acc[i], _mm512_mul_ps(_mm512_cvtepi32_ps(t), sc));
    }
  }
  const __mmask16 sm = n_valid >= 16 ? 0xffff : static_cast<__mmask16>((1u << n_valid) - 1);
  for (int i = 0; i < MR; ++i) _mm512_mask_storeu_ps(y + i * ldy, sm, acc[i]);
}

// The activations of the block-outer form as a panel, built once per call by the calling
// thread (thread-local storage, read by the pool's threads during the call): per group of kPR
// rows and per 64-block, the 4-byte k groups of the kPR rows side by side (r-major), then the
// group's kPR correction and scale values. One pointer per (group, block) reaches every operand
// of block_q8, so the micro-kernel runs without the per-row addresses that had spilled GPRs
// (8 strided rows: base + i·ldx each). Rows past M in the last group are zero (never stored).
constexpr int kPR = 16;  // rows per panel group
struct Q8Panel {
  const int32_t* q;  // [group][block][16 r][kPR rows]: 4 int8 of row i at k = 64·block + 4r
  const int32_t* c;  // [group][block][kPR]
  const float* d;    // [group][block][kPR]
};

Q8Panel build_panel(const Q8Act& a, int64_t M) {
  thread_local std::vector<int32_t> qbuf, cbuf;
  thread_local std::vector<float> dbuf;
  const int64_t nb = a.n_blocks, groups = (M + kPR - 1) / kPR;
  qbuf.assign(static_cast<size_t>(groups * nb * 16 * kPR), 0);
  cbuf.assign(static_cast<size_t>(groups * nb * kPR), 0);
  dbuf.assign(static_cast<size_t>(groups * nb * kPR), 0.0f);
  for (int64_t m = 0; m < M; ++m) {
    const int64_t gi = m / kPR, i = m % kPR;
    const int8_t* xr = a.q + m * nb * kQ8Block;
    for (int64_t b = 0; b < nb; ++b) {
      int32_t* pq = qbuf.data() + (gi * nb + b) * 16 * kPR + i;
      for (int r = 0; r < 16; ++r) std::memcpy(pq + r * kPR, xr + b * kQ8Block + 4 * r, 4);
      cbuf[(gi * nb + b) * kPR + i] = a.c[m * nb + b];
      dbuf[(gi * nb + b) * kPR + i] = a.d[m * nb + b];
    }
  }
  return {qbuf.data(), cbuf.data(), dbuf.data()};
}

// Rows i < MR of one panel group × one 64-block of a tile (pq / pc / pd: the group's block),
// accumulating into acc[MR][16] in memory: the block-outer form for kMR < M ≤
// kMaxBlockOuterRows. The column is then streamed once for all M rows (row-group-outer would
// walk it once per 8 rows, and the later walks, from L1/L2, leave the DRAM stream idle: the
// lm_head at M = 16 ran at a third of the bandwidth). Same per-output sequence
// acc + float(dot) · (x_scale · w_scale) over the blocks in k order: the same bits.
template <int MR>
void block_q8(const int32_t* pq, const int32_t* pc, const float* pd, const uint8_t* wb,
              const float* dwp, float* acc) {
  __m512i s[MR];
  for (int i = 0; i < MR; ++i) s[i] = _mm512_set1_epi32(pc[i]);
#pragma GCC unroll 16
  for (int r = 0; r < 16; ++r) {
    const __m512i wv = _mm512_loadu_si512(wb + 64 * r);
    for (int i = 0; i < MR; ++i) s[i] = _mm512_dpbusd_epi32(s[i], wv, _mm512_set1_epi32(pq[r * kPR + i]));
  }
  const __m512 dw = _mm512_loadu_ps(dwp);
  for (int i = 0; i < MR; ++i) {
    const __m512 sc = _mm512_mul_ps(_mm512_set1_ps(pd[i]), dw);
    _mm512_storeu_ps(acc + 16 * i,
                     _mm512_add_ps(_mm512_loadu_ps(acc + 16 * i), _mm512_mul_ps(_mm512_cvtepi32_ps(s[i]), sc)));
  }
}

constexpr int64_t kMaxBlockOuterRows = 32;

void column_q8_block_outer(const Q8Panel& pan, int64_t nb, int64_t M, const uint8_t* wt,
                           const float* dt, int64_t n_valid, float* y, int64_t ldy) {
  alignas(64) float acc[kMaxBlockOuterRows * 16];
  const int64_t Mp = (M + kPR - 1) / kPR * kPR;
  for (int64_t i = 0; i < Mp * 16; ++i) acc[i] = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* wb = wt + b * kTileBytes;
    prefetch_tile(wb);
    _mm_prefetch(reinterpret_cast<const char*>(dt + (b + kPrefetchBlocks) * 16), _MM_HINT_T0);
    for (int64_t m0 = 0; m0 < M; m0 += kPR) {
      const int64_t gb = (m0 / kPR) * nb + b;
      const int32_t* pq = pan.q + gb * 16 * kPR;
      const int32_t* pc = pan.c + gb * kPR;
      const float* pd = pan.d + gb * kPR;
      float* ac = acc + m0 * 16;
      const float* dw = dt + b * 16;
      // 16 rows: 16 int32 chains in flight (8 leave vpdpbusd's ~6-cycle latency exposed); a
      // group of 9..15 rows runs as 16 (the panel's rows past M are zero, their sums unused).
      if (M - m0 > kMR)
        block_q8<kPR>(pq, pc, pd, wb, dw, ac);
      else
        with_rows<kMR>(M - m0, [&](auto R) { block_q8<R.value>(pq, pc, pd, wb, dw, ac); });
    }
  }
  const __mmask16 sm = n_valid >= 16 ? 0xffff : static_cast<__mmask16>((1u << n_valid) - 1);
  for (int64_t i = 0; i < M; ++i) _mm512_mask_storeu_ps(y + i * ldy, sm, _mm512_load_ps(acc + 16 * i));
}

}  // namespace

void quantize_act_q8(const float* x, int64_t M, int64_t K, int8_t* q, float* d, int32_t* c) {
  const int64_t nb = (K + kQ8Block - 1) / kQ8Block;
  const __m512 sign_off = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t k0 = b * kQ8Block;
      __m512 v[4];
      for (int u = 0; u < 4; ++u) {
        const int64_t r = K - (k0 + 16 * u);
        const __mmask16 mk = r >= 16 ? 0xffff : r <= 0 ? 0 : static_cast<__mmask16>((1u << r) - 1);
        v[u] = _mm512_maskz_loadu_ps(mk, x + m * K + k0 + 16 * u);
      }
      const __m512 mx = _mm512_max_ps(_mm512_max_ps(_mm512_and_ps(v[0], sign_off), _mm512_and_ps(v[1], sign_off)),
                                      _mm512_max_ps(_mm512_and_ps(v[2], sign_off), _mm512_and_ps(v[3], sign_off)));
      const float amax = _mm512_reduce_max_ps(mx);
      const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
      const __m512 iv = _mm512_set1_ps(inv);
      __m512i sum = _mm512_setzero_si512();
      int8_t* qr = q + m * nb * kQ8Block + k0;
      for (int u = 0; u < 4; ++u) {
        const __m512i qi = _mm512_cvtps_epi32(_mm512_mul_ps(v[u], iv));  // RNE
        sum = _mm512_add_epi32(sum, qi);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(qr + 16 * u), _mm512_cvtepi32_epi8(qi));
      }
      d[m * nb + b] = amax / 127.0f;
      c[m * nb + b] = -128 * _mm512_reduce_add_epi32(sum);
    }
  }
}

void matmul_q8(const Q8Act& a, int64_t M, const WeightMatrix& w, float* y, ThreadPool& pool) {
  const int64_t N = w.n_out, nb = a.n_blocks;
  const uint8_t* wq = static_cast<const uint8_t*>(w.data);
  const int64_t n_tiles = (N + 15) / 16;
  const bool block_outer = M > kMR && M <= kMaxBlockOuterRows;
  const Q8Panel pan = block_outer ? build_panel(a, M) : Q8Panel{};
  pool.parallel_for_redoable(
      n_tiles,
      [&](int64_t t0, int64_t t1, int) {
        for (int64_t t = t0; t < t1; ++t) {
          const int64_t n0 = t * 16, nv = imin(16, N - n0);
          const uint8_t* wt = wq + t * nb * kTileBytes;
          const float* dt = w.scale + t * nb * 16;
          if (block_outer) {
            column_q8_block_outer(pan, nb, M, wt, dt, nv, y + n0, N);
            continue;
          }
          for (int64_t m0 = 0; m0 < M; m0 += kMR) {
            float* yr = y + m0 * N + n0;
            with_rows<kMR>(M - m0, [&](auto R) { tile_q8<R.value>(a, m0, wt, dt, nb, nv, yr, N); });
          }
        }
      },
      1);
}

}  // namespace dfl::cpu::avx512
