// AVX2 attention over KV pages (fp32, or bf16 widened exactly in registers: the same arithmetic
// on the same values), for machines without AVX-512 (ops.h attention contract), every n_q.
//
// A row is one (query, head). A task is a tile of up to 16 rows — consecutive queries × heads of
// one GQA group, which see the same slots — so each K and V value loaded serves all of them.
// Per block of 16 LOGICAL slots from slot 0 (slot j is row j % page_slots of page
// j / page_slots; a block lies in one page), skipped when no row of the tile sees any slot:
//   1. visibility of the 16 slots per query (kernels/visibility.h's rule on 8 lanes);
//   2. s_t = (q · k_t) · scale: 8 lanes accumulate q·k_t over d in chunks of 8 in order, then
//      one fixed tree sums the lanes (hadd pairs, quads, then the two 128-bit halves); 2 rows ×
//      4 slots per register tile; −inf where the row does not see the slot;
//   3. per row that sees a slot of the block: m' = max(m, max_t s_t); c = e^(m − m') (0 while
//      m = −inf); p_t = e^(s_t − m') (0 where not visible), e^x = exp8 (cpu/simd_avx2.h);
//      l = l·c + Σ_t p_t (one fixed tree);
//   4. O = O·c + p_t·v_t for t in slot order, 4 rows × 16 value dims at a time; a slot that a row
//      does not see leaves that row's O untouched (no product at all; a slot no row of the 4
//      sees is skipped: the K/V of empty slots may be garbage), and a row that sees no slot of
//      the block keeps its whole state.
// out = O / l (0 where no key and no sink was visible); a sink starts m at its logit with l = 1.
// Each row's arithmetic is the same sequence whatever tile, thread or call it lands in: the
// same bits for any batch (n_q), split, thread count or paging.
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/simd_avx2.h"

namespace dfl::cpu::avx2 {

namespace {

constexpr int kKB = 16;       // slots per block
constexpr int kMaxRows = 16;  // (query, head) rows per task
constexpr int kRG = 4;        // rows per register group of P·V

inline int64_t pad16(int64_t n) { return (n + 15) / 16 * 16; }
inline int imin(int64_t a, int64_t b) { return static_cast<int>(a < b ? a : b); }

// All-ones in the first n (0..8) lanes.
inline __m256i lanes8(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n < 8 ? n : 8)),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

inline __m256 widen8(__m128i b) { return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16)); }

