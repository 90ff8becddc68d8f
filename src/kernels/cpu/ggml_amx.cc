// AMX-INT8 kernel of the repacked 32-element GGML formats (ops.h kPackedQ32x16: Q8_0, Q5_0,
// Q4_0) for multi-row calls (verify blocks, prefill). Same bits as cpu/ggml_avx512.cc's VNNI
// kernel and the portable one (the math: kernels/ggml_matmul.cc, top comment).
//
// The packed weight block — [8 (k/4)][16 (n)][4 (k%4)] unsigned bytes u for Q8_0, nibbles of
// the same shape for Q5_0 / Q4_0 (unpacked here to u) — is the B operand of tdpbsud (signed A ×
// unsigned B, exact int32 sums); 16 activation rows of one 32-block (GgmlAct.q, row stride
// K + 256) are its A operand. One tdpbsud gives the block dots Σ u·q of 16 rows × 16 outputs,
// then per row exactly the VNNI kernel's fp steps:
//   dv = dot − (Σ q << log2 off);  lane[b % 8] = fma(float(dv), d_w · d_x, lane[b % 8])
// and y = ((l0 + l4) + (l1 + l5)) + ((l2 + l6) + (l3 + l7)). The lanes are independent, so the
// blocks run lane by lane (b = l, l + 8, ...: each lane's blocks still in k order) with the
// lane's 16 row accumulators in registers. Tile products are software pipelined against the
// vector epilogue as in cpu/q8_amx.cc: while block i is finished, the product of block i + 2 is
// in flight and that of i + 1 is being stored.
//
// Contract (caller: kernels/ggml_matmul.cc): M ≤ kGgmlAmxMaxRows; a.q has round_up(M, 16)
// readable rows, the rows past M zeroed (tiles always load 16 rows; the extra rows' results are
// never used). Only call when amx_usable() && cpu_features().amx_int8.
#include <immintrin.h>

#include <cstring>
#include <type_traits>

#include "kernels/cpu/cpu_kernels.h"

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
constexpr int kShift = T == kQ8_0 ? 7 : T == kQ4_0 ? 3 : 4;  // log2 of the offset of u

inline int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }

// 4 bits of every lane's qh (bits sh .. sh + 3) spread to bit 4 of its 4 bytes.
inline __m512i fifth_bits(__m512i qh, int sh) {
  const __m512i x =
      _mm512_and_si512(_mm512_srli_epi32(qh, static_cast<unsigned>(sh)), _mm512_set1_epi32(0xF));
  const __m512i s = _mm512_and_si512(_mm512_mullo_epi32(x, _mm512_set1_epi32(0x00204081)),
                                     _mm512_set1_epi32(0x01010101));
  return _mm512_slli_epi32(s, 4);
}

// The B operand (8 rows × 64 bytes of u) of packed block bp: Q8_0's bytes as they are; Q4_0 /
// Q5_0 unpacked into ub (rows 0..3: elements 4g + i = low nibbles, rows 4..7: 16 + 4g + i).
template <int T>
inline const uint8_t* b_operand(const uint8_t* bp, uint8_t* ub) {
  if constexpr (T == kQ8_0) {
    return bp;
  } else {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512i qh = _mm512_setzero_si512();
    if constexpr (T == kQ5_0) qh = _mm512_loadu_si512(bp + 256);
    for (int g = 0; g < 4; ++g) {
      const __m512i wv = _mm512_loadu_si512(bp + 64 * g);
      __m512i lo = _mm512_and_si512(wv, m4), hi = _mm512_and_si512(_mm512_srli_epi16(wv, 4), m4);
      if constexpr (T == kQ5_0) {
        lo = _mm512_or_si512(lo, fifth_bits(qh, 4 * g));
        hi = _mm512_or_si512(hi, fifth_bits(qh, 16 + 4 * g));
      }
      _mm512_store_si512(ub + 64 * g, lo);
      _mm512_store_si512(ub + 64 * (4 + g), hi);
    }
    return ub;
  }
}

