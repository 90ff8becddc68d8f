// AVX-512 VNNI kernels of the Q8 format (ops.h kPackedQ8).
//
// Weights are stored as u8 = q + 128 so they can be the unsigned operand of vpdpbusd; the
// activations are the signed one. Σ u·x = Σ q·x + 128·Σx, and the correction −128·Σx depends only
// on the activation block: it is precomputed as c = −8·Σx and used as the accumulator's start
// value in each of the 16 lanes. The integer block dot product is exact; per block, per output:
//   acc += float(block_dot lanes) * (x_scale * w_scale)
// in one fixed order, so results are batch invariant (same tiling argument as matmul_avx512.cc:
// 4 weight rows per tile, MR ≤ 4 rows per micro-kernel, one accumulator per output).
#include <immintrin.h>

#include "kernels/cpu/cpu_kernels.h"

namespace dfl::cpu::avx512 {

namespace {

constexpr int kNR = 4;
constexpr int kMR = 4;
static_assert(kQ8Block == 64, "one zmm of bytes per block");

inline int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }

inline __m128 reduce4(__m512 a, __m512 b, __m512 c, __m512 d) {
  auto half = [](__m512 v) {
    return _mm256_add_ps(_mm512_castps512_ps256(v),
                         _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  };
  const __m256 a8 = half(a), b8 = half(b), c8 = half(c), d8 = half(d);
  const __m256 ab = _mm256_add_ps(_mm256_permute2f128_ps(a8, b8, 0x20),
                                  _mm256_permute2f128_ps(a8, b8, 0x31));
  const __m256 cd = _mm256_add_ps(_mm256_permute2f128_ps(c8, d8, 0x20),
                                  _mm256_permute2f128_ps(c8, d8, 0x31));
  __m256 h = _mm256_hadd_ps(ab, cd);
  h = _mm256_hadd_ps(h, h);
  return _mm_unpacklo_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

template <int MR>
void tile_q8(const Q8Act& a, int64_t m0, const uint8_t* wq, const float* wd, int64_t nb,
             int64_t n_valid, float* y, int64_t ldy) {
  const int64_t ldw = nb * kQ8Block;
  const uint8_t* wr[kNR];
  const float* dr[kNR];
  for (int j = 0; j < kNR; ++j) {
    const int64_t jj = imin(j, n_valid - 1);
    wr[j] = wq + jj * ldw;
    dr[j] = wd + jj * nb;
  }
  const int8_t* xq = a.q + m0 * ldw;
  const float* xd = a.d + m0 * nb;
  const int32_t* xc = a.c + m0 * nb;
  __m512 acc[MR][kNR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < kNR; ++j) acc[i][j] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __m512i wv[kNR];
    __m512 dw[kNR];
    for (int j = 0; j < kNR; ++j) {
      wv[j] = _mm512_loadu_si512(wr[j] + b * kQ8Block);
      dw[j] = _mm512_set1_ps(dr[j][b]);
    }
    for (int i = 0; i < MR; ++i) {
      const __m512i xv = _mm512_loadu_si512(xq + i * ldw + b * kQ8Block);
      const __m512i cv = _mm512_set1_epi32(xc[i * nb + b]);
      const __m512 dx = _mm512_set1_ps(xd[i * nb + b]);
      for (int j = 0; j < kNR; ++j) {
        const __m512i s = _mm512_dpbusd_epi32(cv, wv[j], xv);
        acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dx, dw[j]), acc[i][j]);
      }
    }
  }
  const __mmask8 sm = static_cast<__mmask8>((1u << n_valid) - 1);
  for (int i = 0; i < MR; ++i)
    _mm_mask_storeu_ps(y + i * ldy, sm, reduce4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]));
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
      c[m * nb + b] = -8 * _mm512_reduce_add_epi32(sum);
    }
  }
}

void matmul_q8(const Q8Act& a, int64_t M, const WeightMatrix& w, float* y, ThreadPool& pool) {
  const int64_t N = w.n_out, nb = a.n_blocks;
  const uint8_t* wq = static_cast<const uint8_t*>(w.data);
  const int64_t n_tiles = (N + kNR - 1) / kNR;
  pool.parallel_for(
      n_tiles,
      [&](int64_t t0, int64_t t1, int) {
        for (int64_t t = t0; t < t1; ++t) {
          const int64_t n0 = t * kNR, nv = imin(kNR, N - n0);
          const uint8_t* w0 = wq + n0 * nb * kQ8Block;
          const float* d0 = w.scale + n0 * nb;
          for (int64_t m0 = 0; m0 < M; m0 += kMR) {
            float* yr = y + m0 * N + n0;
            switch (imin(kMR, M - m0)) {
              case 1: tile_q8<1>(a, m0, w0, d0, nb, nv, yr, N); break;
              case 2: tile_q8<2>(a, m0, w0, d0, nb, nv, yr, N); break;
              case 3: tile_q8<3>(a, m0, w0, d0, nb, nv, yr, N); break;
              default: tile_q8<4>(a, m0, w0, d0, nb, nv, yr, N); break;
            }
          }
        }
      },
      8);
}

}  // namespace dfl::cpu::avx512
