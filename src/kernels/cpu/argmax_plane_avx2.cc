// The greedy-pick screen's 6-bit plane on AVX2 (kernels/ggml_argmax.cc has the math and the
// layout): ŷ1 of the q1 activation rows against the plane, in 8-output halves of each 16-output
// tile, with exactly the steps of the AVX-512 kernel (cpu/argmax_plane_avx512.cc) — the exact
// integer Σ u·q1 from the row's −32·Σ q1, t = fma(float(dot), 4·dx, c), acc = fma(d, t, acc)
// per block — so the same bits. The integer products: AVX2 vpmaddubsw (u ≤ 63, |q1| ≤ 127: a
// pair ≤ 16002, two pairs summed in s16 before vpmaddwd widens them), or with AVX-VNNI
// vpdpbusd ymm. Also the plane's per-block build steps (plane_block_absmax / _values).
// This file is compiled twice: as itself (namespace avx2) and by argmax_plane_avxvnni.cc with
// DFL_AVX2_VNNI = 1 (namespace avx2_vnni: q8_0_plane_tiles on vpdpbusd ymm).
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/avx2_namespace.h"
#include "kernels/cpu/cpu_kernels.h"

namespace dfl::cpu::DFL_AVX2_NAMESPACE {
namespace {

inline __m256i load256(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

inline __m256i bcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// The 8 vectors of u = (q >> 2) + 32 for half h (outputs 8h .. 8h + 7) of one packed block:
// vector v = 2g + s holds elements 16s + 4g + i (i = 0..3) — the AVX-512 kernel's vectors, each
// 32 of its 64 bytes.
inline void unpack_half(const uint8_t* bp, int h, __m256i u[8]) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
  const __m256i h0 = load256(bp + 256 + 32 * h), h1 = load256(bp + 320 + 32 * h);
  const __m256i f[8] = {
      _mm256_and_si256(_mm256_slli_epi16(h0, 4), m30), _mm256_and_si256(_mm256_slli_epi16(h0, 2), m30),
      _mm256_and_si256(h0, m30),                       _mm256_and_si256(_mm256_srli_epi16(h0, 2), m30),
      _mm256_and_si256(_mm256_slli_epi16(h1, 4), m30), _mm256_and_si256(_mm256_slli_epi16(h1, 2), m30),
      _mm256_and_si256(h1, m30),                       _mm256_and_si256(_mm256_srli_epi16(h1, 2), m30)};
  for (int g = 0; g < 4; ++g) {
    const __m256i nv = load256(bp + 64 * g + 32 * h);
    u[2 * g] = _mm256_or_si256(_mm256_and_si256(nv, m4), f[2 * g]);
    u[2 * g + 1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(nv, 4), m4), f[2 * g + 1]);
  }
}

// Σ u·q1 of one row's block (q1: its 32 values) over the half's 8 outputs, from nc.
inline __m256i block_dot(const __m256i u[8], const int8_t* xq, int32_t nc) {
  __m256i dot = _mm256_set1_epi32(nc);
#if DFL_AVX2_VNNI
  // 4 chains of 2 (one chain of 8 is latency-bound when a call has one row: ~5 cycles each)
  __m256i ch[4] = {dot, _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
#pragma GCC unroll 8
  for (int v = 0; v < 8; ++v)
    ch[v % 4] = _mm256_dpbusd_avx_epi32(ch[v % 4], u[v], bcast4(xq + 16 * (v % 2) + 4 * (v / 2)));
  dot = _mm256_add_epi32(_mm256_add_epi32(ch[0], ch[1]), _mm256_add_epi32(ch[2], ch[3]));
#else
  const __m256i ones = _mm256_set1_epi16(1);
#pragma GCC unroll 4
  for (int g = 0; g < 4; ++g) {  // vectors 2g (elements 4g..) and 2g + 1 (16 + 4g..)
    const __m256i s = _mm256_add_epi16(_mm256_maddubs_epi16(u[2 * g], bcast4(xq + 4 * g)),
                                       _mm256_maddubs_epi16(u[2 * g + 1], bcast4(xq + 16 + 4 * g)));
    dot = _mm256_add_epi32(dot, _mm256_madd_epi16(s, ones));
  }
#endif
  return dot;
}

// Prefetch distance of the plane stream, as the AVX-512 kernel's (6 blocks into L1).
constexpr int64_t kPrefetchBlocks = 6;

}  // namespace

void q8_0_plane_tiles(const int8_t* q, const int32_t* nc, const float* dx4, const float* c, int64_t M,
                      const uint8_t* plane, int64_t nb, int64_t n_out, float* y, int64_t t0, int64_t t1) {
  alignas(32) float acc[kGgmlRowChunk * 16];
  for (int64_t t = t0; t < t1; ++t) {
    const uint8_t* tile = plane + t * nb * kQ8PlaneBlockBytes;
    for (int64_t i = 0; i < M * 16; i += 8) _mm256_store_ps(acc + i, _mm256_setzero_ps());
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* bp = tile + b * kQ8PlaneBlockBytes;
      for (int64_t l = 0; l < kQ8PlaneBlockBytes; l += 64)
        _mm_prefetch(reinterpret_cast<const char*>(bp + kPrefetchBlocks * kQ8PlaneBlockBytes + l), _MM_HINT_T0);
      const int8_t* xq = q + b * M * 32;
      const int32_t* ncb = nc + b * M;
      const float* dxb = dx4 + b * M;
      const float* cb = c + b * M;
      for (int h = 0; h < 2; ++h) {
        __m256i u[8];
        unpack_half(bp, h, u);
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bp + 384 + 16 * h)));
        for (int64_t m = 0; m < M; ++m) {
          const __m256 tv = _mm256_fmadd_ps(_mm256_cvtepi32_ps(block_dot(u, xq + 32 * m, ncb[m])),
                                            _mm256_set1_ps(dxb[m]), _mm256_set1_ps(cb[m]));
          float* ap = acc + 16 * m + 8 * h;
          _mm256_store_ps(ap, _mm256_fmadd_ps(d, tv, _mm256_load_ps(ap)));
        }
      }
    }
    const int64_t valid = n_out - 16 * t < 16 ? n_out - 16 * t : 16;
    for (int64_t m = 0; m < M; ++m)
      std::memcpy(y + m * n_out + 16 * t, acc + 16 * m, static_cast<size_t>(valid) * sizeof(float));
  }
}