// 8 dims from d0 of a fp32 row (n valid, the rest 0).
inline __m256 load8(const float* p, int64_t n) {
  return n >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, lanes8(n));
}
// 8 key dims of a bf16 row (n valid, the rest 0).
inline __m256 load8(const uint16_t* p, int64_t n) {
  if (n >= 8) return widen8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  alignas(16) uint16_t t[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::memcpy(t, p, static_cast<size_t>(n) * 2);
  return widen8(_mm_load_si128(reinterpret_cast<const __m128i*>(t)));
}
// 8 value dims from d0 of slot j of a bf16 page block (pairs: slot j's dim d at
// vb + (j − j%2)·vs + 2d + j%2), n valid.
inline __m256 load_value8(const uint16_t* vb, int64_t vs, int j, int64_t d0, int64_t n) {
  const uint16_t* p = vb + (j & ~1) * vs + 2 * d0;
  __m256i x;
  if (n >= 8) {
    x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  } else {
    alignas(32) uint32_t t[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    std::memcpy(t, p, static_cast<size_t>(n) * 4);
    x = _mm256_load_si256(reinterpret_cast<const __m256i*>(t));
  }
  return _mm256_castsi256_ps(j & 1 ? _mm256_and_si256(x, _mm256_set1_epi32(static_cast<int>(0xffff0000u)))
                                   : _mm256_slli_epi32(x, 16));
}
inline __m256 load_value8(const float* vb, int64_t vs, int j, int64_t d0, int64_t n) {
  return load8(vb + j * vs + d0, n);
}

// Lane sums of 4 accumulators: {Σ a0, Σ a1, Σ a2, Σ a3}, each ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)).
inline __m128 sum4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
  const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

// All-ones in the lanes whose key position kp a query at q sees (kernels/visibility.h).
inline __m256 visible8(int32_t q, __m256i kp, Window w) {
  __m256i vis = _mm256_cmpgt_epi32(kp, _mm256_set1_epi32(-1));
  const __m256i qv = _mm256_set1_epi32(q);
  if (w.left >= 0) vis = _mm256_andnot_si256(_mm256_cmpgt_epi32(_mm256_sub_epi32(qv, kp), _mm256_set1_epi32(w.left)), vis);
  if (w.right >= 0) vis = _mm256_andnot_si256(_mm256_cmpgt_epi32(_mm256_sub_epi32(kp, qv), _mm256_set1_epi32(w.right)), vis);
  return _mm256_castsi256_ps(vis);
}

// One kv head's block of 16 slots: slot t's key at k + t·ks, its value by load_value8(v, vs, t).
template <typename T>
struct Block {
  const T* k;
  const T* v;
  int64_t ks, vs;
  int n;  // slots below n_slots (the others are never read)
};

// Raw logits of rows r0, r0 + 1 (q rows qa, qb) over the block: s[0..1] for row r0, s[2..3] for
// row r0 + 1 (8 slots each). Slots past n re-read slot 0 (the caller masks them).
template <typename T>
inline void logits2(const float* qa, const float* qb, const Block<T>& bk, int32_t dq, __m256 s[4]) {
  __m128 part[2][4];
  for (int g = 0; g < 4; ++g) {
    const T* kr[4];
    for (int u = 0; u < 4; ++u) kr[u] = bk.k + (4 * g + u < bk.n ? 4 * g + u : 0) * bk.ks;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
    for (int32_t d = 0; d < dq; d += 8) {
      const int64_t n = dq - d;
      const __m256 x = load8(qa + d, n), y = load8(qb + d, n);
      __m256 k = load8(kr[0] + d, n);
      a0 = _mm256_fmadd_ps(x, k, a0);
      b0 = _mm256_fmadd_ps(y, k, b0);
      k = load8(kr[1] + d, n);
      a1 = _mm256_fmadd_ps(x, k, a1);
      b1 = _mm256_fmadd_ps(y, k, b1);
      k = load8(kr[2] + d, n);
      a2 = _mm256_fmadd_ps(x, k, a2);
      b2 = _mm256_fmadd_ps(y, k, b2);
      k = load8(kr[3] + d, n);
      a3 = _mm256_fmadd_ps(x, k, a3);
      b3 = _mm256_fmadd_ps(y, k, b3);
    }
    part[0][g] = sum4(a0, a1, a2, a3);
    part[1][g] = sum4(b0, b1, b2, b3);
  }
  for (int r = 0; r < 2; ++r) {
    s[2 * r] = _mm256_set_m128(part[r][1], part[r][0]);
    s[2 * r + 1] = _mm256_set_m128(part[r][3], part[r][2]);
  }
}

// One row's online-softmax step over a block (top comment): s = its 16 unscaled logits, vis
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

// O[r] = O[r]·c[r] + Σ_t P[r][t]·v_t for the rows r0..r0+3 in `active` (the others' O
// untouched); seen[r]: bit t = row r sees slot t.
template <typename T>
void accumulate(float* O, const float* P, const float* c, const Block<T>& bk, int64_t dv, int64_t dvp, int r0,
                unsigned active, const unsigned* seen) {
  unsigned any = 0;  // slots some active row sees
  for (int r = 0; r < kRG; ++r)
    if (active >> r & 1) any |= seen[r];
  for (int64_t cc = 0; cc < dvp; cc += 16) {
    float* o[kRG];
    __m256 a[kRG][2];
    for (int r = 0; r < kRG; ++r) {
      o[r] = O + (r0 + r) * dvp + cc;
      const __m256 cv = _mm256_set1_ps(c[r0 + r]);
      a[r][0] = _mm256_mul_ps(_mm256_loadu_ps(o[r]), cv);
      a[r][1] = _mm256_mul_ps(_mm256_loadu_ps(o[r] + 8), cv);
    }
    for (int t = 0; t < kKB; ++t) {
      if (!(any >> t & 1)) continue;
      const __m256 v0 = load_value8(bk.v, bk.vs, t, cc, dv - cc);
      const __m256 v1 = cc + 8 < dv ? load_value8(bk.v, bk.vs, t, cc + 8, dv - cc - 8) : _mm256_setzero_ps();
      for (int r = 0; r < kRG; ++r) {
        if (!(seen[r] >> t & 1) && (active >> r & 1)) continue;  // that row's O keeps its bits
        const __m256 pb = _mm256_broadcast_ss(P + (r0 + r) * kKB + t);
        a[r][0] = _mm256_fmadd_ps(pb, v0, a[r][0]);
        a[r][1] = _mm256_fmadd_ps(pb, v1, a[r][1]);
      }
    }
    for (int r = 0; r < kRG; ++r)
      if (active >> r & 1) {
        _mm256_storeu_ps(o[r], a[r][0]);
        _mm256_storeu_ps(o[r] + 8, a[r][1]);
      }
  }
}

// A task's rows: queries [i0, i0 + nq) × query heads [h0, h0 + gh), row r = (query i0 + r / gh,
// head h0 + r % gh), all of kv head kvh.
struct TileRows {
  int64_t i0 = 0;
  int nq = 0, gh = 1;
  int32_t h0 = 0, kvh = 0;
  int rows() const { return nq * gh; }
};

template <typename T>
Block<T> block_at(const KvPages& kv, const AttnParams& p, int32_t kvh, int64_t j0);
template <>
Block<float> block_at(const KvPages& kv, const AttnParams& p, int32_t kvh, int64_t j0) {
  const int64_t pg = j0 / kv.page_slots, row = j0 % kv.page_slots;
  const KvRow r = kv_row(kv, p, kvh, pg, row);
  return Block<float>{r.k, r.v, int64_t(p.n_kv_heads) * p.d_qk, int64_t(p.n_kv_heads) * p.d_v,
                      imin(kKB, kv.n_slots - j0)};
}
template <>
Block<uint16_t> block_at(const KvPages& kv, const AttnParams& p, int32_t kvh, int64_t j0) {
  const int64_t pg = j0 / kv.page_slots, row = j0 % kv.page_slots;  // row is even (a multiple of 16)
  const KvRow r = kv_row(kv, p, kvh, pg, row);
  return Block<uint16_t>{r.k16, r.v16, p.d_qk, p.d_v, imin(kKB, kv.n_slots - j0)};
}

// One task (top comment). work: kMaxRows · dvp + kMaxRows · kKB floats.
template <typename T>
void run_tile(const float* q, const int32_t* q_pos, const TileRows& tr, const KvPages& kv, const AttnParams& p,
              float* work, float* out) {
  const int32_t dq = p.d_qk, dv = p.d_v;
  const int64_t dvp = pad16(dv);
  const int rows = tr.rows();
  float* O = work;                // [kMaxRows][dvp]
  float* P = O + kMaxRows * dvp;  // [kMaxRows][kKB]
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
  alignas(32) int32_t kp[kKB];
  for (int64_t j0 = 0; j0 < kv.n_slots; j0 += kKB) {
    const int64_t pg = j0 / kv.page_slots, row0 = j0 % kv.page_slots;
    const int n = imin(kKB, kv.n_slots - j0);
    for (int t = 0; t < kKB; ++t) kp[t] = t < n ? kv.pos[pg][row0 + t] : kEmptySlot;
    const __m256i kp0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(kp));
    const __m256i kp1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(kp + 8));
    __m256 vis[kMaxRows][2];
    unsigned seen[kMaxRows + kRG];  // bit t: row r sees slot t
    unsigned sees = 0;              // bit r: row r sees a slot of the block
    for (int r = 0; r < kMaxRows + kRG; ++r) seen[r] = 0;
    for (int r = 0; r < rows; ++r) {
      if (r % tr.gh == 0) {  // one mask per query, shared by its heads
        vis[r][0] = visible8(qp[r], kp0, p.window);
        vis[r][1] = visible8(qp[r], kp1, p.window);
        seen[r] = static_cast<unsigned>(_mm256_movemask_ps(vis[r][0])) |
                  static_cast<unsigned>(_mm256_movemask_ps(vis[r][1])) << 8;
      } else {
        vis[r][0] = vis[r - 1][0];
        vis[r][1] = vis[r - 1][1];
        seen[r] = seen[r - 1];
      }
      if (seen[r]) sees |= 1u << r;
    }
    if (!sees) continue;
    const Block<T> bk = block_at<T>(kv, p, tr.kvh, j0);
    for (int r0 = 0; r0 < rows; r0 += 2) {
      if (!(sees >> r0 & 3u)) continue;
      __m256 s[4];
      logits2(qr[r0], qr[r0 + 1], bk, dq, s);
      for (int u = 0; u < 2; ++u)
        if (sees >> (r0 + u) & 1)
          softmax_step(s[2 * u], s[2 * u + 1], vis[r0 + u][0], vis[r0 + u][1], p.scale, m[r0 + u],
                       l[r0 + u], c[r0 + u], P + (r0 + u) * kKB);
    }
    for (int r0 = 0; r0 < rows; r0 += kRG) {
      const unsigned active = sees >> r0 & ((1u << kRG) - 1);
      if (active) accumulate(O, P, c, bk, dv, dvp, r0, active, seen + r0);
    }
  }
  for (int r = 0; r < rows; ++r) {
    const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
    float* o = out + ((tr.i0 + r / tr.gh) * p.n_heads + tr.h0 + r % tr.gh) * dv;
    for (int32_t d = 0; d < dv; ++d) o[d] = O[r * dvp + d] * inv;
  }
}

