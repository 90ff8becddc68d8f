// AVX-512 gated delta-rule step (ops::delta_rule_step): value columns in blocks of 8 × 16 lanes
// kept in registers, two passes over the state (read; read + write).
#include <immintrin.h>

#include "kernels/cpu/cpu_kernels.h"

namespace dfl::cpu::avx512 {

namespace {

// Columns [0, 16·NB) of a state whose rows are `ld` floats apart.
template <int NB>
inline void delta_block(const float* s_in, float* s_out, int64_t ld, const float* k, const float* q,
                        const float* v, float decay, float beta, int32_t dk, float* o) {
  __m512 m[NB];
  for (int b = 0; b < NB; ++b) m[b] = _mm512_setzero_ps();
  for (int32_t i = 0; i < dk; ++i) {  // m = S_inᵀ k
    const __m512 ki = _mm512_set1_ps(k[i]);
    const float* r = s_in + i * ld;
    for (int b = 0; b < NB; ++b) m[b] = _mm512_fmadd_ps(_mm512_loadu_ps(r + 16 * b), ki, m[b]);
  }
  const __m512 dec = _mm512_set1_ps(decay), bet = _mm512_set1_ps(beta);
  __m512 u[NB], acc[NB];
  for (int b = 0; b < NB; ++b) {  // u = (v − decay·m)·β
    u[b] = _mm512_mul_ps(_mm512_fnmadd_ps(dec, m[b], _mm512_loadu_ps(v + 16 * b)), bet);
    acc[b] = _mm512_setzero_ps();
  }
  for (int32_t i = 0; i < dk; ++i) {  // S_out = decay·S_in + k uᵀ;  o = S_outᵀ q
    const __m512 ki = _mm512_set1_ps(k[i]), qi = _mm512_set1_ps(q[i]);
    const float* r = s_in + i * ld;
    float* w = s_out + i * ld;
    for (int b = 0; b < NB; ++b) {
      const __m512 x = _mm512_fmadd_ps(ki, u[b], _mm512_mul_ps(_mm512_loadu_ps(r + 16 * b), dec));
      _mm512_storeu_ps(w + 16 * b, x);
      acc[b] = _mm512_fmadd_ps(x, qi, acc[b]);
    }
  }
  if (o)
    for (int b = 0; b < NB; ++b) _mm512_storeu_ps(o + 16 * b, acc[b]);
}

}  // namespace

void delta_rule_step(const float* s_in, float* s_out, const float* k, const float* q, const float* v,
                     float decay, float beta, int32_t dk, int32_t dv, float* o) {
  int32_t c = 0;
  for (; c + 128 <= dv; c += 128)
    delta_block<8>(s_in + c, s_out + c, dv, k, q, v + c, decay, beta, dk, o ? o + c : nullptr);
  for (; c < dv; c += 16)
    delta_block<1>(s_in + c, s_out + c, dv, k, q, v + c, decay, beta, dk, o ? o + c : nullptr);
}

}  // namespace dfl::cpu::avx512
