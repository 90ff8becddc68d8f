// The greedy-pick screen of a Q8_0 head on its 6-bit plane (kernels/ggml_argmax.cc has the math
// and the layout, ops.h kQ8PlaneBlockBytes): ŷ1 = the q1 half of the activations times the plane
// weights d·(4·(q >> 2) + 1.5), 16 outputs per lane group, rows from a block-major panel.
// Per (row, block) the exact integer Σ h·q1 (h = u − 32 = q >> 2: the dot chain starts from
// −32·Σ q1) gives the block's Σ ŵ·x̂1 / d_w = dx·(4·Σ h·q1 + 1.5·Σ q1) as one fma with the row's
// 4·dx and c = fl(1.5·dx·Σ q1), then d_w times it is fma-added into one accumulator per output
// (3 vector steps per row and block): the screen only bounds, so this order needs no match with
// any other kernel (its rounding is in the screen's γ_p).
#include <immintrin.h>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/simd_avx512.h"

namespace dfl::cpu::avx512 {
namespace {

// The 8 vectors of u = (q >> 2) + 32 (6 bits) of one packed block: vector v = 2g + s holds
// elements 16s + 4g + i (i = 0..3) of the 16 outputs; its low nibbles are nibble vector g (low
// half for s = 0, high half for s = 1), its bits 4–5 are the 2-bit field 2·(v % 4) of high-bit
// vector v / 4.
inline void unpack_plane(const uint8_t* bp, __m512i u[8]) {
  const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
  const __m512i h0 = _mm512_loadu_si512(bp + 256), h1 = _mm512_loadu_si512(bp + 320);
  // the field at bit pos moved to bits 4–5 (16-bit shifts: what crosses a byte lands in bits 0–3
  // or 6–7 of the neighbour and is masked off)
  const __m512i f[8] = {
      _mm512_and_si512(_mm512_slli_epi16(h0, 4), m30), _mm512_and_si512(_mm512_slli_epi16(h0, 2), m30),
      _mm512_and_si512(h0, m30),                       _mm512_and_si512(_mm512_srli_epi16(h0, 2), m30),
      _mm512_and_si512(_mm512_slli_epi16(h1, 4), m30), _mm512_and_si512(_mm512_slli_epi16(h1, 2), m30),
      _mm512_and_si512(h1, m30),                       _mm512_and_si512(_mm512_srli_epi16(h1, 2), m30)};
  for (int g = 0; g < 4; ++g) {
    const __m512i nv = _mm512_loadu_si512(bp + 64 * g);
    u[2 * g] = _mm512_or_si512(_mm512_and_si512(nv, m4), f[2 * g]);
    u[2 * g + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(nv, 4), m4), f[2 * g + 1]);
  }
}

// Rows 0..MR-1 of the panel block × the 16 outputs; each row's dot is split over C chains
// (one row alone is bound by the plane's stream, not by the chain: C = 1 there — 8 chains cost
// 15 % at M = 1 in their extra adds).
template <int MR>
inline void plane_rows(const __m512i u[8], __m512 d, const int8_t* xq, const int32_t* nc,
                       const float* dx4, const float* c, float* acc /* [MR][16] */) {
  constexpr int C = MR == 1 ? 1 : kDotChains<MR>;
  __m512i dot[MR][C];
  for (int r = 0; r < MR; ++r) {
    dot[r][0] = _mm512_set1_epi32(nc[r]);
    for (int k = 1; k < C; ++k) dot[r][k] = _mm512_setzero_si512();
  }
#pragma GCC unroll 8
  for (int v = 0; v < 8; ++v) {
    const int e = 16 * (v % 2) + 4 * (v / 2);
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) dot[r][v % C] = _mm512_dpbusd_epi32(dot[r][v % C], u[v], bcast4(xq + 32 * r + e));
  }
  for (int r = 0; r < MR; ++r) {
    for (int w = C / 2; w >= 1; w /= 2)
      for (int k = 0; k < w; ++k) dot[r][k] = _mm512_add_epi32(dot[r][k], dot[r][k + w]);
    const __m512 t = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[r][0]), _mm512_set1_ps(dx4[r]), _mm512_set1_ps(c[r]));
    float* ap = acc + 16 * r;
    _mm512_storeu_ps(ap, _mm512_fmadd_ps(d, t, _mm512_loadu_ps(ap)));
  }
}

}  // namespace

