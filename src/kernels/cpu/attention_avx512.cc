// AVX-512 attention: online softmax in fp32 over key blocks of 16 cache slots.
//
// One task = (query, kv head); the `group` query heads that share the kv head are processed
// together, so each K/V block is brought into L1 once and reused for all of them. Per block:
//   1. visibility mask of the 16 slots (the rule of kernels/visibility.h); skip if empty;
//   2. per head: 16 logits (dot products over d_qk, 16 independent accumulators, one transposed
//      reduction), scaled, invisible lanes = -inf;
//   3. per head: online softmax update (max, rescale, exp) and acc += p_j · v_j over visible j.
// Block boundaries are fixed slot multiples of 16, independent of the query and of the other
// queries in the call, so each query's output is the same for any batch and thread count.
// Invisible slots (empty, masked) never touch the accumulators (their V may be garbage).
#include <immintrin.h>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/simd_avx512.h"

namespace dfl::cpu::avx512 {

namespace {

constexpr int kKB = 16;

inline bool visible(int32_t q, int32_t k, int32_t left, int32_t right) {
  if (k < 0) return false;
  if (left >= 0 && q - k > left) return false;
  if (right >= 0 && k - q > right) return false;
  return true;
}

// acc[j] (16 vectors) → one vector whose lane j is Σ acc[j].
inline __m512 transpose_sum16(__m512* a) {
  __m512 b[8], c[4], d[2];
  for (int i = 0; i < 8; ++i)
    b[i] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * i], a[2 * i + 1]),
                         _mm512_unpackhi_ps(a[2 * i], a[2 * i + 1]));
  for (int i = 0; i < 4; ++i) {
    const __m512d x = _mm512_castps_pd(b[2 * i]), y = _mm512_castps_pd(b[2 * i + 1]);
    c[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)),
                         _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
  }
  for (int i = 0; i < 2; ++i)
    d[i] = _mm512_add_ps(_mm512_shuffle_f32x4(c[2 * i], c[2 * i + 1], 0x88),
                         _mm512_shuffle_f32x4(c[2 * i], c[2 * i + 1], 0xdd));
  return _mm512_add_ps(_mm512_shuffle_f32x4(d[0], d[1], 0x88), _mm512_shuffle_f32x4(d[0], d[1], 0xdd));
}

