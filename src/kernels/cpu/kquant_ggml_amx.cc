// AMX-INT8 kernels of the repacked GGML K formats (ops.h kPackedQ4K16, kPackedQ6K16; layouts at
// their VNNI kernels in cpu/ggml_avx512.cc) for multi-row calls: verify blocks, prefill chunks.
// They compute the bits of the portable int8 kernel (kernels/ggml_matmul.cc top comment):
//
// The integer part of a superblock, isum_s = Σ_k q_k·sc_j(k)·u_k, is one exact integer matmul
// of the activation rows (A: int8, straight from GgmlAct.q) with weights "u times its sub-block
// scale" — except that the product does not fit a byte, so it is split in two byte-sized
// B operands and two tile products:
//  * Q4_K: sc = 16·sh + sl (sl ≤ 15, sh ≤ 3): B_lo = u·sl ≤ 225, B_hi = u·sh ≤ 45, both u8
//    (tdpbsud); isum = C_lo + 16·C_hi. Because u·sl < 256 never carries, one vpmullw of the
//    packed nibble bytes by sl in both 16-bit halves of a lane makes two B bytes at once.
//    msum = Σ_j m_j·s32_j is a vpdpwssd per pair of sub-blocks on the vector units.
//  * Q6_K: P = sc·(u − 32) ∈ [−4064, 4096] (the −32·Σq correction folded in) is formed exactly in
//    16 bits (even and odd bytes by vpmaddubsw), P = 256·P_hi + P_lo with P_lo ∈ [0, 255] (u8,
//    tdpbsud) and P_hi ∈ [−16, 16] (s8, tdpbssd); isum = C_lo + 256·C_hi.
// All integer sums are exact in int32 whatever unit adds them, so isum / msum equal the spec's;
// the fp part per (row, output) is then the spec's, superblock s into lane s % 8 in s order:
//   Q4_K: a = fma(float(isum), d·dx, a); a = fma(−float(msum), dmin·dx, a)    Q6_K: the first
// and y = ((a0 + a4) + (a1 + a5)) + ((a2 + a6) + (a3 + a7)) — bit-identical to the VNNI kernels
// for any M, row position, thread count.
//
// The packed weight bytes of one (16-output tile, superblock) are exactly the B-tile layout
// ([k/4 rows][16 n][4 k]), so "unpacking" is nibble masking and the scale products, done once per
// superblock for all rows of the call (≤ 64: up to four 16-row A tiles). A step multiplies one
// superblock with a pair of row blocks (2×2 tile blocking: A tiles 0/1 × B lo/hi 2/3 into four
// C tiles, so no accumulator waits on its previous product) or a single one. Steps are
// software pipelined as in cpu/q8_amx.cc: the tile products of step i are issued,
// then the vector units finish step i − 1 (C tiles → fp32 accumulators) and, once per superblock,
// unpack the next superblock's B tiles (double buffered), so the AMX unit and the vector units
// overlap.
#include <immintrin.h>

#include "core/error.h"
#include "kernels/cpu/amx_tiles.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/simd_avx512.h"

namespace dfl::cpu::amx {

namespace {

constexpr int64_t kMaxRows = kGgmlAmxMaxRows;  // activation rows per call
constexpr int kTileBytes = 16 * 64;  // one B tile: 16 rows (k / 4) × 16 outputs × 4 bytes
constexpr int kCTile = 16 * 16;      // int32 entries of one C tile

inline int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }

// A tiles (tmm0/1) and C tiles of `rows` rows; the tiles in b_tiles (bit t = tmm t) are B tiles of
// 16 rows. All 64 bytes wide.
void configure(int rows, unsigned b_tiles) {
  uint8_t r[8];
  for (int t = 0; t < 8; ++t) r[t] = static_cast<uint8_t>((b_tiles >> t) & 1 ? 16 : rows);
  configure_tiles(r, {64, 64, 64, 64, 64, 64, 64, 64});
}

// ---- Q4_K ------------------------------------------------------------------------------------
// kPackedQ4K16 superblock: qs [4 c][8 g][16 o][4] (low nibbles: sub-block 2c, high: 2c + 1),
// sc [8 j][16 o] u8, m [8 j][16 o] u8, d [16] f32, dmin [16] f32.
struct Q4K {
  static constexpr int64_t kSuperBytes = kQ4K16SuperBytes;
  static constexpr int64_t kSc = 2048, kM = 2048 + 128, kD = 2048 + 256, kDmin = 2048 + 256 + 64;
  static constexpr int kHiShift = 4;          // isum = C_lo + 16·C_hi
  static constexpr bool kSignedHi = false;    // B_hi = u·sh is u8
  // B tiles of one superblock, per 64-k chunk c (rows 0-7: sub-block 2c, rows 8-15: 2c + 1),
  // and the min scales as int16 pairs (m_2p, m_2p+1) per output lane for vpdpwssd.
  struct B {
    alignas(64) uint8_t lo[4][kTileBytes];
    alignas(64) uint8_t hi[4][kTileBytes];
    __m512i mpair[4];
  };

