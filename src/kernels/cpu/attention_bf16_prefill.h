// The bf16 prefill attention (ops.h `attention`, n_q ≥ kPrefillAttentionMinQueries on AVX-512),
// shared by its two product engines: AMX tiles (cpu/attention_amx.cc, tdpbf16ps) and AVX-512
// BF16 dot products (cpu/attention_bf16_avx512.cc, vdpbf16ps, for machines without AMX such as
// Zen 4). Everything but the two products lives here, once.
//
// Per kv head, K and V are first packed (bf16, round-to-nearest-even; empty slots packed as
// zeros so their garbage never reaches a product):
//   K: per block of 16 slots and chunk of 32 dims, a tile [16 dim-pairs][16 slots][2]
//   V: per block of 32 slots and chunk of 16 value dims, a tile [16 slot-pairs][16 dims][2]
// (the AMX B layout, which is also vdpbf16ps's: one 64-byte row = 16 output lanes × a pair).
// A task is 16 consecutive queries of one query head. For each block of 32 slots that any of
// its queries sees (the rule of kernels/visibility.h, vectorized):
//   S[16×32] = Q·Kᵀ      Engine::scores, fp32 sums of bf16 pair products over the d_qk chunks;
//   softmax   per row in fp32: scale, mask invisible slots to -inf, running max m and
//             denominator l (sinks start them at (s_h, 1)), p = exp(s - m) rounded to bf16;
//   O ← O·corr + P·V     Engine::accumulate, 16 value dims at a time, the rescale in fp32.
// Out = O / l. Every row's arithmetic depends only on that row (a block a row does not see
// leaves its state exactly unchanged), so results do not depend on the thread count or on how
// rows are grouped; they differ from the fp32 path by the bf16 rounding of Q, K, P and V (~3
// significant digits per product, fp32 sums), and the two engines differ from each other in
// how the hardware adds pair products (so each machine is invariant with itself).
//
// Engine contract (both are structs of static functions):
//   begin() / end()          around a thread's run of tasks (AMX: tile configuration);
//   scores(qb, Dp, k0, k1, dcp, vis, sb)
//       sb[r][0..31] = Σ_dc Q_r(chunk dc) · K(slot) for the 16 rows r (rows with vis[r] == 0
//       may be skipped), Q bf16 at qb + r·Dp, the key tiles of the block's two 16-slot halves
//       at k0 / k1 (dcp chunk tiles each, kTile apart);
//   accumulate(pb, vt, nvc, vis, rescale, corr, o, tb)
//       for every value chunk vc: O[r][vc] = rescale ? O·corr[r] + T : O + T with
//       T[r] = P_r · V(vc), P bf16 at pb + 32·r, the V tiles of the block at vt (kTile apart),
//       O fp32 at o + (r·nvc + vc)·16; tb: a 16×16 fp32 scratch. Rows with vis[r] == 0 have
//       P = 0 and corr = 1 (skipping them leaves O unchanged, as computing them does).
//
// Paged caches (ops.h KvPages): the packing gathers each 16-slot half of a key block from its
// own page (page_slots = 16 puts the two halves of a 32-slot block on different pages) and the
// positions are gathered once per call; the tiles are the same bytes as for the contiguous
// call, so the results are bit-identical to it.
//
// bf16 caches (ops.h KvPages kBF16, head-major pages): the values are already the bf16 the
// packing would round to (RNE either way), so packing is a move of 32-bit words — a K row's dim
// pairs, V's slot pairs as the page stores them — and the tiles, hence the results, are the
// same bytes as for an fp32 cache holding the unrounded values. Loading the tiles straight from
// the pages was built and measured for AMX (commit 66f233c, reverted): the head-major rows the
// decode kernel wants are the A layout, not the B layout K takes in S = Q·Kᵀ, so it computed
// Sᵀ = K·Qᵀ and paid two 16×16 transposes per block per task, and 16-slot pages split each P·V
// product in two; 1.4× slower than this per-call pack (which is shared by every task of a kv
// head and, from bf16 pages, is a move of 32-bit words: 0.85× the fp32 cache's pack + convert).
//
// Include only from files compiled with AVX-512 BF16 flags (cpu/*_avx512.cc, cpu/*_amx.cc);
// everything here has internal linkage, so each of them gets its own copy.
#pragma once

