// AVX2 attention over KV pages (fp32, or bf16 widened exactly row by row: the same arithmetic on
// the same values), for machines without AVX-512 (ops.h attention contract).
// Per (query row, head), online softmax over the cache slots in blocks of 8 LOGICAL slots
// (slot j is row j % page_slots of page j / page_slots, so the blocks and every operation are
// the same for any paging of the same slots):
//   1. s_t = (q · k_t) · scale for the block's visible slots t (8-lane fma over d, one fixed
//      reduction tree); invisible ones are skipped (their K/V may be garbage);
//   2. m' = max(m, max_t s_t); c = e^(m − m') (0 while m = −inf); p_t = e^(s_t − m');
//   3. l = l·c + Σ_t p_t (t in slot order); acc = acc·c, then acc = fma(p_t, v_t, acc) per
//      visible t in slot order;
//   out = acc / l (0 where no key and no sink was visible). A sink starts m at its logit with
// l = 1 (an extra key with a zero value). Each row depends on its own data only: the same bits
// for any batch, split over the pool or thread count. A pool task is one query's GQA group of
// heads (up to kMaxGroup): they see the same slots, so they share the walk and each block's
// widened bf16 K/V rows (Qwen3-0.6B shape, 2 heads a group, pp512 86 → 94 tok/s).
#include <immintrin.h>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/simd_avx2.h"

namespace dfl::cpu::avx2 {

namespace {

constexpr int32_t kMaxGroup = 8;  // heads of one GQA group run as one task up to this many

// The rule of kernels/visibility.h (kv_visible), restated here: ISA files share no inline code
// with baseline ones.
inline bool visible(int32_t q, int32_t k, Window w) {
  if (k < 0) return false;
  if (w.left >= 0 && q - k > w.left) return false;
  if (w.right >= 0 && k - q > w.right) return false;
  return true;
}

inline float dot(const float* a, const float* b, int32_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  int32_t d = 0;
  for (; d + 16 <= n; d += 16) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + d), _mm256_loadu_ps(b + d), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + d + 8), _mm256_loadu_ps(b + d + 8), s1);
  }
  if (d + 8 <= n) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + d), _mm256_loadu_ps(b + d), s0);
    d += 8;
  }
  float r = hsum8(_mm256_add_ps(s0, s1));
  for (; d < n; ++d) r = __builtin_fmaf(a[d], b[d], r);
  return r;
}

// bf16 → fp32 (exact) of n values at p (k rows: contiguous).
void widen_k(const uint16_t* p, int32_t n, float* out) {
  int32_t d = 0;
  for (; d + 8 <= n; d += 8)
    _mm256_storeu_ps(out + d, _mm256_castsi256_ps(_mm256_slli_epi32(
                                  _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + d))), 16)));
  for (; d < n; ++d) {
    const uint32_t b = static_cast<uint32_t>(p[d]) << 16;
    __builtin_memcpy(out + d, &b, 4);
  }
}

// The V row of a bf16 page (ops.h kv_bf16_v_index: dims 2 apart; p points at dim 0 of the row):
// each 32-bit word holds the even row in its low half, the odd row in its high half.
void widen_v(const uint16_t* p, int32_t n, bool odd, float* out) {
  const __m256i hi = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
  const uint16_t* pair = p - (odd ? 1 : 0);
  int32_t d = 0;
  for (; d + 8 <= n; d += 8) {
    const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pair + 2 * d));
    _mm256_storeu_ps(out + d, _mm256_castsi256_ps(odd ? _mm256_and_si256(w, hi) : _mm256_slli_epi32(w, 16)));
  }
  for (; d < n; ++d) {
    const uint32_t b = static_cast<uint32_t>(p[2 * d]) << 16;
    __builtin_memcpy(out + d, &b, 4);
  }
}