  static void unpack(const uint8_t* sb, B* b) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    for (int p = 0; p < 4; ++p) {
      const __m512i m0 = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sb + kM + 32 * p)));
      const __m512i m1 = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sb + kM + 32 * p + 16)));
      b->mpair[p] = _mm512_or_si512(m0, _mm512_slli_epi32(m1, 16));
    }
    for (int c = 0; c < 4; ++c) {
      __m512i sl[2], sh[2];
      for (int p = 0; p < 2; ++p) {
        const int j = 2 * c + p;
        const __m512i s = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sb + kSc + 16 * j)));
        const __m512i sw = _mm512_or_si512(s, _mm512_slli_epi32(s, 16));  // sc in both 16-bit halves
        sl[p] = _mm512_and_si512(sw, _mm512_set1_epi16(0x0F));
        sh[p] = _mm512_srli_epi16(sw, 4);
      }
      for (int g = 0; g < 8; ++g) {
        const __m512i wv = _mm512_loadu_si512(sb + (c * 8 + g) * 64);
        const __m512i u[2] = {_mm512_and_si512(wv, m4), _mm512_and_si512(_mm512_srli_epi16(wv, 4), m4)};
        for (int p = 0; p < 2; ++p) {
          _mm512_store_si512(b->lo[c] + (8 * p + g) * 64, _mm512_mullo_epi16(u[p], sl[p]));
          _mm512_store_si512(b->hi[c] + (8 * p + g) * 64, _mm512_mullo_epi16(u[p], sh[p]));
        }
      }
    }
  }

  // Rows [m0, m0 + R) of superblock s: isum (int32 rows) → the fp32 lane accumulators
  // (acc [M][8][16]); msum = Σ_p (m_2p·s32_2p + m_2p+1·s32_2p+1) by vpdpwssd (|s32| ≤ 4064 and
  // m ≤ 63 are exact int16).
  static void finish_rows(const __m512i* isum, const B& b, const uint8_t* sb, const GgmlAct& a,
                          int64_t m0, int64_t R, int64_t s, int64_t ns, float* acc) {
    const __m512 d = _mm512_loadu_ps(reinterpret_cast<const float*>(sb + kD));
    const __m512 dmin = _mm512_loadu_ps(reinterpret_cast<const float*>(sb + kDmin));
    const int64_t n32 = a.K / 32;
    for (int64_t i = 0; i < R; ++i) {
      const __m512i s8 = _mm512_castsi256_si512(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.s32 + (m0 + i) * n32 + 8 * s)));
      __m512i msum = _mm512_setzero_si512();
      for (int p = 0; p < 4; ++p) {  // words 4p, 4p + 2 = the low halves of s32[2p], s32[2p + 1]
        const __m512i pair = _mm512_permutexvar_epi16(_mm512_set1_epi32(((4 * p + 2) << 16) | (4 * p)), s8);
        msum = _mm512_dpwssd_epi32(msum, pair, b.mpair[p]);
      }
      const __m512 dx = _mm512_set1_ps(a.d[(m0 + i) * ns + s]);
      float* ap = acc + ((m0 + i) * 8 + s % 8) * 16;
      __m512 v = _mm512_load_ps(ap);
      v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[i]), _mm512_mul_ps(d, dx), v);
      v = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(msum), _mm512_mul_ps(dmin, dx), v);
      _mm512_store_ps(ap, v);
    }
  }
};

// ---- Q6_K ------------------------------------------------------------------------------------
// kPackedQ6K16 superblock: ql [2 h][2 p][8 lg][16 o][4], qh [2 h][8 lg][16 o][4], sc [16 j][16 o]
// i8, d [16] f32. Element e = 128h + 32g + 4lg + i: low (g < 2) or high nibble of ql[h][g % 2],
// bits 2g, 2g + 1 of qh[h]. Chunk c = e / 64 has h = c / 2, g = 2(c % 2) + r / 8 for B row r and
// sub-block j = 4c + r / 4.
struct Q6K {
  static constexpr int64_t kSuperBytes = kQ6K16SuperBytes;
  static constexpr int64_t kQh = 2048, kSc = 3072, kD = 3072 + 256;
  static constexpr int kHiShift = 8;        // isum = C_lo + 256·C_hi
  static constexpr bool kSignedHi = true;   // P_hi ∈ [−16, 16] is s8
  struct B {
    alignas(64) uint8_t lo[4][kTileBytes];  // P_lo u8
    alignas(64) uint8_t hi[4][kTileBytes];  // P_hi s8
  };

