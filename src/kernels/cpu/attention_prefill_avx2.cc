// The AVX2 prefill attention (ops.h `attention`: query runs of n_q ≥ kPrefillAttentionMinQueries
// on machines whose level is AVX2). The math of the per-row kernel (cpu/attention_avx2.cc: fp32,
// online softmax) computed for tiles of 8 queries × blocks of 16 slots, so that each K and V
// value loaded serves 4 query rows and a row's scores come out as vectors over slots, with e^x
// from exp8 (cpu/simd_avx2.h) instead of libm's expf. Not the per-row kernel's bits (another
// summation order, another exp: ~1e-6 relative apart), but each row's arithmetic depends on that
// row alone: the results do not depend on the thread count, on how rows fall into tiles, or on
// the paging (ops.h KvPages).
//
// Per kv head, one after another (the scratch holds one head's packed slots):
//   pack (pool, per block of 16 slots): K transposed, Kt[block][d_qk][16 slot lanes]; the V rows
//     [slot][dvp] (dvp = d_v rounded up to 16, zero padded); the positions. Empty slots and the
//     slots past n_slots are packed as zeros (their garbage never reaches a product) at
//     kEmptySlot. bf16 pages are widened exactly (the fp32 result over the rounded values).
//   tasks (pool; 8 consecutive queries × one query head of the kv head's group): for each block
//     that some row of the tile sees (kernels/visibility.h's rule, on 8 lanes), per row that sees
//     a slot of it:
//       s_t = (q · k_t) · scale     per slot lane, one fma per d in d order; −inf if not visible;
//       m' = max(m, max_t s_t); c = e^(m − m') (0 while m = −inf); p_t = e^(s_t − m') (0 where
//       not visible); l = l·c + Σ_t p_t (one fixed tree); O = O·c + Σ_t p_t·v_t (t in order);
//     a row that sees no slot of the block keeps its state untouched. out = O / l (0 where
//     l = 0). A sink starts m at the head's sink logit with l = 1.
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/simd_avx2.h"

