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
//   tasks (pool; 16 (query, head) rows: consecutive queries × up to 4 heads of the kv head's
//     group, cpu/attention_tile_avx2.h): for each block that some row of the tile sees
//     (kernels/visibility.h's rule, on 8 lanes), per row that sees a slot of it:
//       s_t = (q · k_t) · scale     per slot lane, one fma per d in d order; −inf if not visible;
//       m' = max(m, max_t s_t); c = e^(m − m') (0 while m = −inf); p_t = e^(s_t − m') (0 where
//       not visible); l = l·c + Σ_t p_t (one fixed tree); O = O·c + p_t·v_t (t in order, only
//       for the slots the row sees); a row that sees no slot of the block keeps its state.
//     out = O / l (0 where l = 0). A sink starts m at the head's sink logit with l = 1.
// Only the blocks from the first to the last holding a slot some query of the call can see are
// packed and walked: a sliding-window layer deep into a long prompt packs its window, not the
// whole cache (the others hold no visible slot, so no row's result changes).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/attention_tile_avx2.h"
#include "kernels/cpu/cpu_kernels.h"

namespace dfl::cpu::avx2 {

namespace {

// One kv head's slots, packed (top comment).
struct PackedHead {
  float* kt = nullptr;       // [n_kb][d_qk][16]
  float* v = nullptr;        // [n_kb · 16][dvp]
  int32_t* pos = nullptr;    // [n_kb · 16]
  int64_t n_kb = 0, dvp = 0;
  int64_t b0 = 0, b1 = 0;    // the blocks packed and walked: [b0, b1)
  int64_t lo = 0, hi = 0;    // the positions some query of the call can see lie in [lo, hi]
};

// ph.lo / hi from the queries' positions and the window, and ph.b0 / b1: the first and one past
// the last block holding a slot in [lo, hi] (b0 = b1 when none does).
void live_blocks(const KvPages& kv, const int32_t* q_pos, int64_t n_q, Window w, PackedHead& ph) {
  int64_t qmin = INT64_MAX, qmax = INT64_MIN;
  for (int64_t i = 0; i < n_q; ++i) qmin = q_pos[i] < qmin ? q_pos[i] : qmin, qmax = q_pos[i] > qmax ? q_pos[i] : qmax;
  ph.lo = w.left >= 0 ? qmin - w.left : INT64_MIN;
  ph.hi = w.right >= 0 ? qmax + w.right : INT64_MAX;
  ph.b0 = ph.n_kb, ph.b1 = 0;
  for (int64_t j = 0; j < kv.n_slots; ++j) {
    const int32_t pos = kv.pos[j / kv.page_slots][j % kv.page_slots];
    if (pos < 0 || pos < ph.lo || pos > ph.hi) continue;
    const int64_t b = j / kTileSlots;
    ph.b0 = b < ph.b0 ? b : ph.b0;
    ph.b1 = b + 1 > ph.b1 ? b + 1 : ph.b1;
  }
  if (ph.b0 >= ph.b1) ph.b0 = ph.b1 = 0;
}

inline float widen(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

void pack_block(const KvPages& kv, const AttnParams& p, int32_t kvh, int64_t b, const PackedHead& ph) {
  const int32_t dq = p.d_qk, dv = p.d_v;
  float* kt = ph.kt + b * kTileSlots * dq;
  for (int t = 0; t < kTileSlots; ++t) {
    const int64_t j = b * kTileSlots + t;
    float* vr = ph.v + j * ph.dvp;
    const int64_t page = j < kv.n_slots ? j / kv.page_slots : 0, row = j < kv.n_slots ? j % kv.page_slots : 0;
    int32_t pos = j < kv.n_slots ? kv.pos[page][row] : kEmptySlot;
    if (pos < ph.lo || pos > ph.hi) pos = kEmptySlot;  // no query of the call sees it
    ph.pos[j] = pos < 0 ? kEmptySlot : pos;
    if (pos < 0) {
      for (int32_t d = 0; d < dq; ++d) kt[d * kTileSlots + t] = 0.0f;
      std::memset(vr, 0, static_cast<size_t>(ph.dvp) * 4);
      continue;
    }
    const KvRow r = kv_row(kv, p, kvh, page, row);
    if (kv.dtype == KvDtype::kBF16) {
      for (int32_t d = 0; d < dq; ++d) kt[d * kTileSlots + t] = widen(r.k16[d]);
      for (int32_t d = 0; d < dv; ++d) vr[d] = widen(r.v16[2 * d]);
    } else {
      for (int32_t d = 0; d < dq; ++d) kt[d * kTileSlots + t] = r.k[d];
      std::memcpy(vr, r.v, static_cast<size_t>(dv) * 4);
    }
    for (int64_t d = dv; d < ph.dvp; ++d) vr[d] = 0.0f;
  }
}

// Logits of 4 rows (q rows at qr[0..4)) against block kt [d_qk][16]: s[r][0..1]. The
// accumulators and row pointers are named locals (as an array passed by reference, GCC kept
// them in memory: a spill and reload per d).
inline void logits4(const float* const* qr, const float* kt, int32_t dq, __m256 s[4][2]) {
  const float *q0 = qr[0], *q1 = qr[1], *q2 = qr[2], *q3 = qr[3];
  __m256 a00 = _mm256_setzero_ps(), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00, a30 = a00, a31 = a00;
#pragma GCC unroll 2
  for (int32_t d = 0; d < dq; ++d) {
    const __m256 k0 = _mm256_loadu_ps(kt + d * kTileSlots), k1 = _mm256_loadu_ps(kt + d * kTileSlots + 8);
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

// One task over the packed head (top comment); work: TileState::work_floats(p) floats.
void run_tile(const float* q, const int32_t* q_pos, const TileRows& tr, const AttnParams& p,
              const PackedHead& ph, float* work, float* out) {
  TileState st(q, q_pos, tr, p, work);
  for (int64_t b = ph.b0; b < ph.b1; ++b) {
    const int32_t* kp = ph.pos + b * kTileSlots;
    const unsigned sees = st.see(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(kp)),
                                 _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kp + 8)), p.window);
    if (!sees) continue;
    const float* kt = ph.kt + b * kTileSlots * p.d_qk;
    const Block<float> vb{nullptr, ph.v + b * kTileSlots * ph.dvp, 0, ph.dvp, kTileSlots};
    for (int r0 = 0; r0 < st.rows; r0 += 4) {
      const unsigned active = sees >> r0 & 15u;
      if (!active) continue;
      __m256 s[4][2];
      logits4(st.qr + r0, kt, p.d_qk, s);
      for (int r = 0; r < 4; ++r)
        if (active >> r & 1) st.softmax_step(r0 + r, s[r][0], s[r][1], p.scale);
      st.accumulate(vb, ph.dvp, r0, active);
    }
  }
  st.finish(p, out);
}

}  // namespace

int64_t prefill_attention_work_floats(const AttnParams& p, int64_t n_kv, int n_threads) {
  return pad16(n_kv) * (p.d_qk + pad16(p.d_v)) + static_cast<int64_t>(n_threads) * TileState::work_floats(p);
}

void attention_prefill(const float* q, const int32_t* q_pos, int64_t n_q, const KvPages& kv,
                       const AttnParams& p, float* out, ThreadPool& pool, float* work, int32_t* pos_work) {
  PackedHead ph;
  ph.n_kb = (kv.n_slots + kTileSlots - 1) / kTileSlots;
  ph.dvp = pad16(p.d_v);
  ph.kt = work;
  ph.v = ph.kt + ph.n_kb * kTileSlots * p.d_qk;
  ph.pos = pos_work;
  float* task_work = ph.v + ph.n_kb * kTileSlots * ph.dvp;
  const int64_t per_thread = TileState::work_floats(p);
  const int32_t group = p.n_heads / p.n_kv_heads;
  const int gh = heads_per_task(p), nq = kTileMaxRows / gh, parts = group / gh;
  const int64_t tiles = (n_q + nq - 1) / nq;
  live_blocks(kv, q_pos, n_q, p.window, ph);
  for (int32_t kvh = 0; kvh < p.n_kv_heads; ++kvh) {
    pool.parallel_for_redoable(ph.b1 - ph.b0, [&](int64_t b0, int64_t b1, int) {
      for (int64_t b = b0; b < b1; ++b) pack_block(kv, p, kvh, ph.b0 + b, ph);
    });
    pool.parallel_for_redoable(tiles * parts, [&](int64_t t0, int64_t t1, int tid) {
      float* w = task_work + static_cast<int64_t>(tid) * per_thread;
      for (int64_t t = t0; t < t1; ++t) {
        TileRows tr;
        tr.kvh = kvh;
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