  static void unpack(const uint8_t* sb, B* b) {
    const __mmask64 odd = 0xAAAAAAAAAAAAAAAAull;
    for (int c = 0; c < 4; ++c) {
      const int h = c / 2;
      for (int q = 0; q < 4; ++q) {
        const int j = 4 * c + q;
        const __m512i s = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sb + kSc + 16 * j)));
        // sc as the bytes [sc, 0, sc, 0] (even-byte multiplier of vpmaddubsw), [0, sc, 0, sc]
        // (odd), and 32·sc in both 16-bit halves.
        const __m512i sb8 = _mm512_and_si512(s, _mm512_set1_epi32(0xFF));
        const __m512i sce = _mm512_or_si512(sb8, _mm512_slli_epi32(sb8, 16));
        const __m512i sco = _mm512_slli_epi16(sce, 8);
        const __m512i sc32 = _mm512_slli_epi16(
            _mm512_or_si512(_mm512_and_si512(s, _mm512_set1_epi32(0xFFFF)), _mm512_slli_epi32(s, 16)), 5);
        for (int l = 0; l < 4; ++l) {
          const int r = 4 * q + l, g = 2 * (c % 2) + r / 8, lg = r % 8;
          const __m512i qlv = _mm512_loadu_si512(sb + ((h * 2 + g % 2) * 8 + lg) * 64);
          const __m512i qhv = _mm512_loadu_si512(sb + kQh + (h * 8 + lg) * 64);
          const __m512i u = avx512::q6k16_values(qlv, qhv, g);
          // P = sc·(u − 32) = u·sc − 32·sc of the even and the odd bytes (exact in 16 bits:
          // |u·sc| ≤ 8064, one of vpmaddubsw's two products is 0), split into bytes.
          const __m512i pe = _mm512_sub_epi16(_mm512_maddubs_epi16(u, sce), sc32);
          const __m512i po = _mm512_sub_epi16(_mm512_maddubs_epi16(u, sco), sc32);
          _mm512_store_si512(b->lo[c] + 64 * r, _mm512_mask_blend_epi8(odd, pe, _mm512_slli_epi16(po, 8)));
          _mm512_store_si512(b->hi[c] + 64 * r, _mm512_mask_blend_epi8(odd, _mm512_srli_epi16(pe, 8), po));
        }
      }
    }
  }

  static void finish_rows(const __m512i* isum, const B&, const uint8_t* sb, const GgmlAct& a,
                          int64_t m0, int64_t R, int64_t s, int64_t ns, float* acc) {
    const __m512 d = _mm512_loadu_ps(reinterpret_cast<const float*>(sb + kD));
    for (int64_t i = 0; i < R; ++i) {
      const __m512 dx = _mm512_set1_ps(a.d[(m0 + i) * ns + s]);
      float* ap = acc + ((m0 + i) * 8 + s % 8) * 16;
      _mm512_store_ps(ap, _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[i]), _mm512_mul_ps(d, dx), _mm512_load_ps(ap)));
    }
  }
};

// ---- tile products -----------------------------------------------------------------------------
// A tiles tmm0/1, B tiles tmm2 (lo) / tmm3 (hi), C tiles tmm4..7, stored to c[0..3] (1 KiB each).
// Pair step (two row blocks x0, x1 — 2×2 blocking, every C chain gets a product every 4):
//   c[0] = lo(x0), c[1] = hi(x0), c[2] = lo(x1), c[3] = hi(x1).
// Single step (one row block): chunks 0, 2 → c[0], c[1], chunks 1, 3 → c[2], c[3] (summed by the
// epilogue: int32, exact), so that no C chain waits on its previous product.
#define DFL_KQ_PAIR_CHUNK(c, HI)         \
  _tile_loadd(0, x0 + 64 * (c), ldq);    \
  _tile_loadd(2, b.lo[c], 64);           \
  _tile_loadd(3, b.hi[c], 64);           \
  _tile_loadd(1, x1 + 64 * (c), ldq);    \
  _tile_dpbsud(4, 0, 2);                 \
  HI(5, 0, 3);                           \
  _tile_dpbsud(6, 1, 2);                 \
  HI(7, 1, 3);