// The heads h0 .. h0 + g − 1 of one query (a GQA group: one KV head, the same visible slots),
// each computed exactly as a row of its own (top comment) — the group only shares the walk over
// the slots and, for bf16 pages, each block's widened K and V rows (exact values: the same bits
// as widening them once per head). qv: the g heads' q rows (d_qk apart); o: their outputs (d_v
// apart); acc: g · d_v floats; kbuf: 8 · d_qk, vbuf: 8 · d_v.
void group_rows(const float* qv, int32_t qpos, const KvPages& kv, const AttnParams& p, int32_t h0, int32_t g,
                float* acc, float* kbuf, float* vbuf, float* o) {
  const int32_t kvh = h0 / (p.n_heads / p.n_kv_heads), dv = p.d_v;
  const bool bf16 = kv.dtype == KvDtype::kBF16;
  float m[kMaxGroup], l[kMaxGroup];
  for (int32_t h = 0; h < g; ++h) {
    m[h] = p.sinks ? p.sinks[h0 + h] : -__builtin_inff();
    l[h] = p.sinks ? 1.0f : 0.0f;
  }
  for (int32_t d = 0; d < g * dv; ++d) acc[d] = 0.0f;
  for (int64_t j0 = 0; j0 < kv.n_slots; j0 += 8) {
    const float* krow[8];
    const float* vrow[8];
    int n = 0;
    for (int64_t j = j0; j < j0 + 8 && j < kv.n_slots; ++j) {
      const int64_t page = j / kv.page_slots, r = j % kv.page_slots;
      if (!visible(qpos, kv.pos[page][r], p.window)) continue;
      if (bf16) {
        const int64_t ps = kv.page_slots;
        widen_k(kv.k16[page] + (kvh * ps + r) * p.d_qk, p.d_qk, kbuf + n * p.d_qk);
        widen_v(kv.v16[page] + (kvh * ps + (r & ~int64_t(1))) * dv + (r & 1), dv, (r & 1) != 0,
                vbuf + n * dv);
        krow[n] = kbuf + n * p.d_qk;
        vrow[n] = vbuf + n * dv;
      } else {
        krow[n] = kv.k[page] + (r * p.n_kv_heads + kvh) * p.d_qk;
        vrow[n] = kv.v[page] + (r * p.n_kv_heads + kvh) * dv;
      }
      ++n;
    }
    if (n == 0) continue;
    for (int32_t h = 0; h < g; ++h) {
      float s[8];
      for (int t = 0; t < n; ++t) s[t] = dot(qv + h * p.d_qk, krow[t], p.d_qk) * p.scale;
      float mb = s[0];
      for (int t = 1; t < n; ++t) mb = s[t] > mb ? s[t] : mb;
      const float mn = mb > m[h] ? mb : m[h];
      const float c = m[h] == -__builtin_inff() ? 0.0f : __builtin_expf(m[h] - mn);
      l[h] = l[h] * c;
      for (int t = 0; t < n; ++t) {
        s[t] = __builtin_expf(s[t] - mn);
        l[h] += s[t];
      }
      m[h] = mn;
      float* ah = acc + h * dv;
      const __m256 cv = _mm256_set1_ps(c);
      int32_t d = 0;
      for (; d + 8 <= dv; d += 8) {
        __m256 a = _mm256_mul_ps(_mm256_loadu_ps(ah + d), cv);
        for (int t = 0; t < n; ++t) a = _mm256_fmadd_ps(_mm256_set1_ps(s[t]), _mm256_loadu_ps(vrow[t] + d), a);
        _mm256_storeu_ps(ah + d, a);
      }
      for (; d < dv; ++d) {
        float a = ah[d] * c;
        for (int t = 0; t < n; ++t) a = __builtin_fmaf(s[t], vrow[t][d], a);
        ah[d] = a;
      }
    }
  }
  for (int32_t h = 0; h < g; ++h) {
    const float inv = l[h] > 0.0f ? 1.0f / l[h] : 0.0f;
    for (int32_t d = 0; d < dv; ++d) o[h * dv + d] = acc[h * dv + d] * inv;
  }
}

// The heads of a task: the largest part of a GQA group that divides it and has at most
// kMaxGroup heads (a 16-head group runs as two tasks of 8); one head where n_heads is not a
// multiple of n_kv_heads.
int32_t group_size(const AttnParams& p) {
  const int32_t full = p.n_heads / p.n_kv_heads;
  if (full * p.n_kv_heads != p.n_heads) return 1;
  for (int32_t g = kMaxGroup; g > 1; --g)
    if (full % g == 0) return g;
  return 1;
}

}  // namespace

int64_t attention_work_floats(const AttnParams& p, int n_threads) {
  return static_cast<int64_t>(n_threads) * (static_cast<int64_t>(kMaxGroup + 8) * p.d_v + 8 * p.d_qk);
}

void attention(const float* q, const int32_t* q_pos, int64_t n_q, const KvPages& kv,
               const AttnParams& p, float* out, ThreadPool& pool, float* work) {
  const int32_t g = group_size(p), groups = p.n_heads / g;
  pool.parallel_for_redoable(n_q * groups, [&](int64_t b, int64_t e, int tid) {
    float* acc = work + static_cast<int64_t>(tid) * (static_cast<int64_t>(kMaxGroup + 8) * p.d_v + 8 * p.d_qk);
    float* vbuf = acc + kMaxGroup * p.d_v;
    float* kbuf = vbuf + 8 * p.d_v;
    for (int64_t task = b; task < e; ++task) {
      const int64_t i = task / groups;
      const int32_t h0 = static_cast<int32_t>(task % groups) * g;
      const int64_t qh = i * p.n_heads + h0;
      group_rows(q + qh * p.d_qk, q_pos[i], kv, p, h0, g, acc, kbuf, vbuf, out + qh * p.d_v);
    }
  });
}

}  // namespace dfl::cpu::avx2
