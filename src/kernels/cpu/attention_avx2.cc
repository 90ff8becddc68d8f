// AVX2 attention over KV pages (fp32, or bf16 widened exactly in registers: the same arithmetic
// on the same values), for machines without AVX-512 (ops.h attention contract): every call
// below the prefill threshold (runs of ≥ 64 queries take cpu/attention_prefill_avx2.cc's packed
// tiles), and every call when the prefill attention is switched off.
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

#include "kernels/cpu/attention_tile_avx2.h"
#include "kernels/cpu/cpu_kernels.h"

namespace dfl::cpu::avx2 {

namespace {

inline int imin(int64_t a, int64_t b) { return static_cast<int>(a < b ? a : b); }

// Lane sums of 4 accumulators: {Σ a0, Σ a1, Σ a2, Σ a3}, each ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)).
inline __m128 sum4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
  const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

// Raw logits of two rows (q rows qa, qb) over the block: s[0..1] for the first (8 slots each),
// s[2..3] for the second. Slots past n re-read slot 0 (the caller masks them).
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

Block<float> block_at(const KvPages& kv, const AttnParams& p, int32_t kvh, int64_t j0, const float*) {
  const KvRow r = kv_row(kv, p, kvh, j0 / kv.page_slots, j0 % kv.page_slots);
  return Block<float>{r.k, r.v, int64_t(p.n_kv_heads) * p.d_qk, int64_t(p.n_kv_heads) * p.d_v,
                      imin(kTileSlots, kv.n_slots - j0)};
}
Block<uint16_t> block_at(const KvPages& kv, const AttnParams& p, int32_t kvh, int64_t j0, const uint16_t*) {
  const KvRow r = kv_row(kv, p, kvh, j0 / kv.page_slots, j0 % kv.page_slots);  // an even row
  return Block<uint16_t>{r.k16, r.v16, p.d_qk, p.d_v, imin(kTileSlots, kv.n_slots - j0)};
}

// One task (top comment); work: TileState::work_floats(p) floats.
template <typename T>
void run_tile(const float* q, const int32_t* q_pos, const TileRows& tr, const KvPages& kv, const AttnParams& p,
              float* work, float* out) {
  TileState st(q, q_pos, tr, p, work);
  alignas(32) int32_t kp[kTileSlots];
  for (int64_t j0 = 0; j0 < kv.n_slots; j0 += kTileSlots) {
    const int64_t pg = j0 / kv.page_slots, row0 = j0 % kv.page_slots;
    const int n = imin(kTileSlots, kv.n_slots - j0);
    for (int t = 0; t < kTileSlots; ++t) kp[t] = t < n ? kv.pos[pg][row0 + t] : kEmptySlot;
    const unsigned sees = st.see(_mm256_load_si256(reinterpret_cast<const __m256i*>(kp)),
                                 _mm256_load_si256(reinterpret_cast<const __m256i*>(kp + 8)), p.window);
    if (!sees) continue;
    const Block<T> bk = block_at(kv, p, tr.kvh, j0, static_cast<const T*>(nullptr));
    for (int r0 = 0; r0 < st.rows; r0 += 2) {
      if (!(sees >> r0 & 3u)) continue;
      __m256 s[4];
      logits2(st.qr[r0], st.qr[r0 + 1], bk, p.d_qk, s);
      for (int u = 0; u < 2; ++u)
        if (sees >> (r0 + u) & 1) st.softmax_step(r0 + u, s[2 * u], s[2 * u + 1], p.scale);
    }
    for (int r0 = 0; r0 < st.rows; r0 += 4)
      if (const unsigned active = sees >> r0 & 15u) st.accumulate(bk, p.d_v, r0, active);
  }
  st.finish(p, out);
}

}  // namespace

int64_t attention_work_floats(const AttnParams& p, int n_threads) {
  return static_cast<int64_t>(n_threads) * TileState::work_floats(p);
}

void attention(const float* q, const int32_t* q_pos, int64_t n_q, const KvPages& kv,
               const AttnParams& p, float* out, ThreadPool& pool, float* work) {
  const int32_t group = p.n_heads / p.n_kv_heads;
  int gh = heads_per_task(p);
  int64_t nq = kTileMaxRows / gh;
  // Fewer tasks than threads (a decode step of few kv heads): one head per task.
  if (((n_q + nq - 1) / nq) * (group / gh) * p.n_kv_heads < pool.n_threads()) gh = 1, nq = kTileMaxRows;
  const int64_t tiles = (n_q + nq - 1) / nq, parts = group / gh, per_kvh = tiles * parts;
  const int64_t per_thread = TileState::work_floats(p);
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