float plane_block_absmax(const float* w) {
  const __m512 a = _mm512_abs_ps(_mm512_loadu_ps(w)), b = _mm512_abs_ps(_mm512_loadu_ps(w + 16));
  return _mm512_reduce_max_ps(_mm512_max_ps(a, b));
}

void plane_block_values(const float* w, uint16_t d16, uint8_t* u, double* sums) {
  const float d = _cvtsh_ss(d16);
  const __m512 inv = _mm512_set1_ps(d > 0 ? 1.0f / d : 0.0f), dv = _mm512_set1_ps(d);
  __m512d e2 = _mm512_setzero_pd(), w2 = _mm512_setzero_pd(), h2 = _mm512_setzero_pd();
  for (int half = 0; half < 2; ++half) {
    const __m512 wv = _mm512_loadu_ps(w + 16 * half);
    __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(wv, inv));  // (any rounding will do)
    q = _mm512_max_epi32(_mm512_min_epi32(q, _mm512_set1_epi32(127)), _mm512_set1_epi32(-127));
    const __m512i h = _mm512_srai_epi32(q, 2);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(u + 16 * half), _mm512_cvtepi32_epi8(_mm512_add_epi32(h, _mm512_set1_epi32(32))));
    // ŵ = d·(4h + 1.5): 11 × 8 significant bits, exact in fp32
    const __m512 wh = _mm512_mul_ps(dv, _mm512_add_ps(_mm512_cvtepi32_ps(_mm512_slli_epi32(h, 2)), _mm512_set1_ps(1.5f)));
    for (int i = 0; i < 2; ++i) {
      const __m512d wd = _mm512_cvtps_pd(i ? _mm512_extractf32x8_ps(wv, 1) : _mm512_castps512_ps256(wv));
      const __m512d hd = _mm512_cvtps_pd(i ? _mm512_extractf32x8_ps(wh, 1) : _mm512_castps512_ps256(wh));
      const __m512d e = _mm512_sub_pd(wd, hd);  // exact in double
      e2 = _mm512_fmadd_pd(e, e, e2);
      w2 = _mm512_fmadd_pd(wd, wd, w2);
      h2 = _mm512_fmadd_pd(hd, hd, h2);
    }
  }
  sums[0] += _mm512_reduce_add_pd(e2);
  sums[1] += _mm512_reduce_add_pd(w2);
  sums[2] += _mm512_reduce_add_pd(h2);
}

void q8_0_plane_tiles(const int8_t* q, const int32_t* nc, const float* dx4, const float* c, int64_t M,
                      const uint8_t* plane, int64_t nb, int64_t n_out, float* y, int64_t t0,
                      int64_t t1) {
  alignas(64) float acc[kGgmlRowChunk * 16];
  for (int64_t t = t0; t < t1; ++t) {
    const uint8_t* tile = plane + t * nb * kQ8PlaneBlockBytes;
    for (int64_t m = 0; m < M; ++m) _mm512_store_ps(acc + 16 * m, _mm512_setzero_ps());
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* bp = tile + b * kQ8PlaneBlockBytes;
      prefetch_lines(bp + 6 * kQ8PlaneBlockBytes, kQ8PlaneBlockBytes);
      prefetch_lines_l2(bp, kQ8PlaneBlockBytes);
      __m512i u[8];
      unpack_plane(bp, u);
      const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(bp + 384)));
      const int8_t* xq = q + b * M * 32;
      const int32_t* ncb = nc + b * M;
      const float* dxb = dx4 + b * M;
      const float* cb = c + b * M;
      for (int64_t m0 = 0; m0 < M;) {
        if (M - m0 >= 16) {
          plane_rows<16>(u, d, xq + 32 * m0, ncb + m0, dxb + m0, cb + m0, acc + 16 * m0);
          m0 += 16;
          continue;
        }
        with_rows(M - m0, [&](auto R) {
          plane_rows<R.value>(u, d, xq + 32 * m0, ncb + m0, dxb + m0, cb + m0, acc + 16 * m0);
        });
        m0 += 8;
      }
    }
    const int64_t valid = n_out - 16 * t;
    const __mmask16 mk = static_cast<__mmask16>(valid >= 16 ? 0xFFFF : (1u << valid) - 1);
    for (int64_t m = 0; m < M; ++m) _mm512_mask_storeu_ps(y + m * n_out + 16 * t, mk, _mm512_load_ps(acc + 16 * m));
  }
}

}  // namespace dfl::cpu::avx512