// Slot J of the ring: A in tmm(J % 2), B in tmm(2 + J % 2), C in tmm(4 + J). (The tile
// intrinsics take literal tile numbers.)
template <int J>
void block_product(const int8_t* xa, int64_t ldq, const uint8_t* bo);
template <int J>
void store_product(int32_t (*c)[16]);
#define DFL_GGML_PRODUCT(J, A, B, C)                                                \
  template <>                                                                       \
  inline void block_product<J>(const int8_t* xa, int64_t ldq, const uint8_t* bo) {  \
    _tile_loadd(A, xa, ldq);                                                        \
    _tile_loadd(B, bo, 64);                                                         \
    _tile_zero(C);                                                                  \
    _tile_dpbsud(C, A, B);                                                          \
  }                                                                                 \
  template <>                                                                       \
  inline void store_product<J>(int32_t (*c)[16]) {                                  \
    _tile_stored(C, c, 64);                                                         \
  }
DFL_GGML_PRODUCT(0, 0, 2, 4)
DFL_GGML_PRODUCT(1, 1, 3, 5)
DFL_GGML_PRODUCT(2, 0, 2, 6)
DFL_GGML_PRODUCT(3, 1, 3, 7)
#undef DFL_GGML_PRODUCT

// Rows [m0, m0 + R) × the 16 outputs of one packed tile (all nb blocks): the 8 lane sums per
// row into lanes[R][8][16]. next_tile (or nullptr): the following tile, prefetched block by block.
template <int T, int R>
void tile_rows(const GgmlAct& a, int64_t m0, const uint8_t* tile, int64_t nb,
               const uint8_t* next_tile, const uint8_t* bcache, float (*lanes)[8][16]) {
  constexpr int64_t BB = kBlockBytes<T>;
  const int64_t ldq = a.K + 256;
  const int8_t* xq = a.q + m0 * ldq;
  const float* xd = a.d + m0 * nb;
  const int32_t* xs = a.s32 + m0 * nb;
  alignas(64) int32_t c[4][16][16];
  alignas(64) uint8_t ub[4][512];
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  // Step i runs block seq(i): lane-major (lanes 0..7, blocks l, l + 8, ... of each). Lanes
  // l < nb % 8 hold q + 1 blocks, the others q.
  const int64_t n = nb, q = nb / 8, rem = nb % 8;
  auto seq = [&](int64_t i) -> int64_t {
    if (i < rem * (q + 1)) return i / (q + 1) + 8 * (i % (q + 1));
    const int64_t j = i - rem * (q + 1);
    return rem + j / q + 8 * (j % q);
  };
  auto product = [&](auto jc, int64_t i) {
    constexpr int J = decltype(jc)::value;
    const int64_t b = seq(i);
    if (next_tile) {
      const char* pf = reinterpret_cast<const char*>(next_tile + b * BB);
      for (int64_t o = 0; o < BB; o += 64) _mm_prefetch(pf + o, _MM_HINT_T1);
    }
    block_product<J>(xq + 32 * b, ldq, bcache ? bcache + 512 * b : b_operand<T>(tile + b * BB, ub[J]));
  };
  auto finish = [&](int64_t i, int32_t (*cb)[16]) {
    const int64_t b = seq(i);
    const __m512 dw = _mm512_loadu_ps(reinterpret_cast<const float*>(tile + b * BB + kQs<T> + kQh<T>));
    for (int r = 0; r < R; ++r) {
      const __m512i dv = _mm512_sub_epi32(_mm512_load_si512(cb[r]),
                                          _mm512_set1_epi32(xs[r * nb + b] << kShift<T>));
      const __m512 sc = _mm512_mul_ps(dw, _mm512_set1_ps(xd[r * nb + b]));
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dv), sc, acc[r]);
    }
    if (b + 8 >= nb) {  // the lane's last block
      for (int r = 0; r < R; ++r) {
        _mm512_store_ps(lanes[r][b % 8], acc[r]);
        acc[r] = _mm512_setzero_ps();
      }
    }
  };
  // Step i (J = i % 4): issue the product of i + 2, store that of i + 1, finish i.
  auto step = [&](auto jc, int64_t i) {
    constexpr int J = decltype(jc)::value;
    if (i + 2 < n) product(std::integral_constant<int, (J + 2) % 4>{}, i + 2);
    if (i + 1 < n) store_product<(J + 1) % 4>(c[(J + 1) % 4]);
    finish(i, c[J]);
  };
  product(std::integral_constant<int, 0>{}, 0);
  if (n > 1) product(std::integral_constant<int, 1>{}, 1);
  store_product<0>(c[0]);
  for (int64_t i = 0; i < n; i += 4) {
    step(std::integral_constant<int, 0>{}, i);
    if (i + 1 < n) step(std::integral_constant<int, 1>{}, i + 1);
    if (i + 2 < n) step(std::integral_constant<int, 2>{}, i + 2);
    if (i + 3 < n) step(std::integral_constant<int, 3>{}, i + 3);
  }
  for (int64_t l = nb; l < 8; ++l)  // lanes without blocks (K < 256)
    for (int r = 0; r < R; ++r) _mm512_store_ps(lanes[r][l], _mm512_setzero_ps());
}