#if !DFL_AVX2_VNNI

float plane_block_absmax(const float* w) {
  const __m256 abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  __m256 m = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(w), abs), _mm256_and_ps(_mm256_loadu_ps(w + 8), abs));
  m = _mm256_max_ps(m, _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(w + 16), abs), _mm256_and_ps(_mm256_loadu_ps(w + 24), abs)));
  __m128 r = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  r = _mm_max_ps(r, _mm_movehl_ps(r, r));
  r = _mm_max_ss(r, _mm_shuffle_ps(r, r, 1));
  return _mm_cvtss_f32(r);
}

void plane_block_values(const float* w, uint16_t d16, uint8_t* u, double* sums) {
  const float d = _cvtsh_ss(d16);
  const __m256 inv = _mm256_set1_ps(d > 0 ? 1.0f / d : 0.0f), dv = _mm256_set1_ps(d);
  __m256d e2 = _mm256_setzero_pd(), w2 = _mm256_setzero_pd(), h2 = _mm256_setzero_pd();
  for (int part = 0; part < 4; ++part) {
    const __m256 wv = _mm256_loadu_ps(w + 8 * part);
    __m256i q = _mm256_cvtps_epi32(_mm256_mul_ps(wv, inv));  // (any rounding will do)
    q = _mm256_max_epi32(_mm256_min_epi32(q, _mm256_set1_epi32(127)), _mm256_set1_epi32(-127));
    const __m256i h = _mm256_srai_epi32(q, 2);
    alignas(32) int32_t hv[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(hv), _mm256_add_epi32(h, _mm256_set1_epi32(32)));
    for (int i = 0; i < 8; ++i) u[8 * part + i] = static_cast<uint8_t>(hv[i]);
    // ŵ = d·(4h + 1.5): 11 × 8 significant bits, exact in fp32
    const __m256 wh = _mm256_mul_ps(dv, _mm256_add_ps(_mm256_cvtepi32_ps(_mm256_slli_epi32(h, 2)), _mm256_set1_ps(1.5f)));
    for (int i = 0; i < 2; ++i) {
      const __m256d wd = _mm256_cvtps_pd(i ? _mm256_extractf128_ps(wv, 1) : _mm256_castps256_ps128(wv));
      const __m256d hd = _mm256_cvtps_pd(i ? _mm256_extractf128_ps(wh, 1) : _mm256_castps256_ps128(wh));
      const __m256d e = _mm256_sub_pd(wd, hd);  // exact in double
      e2 = _mm256_fmadd_pd(e, e, e2);
      w2 = _mm256_fmadd_pd(wd, wd, w2);
      h2 = _mm256_fmadd_pd(hd, hd, h2);
    }
  }
  alignas(32) double s[3][4];
  _mm256_store_pd(s[0], e2);
  _mm256_store_pd(s[1], w2);
  _mm256_store_pd(s[2], h2);
  for (int i = 0; i < 3; ++i) sums[i] += (s[i][0] + s[i][1]) + (s[i][2] + s[i][3]);
}

#endif  // !DFL_AVX2_VNNI

}  // namespace dfl::cpu::DFL_AVX2_NAMESPACE