#define DFL_KQ_SINGLE_CHUNK(A, c, CL, CH, HI) \
  _tile_loadd(A, x0 + 64 * (c), ldq);         \
  _tile_loadd(2, b.lo[c], 64);                \
  _tile_loadd(3, b.hi[c], 64);                \
  _tile_dpbsud(CL, A, 2);                     \
  HI(CH, A, 3);
#define DFL_KQ_STORE_C                    \
  _tile_stored(4, c, 64);                 \
  _tile_stored(5, c + kCTile, 64);        \
  _tile_stored(6, c + 2 * kCTile, 64);    \
  _tile_stored(7, c + 3 * kCTile, 64);
#define DFL_KQ_ZERO_C \
  _tile_zero(4);      \
  _tile_zero(5);      \
  _tile_zero(6);      \
  _tile_zero(7);
#define DFL_KQ_PAIR(HI)                                                              \
  DFL_KQ_ZERO_C DFL_KQ_PAIR_CHUNK(0, HI) DFL_KQ_PAIR_CHUNK(1, HI) DFL_KQ_PAIR_CHUNK(2, HI) \
      DFL_KQ_PAIR_CHUNK(3, HI) DFL_KQ_STORE_C
#define DFL_KQ_SINGLE(HI)                                                                 \
  DFL_KQ_ZERO_C DFL_KQ_SINGLE_CHUNK(0, 0, 4, 5, HI) DFL_KQ_SINGLE_CHUNK(1, 1, 6, 7, HI)    \
      DFL_KQ_SINGLE_CHUNK(0, 2, 4, 5, HI) DFL_KQ_SINGLE_CHUNK(1, 3, 6, 7, HI) DFL_KQ_STORE_C

template <class F>
void products_pair(const int8_t* x0, const int8_t* x1, int64_t ldq, const typename F::B& b, int32_t* c) {
  if constexpr (F::kSignedHi) {
    DFL_KQ_PAIR(_tile_dpbssd)
  } else {
    DFL_KQ_PAIR(_tile_dpbsud)
  }
}
template <class F>
void products_single(const int8_t* x0, int64_t ldq, const typename F::B& b, int32_t* c) {
  if constexpr (F::kSignedHi) {
    DFL_KQ_SINGLE(_tile_dpbssd)
  } else {
    DFL_KQ_SINGLE(_tile_dpbsud)
  }
}
#undef DFL_KQ_SINGLE
#undef DFL_KQ_PAIR
#undef DFL_KQ_ZERO_C
#undef DFL_KQ_STORE_C
#undef DFL_KQ_SINGLE_CHUNK
#undef DFL_KQ_PAIR_CHUNK

// One step: superblock u of the thread's sequence (tile t, superblock s), row blocks
// [rb, rb + n_rb) (n_rb 1 or 2).
struct Step {
  int64_t t, s, rb, n_rb;
};

// A finished step's C tiles → isum rows → F::finish_rows into acc (the step's tile's [M][8][16]).
template <class F>
void finish_step(const Step& st, const int32_t* c, const typename F::B& b, const uint8_t* sb,
                 const GgmlAct& a, int64_t M, int64_t ns, float* acc) {
  __m512i isum[16];
  for (int64_t k = 0; k < st.n_rb; ++k) {
    const int64_t m0 = (st.rb + k) * 16, R = imin(16, M - m0);
    const int32_t* lo = c + 2 * k * kCTile;
    const int32_t* hi = lo + kCTile;
    for (int64_t i = 0; i < R; ++i) {
      __m512i l = _mm512_load_si512(lo + 16 * i), h = _mm512_load_si512(hi + 16 * i);
      if (st.n_rb == 1) {  // single step: chunks 1, 3 in c[2], c[3]
        l = _mm512_add_epi32(l, _mm512_load_si512(lo + 2 * kCTile + 16 * i));
        h = _mm512_add_epi32(h, _mm512_load_si512(hi + 2 * kCTile + 16 * i));
      }
      isum[i] = _mm512_add_epi32(l, _mm512_slli_epi32(h, F::kHiShift));
    }
    F::finish_rows(isum, b, sb, a, m0, R, st.s, ns, acc);
  }
}

// y rows [0, M) of output tile t from its lane accumulators.
void write_tile(const float* acc, int64_t M, int64_t t, int64_t N, float* y, int64_t pair) {
  avx512::store_lane_sums(acc, M, N - t * 16, y + t * 16, N, 0, pair);
}