template <int T>
void run_rows(int64_t R, const GgmlAct& a, int64_t m0, const uint8_t* tile, int64_t nb,
              const uint8_t* next, const uint8_t* bcache, float (*lanes)[8][16]) {
  switch (R) {
#define DFL_GGML_ROWS(r) \
  case r: return tile_rows<T, r>(a, m0, tile, nb, next, bcache, lanes);
    DFL_GGML_ROWS(1) DFL_GGML_ROWS(2) DFL_GGML_ROWS(3) DFL_GGML_ROWS(4) DFL_GGML_ROWS(5)
    DFL_GGML_ROWS(6) DFL_GGML_ROWS(7) DFL_GGML_ROWS(8) DFL_GGML_ROWS(9) DFL_GGML_ROWS(10)
    DFL_GGML_ROWS(11) DFL_GGML_ROWS(12) DFL_GGML_ROWS(13) DFL_GGML_ROWS(14) DFL_GGML_ROWS(15)
#undef DFL_GGML_ROWS
    default: return tile_rows<T, 16>(a, m0, tile, nb, next, bcache, lanes);
  }
}

// A tiles (tmm0/1): 16 rows × 32 bytes (one block of k); B (tmm2/3): 8 rows × 64 bytes; C
// (tmm4..7): 16 × 16 int32.
void configure_ggml_tiles() {
  struct alignas(64) TileConfig {
    uint8_t palette_id;
    uint8_t start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
  } cfg{};
  cfg.palette_id = 1;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = static_cast<uint16_t>(t < 2 ? 32 : 64);
    cfg.rows[t] = static_cast<uint8_t>(t == 2 || t == 3 ? 8 : 16);
  }
  _tile_loadconfig(&cfg);
}

// Unpacked B operands of one tile (Q4_0 / Q5_0, K ≤ 32 · kCacheBlocks), per thread.
constexpr int64_t kCacheBlocks = 128;
alignas(64) thread_local uint8_t g_bcache[kCacheBlocks * 512];

template <int T>
void q32x16_tiles(const GgmlAct& a, int64_t M, const WeightMatrix& w, float* y, int64_t t0,
                  int64_t t1) {
  const int64_t nb = w.n_in / 32, N = w.n_out, n_tiles = (N + 15) / 16;
  const uint8_t* packed = static_cast<const uint8_t*>(w.packed);
  alignas(64) float lanes[16][8][16];
  for (int64_t t = t0; t < t1; ++t) {
    const uint8_t* tile = packed + t * nb * kBlockBytes<T>;
    const uint8_t* next = t + 1 < n_tiles ? tile + nb * kBlockBytes<T> : nullptr;
    const int64_t n0 = t * 16;
    const __mmask16 mk = static_cast<__mmask16>(N - n0 >= 16 ? 0xFFFF : (1u << (N - n0)) - 1);
    // Several 16-row groups: unpack the tile's B operands once for all of them.
    const uint8_t* bcache = nullptr;
    if (T != kQ8_0 && M > 16 && nb <= kCacheBlocks) {
      for (int64_t b = 0; b < nb; ++b) b_operand<T>(tile + b * kBlockBytes<T>, g_bcache + 512 * b);
      bcache = g_bcache;
    }
    for (int64_t m0 = 0; m0 < M; m0 += 16) {
      const int64_t R = imin(16, M - m0);
      run_rows<T>(R, a, m0, tile, nb, m0 == 0 ? next : nullptr, bcache, lanes);
      for (int64_t r = 0; r < R; ++r) {
        __m512 l[8];
        for (int i = 0; i < 8; ++i) l[i] = _mm512_load_ps(lanes[r][i]);
        const __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(l[0], l[4]), _mm512_add_ps(l[1], l[5])),
                                       _mm512_add_ps(_mm512_add_ps(l[2], l[6]), _mm512_add_ps(l[3], l[7])));
        _mm512_mask_storeu_ps(y + (m0 + r) * N + n0, mk, s);
      }
    }
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