#include <immintrin.h>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/simd_avx512.h"

namespace dfl::cpu::bf16_attention {
namespace {

using avx512::exp16;
using avx512::lanes16;

constexpr int kQT = 16;           // query rows per task
constexpr int kKT = 32;           // slots per key block
constexpr int64_t kTile = 16 * 32;  // bf16 elements of one tile (1 KiB)

inline int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }

struct Shape {
  int64_t n_kv, n_kb;  // slots, blocks of 32 slots
  int64_t dcp;         // 32-wide chunks of d_qk
  int64_t nvc;         // 16-wide chunks of d_v
  int64_t k_tiles() const { return n_kb * 2 * dcp; }
  int64_t v_tiles() const { return n_kb * nvc; }
};

Shape shape_of(const AttnParams& p, int64_t n_kv) {
  Shape s;
  s.n_kv = n_kv;
  s.n_kb = (n_kv + kKT - 1) / kKT;
  s.dcp = (p.d_qk + 31) / 32;
  s.nvc = (p.d_v + 15) / 16;
  return s;
}

// Per-thread scratch (floats): Q bf16 [16][dcp*32], O [16][nvc*16], S [16][32], P bf16 [16][32],
// T [16][16], m, l, corr [16] each, + alignment.
int64_t task_scratch_floats(const Shape& s) {
  return 16 * s.dcp * 16 + 16 * s.nvc * 16 + 16 * 32 + 16 * 16 + 16 * 16 + 3 * 16 + 16;
}

// The 16 slots [j0, j0 + 16) of one kv head: they lie in one page (ops.h KvPages: page_slots
// is a multiple of 16, or there is one page), so a 32-slot key block is two such halves, each
// from its own page when page_slots = 16.
struct Half {
  const float* k = nullptr;    // slot j0 + j at k + j * ks
  const float* v = nullptr;
  const uint16_t* k16 = nullptr;  // bf16 pages: slot j0 + j's key at k16 + j * d_qk,
  const uint16_t* v16 = nullptr;  // its value pair (j even) at v16 + j * d_v
  const int32_t* pos = nullptr;
  int n = 0;                   // slots of the half below n_slots
  bool used(int j) const { return j < n && pos[j] >= 0; }
};

Half half_at(const KvPages& kv, const AttnParams& p, int32_t kvh, int64_t j0) {
  Half h;
  if (j0 >= kv.n_slots) return h;
  const int64_t pg = j0 / kv.page_slots, row = j0 - pg * kv.page_slots;
  const KvRow r = kv_row(kv, p, kvh, pg, row);
  h.k = r.k;
  h.v = r.v;
  h.k16 = r.k16;
  h.v16 = r.v16;
  h.pos = kv.pos[pg] + row;
  h.n = static_cast<int>(imin(16, kv.n_slots - j0));
  return h;
}

// Packs key blocks [b, e) of kv head kvh.
void pack_kv(const KvPages& kv, const AttnParams& p, const Shape& s, int32_t kvh, int64_t b,
             int64_t e, uint16_t* kp, uint16_t* vp) {
  const int64_t ks = static_cast<int64_t>(p.n_kv_heads) * p.d_qk;
  const int64_t vs = static_cast<int64_t>(p.n_kv_heads) * p.d_v;
  alignas(64) uint32_t rows[16][16];
  const bool hw = avx512_bf16_usable();
  for (int64_t kb = b; kb < e; ++kb) {
    const Half half[2] = {half_at(kv, p, kvh, kb * kKT), half_at(kv, p, kvh, kb * kKT + 16)};
    // K: tile (kb, half, dc)[pair][slot] = (K[slot][2 pair], K[slot][2 pair + 1]).
    for (int h = 0; h < 2; ++h)
      for (int64_t dc = 0; dc < s.dcp; ++dc) {
        for (int j = 0; j < 16; ++j) {
          __m512i packed = _mm512_setzero_si512();
          if (half[h].used(j) && half[h].k16) {  // 16 dim pairs, already bf16
            const long left = p.d_qk - dc * 32;  // dims of this chunk (an odd tail reads no further)
            const __mmask32 m32 = left >= 32 ? ~__mmask32(0) : __mmask32((1u << left) - 1);
            packed = _mm512_maskz_loadu_epi16(m32, half[h].k16 + j * p.d_qk + dc * 32);
          } else if (half[h].used(j)) {
            const float* kr = half[h].k + j * ks + dc * 32;
            const long left = p.d_qk - dc * 32;
            const __m512 lo = _mm512_maskz_loadu_ps(lanes16(left), kr);
            const __m512 hi = _mm512_maskz_loadu_ps(lanes16(left - 16), kr + 16);
            packed = avx512::cvtne2ps_bf16(hi, lo, hw);
          }
          _mm512_store_si512(rows[j], packed);
        }
        uint32_t* tile = reinterpret_cast<uint32_t*>(kp + ((kb * 2 + h) * s.dcp + dc) * kTile);
        for (int pr = 0; pr < 16; ++pr)
          for (int j = 0; j < 16; ++j) tile[pr * 16 + j] = rows[j][pr];
      }
    // V: tile (kb, vc)[pair][dim] = (V[2 pair][dim], V[2 pair + 1][dim]).
    const __m512i interleave = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9,
                                                24, 8, 23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2,
                                                17, 1, 16, 0);
    for (int64_t vc = 0; vc < s.nvc; ++vc) {
      uint16_t* tile = vp + (kb * s.nvc + vc) * kTile;
      const __mmask16 m = lanes16(p.d_v - vc * 16);
      for (int pr = 0; pr < 16; ++pr) {
        const Half& hf = half[pr / 8];  // slots 2 pr, 2 pr + 1 of the block
        const int j0 = 2 * pr % 16, j1 = j0 + 1;
        if (hf.v16) {  // the page's slot pair: the tile row as is, unused slots zeroed
          const __m512i pair = _mm512_maskz_loadu_epi32(m, hf.v16 + j0 * p.d_v + vc * 32);
          const __m512i keep = _mm512_set1_epi32(int((hf.used(j0) ? 0xffffu : 0u) |
                                                     (hf.used(j1) ? 0xffff0000u : 0u)));
          _mm512_store_si512(tile + pr * 32, _mm512_and_si512(pair, keep));
          continue;
        }
        const __m512 a = hf.used(j0) ? _mm512_maskz_loadu_ps(m, hf.v + j0 * vs + vc * 16)
                                     : _mm512_setzero_ps();
        const __m512 c = hf.used(j1) ? _mm512_maskz_loadu_ps(m, hf.v + j1 * vs + vc * 16)
                                     : _mm512_setzero_ps();
        const __m512i ab = avx512::cvtne2ps_bf16(c, a, hw);
        _mm512_store_si512(tile + pr * 32, _mm512_permutexvar_epi16(interleave, ab));
      }
    }
  }
}

