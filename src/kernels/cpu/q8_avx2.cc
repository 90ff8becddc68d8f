// AVX2 kernels of the Q8 format (ops.h kPackedQ8) for machines without AVX-512: the layout and
// the arithmetic of cpu/q8_avx512.cc, so the same bits. A tile row r of a 64-block holds 4
// consecutive k of 16 outputs (one per 32-bit lane); here as two halves of 8 lanes. The stored
// u8 = q + 128 is turned back into q (u ^ 0x80, |q| ≤ 127) and multiplied as |q| · sign(x, q)
// by vpmaddubsw (pairs ≤ 2·127·127 < 2^15), widened by vpmaddwd: that is Σ q·x, the exact
// int32 block dot the AVX-512 kernel gets as c + Σ u·x. Then acc = acc + float(dot)·(dx·dw)
// (mul, mul, add) per output over the blocks in k order.
// Compiled twice: as itself (namespace avx2) and by q8_avxvnni.cc with DFL_AVX2_VNNI = 1 and the
// AVX-VNNI flag (namespace avx2_vnni, matmul_q8 only): the block dot is then c + Σ u·x on
// vpdpbusd ymm, the AVX-512 kernel's form — the same int32.
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/avx2_namespace.h"
#include "kernels/cpu/cpu_kernels.h"

namespace dfl::cpu::DFL_AVX2_NAMESPACE {

namespace {

constexpr int kMR = 4;               // activation rows per micro-kernel
constexpr int kTileBytes = 16 * 64;  // one 16-row × 64-k block tile
static_assert(kQ8Block == 64 && kQ8TileN == 16, "16 tile rows of 64 bytes per block");

inline int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }

inline __m256i bcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

template <int MR>
void tile_q8(const Q8Act& a, int64_t m0, const uint8_t* wt, const float* dt, int64_t nb,
             int64_t n_valid, float* y, int64_t ldy) {
  const int64_t ldx = nb * kQ8Block;
  const int8_t* xq = a.q + m0 * ldx;
  const float* xd = a.d + m0 * nb;
#if !DFL_AVX2_VNNI
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80)), ones = _mm256_set1_epi16(1);
#endif
  __m256 acc[MR][2];
  for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* wb = wt + b * kTileBytes;
    __m256i s[MR][2];
#if DFL_AVX2_VNNI
    for (int i = 0; i < MR; ++i) s[i][0] = s[i][1] = _mm256_set1_epi32(a.c[(m0 + i) * nb + b]);
    for (int r = 0; r < 16; ++r) {
      const __m256i u0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + 64 * r));
      const __m256i u1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + 64 * r + 32));
      for (int i = 0; i < MR; ++i) {
        const __m256i x = bcast4(xq + i * ldx + b * kQ8Block + 4 * r);
        s[i][0] = _mm256_dpbusd_avx_epi32(s[i][0], u0, x);
        s[i][1] = _mm256_dpbusd_avx_epi32(s[i][1], u1, x);
      }
    }
#else
    for (int i = 0; i < MR; ++i) s[i][0] = s[i][1] = _mm256_setzero_si256();
    for (int r = 0; r < 16; ++r) {
      __m256i wq[2], wu[2];
      for (int h = 0; h < 2; ++h) {
        wq[h] = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + 64 * r + 32 * h)), flip);
        wu[h] = _mm256_sign_epi8(wq[h], wq[h]);
      }
      for (int i = 0; i < MR; ++i) {
        const __m256i x = bcast4(xq + i * ldx + b * kQ8Block + 4 * r);
        for (int h = 0; h < 2; ++h)
          s[i][h] = _mm256_add_epi32(
              s[i][h], _mm256_madd_epi16(_mm256_maddubs_epi16(wu[h], _mm256_sign_epi8(x, wq[h])), ones));
      }
    }
#endif
    const __m256 dw0 = _mm256_loadu_ps(dt + b * 16), dw1 = _mm256_loadu_ps(dt + b * 16 + 8);
    for (int i = 0; i < MR; ++i) {
      const __m256 dx = _mm256_set1_ps(xd[i * nb + b]);
      acc[i][0] = _mm256_add_ps(acc[i][0], _mm256_mul_ps(_mm256_cvtepi32_ps(s[i][0]), _mm256_mul_ps(dx, dw0)));
      acc[i][1] = _mm256_add_ps(acc[i][1], _mm256_mul_ps(_mm256_cvtepi32_ps(s[i][1]), _mm256_mul_ps(dx, dw1)));
    }
  }
  for (int i = 0; i < MR; ++i) {
    alignas(32) float v[16];
    _mm256_store_ps(v, acc[i][0]);
    _mm256_store_ps(v + 8, acc[i][1]);
    for (int64_t j = 0; j < n_valid; ++j) y[i * ldy + j] = v[j];
  }
}

}  // namespace