// Output tiles [t0, t1) of one thread: its superblocks u = 0 .. (t1 − t0)·ns − 1 are contiguous
// in the packed weight (tile-major). Per step: issue its tile products, finish the step before
// it (and write that step's tile once its last superblock is in), and in the first step of
// superblock u unpack superblock u + 2 (three B buffers: the vector stores have drained long
// before the tile loads read them). Two accumulator sets by tile parity let the pipeline run
// across tile boundaries.
template <class F>
void run_tiles(const GgmlAct& a, int64_t M, const WeightMatrix& w, float* y, int64_t t0, int64_t t1) {
  const int64_t ns = w.n_in / 256, ldq = a.K + 256, N = w.n_out, nrb = (M + 15) / 16;
  const int64_t U = (t1 - t0) * ns;
  const uint8_t* base = static_cast<const uint8_t*>(w.packed) + t0 * ns * F::kSuperBytes;
  alignas(64) typename F::B b[3];
  alignas(64) int32_t cbuf[2][4 * kCTile];
  alignas(64) float acc[2][kMaxRows * 8 * 16];
  F::unpack(base, &b[0]);
  if (U > 1) F::unpack(base + F::kSuperBytes, &b[1]);
  int64_t step = 0;
  Step prev{0, 0, 0, 0};
  auto finish_prev = [&] {
    const int64_t pu = (prev.t - t0) * ns + prev.s;
    float* pacc = acc[(prev.t - t0) % 2];
    finish_step<F>(prev, cbuf[(step - 1) % 2], b[pu % 3], base + pu * F::kSuperBytes, a, M, ns, pacc);
    if (prev.s == ns - 1 && prev.rb + prev.n_rb == nrb) write_tile(pacc, M, prev.t, N, y, a.pair);
  };
  for (int64_t u = 0; u < U; ++u) {
    const int64_t t = t0 + u / ns, s = u % ns;
    if (s == 0) {
      float* ac = acc[(t - t0) % 2];
      for (int64_t i = 0; i < M * 8 * 16; ++i) ac[i] = 0.0f;
    }
    for (int64_t rb = 0; rb < nrb; ++step) {
      const Step cur{t, s, rb, nrb - rb >= 2 ? 2 : 1};
      const int8_t* x0 = a.q + rb * 16 * ldq + 256 * s;
      if (cur.n_rb == 2)
        products_pair<F>(x0, x0 + 16 * ldq, ldq, b[u % 3], cbuf[step % 2]);
      else
        products_single<F>(x0, ldq, b[u % 3], cbuf[step % 2]);
      if (step > 0) finish_prev();
      if (rb == 0 && u + 2 < U) {
        const uint8_t* nb = base + (u + 2) * F::kSuperBytes;
        for (int64_t l = 0; l < F::kSuperBytes; l += 64)
          _mm_prefetch(reinterpret_cast<const char*>(nb + 2 * F::kSuperBytes + l), _MM_HINT_T0);
        F::unpack(nb, &b[(u + 2) % 3]);
      }
      prev = cur;
      rb += cur.n_rb;
    }
  }
  finish_prev();
}

// Calls of more than kMaxRows rows run as chunks of kMaxRows (each row's result depends only on
// that row).
template <class F>
void matmul_packed(const GgmlAct& a, int64_t M, const WeightMatrix& w, float* y, ThreadPool& pool) {
  const int64_t ldq = a.K + 256, ns = a.K / 256;
  for (int64_t m0 = 0; m0 < M; m0 += kMaxRows) {
    DFL_ASSERT(a.pair == 0 || M <= kMaxRows);  // the residual rows in the same call as theirs
    GgmlAct ac = a;
    ac.q += m0 * ldq;
    ac.d += m0 * ns;
    ac.s16 += m0 * (a.K / 16);
    ac.s32 += m0 * (a.K / 32);
    const int64_t Mc = imin(kMaxRows, M - m0);
    float* yc = y + m0 * w.n_out;
    pool.parallel_for((w.n_out + 15) / 16, [&](int64_t t0, int64_t t1, int) {
      configure(static_cast<int>(imin(16, Mc)), (1u << 2) | (1u << 3));
      run_tiles<F>(ac, Mc, w, yc, t0, t1);
      _tile_release();
    });
  }
}

}  // namespace

void matmul_q4k16(const GgmlAct& a, int64_t M, const WeightMatrix& w, float* y, ThreadPool& pool) {
  matmul_packed<Q4K>(a, M, w, y, pool);
}

void matmul_q6k16(const GgmlAct& a, int64_t M, const WeightMatrix& w, float* y, ThreadPool& pool) {
  matmul_packed<Q6K>(a, M, w, y, pool);
}

}  // namespace dfl::cpu::amx