// Heads per task: the largest divisor of the group size up to 4.
int heads_per_task(const AttnParams& p) {
  const int g = p.n_heads / p.n_kv_heads;
  for (int gh = 4; gh > 1; --gh)
    if (g % gh == 0) return gh;
  return 1;
}

}  // namespace

int64_t attention_work_floats(const AttnParams& p, int n_threads) {
  return static_cast<int64_t>(n_threads) * (kMaxRows * pad16(p.d_v) + kMaxRows * kKB);
}

void attention(const float* q, const int32_t* q_pos, int64_t n_q, const KvPages& kv,
               const AttnParams& p, float* out, ThreadPool& pool, float* work) {
  const int32_t group = p.n_heads / p.n_kv_heads;
  int gh = heads_per_task(p);
  int64_t nq = kMaxRows / gh;
  // Fewer tasks than threads (a decode step of few kv heads): one head per task.
  if (((n_q + nq - 1) / nq) * (group / gh) * p.n_kv_heads < pool.n_threads()) gh = 1, nq = kMaxRows;
  const int64_t tiles = (n_q + nq - 1) / nq, parts = group / gh, per_kvh = tiles * parts;
  const int64_t per_thread = kMaxRows * pad16(p.d_v) + kMaxRows * kKB;
  const bool bf16 = kv.dtype == KvDtype::kBF16;
  pool.parallel_for_redoable(per_kvh * p.n_kv_heads, [&](int64_t t0, int64_t t1, int tid) {
    float* w = work + static_cast<int64_t>(tid) * per_thread;
    for (int64_t t = t0; t < t1; ++t) {
      TileRows tr;
      tr.kvh = static_cast<int32_t>(t / per_kvh);
      const int64_t in_head = t % per_kvh;
      tr.i0 = (in_head / parts) * nq;
      tr.nq = imin(nq, n_q - tr.i0);
      tr.gh = gh;
      tr.h0 = tr.kvh * group + static_cast<int32_t>(in_head % parts) * gh;
      if (bf16)
        run_tile<uint16_t>(q, q_pos, tr, kv, p, w, out);
      else
        run_tile<float>(q, q_pos, tr, kv, p, w, out);
    }
  });
}

}  // namespace dfl::cpu::avx2