#if !DFL_AVX2_VNNI
void quantize_act_q8(const float* x, int64_t M, int64_t K, int8_t* q, float* d, int32_t* c) {
  const int64_t nb = (K + kQ8Block - 1) / kQ8Block;
  const __m256 sign_off = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  // The low byte of each int32 (the AVX-512 kernel's truncating vpmovdb), lanes 0-3 of each half.
  const __m256i low_bytes = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                             0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t k0 = b * kQ8Block;
      __m256 v[8];
      for (int u = 0; u < 8; ++u) {
        const int64_t r = K - (k0 + 8 * u);
        if (r >= 8) {
          v[u] = _mm256_loadu_ps(x + m * K + k0 + 8 * u);
        } else {
          alignas(32) float t[8] = {0, 0, 0, 0, 0, 0, 0, 0};
          for (int64_t i = 0; i < r; ++i) t[i] = x[m * K + k0 + 8 * u + i];
          v[u] = _mm256_load_ps(t);
        }
      }
      // max_ps(|v|, mx) keeps mx for a NaN v, as std::fmax does.
      __m256 mx = _mm256_setzero_ps();
      for (int u = 0; u < 8; ++u) mx = _mm256_max_ps(_mm256_and_ps(v[u], sign_off), mx);
      __m128 h = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
      h = _mm_max_ps(h, _mm_shuffle_ps(h, h, 0x4E));
      h = _mm_max_ps(h, _mm_shuffle_ps(h, h, 0xB1));
      const float amax = _mm_cvtss_f32(h);
      const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
      const __m256 iv = _mm256_set1_ps(inv);
      __m256i sum = _mm256_setzero_si256();
      int8_t* qr = q + m * nb * kQ8Block + k0;
      for (int u = 0; u < 8; ++u) {
        const __m256i qi = _mm256_cvtps_epi32(_mm256_mul_ps(v[u], iv));  // RNE
        sum = _mm256_add_epi32(sum, qi);
        const __m256i lb = _mm256_shuffle_epi8(qi, low_bytes);
        const int32_t lo = _mm256_extract_epi32(lb, 0), hi = _mm256_extract_epi32(lb, 4);
        std::memcpy(qr + 8 * u, &lo, 4);
        std::memcpy(qr + 8 * u + 4, &hi, 4);
      }
      __m128i s = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
      s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
      s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
      d[m * nb + b] = amax / 127.0f;
      c[m * nb + b] = -128 * _mm_cvtsi128_si32(s);
    }
  }
}

#endif  // !DFL_AVX2_VNNI

void matmul_q8(const Q8Act& a, int64_t M, const WeightMatrix& w, float* y, ThreadPool& pool) {
  const int64_t N = w.n_out, nb = a.n_blocks;
  const uint8_t* wq = static_cast<const uint8_t*>(w.data);
  const int64_t n_tiles = (N + 15) / 16;
  pool.parallel_for_redoable(
      n_tiles,
      [&](int64_t t0, int64_t t1, int) {
        for (int64_t t = t0; t < t1; ++t) {
          const int64_t n0 = t * 16, nv = imin(16, N - n0);
          const uint8_t* wt = wq + t * nb * kTileBytes;
          const float* dt = w.scale + t * nb * 16;
          for (int64_t m0 = 0; m0 < M; m0 += kMR) {
            float* yr = y + m0 * N + n0;
            switch (imin(kMR, M - m0)) {
              case 1: tile_q8<1>(a, m0, wt, dt, nb, nv, yr, N); break;
              case 2: tile_q8<2>(a, m0, wt, dt, nb, nv, yr, N); break;
              case 3: tile_q8<3>(a, m0, wt, dt, nb, nv, yr, N); break;
              default: tile_q8<4>(a, m0, wt, dt, nb, nv, yr, N); break;
            }
          }
        }
      },
      1);
}

}  // namespace dfl::cpu::avx2 (or avx2_vnni)