void attend_one(const float* q /*[group, d_qk]*/, int32_t qpos, const float* k, const float* v,
                const int32_t* k_pos, int64_t n_kv, const AttnParams& p, int32_t kvh,
                int32_t h0, float* out /*[group, d_v]*/, float* scratch) {
  const int32_t G = p.n_heads / p.n_kv_heads;
  const int64_t dq = p.d_qk, dv = p.d_v;
  const int64_t kstride = static_cast<int64_t>(p.n_kv_heads) * dq;
  const int64_t vstride = static_cast<int64_t>(p.n_kv_heads) * dv;
  const int nq_chunks = static_cast<int>((dq + 15) / 16);
  const int nv_chunks = static_cast<int>((dv + 15) / 16);
  float* acc = scratch;        // [G, nv_chunks * 16]
  float* mrun = acc + static_cast<int64_t>(G) * nv_chunks * 16;  // [G]
  float* lrun = mrun + G;                                        // [G]
  for (int32_t g = 0; g < G; ++g) {
    mrun[g] = p.sinks ? p.sinks[h0 + g] : -__builtin_inff();
    lrun[g] = p.sinks ? 1.0f : 0.0f;
    for (int c = 0; c < nv_chunks; ++c) _mm512_storeu_ps(acc + (g * nv_chunks + c) * 16, _mm512_setzero_ps());
  }
  const __m512 vscale = _mm512_set1_ps(p.scale);
  const __m512 neg_inf = _mm512_set1_ps(-__builtin_inff());
  for (int64_t j0 = 0; j0 < n_kv; j0 += kKB) {
    const int nk = static_cast<int>(n_kv - j0 < kKB ? n_kv - j0 : kKB);
    unsigned vis = 0;
    for (int j = 0; j < nk; ++j)
      if (visible(qpos, k_pos[j0 + j], p.window.left, p.window.right)) vis |= 1u << j;
    if (!vis) continue;
    const float* kb = k + j0 * kstride + kvh * dq;
    const float* vb = v + j0 * vstride + kvh * dv;
    for (int32_t g = 0; g < G; ++g) {
      const float* qg = q + g * dq;
      __m512 a[kKB];
      for (int j = 0; j < kKB; ++j) a[j] = _mm512_setzero_ps();
      for (int c = 0; c < nq_chunks; ++c) {
        const __mmask16 m = lanes16(dq - c * 16);
        const __m512 qc = _mm512_maskz_loadu_ps(m, qg + c * 16);
        // Rows past the end of the cache re-read the last row (their lanes are masked anyway),
        // so the loop has a constant trip count and the 16 accumulators stay in registers.
        for (int j = 0; j < kKB; ++j) {
          const int64_t jj = j < nk ? j : nk - 1;
          a[j] = _mm512_fmadd_ps(qc, _mm512_maskz_loadu_ps(m, kb + jj * kstride + c * 16), a[j]);
        }
      }
      const __mmask16 vm = static_cast<__mmask16>(vis);
      const __m512 s = _mm512_mask_blend_ps(vm, neg_inf, _mm512_mul_ps(transpose_sum16(a), vscale));
      const float bmax = _mm512_reduce_max_ps(s);
      const float m_old = mrun[g];
      const float m_new = bmax > m_old ? bmax : m_old;
      const __m512 pr = _mm512_maskz_mov_ps(vm, exp16(_mm512_sub_ps(s, _mm512_set1_ps(m_new))));
      float* ag = acc + g * nv_chunks * 16;
      if (m_new != m_old) {
        const float corr = m_old == -__builtin_inff() ? 0.0f : __builtin_expf(m_old - m_new);
        lrun[g] *= corr;
        const __m512 cv = _mm512_set1_ps(corr);
        for (int c = 0; c < nv_chunks; ++c)
          _mm512_storeu_ps(ag + c * 16, _mm512_mul_ps(_mm512_loadu_ps(ag + c * 16), cv));
        mrun[g] = m_new;
      }
      lrun[g] += _mm512_reduce_add_ps(pr);
      alignas(64) float pj[kKB];
      _mm512_store_ps(pj, pr);
      // acc += Σ_j p_j v_j, four output chunks at a time (independent FMA chains).
      for (int c0 = 0; c0 < nv_chunks; c0 += 4) {
        const int cn = nv_chunks - c0 < 4 ? nv_chunks - c0 : 4;
        __m512 r[4];
        __mmask16 mk[4];
        for (int c = 0; c < cn; ++c) {
          mk[c] = lanes16(dv - (c0 + c) * 16);
          r[c] = _mm512_loadu_ps(ag + (c0 + c) * 16);
        }
        for (unsigned mm = vis; mm; mm &= mm - 1) {
          const int j = __builtin_ctz(mm);
          const __m512 pv = _mm512_set1_ps(pj[j]);
          const float* vr = vb + j * vstride + c0 * 16;
          for (int c = 0; c < cn; ++c)
            r[c] = _mm512_fmadd_ps(pv, _mm512_maskz_loadu_ps(mk[c], vr + c * 16), r[c]);
        }
        for (int c = 0; c < cn; ++c) _mm512_storeu_ps(ag + (c0 + c) * 16, r[c]);
      }
    }
  }
  for (int32_t g = 0; g < G; ++g) {
    const float inv = lrun[g] > 0.0f ? 1.0f / lrun[g] : 0.0f;
    const __m512 iv = _mm512_set1_ps(inv);
    for (int c = 0; c < nv_chunks; ++c) {
      const __mmask16 m = lanes16(dv - c * 16);
      _mm512_mask_storeu_ps(out + g * dv + c * 16, m,
                            _mm512_mul_ps(_mm512_loadu_ps(acc + (g * nv_chunks + c) * 16), iv));
    }
  }
}

}  // namespace

int64_t attention_scratch_floats(const AttnParams& p) {
  const int64_t G = p.n_heads / p.n_kv_heads;
  return G * ((p.d_v + 15) / 16 * 16) + 2 * G + 16;
}

void attention(const float* q, const int32_t* q_pos, int64_t n_q, const float* k, const float* v,
               const int32_t* k_pos, int64_t n_kv, const AttnParams& p, float* out,
               ThreadPool& pool, float* scratch) {
  const int32_t G = p.n_heads / p.n_kv_heads;
  const int64_t per_thread = attention_scratch_floats(p);
  pool.parallel_for(n_q * p.n_kv_heads, [&](int64_t b, int64_t e, int tid) {
    float* s = scratch + tid * per_thread;
    for (int64_t t = b; t < e; ++t) {
      const int64_t i = t / p.n_kv_heads;
      const int32_t kvh = static_cast<int32_t>(t % p.n_kv_heads);
      const int32_t h0 = kvh * G;
      attend_one(q + (i * p.n_heads + h0) * p.d_qk, q_pos[i], k, v, k_pos, n_kv, p, kvh, h0,
                 out + (i * p.n_heads + h0) * p.d_v, s);
    }
  });
}

}  // namespace dfl::cpu::avx512