// Visibility bits of the 32 slots of block kb for a query at qpos.
inline uint32_t block_visibility32(const int32_t* k_pos, int64_t n_kv, int64_t kb, int32_t qpos,
                                   Window w) {
  const int64_t j0 = kb * kKT;
  return static_cast<uint32_t>(avx512::visible_slots16(k_pos + j0, n_kv - j0, qpos, w)) |
         static_cast<uint32_t>(avx512::visible_slots16(k_pos + j0 + 16, n_kv - j0 - 16, qpos, w)) << 16;
}

// Queries [i0, i0 + nq) (nq ≤ 16) of query head h.
template <class Engine>
void attend_task(const float* q, const int32_t* q_pos, int64_t i0, int64_t nq, int32_t h,
                 const int32_t* k_pos, const AttnParams& p, const Shape& s, const uint16_t* kp,
                 const uint16_t* vp, float* out, float* scratch) {
  const int64_t Dp = s.dcp * 32, nvc = s.nvc;
  float* base = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(scratch) + 63) & ~uintptr_t(63));
  uint16_t* qb = reinterpret_cast<uint16_t*>(base);          // [16][Dp]
  float* o = base + 16 * Dp / 2;                              // [16][nvc*16]
  float* sb = o + 16 * nvc * 16;                              // [16][32]
  uint16_t* pb = reinterpret_cast<uint16_t*>(sb + 16 * 32);   // [16][32]
  float* tb = sb + 16 * 32 + 16 * 16;                         // [16][16]
  float* mrun = tb + 16 * 16;
  float* lrun = mrun + 16;
  float* corr = lrun + 16;
  const bool hw = avx512_bf16_usable();
  for (int r = 0; r < kQT; ++r) {
    uint16_t* qr = qb + r * Dp;
    const float* src = r < nq ? q + ((i0 + r) * p.n_heads + h) * p.d_qk : nullptr;
    for (int64_t c = 0; c < Dp; c += 32) {
      const long left = src ? p.d_qk - c : 0;
      const __m512 lo = _mm512_maskz_loadu_ps(lanes16(left), src ? src + c : nullptr);
      const __m512 hi = _mm512_maskz_loadu_ps(lanes16(left - 16), src ? src + c + 16 : nullptr);
      _mm512_store_si512(qr + c, avx512::cvtne2ps_bf16(hi, lo, hw));
    }
    mrun[r] = p.sinks ? p.sinks[h] : -__builtin_inff();
    lrun[r] = p.sinks ? 1.0f : 0.0f;
    for (int64_t c = 0; c < nvc; ++c) _mm512_store_ps(o + (r * nvc + c) * 16, _mm512_setzero_ps());
  }
  const __m512 vscale = _mm512_set1_ps(p.scale);
  const __m512 neg_inf = _mm512_set1_ps(-__builtin_inff());
  uint32_t vis[kQT];
  for (int64_t kb = 0; kb < s.n_kb; ++kb) {
    uint32_t any = 0;
    for (int r = 0; r < kQT; ++r) {
      vis[r] = r < nq ? block_visibility32(k_pos, s.n_kv, kb, q_pos[i0 + r], p.window) : 0;
      any |= vis[r];
    }
    if (!any) continue;
    Engine::scores(qb, Dp, kp + (kb * 2 + 0) * s.dcp * kTile, kp + (kb * 2 + 1) * s.dcp * kTile,
                   s.dcp, vis, sb);
    // Online softmax per row; P rounded to bf16 for the P·V product.
    bool rescale = false;
    for (int r = 0; r < kQT; ++r) {
      if (!vis[r]) {
        _mm512_store_si512(pb + r * 32, _mm512_setzero_si512());
        corr[r] = 1.0f;
        continue;
      }
      const __mmask16 v0 = static_cast<__mmask16>(vis[r]), v1 = static_cast<__mmask16>(vis[r] >> 16);
      const __m512 s0 = _mm512_mask_blend_ps(v0, neg_inf, _mm512_mul_ps(_mm512_load_ps(sb + r * 32), vscale));
      const __m512 s1 = _mm512_mask_blend_ps(v1, neg_inf, _mm512_mul_ps(_mm512_load_ps(sb + r * 32 + 16), vscale));
      const float bmax = _mm512_reduce_max_ps(_mm512_max_ps(s0, s1));
      const float m_old = mrun[r];
      const float m_new = bmax > m_old ? bmax : m_old;
      const __m512 mv = _mm512_set1_ps(m_new);
      const __m512 p0 = _mm512_maskz_mov_ps(v0, exp16(_mm512_sub_ps(s0, mv)));
      const __m512 p1 = _mm512_maskz_mov_ps(v1, exp16(_mm512_sub_ps(s1, mv)));
      float c = 1.0f;
      if (m_new != m_old) {
        c = m_old == -__builtin_inff() ? 0.0f : __builtin_expf(m_old - m_new);
        rescale = true;
        mrun[r] = m_new;
      }
      corr[r] = c;
      lrun[r] = lrun[r] * c + _mm512_reduce_add_ps(_mm512_add_ps(p0, p1));
      _mm512_store_si512(pb + r * 32, avx512::cvtne2ps_bf16(p1, p0, hw));
    }
    Engine::accumulate(pb, vp + kb * nvc * kTile, nvc, vis, rescale, corr, o, tb);
  }
  for (int64_t r = 0; r < nq; ++r) {
    const float inv = lrun[r] > 0.0f ? 1.0f / lrun[r] : 0.0f;
    const __m512 iv = _mm512_set1_ps(inv);
    float* dst = out + ((i0 + r) * p.n_heads + h) * p.d_v;
    for (int64_t c = 0; c < nvc; ++c)
      _mm512_mask_storeu_ps(dst + c * 16, lanes16(p.d_v - c * 16),
                            _mm512_mul_ps(_mm512_load_ps(o + (r * nvc + c) * 16), iv));
  }
}

