// The row-tile machinery both AVX2 attention kernels share — the in-place walk of every call
// (cpu/attention_avx2.cc) and the packed prefill tiles (cpu/attention_prefill_avx2.cc): a task's
// (query, head) rows, their online-softmax state, the visibility of a 16-slot block and one
// row's softmax step. Include only from *_avx2.cc files (everything is `static inline` in an
// anonymous namespace).
#pragma once

#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/simd_avx2.h"

namespace dfl::cpu::avx2 {
namespace {

constexpr int kTileSlots = 16;    // slots per key block (fixed multiples of 16 from slot 0)
constexpr int kTileMaxRows = 16;  // (query, head) rows per task

static inline int64_t pad16(int64_t n) { return (n + 15) / 16 * 16; }

// A task's rows: queries [i0, i0 + nq) × query heads [h0, h0 + gh) of kv head kvh, row r =
// (query i0 + r / gh, head h0 + r % gh). The heads of one GQA group see the same slots, so
// every K and V value a block loads serves all of them.
struct TileRows {
  int64_t i0 = 0;
  int nq = 0, gh = 1;
  int32_t h0 = 0, kvh = 0;
  int rows() const { return nq * gh; }
};

// Heads per task: the largest divisor of the GQA group up to 4.
static inline int heads_per_task(const AttnParams& p) {
  const int g = p.n_heads / p.n_kv_heads;
  for (int gh = 4; gh > 1; --gh)
    if (g % gh == 0) return gh;
  return 1;
}

// All-ones in the lanes whose key position kp a query at q sees (kernels/visibility.h).
static inline __m256 visible8(int32_t q, __m256i kp, Window w) {
  __m256i vis = _mm256_cmpgt_epi32(kp, _mm256_set1_epi32(-1));
  const __m256i qv = _mm256_set1_epi32(q);
  if (w.left >= 0) vis = _mm256_andnot_si256(_mm256_cmpgt_epi32(_mm256_sub_epi32(qv, kp), _mm256_set1_epi32(w.left)), vis);
  if (w.right >= 0) vis = _mm256_andnot_si256(_mm256_cmpgt_epi32(_mm256_sub_epi32(kp, qv), _mm256_set1_epi32(w.right)), vis);
  return _mm256_castsi256_ps(vis);
}

// All-ones in the first n (0..8) lanes.
static inline __m256i lanes8(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n < 8 ? n : 8)),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
static inline __m256 widen8(__m128i b) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16));
}
// 8 dims of an fp32 row (n valid, the rest 0).
static inline __m256 load8(const float* p, int64_t n) {
  return n >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, lanes8(n));
}
// 8 dims of a bf16 row, widened (n valid, the rest 0).
static inline __m256 load8(const uint16_t* p, int64_t n) {
  if (n >= 8) return widen8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  alignas(16) uint16_t t[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::memcpy(t, p, static_cast<size_t>(n) * 2);
  return widen8(_mm_load_si128(reinterpret_cast<const __m128i*>(t)));
}

// A block of 16 slots of one kv head: slot t's key at k + t·ks; its value dims from d0 by
// load_value8 (fp32: the row at v + t·vs; bf16 pages: slot pairs, dim d of slot t at
// v + (t − t%2)·vs + 2d + t%2, the block starting at an even row). n: slots below n_slots
// (the others are never read).
template <typename T>
struct Block {
  const T* k;
  const T* v;
  int64_t ks, vs;
  int n;
};
static inline __m256 load_value8(const Block<float>& b, int t, int64_t d0, int64_t n) {
  return load8(b.v + t * b.vs + d0, n);
}
static inline __m256 load_value8(const Block<uint16_t>& b, int t, int64_t d0, int64_t n) {
  const uint16_t* p = b.v + (t & ~1) * b.vs + 2 * d0;
  __m256i x;
  if (n >= 8) {
    x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  } else {
    alignas(32) uint32_t w[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    std::memcpy(w, p, static_cast<size_t>(n) * 4);
    x = _mm256_load_si256(reinterpret_cast<const __m256i*>(w));
  }
  return _mm256_castsi256_ps(t & 1 ? _mm256_and_si256(x, _mm256_set1_epi32(static_cast<int>(0xffff0000u)))
                                   : _mm256_slli_epi32(x, 16));
}

// The rows of a task and their state: q rows, positions, running max m, denominator l, the
// block's rescale factor c, and the output accumulators O [kTileMaxRows][dvp] and the block's
// probabilities P [kTileMaxRows][16] in `work` (work_floats(p) floats). Rows past
// rows() repeat the last one and are never stored.
struct TileState {
  TileRows tr;
  int rows = 0;
  int64_t dvp = 0;
  float *O = nullptr, *P = nullptr;
  float m[kTileMaxRows], l[kTileMaxRows], c[kTileMaxRows];
  const float* qr[kTileMaxRows];
  int32_t qp[kTileMaxRows];
  __m256 vis[kTileMaxRows][2];  // the current block's visibility per row
  unsigned seen[kTileMaxRows + 4];  // bit t: row r sees slot t of the current block (4 zero rows past)

  TileState(const float* q, const int32_t* q_pos, const TileRows& t, const AttnParams& p, float* work)
      : tr(t), rows(t.rows()), dvp(pad16(p.d_v)), O(work), P(work + kTileMaxRows * pad16(p.d_v)) {
    for (int r = 0; r < kTileMaxRows; ++r) {
      const int rr = r < rows ? r : rows - 1;
      const int64_t i = tr.i0 + rr / tr.gh;
      const int32_t h = tr.h0 + rr % tr.gh;
      qr[r] = q + (i * p.n_heads + h) * p.d_qk;
      qp[r] = q_pos[i];
      m[r] = p.sinks ? p.sinks[h] : -__builtin_inff();
      l[r] = p.sinks ? 1.0f : 0.0f;
      c[r] = 1.0f;
    }
    std::memset(O, 0, static_cast<size_t>(kTileMaxRows * dvp) * 4);
  }
  static int64_t work_floats(const AttnParams& p) { return kTileMaxRows * pad16(p.d_v) + kTileMaxRows * kTileSlots; }

  // vis and seen for a block whose 16 slot positions are kp0, kp1; returns the rows that see
  // some slot of it (bit r).
  unsigned see(__m256i kp0, __m256i kp1, Window w) {
    unsigned sees = 0;
    for (int r = 0; r < kTileMaxRows + 4; ++r) seen[r] = 0;
    for (int r = 0; r < rows; ++r) {
      if (r % tr.gh == 0) {  // one mask per query, shared by its heads
        vis[r][0] = visible8(qp[r], kp0, w);
        vis[r][1] = visible8(qp[r], kp1, w);
        seen[r] = static_cast<unsigned>(_mm256_movemask_ps(vis[r][0])) |
                  static_cast<unsigned>(_mm256_movemask_ps(vis[r][1])) << 8;
      } else {
        vis[r][0] = vis[r - 1][0];
        vis[r][1] = vis[r - 1][1];
        seen[r] = seen[r - 1];
      }
      if (seen[r]) sees |= 1u << r;
    }
    return sees;
  }

  // Row r's online-softmax step over the block from its 16 unscaled logits s0, s1: m, l, c[r]
  // and P[r] (0 where not visible).
  void softmax_step(int r, __m256 s0, __m256 s1, float scale) {
    const __m256 neg_inf = _mm256_set1_ps(-__builtin_inff()), sc = _mm256_set1_ps(scale);
    s0 = _mm256_blendv_ps(neg_inf, _mm256_mul_ps(s0, sc), vis[r][0]);
    s1 = _mm256_blendv_ps(neg_inf, _mm256_mul_ps(s1, sc), vis[r][1]);
    const float bm = hmax8(_mm256_max_ps(s0, s1));
    const float mn = bm > m[r] ? bm : m[r];
    c[r] = m[r] == -__builtin_inff() ? 0.0f : _mm256_cvtss_f32(exp8(_mm256_set1_ps(m[r] - mn)));
    const __m256 mv = _mm256_set1_ps(mn);
    const __m256 p0 = _mm256_and_ps(exp8(_mm256_sub_ps(s0, mv)), vis[r][0]);
    const __m256 p1 = _mm256_and_ps(exp8(_mm256_sub_ps(s1, mv)), vis[r][1]);
    l[r] = l[r] * c[r] + hsum8(_mm256_add_ps(p0, p1));
    m[r] = mn;
    _mm256_storeu_ps(P + r * kTileSlots, p0);
    _mm256_storeu_ps(P + r * kTileSlots + 8, p1);
  }

  // O[r] = O[r]·c[r] + Σ_t P[r][t]·v_t for the rows r0..r0+3 in `active` (the others' O
  // untouched), 4 rows × 16 value dims at a time over the block's slots in order: a slot no
  // active row sees is skipped (the K/V of empty slots may be garbage), and a row that does not
  // see a slot gets no product for it (not a product by 0: its O keeps its bits). Where every
  // active row sees the same slots (all but the blocks on a causal diagonal or a window edge)
  // the loop has no per-row test.
  template <typename T>
  void accumulate(const Block<T>& bk, int64_t dv, int r0, unsigned active) {
    unsigned any = 0, all = ~0u;  // slots some / every active row sees
    for (int r = 0; r < 4; ++r)
      if (active >> r & 1) any |= seen[r0 + r], all &= seen[r0 + r];
    if (any == all)
      accumulate_rows<T, true>(bk, dv, r0, active, any);
    else
      accumulate_rows<T, false>(bk, dv, r0, active, any);
  }
  template <typename T, bool kUniform>
  void accumulate_rows(const Block<T>& bk, int64_t dv, int r0, unsigned active, unsigned any) {
    const float* pr = P + r0 * kTileSlots;
    unsigned skip[4];  // kUniform = false: bit t = row r0 + r keeps its O for slot t
    for (int r = 0; r < 4; ++r) skip[r] = (active >> r & 1) ? ~seen[r0 + r] : 0u;
    for (int64_t cc = 0; cc < dvp; cc += 16) {
      float* o = O + r0 * dvp + cc;
      __m256 a0[4], a1[4];
      for (int r = 0; r < 4; ++r) {
        const __m256 cv = _mm256_set1_ps(c[r0 + r]);
        a0[r] = _mm256_mul_ps(_mm256_loadu_ps(o + r * dvp), cv);
        a1[r] = _mm256_mul_ps(_mm256_loadu_ps(o + r * dvp + 8), cv);
      }
      for (int t = 0; t < kTileSlots; ++t) {
        if (!(any >> t & 1)) continue;
        const __m256 v0 = load_value8(bk, t, cc, dv - cc);
        const __m256 v1 = cc + 8 < dv ? load_value8(bk, t, cc + 8, dv - cc - 8) : _mm256_setzero_ps();
        for (int r = 0; r < 4; ++r) {
          if (!kUniform && (skip[r] >> t & 1)) continue;
          const __m256 pb = _mm256_broadcast_ss(pr + r * kTileSlots + t);
          a0[r] = _mm256_fmadd_ps(pb, v0, a0[r]);
          a1[r] = _mm256_fmadd_ps(pb, v1, a1[r]);
        }
      }
      for (int r = 0; r < 4; ++r)
        if (active >> r & 1) {
          _mm256_storeu_ps(o + r * dvp, a0[r]);
          _mm256_storeu_ps(o + r * dvp + 8, a1[r]);
        }
    }
  }

  // out = O / l per row (0 where l = 0).
  void finish(const AttnParams& p, float* out) const {
    for (int r = 0; r < rows; ++r) {
      const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
      float* o = out + ((tr.i0 + r / tr.gh) * p.n_heads + tr.h0 + r % tr.gh) * p.d_v;
      for (int32_t d = 0; d < p.d_v; ++d) o[d] = O[r * dvp + d] * inv;
    }
  }
};

}  // namespace
}  // namespace dfl::cpu::avx2