namespace dfl::cpu::avx2 {

namespace {

constexpr int kMaxRows = 16;  // (query, head) rows per task
constexpr int kRG = 4;   // rows per register group (4 rows × 16 lanes: 8 accumulators)
constexpr int kKB = 16;  // slots per key block

inline int64_t pad16(int64_t n) { return (n + 15) / 16 * 16; }

// One kv head's slots, packed (top comment).
struct PackedHead {
  float* kt = nullptr;       // [n_kb][d_qk][16]
  float* v = nullptr;        // [n_kb · 16][dvp]
  int32_t* pos = nullptr;    // [n_kb · 16]
  int64_t n_kb = 0, dvp = 0;
};

inline float widen(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

void pack_block(const KvPages& kv, const AttnParams& p, int32_t kvh, int64_t b, const PackedHead& ph) {
  const int32_t dq = p.d_qk, dv = p.d_v;
  float* kt = ph.kt + b * kKB * dq;
  for (int t = 0; t < kKB; ++t) {
    const int64_t j = b * kKB + t;
    float* vr = ph.v + j * ph.dvp;
    const int64_t page = j < kv.n_slots ? j / kv.page_slots : 0, row = j < kv.n_slots ? j % kv.page_slots : 0;
    const int32_t pos = j < kv.n_slots ? kv.pos[page][row] : kEmptySlot;
    ph.pos[j] = pos < 0 ? kEmptySlot : pos;
    if (pos < 0) {
      for (int32_t d = 0; d < dq; ++d) kt[d * kKB + t] = 0.0f;
      std::memset(vr, 0, static_cast<size_t>(ph.dvp) * 4);
      continue;
    }
    const KvRow r = kv_row(kv, p, kvh, page, row);
    if (kv.dtype == KvDtype::kBF16) {
      for (int32_t d = 0; d < dq; ++d) kt[d * kKB + t] = widen(r.k16[d]);
      for (int32_t d = 0; d < dv; ++d) vr[d] = widen(r.v16[2 * d]);
    } else {
      for (int32_t d = 0; d < dq; ++d) kt[d * kKB + t] = r.k[d];
      std::memcpy(vr, r.v, static_cast<size_t>(dv) * 4);
    }
    for (int64_t d = dv; d < ph.dvp; ++d) vr[d] = 0.0f;
  }
}

// All-ones in the lanes whose key position kp a query at q sees (kernels/visibility.h).
inline __m256 visible8(int32_t q, __m256i kp, Window w) {
  __m256i vis = _mm256_cmpgt_epi32(kp, _mm256_set1_epi32(-1));
  const __m256i qv = _mm256_set1_epi32(q);
  if (w.left >= 0) vis = _mm256_andnot_si256(_mm256_cmpgt_epi32(_mm256_sub_epi32(qv, kp), _mm256_set1_epi32(w.left)), vis);
  if (w.right >= 0) vis = _mm256_andnot_si256(_mm256_cmpgt_epi32(_mm256_sub_epi32(kp, qv), _mm256_set1_epi32(w.right)), vis);
  return _mm256_castsi256_ps(vis);
}

// One row's online-softmax step over a block (top comment): s = its 16 unscaled scores, vis
// their visibility; writes p to P[0..16) and the rescale factor to c.
inline void softmax_step(__m256 s0, __m256 s1, __m256 vis0, __m256 vis1, float scale, float& m, float& l,
                         float& c, float* P) {
  const __m256 neg_inf = _mm256_set1_ps(-__builtin_inff()), sc = _mm256_set1_ps(scale);
  s0 = _mm256_blendv_ps(neg_inf, _mm256_mul_ps(s0, sc), vis0);
  s1 = _mm256_blendv_ps(neg_inf, _mm256_mul_ps(s1, sc), vis1);
  const float bm = hmax8(_mm256_max_ps(s0, s1));
  const float mn = bm > m ? bm : m;
  c = m == -__builtin_inff() ? 0.0f : _mm256_cvtss_f32(exp8(_mm256_set1_ps(m - mn)));
  const __m256 mv = _mm256_set1_ps(mn);
  const __m256 p0 = _mm256_and_ps(exp8(_mm256_sub_ps(s0, mv)), vis0);
  const __m256 p1 = _mm256_and_ps(exp8(_mm256_sub_ps(s1, mv)), vis1);
  l = l * c + hsum8(_mm256_add_ps(p0, p1));
  m = mn;
  _mm256_storeu_ps(P, p0);
  _mm256_storeu_ps(P + 8, p1);
}

// Scores of kRG = 4 rows (q rows at qr[0..4)) against block kt [d_qk][16]: s[r][0..1]. The
// accumulators and row pointers are named locals (as an array passed by reference, GCC kept
// them in memory: a spill and reload per d).
inline void scores(const float* const* qr, const float* kt, int32_t dq, __m256 s[kRG][2]) {
  static_assert(kRG == 4, "four named rows");
  const float *q0 = qr[0], *q1 = qr[1], *q2 = qr[2], *q3 = qr[3];
  __m256 a00 = _mm256_setzero_ps(), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00, a30 = a00, a31 = a00;
#pragma GCC unroll 2
  for (int32_t d = 0; d < dq; ++d) {
    const __m256 k0 = _mm256_loadu_ps(kt + d * kKB), k1 = _mm256_loadu_ps(kt + d * kKB + 8);
    __m256 b = _mm256_broadcast_ss(q0 + d);
    a00 = _mm256_fmadd_ps(b, k0, a00);
    a01 = _mm256_fmadd_ps(b, k1, a01);
    b = _mm256_broadcast_ss(q1 + d);
    a10 = _mm256_fmadd_ps(b, k0, a10);
    a11 = _mm256_fmadd_ps(b, k1, a11);
    b = _mm256_broadcast_ss(q2 + d);
    a20 = _mm256_fmadd_ps(b, k0, a20);
    a21 = _mm256_fmadd_ps(b, k1, a21);
    b = _mm256_broadcast_ss(q3 + d);
    a30 = _mm256_fmadd_ps(b, k0, a30);
    a31 = _mm256_fmadd_ps(b, k1, a31);
  }
  s[0][0] = a00, s[0][1] = a01, s[1][0] = a10, s[1][1] = a11;
  s[2][0] = a20, s[2][1] = a21, s[3][0] = a30, s[3][1] = a31;
}

// O[r] = O[r]·c[r] + Σ_t P[r][t]·v_t for the kRG rows from r0 whose bit is in `rows` (the others'
// O untouched), 16 value dims at a time. vb: the block's V rows (dvp apart).
inline void accumulate(float* O, const float* P, const float* c, const float* vb, int64_t dvp, int r0,
                       unsigned rows) {
  for (int64_t cc = 0; cc < dvp; cc += 16) {
    __m256 a[kRG][2];
    for (int r = 0; r < kRG; ++r) {
      const __m256 cv = _mm256_set1_ps(c[r0 + r]);
      a[r][0] = _mm256_mul_ps(_mm256_loadu_ps(O + (r0 + r) * dvp + cc), cv);
      a[r][1] = _mm256_mul_ps(_mm256_loadu_ps(O + (r0 + r) * dvp + cc + 8), cv);
    }
#pragma GCC unroll 4
    for (int t = 0; t < kKB; ++t) {
      const __m256 v0 = _mm256_loadu_ps(vb + t * dvp + cc), v1 = _mm256_loadu_ps(vb + t * dvp + cc + 8);
      for (int r = 0; r < kRG; ++r) {
        const __m256 pb = _mm256_broadcast_ss(P + (r0 + r) * kKB + t);
        a[r][0] = _mm256_fmadd_ps(pb, v0, a[r][0]);
        a[r][1] = _mm256_fmadd_ps(pb, v1, a[r][1]);
      }
    }
    for (int r = 0; r < kRG; ++r)
      if (rows >> (r0 + r) & 1) {
        _mm256_storeu_ps(O + (r0 + r) * dvp + cc, a[r][0]);
        _mm256_storeu_ps(O + (r0 + r) * dvp + cc + 8, a[r][1]);
      }
  }
}

// A task's rows: queries [i0, i0 + nq) × query heads [h0, h0 + gh), row r = (query i0 + r / gh,
// head h0 + r % gh); the heads of one kv group see the same slots, so every K and V value a
// block loads serves all of them.
struct TileRows {
  int64_t i0 = 0;
  int nq = 0, gh = 1;
  int32_t h0 = 0;
  int rows() const { return nq * gh; }
};

// One task over the packed head (top comment). work: kMaxRows · dvp + kMaxRows · kKB floats.
void run_tile(const float* q, const int32_t* q_pos, const TileRows& tr, const AttnParams& p,
              const PackedHead& ph, float* work, float* out) {
  const int32_t dq = p.d_qk, dv = p.d_v;
  const int64_t dvp = ph.dvp;
  const int rows = tr.rows();
  float* O = work;                   // [kMaxRows][dvp]
  float* P = O + kMaxRows * dvp;     // [kMaxRows][kKB]
  float m[kMaxRows], l[kMaxRows], c[kMaxRows];
  const float* qr[kMaxRows];
  int32_t qp[kMaxRows];
  for (int r = 0; r < kMaxRows; ++r) {
    const int rr = r < rows ? r : rows - 1;  // rows past `rows` repeat the last, never stored
    const int64_t i = tr.i0 + rr / tr.gh;
    const int32_t h = tr.h0 + rr % tr.gh;
    qr[r] = q + (i * p.n_heads + h) * dq;
    qp[r] = q_pos[i];
    m[r] = p.sinks ? p.sinks[h] : -__builtin_inff();
    l[r] = p.sinks ? 1.0f : 0.0f;
    c[r] = 1.0f;
  }
  std::memset(O, 0, static_cast<size_t>(kMaxRows * dvp) * 4);
  for (int64_t b = 0; b < ph.n_kb; ++b) {
    const __m256i kp0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ph.pos + b * kKB));
    const __m256i kp1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ph.pos + b * kKB + 8));
    __m256 vis[kMaxRows][2];
    unsigned sees = 0;  // bit r: row r sees a slot of the block
    for (int r = 0; r < rows; ++r) {
      if (r % tr.gh == 0) {  // one mask per query, shared by its heads
        vis[r][0] = visible8(qp[r], kp0, p.window);
        vis[r][1] = visible8(qp[r], kp1, p.window);
      } else {
        vis[r][0] = vis[r - 1][0];
        vis[r][1] = vis[r - 1][1];
      }
      if (_mm256_movemask_ps(_mm256_or_ps(vis[r][0], vis[r][1]))) sees |= 1u << r;
    }
    if (!sees) continue;
    const float* kt = ph.kt + b * kKB * dq;
    for (int r0 = 0; r0 < rows; r0 += kRG) {
      if (!(sees >> r0 & ((1u << kRG) - 1))) continue;
      __m256 s[kRG][2];
      scores(qr + r0, kt, dq, s);
      for (int r = 0; r < kRG; ++r)
        if (sees >> (r0 + r) & 1)
          softmax_step(s[r][0], s[r][1], vis[r0 + r][0], vis[r0 + r][1], p.scale, m[r0 + r], l[r0 + r],
                       c[r0 + r], P + (r0 + r) * kKB);
      accumulate(O, P, c, ph.v + b * kKB * dvp, dvp, r0, sees);
    }
  }
  for (int r = 0; r < rows; ++r) {
    const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
    float* o = out + ((tr.i0 + r / tr.gh) * p.n_heads + tr.h0 + r % tr.gh) * dv;
    for (int32_t d = 0; d < dv; ++d) o[d] = O[r * dvp + d] * inv;
  }
}