// O ← O·corr + T for one row's 16 value dims (Engine::accumulate's update, one rule for both).
inline void update_o(float* orow, __m512 t, bool rescale, float corr) {
  const __m512 prev = _mm512_load_ps(orow);
  _mm512_store_ps(orow, rescale ? _mm512_fmadd_ps(prev, _mm512_set1_ps(corr), t) : _mm512_add_ps(prev, t));
}

[[maybe_unused]] int64_t work_floats(const AttnParams& p, int64_t n_kv, int n_threads) {
  const Shape s = shape_of(p, n_kv);
  return task_scratch_floats(s) * n_threads + (s.k_tiles() + s.v_tiles()) * kTile / 2 + 16;
}

// The whole call (cpu_kernels.h `attention` of the engine's namespace).
template <class Engine>
void run(const float* q, const int32_t* q_pos, int64_t n_q, const KvPages& kv,
         const AttnParams& p, float* out, ThreadPool& pool, float* work, int32_t* pos_work) {
  const int64_t n_kv = kv.n_slots;
  const Shape s = shape_of(p, n_kv);
  // Positions contiguous for the per-block visibility (a copy when the cache is paged).
  const int32_t* k_pos = n_kv > 0 ? kv.pos[0] : nullptr;
  if (n_kv > kv.page_slots) {
    for (int64_t j = 0, pg = 0; j < n_kv; j += kv.page_slots, ++pg)
      for (int64_t r = 0, n = imin(kv.page_slots, n_kv - j); r < n; ++r) pos_work[j + r] = kv.pos[pg][r];
    k_pos = pos_work;
  }
  const int32_t G = p.n_heads / p.n_kv_heads;
  const int64_t per_thread = task_scratch_floats(s);
  float* packs = work + per_thread * pool.n_threads();
  uint16_t* kp = reinterpret_cast<uint16_t*>((reinterpret_cast<uintptr_t>(packs) + 63) & ~uintptr_t(63));
  uint16_t* vp = kp + s.k_tiles() * kTile;
  const int64_t n_qt = (n_q + kQT - 1) / kQT;
  const int64_t n_tasks = n_qt * G;
  for (int32_t kvh = 0; kvh < p.n_kv_heads; ++kvh) {
    pool.parallel_for(s.n_kb, [&](int64_t b, int64_t e, int) {
      pack_kv(kv, p, s, kvh, b, e, kp, vp);
    });
    // Tasks (query tile, head), claimed in chunks dynamically: causal work stays balanced and a
    // descheduled thread takes fewer. A task's result doesn't depend on who runs it.
    pool.parallel_for(n_tasks, [&](int64_t t0, int64_t t1, int tid) {
      Engine::begin();
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t qt = t / G;
        const int32_t h = kvh * G + static_cast<int32_t>(t % G);
        const int64_t i0 = qt * kQT;
        attend_task<Engine>(q, q_pos, i0, imin(kQT, n_q - i0), h, k_pos, p, s, kp, vp, out,
                            work + tid * per_thread);
      }
      Engine::end();
    });
  }
}

}  // namespace
}  // namespace dfl::cpu::bf16_attention