// Heads per task: the largest divisor of the group size up to kRG.
int heads_per_task(const AttnParams& p) {
  const int g = p.n_heads / p.n_kv_heads;
  for (int gh = kRG; gh > 1; --gh)
    if (g % gh == 0) return gh;
  return 1;
}

}  // namespace

int64_t prefill_attention_work_floats(const AttnParams& p, int64_t n_kv, int n_threads) {
  const int64_t slots = pad16(n_kv), dvp = pad16(p.d_v);
  return slots * (p.d_qk + dvp) + static_cast<int64_t>(n_threads) * (kMaxRows * dvp + kMaxRows * kKB);
}

void attention_prefill(const float* q, const int32_t* q_pos, int64_t n_q, const KvPages& kv,
                       const AttnParams& p, float* out, ThreadPool& pool, float* work, int32_t* pos_work) {
  PackedHead ph;
  ph.n_kb = (kv.n_slots + kKB - 1) / kKB;
  ph.dvp = pad16(p.d_v);
  ph.kt = work;
  ph.v = ph.kt + ph.n_kb * kKB * p.d_qk;
  ph.pos = pos_work;
  float* task_work = ph.v + ph.n_kb * kKB * ph.dvp;
  const int64_t per_thread = kMaxRows * ph.dvp + kMaxRows * kKB;
  const int32_t group = p.n_heads / p.n_kv_heads;
  const int gh = heads_per_task(p), nq = kMaxRows / gh, parts = group / gh;
  const int64_t tiles = (n_q + nq - 1) / nq;
  for (int32_t kvh = 0; kvh < p.n_kv_heads; ++kvh) {
    pool.parallel_for_redoable(ph.n_kb, [&](int64_t b0, int64_t b1, int) {
      for (int64_t b = b0; b < b1; ++b) pack_block(kv, p, kvh, b, ph);
    });
    pool.parallel_for_redoable(tiles * parts, [&](int64_t t0, int64_t t1, int tid) {
      float* w = task_work + static_cast<int64_t>(tid) * per_thread;
      for (int64_t t = t0; t < t1; ++t) {
        TileRows tr;
        tr.i0 = (t / parts) * nq;
        tr.nq = static_cast<int>(n_q - tr.i0 < nq ? n_q - tr.i0 : nq);
        tr.gh = gh;
        tr.h0 = kvh * group + static_cast<int32_t>(t % parts) * gh;
        run_tile(q, q_pos, tr, p, ph, w, out);
      }
    });
  }
}

}  // namespace dfl::cpu::avx2
