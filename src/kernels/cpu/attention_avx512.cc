// AVX-512 attention: online softmax in fp32 over key blocks of 16 cache slots, tiled over rows.
//
// A row is one (query, head). A tile is the rows of up to `tile_queries` consecutive queries ×
// the `group` query heads that share one kv head, so each K/V block is brought into L1 once
// and used by every row of the tile (tile_queries: verify-sized calls take many queries per
// tile). Per key block:
//   1. visibility of the 16 slots for each query of the tile (kernels/visibility.h, vectorized);
//      a block no row sees is skipped;
//   2. logits, 8 rows × 2 keys at a time: per (row, key) 16 lanes accumulate q·k over the d_qk
//      chunks in order, then one transposed reduction per row gives its 16 logits; scaled,
//      invisible lanes = -inf;
//   3. per row: online softmax update (max, rescale, exp);
//   4. acc += p_j · v_j over the row's visible j in slot order, 4 rows × 4 output chunks at a
//      time (one V load feeds 4 rows; rows that don't see slot j keep acc unchanged: a masked
//      fma, where some row of the 4 doesn't see some slot of the block).
// Every row's arithmetic is the same sequence whatever tile, position in the tile, thread or
// call it lands in, and block boundaries are fixed slot multiples of 16: batch invariant.
// Invisible slots never touch the accumulators (their V may be garbage).
//
// Memory: the cache is [slot][kv head][d], so one head's keys sit n_kv_heads·d floats apart
// (4 KiB for 8 heads × 128: every key row of a block maps to the same L1 sets, and each lands
// in its own page). For long query runs (prefill) each kv head's K and V are first copied into
// contiguous [slot][d] buffers — a pure copy, so results are unchanged — and the tiles read
// those. Tiles are handed to threads round-robin so causal (triangular) work stays balanced.
//
// Paged caches (ops.h KvPages): a block of 16 slots lies in one page, so a block only fetches
// its page's K/V/position pointers; the copy path gathers through the pages (and gathers the
// positions once). Same blocks, same arithmetic: bit-identical to the contiguous call.
//
// bf16 caches (KvPages kBF16, head-major pages): each kv head's keys and value pairs are already
// contiguous in a page, so there is never a copy; K chunks of 16 dims are widened in registers
// (bf16 → fp32 is exact: a 16-bit shift), V rows come from the slot-pair layout (low or high
// half of each 32-bit lane). Steps 1–4 are the same instructions on the same fp32 values, so the
// result equals this kernel's fp32 result over the bf16-rounded K/V bit for bit.
#include <immintrin.h>

#include <cstring>
#include <type_traits>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/simd_avx512.h"

namespace dfl::cpu::avx512 {

namespace {

inline int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }

constexpr int kKB = 16;      // keys per block
constexpr int kRB = 4;       // rows per register tile of P·V
constexpr int kQkRows = 8;   // rows per logits group (qk_partials)
constexpr int kTileRows = 8; // rows per tile: kTileRows / G queries × G heads (G ≤ kTileRows)
constexpr int kMaxRows = 64; // wider groups are split into tiles of ≤ kMaxRows heads of one query

// One kv head's keys, values and positions over pages (ops.h KvPages): slot j = row r of page
// g = j / page_slots at k[g] + r * ks + koff, v[g] + r * vs + voff, pos[g][r]. A block of 16
// slots never straddles a page (page_slots % 16 == 0, or a single page), so its pointers are
// fetched once per block.
// bf16 pages (KvPages kBF16): k16 / v16 instead; ks = d_qk (the next slot's key), vs = d_v
// (slot j's value dims at v + (j − j%2)·vs + 2d + j%2), koff / voff the head's run in a page.
struct KvView {
  const float* const* k;
  const float* const* v;
  const int32_t* const* pos;
  int64_t ks, vs, koff, voff;
  int64_t page_slots;
  const uint16_t* const* k16 = nullptr;
  const uint16_t* const* v16 = nullptr;
};

// Element type of the cache rows a kernel instance reads.
template <bool kBf16>
struct KvElem {
  using T = float;
  static const T* const* k(const KvView& v) { return v.k; }
  static const T* const* val(const KvView& v) { return v.v; }
};
template <>
struct KvElem<true> {
  using T = uint16_t;
  static const T* const* k(const KvView& v) { return v.k16; }
  static const T* const* val(const KvView& v) { return v.v16; }
};

// 16 key dims (masked) as fp32.
inline __m512 load_key16(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
inline __m512 load_key16(const uint16_t* p, __mmask16 m) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
}
// 16 value dims (masked) of slot j as fp32: fp32 rows vs apart; bf16 slot pairs (see KvView).
inline __m512 load_value16(const float* vb, int64_t vs, int j, int64_t d0, __mmask16 m) {
  return _mm512_maskz_loadu_ps(m, vb + j * vs + d0);
}
inline __m512 load_value16(const uint16_t* vb, int64_t vs, int j, int64_t d0, __mmask16 m) {
  const __m512i x = _mm512_maskz_loadu_epi32(m, vb + (j & ~1) * vs + 2 * d0);
  return _mm512_castsi512_ps(j & 1 ? _mm512_and_si512(x, _mm512_set1_epi32(int(0xffff0000u)))
                                   : _mm512_slli_epi32(x, 16));
}

// acc[j] (16 vectors) → one vector whose lane j is Σ acc[j].
inline __m512 transpose_sum16(const __m512* a) {
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

// Raw logits of RB rows × 16 keys: dots[r][j] holds the 16 partial lanes of q_r · k_j.
// Keys past nk re-read the last key (their lanes are masked by the caller).
// RB rows × JK keys per register tile (RB·JK = 16 accumulators): 8 rows × 2 keys shares each
// widened bf16 key among more rows than 4 × 4 (half the widening ops per product); the per-lane
// sums are the same either way.
template <int RB, typename T, int JK = (RB > 4 ? 2 : 4)>
void qk_partials(const float* const* q, const T* kb, int64_t ks, int nk, int dq,
                 float* dots /*[RB][16][16]*/) {
  const int nqc = (dq + 15) / 16;
  for (int jg = 0; jg < kKB; jg += JK) {
    const T* kr[JK];
    for (int jj = 0; jj < JK; ++jj) kr[jj] = kb + imin(jg + jj, nk - 1) * ks;
    __m512 a[RB][JK];
    for (int r = 0; r < RB; ++r)
      for (int jj = 0; jj < JK; ++jj) a[r][jj] = _mm512_setzero_ps();
    for (int c = 0; c < nqc; ++c) {
      const __mmask16 m = lanes16(dq - c * 16);
      __m512 kv[JK];
      for (int jj = 0; jj < JK; ++jj) kv[jj] = load_key16(kr[jj] + c * 16, m);
      for (int r = 0; r < RB; ++r) {
        const __m512 qc = _mm512_maskz_loadu_ps(m, q[r] + c * 16);
        for (int jj = 0; jj < JK; ++jj) a[r][jj] = _mm512_fmadd_ps(qc, kv[jj], a[r][jj]);
      }
    }
    for (int r = 0; r < RB; ++r)
      for (int jj = 0; jj < JK; ++jj) _mm512_store_ps(dots + (r * kKB + jg + jj) * 16, a[r][jj]);
  }
}

// acc_r += Σ_j p_r[j] · v_j over the slots j of `any` visible to row r (bit j of vis[r]),
// in ascending j, for RB rows and output chunks [c0, c0 + cn).
// CN = 4: four whole chunks, the count known at compile time so the 4·RB accumulators stay in
// registers (with a run-time count GCC kept them on the stack: load, masked fma, store per key).
// CN = 0: cn chunks (1..4) at run time. The same instructions per chunk either way.
template <int RB, typename T, int CN>
void pv_accumulate(float* const* acc, const float* const* p, const unsigned* vis, unsigned any,
                   const T* vb, int64_t vs, int dv, int c0, int cn_rt) {
  const int cn = CN ? CN : cn_rt;
  __m512 r[RB][4];
  __mmask16 mk[4];
  for (int c = 0; c < cn; ++c) mk[c] = lanes16(dv - (c0 + c) * 16);
  for (int i = 0; i < RB; ++i)
    for (int c = 0; c < cn; ++c) r[i][c] = _mm512_load_ps(acc[i] + (c0 + c) * 16);
  // When every row of the group sees every slot of `any` (all but the causal edge of a verify
  // block), the fma needs no mask: the same result without a mask per row and slot.
  auto run = [&](auto masked) {
    for (unsigned mm = any; mm; mm &= mm - 1) {
      const int j = __builtin_ctz(mm);
      __m512 vv[4];
      for (int c = 0; c < cn; ++c) vv[c] = load_value16(vb, vs, j, (c0 + c) * 16, mk[c]);
      for (int i = 0; i < RB; ++i) {
        const __m512 pv = _mm512_set1_ps(p[i][j]);
        if constexpr (decltype(masked)::value) {
          const __mmask16 use = static_cast<__mmask16>(-static_cast<int>((vis[i] >> j) & 1u));
          for (int c = 0; c < cn; ++c) r[i][c] = _mm512_mask3_fmadd_ps(pv, vv[c], r[i][c], use);
        } else {
          for (int c = 0; c < cn; ++c) r[i][c] = _mm512_fmadd_ps(pv, vv[c], r[i][c]);
        }
      }
    }
  };
  unsigned all = any;
  for (int i = 0; i < RB; ++i) all &= vis[i];
  if (all == any)
    run(std::false_type{});
  else
    run(std::true_type{});
  for (int i = 0; i < RB; ++i)
    for (int c = 0; c < cn; ++c) _mm512_store_ps(acc[i] + (c0 + c) * 16, r[i][c]);
}

// Per-thread scratch of one tile of up to `rows` rows.
struct TileScratch {
  float* acc;   // [rows][nvc * 16]
  float* prob;  // [rows][16]
  float* dots;  // [kQkRows][16][16]
  float* mrun;  // [rows]
  float* lrun;  // [rows]
};

// Heads per tile (a divisor-free chunk of the group) and queries per tile.
// The whole group (up to kMaxRows heads), or a share of it when the call has fewer (query tile,
// kv head) tasks than threads — one query over one kv head (Gemma-3-270M's decode: 4 heads, 1
// kv head) was a single task on one thread while the others waited; the chunks re-read the kv
// head's K/V (from cache), and a row's arithmetic does not depend on its tile.
int64_t tile_heads(const AttnParams& p, int64_t n_qtiles, int n_threads) {
  const int64_t G = p.n_heads / p.n_kv_heads, whole = imin(G, kMaxRows);
  const int64_t tasks = n_qtiles * p.n_kv_heads;
  if (tasks >= n_threads) return whole;
  const int64_t chunks = (n_threads + tasks - 1) / tasks;  // per (query tile, kv head)
  return imin(whole, (G + chunks - 1) / chunks);
}
// A verify-sized call (all queries × the group fit one tile of ≤ kMaxRows rows) takes its queries
// in as few tiles per kv head as keep every thread busy (about 2 tasks per thread), so each
// head's K/V is read once or a few times, in place (no copy: see use_packed_kv); tiles of
// kTileRows rows re-read it once per tile (Zen 4, 2 threads, 16 queries of the Qwen3-4B shape
// over 4,096 slots: 25 → 13 ms). Longer runs (prefill) keep the kTileRows tiles.
int64_t tile_queries(const AttnParams& p, int64_t n_q, int n_threads) {
  const int64_t G = p.n_heads / p.n_kv_heads;
  if (n_q < 1) return 1;
  if (n_q * G <= kMaxRows) {
    const int64_t want_tiles = (2 * int64_t(n_threads) + p.n_kv_heads - 1) / p.n_kv_heads;
    const int64_t n_tiles = want_tiles < 1 ? 1 : want_tiles > n_q ? n_q : want_tiles;
    return (n_q + n_tiles - 1) / n_tiles;
  }
  return G >= kTileRows ? 1 : kTileRows / G;
}

int64_t scratch_floats_per_thread(const AttnParams& p) {
  const int64_t R = kMaxRows, nvc = (p.d_v + 15) / 16;
  return R * nvc * 16 + R * 16 + kQkRows * 256 + 2 * R + 16 /*alignment slack*/;
}

TileScratch carve(float* base, const AttnParams& p) {
  const int64_t R = kMaxRows, nvc = (p.d_v + 15) / 16;
  float* s = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(base) + 63) & ~uintptr_t(63));
  TileScratch t;
  t.dots = s;
  t.acc = t.dots + kQkRows * 256;
  t.prob = t.acc + R * nvc * 16;
  t.mrun = t.prob + R * 16;
  t.lrun = t.mrun + R;
  return t;
}

// Queries [i0, i0 + nq) × heads [h0, h0 + G) of one kv head; row r = (i0 + r / G, h0 + r % G).
template <bool kBf16>
void attend_tile(const float* q, const int32_t* q_pos, int64_t i0, int64_t nq, int32_t h0,
                 int32_t G, const KvView& kv, int64_t n_kv, const AttnParams& p, float* out,
                 const TileScratch& t) {
  const int R = static_cast<int>(nq * G);  // ≤ kMaxRows (tile_rows)
  const int dq = p.d_qk, dv = p.d_v;
  const int nvc = (dv + 15) / 16;
  const float* qrow[kMaxRows];
  float* acc_row[kMaxRows];
  float* prob_row[kMaxRows];
  for (int r = 0; r < R; ++r) {
    const int64_t i = i0 + r / G;
    const int32_t h = h0 + r % G;
    qrow[r] = q + (i * p.n_heads + h) * dq;
    acc_row[r] = t.acc + static_cast<int64_t>(r) * nvc * 16;
    prob_row[r] = t.prob + r * 16;
    t.mrun[r] = p.sinks ? p.sinks[h] : -__builtin_inff();
    t.lrun[r] = p.sinks ? 1.0f : 0.0f;
    for (int c = 0; c < nvc; ++c) _mm512_store_ps(acc_row[r] + c * 16, _mm512_setzero_ps());
  }
  const __m512 vscale = _mm512_set1_ps(p.scale);
  const __m512 neg_inf = _mm512_set1_ps(-__builtin_inff());
  unsigned vis[kMaxRows];
  for (int64_t j0 = 0; j0 < n_kv; j0 += kKB) {
    const int nk = static_cast<int>(imin(kKB, n_kv - j0));
    const int64_t pg = j0 / kv.page_slots, row = j0 - pg * kv.page_slots;
    const int32_t* k_pos = kv.pos[pg] + row;
    unsigned any = 0;
    for (int64_t qi = 0; qi < nq; ++qi) {
      const unsigned vq = visible_slots16(k_pos, nk, q_pos[i0 + qi], p.window);
      for (int g = 0; g < G; ++g) vis[qi * G + g] = vq;
      any |= vq;
    }
    if (!any) continue;
    using T = typename KvElem<kBf16>::T;
    const T* kb = KvElem<kBf16>::k(kv)[pg] + row * kv.ks + kv.koff;
    const T* vb = KvElem<kBf16>::val(kv)[pg] + row * kv.vs + kv.voff;
    // Logits and softmax, kQkRows rows at a time.
    for (int r0 = 0; r0 < R; r0 += kQkRows) {
      const int rb = static_cast<int>(imin(kQkRows, R - r0));
      switch (rb) {
        case 1: qk_partials<1, T>(qrow + r0, kb, kv.ks, nk, dq, t.dots); break;
        case 2: qk_partials<2, T>(qrow + r0, kb, kv.ks, nk, dq, t.dots); break;
        case 3: qk_partials<3, T>(qrow + r0, kb, kv.ks, nk, dq, t.dots); break;
        case 4: qk_partials<4, T>(qrow + r0, kb, kv.ks, nk, dq, t.dots); break;
        case 5: qk_partials<5, T>(qrow + r0, kb, kv.ks, nk, dq, t.dots); break;
        case 6: qk_partials<6, T>(qrow + r0, kb, kv.ks, nk, dq, t.dots); break;
        case 7: qk_partials<7, T>(qrow + r0, kb, kv.ks, nk, dq, t.dots); break;
        default: qk_partials<8, T>(qrow + r0, kb, kv.ks, nk, dq, t.dots); break;
      }
      for (int i = 0; i < rb; ++i) {
        const int r = r0 + i;
        if (!vis[r]) continue;
        __m512 a[kKB];
        for (int j = 0; j < kKB; ++j) a[j] = _mm512_load_ps(t.dots + (i * kKB + j) * 16);
        const __mmask16 vm = static_cast<__mmask16>(vis[r]);
        const __m512 s = _mm512_mask_blend_ps(vm, neg_inf, _mm512_mul_ps(transpose_sum16(a), vscale));
        const float bmax = _mm512_reduce_max_ps(s);
        const float m_old = t.mrun[r];
        const float m_new = bmax > m_old ? bmax : m_old;
        const __m512 pr = _mm512_maskz_mov_ps(vm, exp16(_mm512_sub_ps(s, _mm512_set1_ps(m_new))));
        if (m_new != m_old) {
          const float corr = m_old == -__builtin_inff() ? 0.0f : __builtin_expf(m_old - m_new);
          t.lrun[r] *= corr;
          const __m512 cv = _mm512_set1_ps(corr);
          for (int c = 0; c < nvc; ++c)
            _mm512_store_ps(acc_row[r] + c * 16, _mm512_mul_ps(_mm512_load_ps(acc_row[r] + c * 16), cv));
          t.mrun[r] = m_new;
        }
        t.lrun[r] += _mm512_reduce_add_ps(pr);
        _mm512_store_ps(prob_row[r], pr);
      }
    }
    // acc += P · V, kRB rows × 4 output chunks at a time.
    for (int r0 = 0; r0 < R; r0 += kRB) {
      const int rb = static_cast<int>(imin(kRB, R - r0));
      unsigned any_rows = 0;
      for (int i = 0; i < rb; ++i) any_rows |= vis[r0 + i];
      if (!any_rows) continue;
      for (int c0 = 0; c0 < nvc; c0 += 4) {
        const int cn = static_cast<int>(imin(4, nvc - c0));
#define DFL_PV(R, C) pv_accumulate<R, T, C>(acc_row + r0, prob_row + r0, vis + r0, any_rows, vb, kv.vs, dv, c0, cn)
        if (cn == 4) {
          switch (rb) {
            case 1: DFL_PV(1, 4); break;
            case 2: DFL_PV(2, 4); break;
            case 3: DFL_PV(3, 4); break;
            default: DFL_PV(4, 4); break;
          }
        } else {
          switch (rb) {
            case 1: DFL_PV(1, 0); break;
            case 2: DFL_PV(2, 0); break;
            case 3: DFL_PV(3, 0); break;
            default: DFL_PV(4, 0); break;
          }
        }
#undef DFL_PV
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    const int64_t i = i0 + r / G;
    const int32_t h = h0 + r % G;
    const float inv = t.lrun[r] > 0.0f ? 1.0f / t.lrun[r] : 0.0f;
    const __m512 iv = _mm512_set1_ps(inv);
    float* o = out + (i * p.n_heads + h) * dv;
    for (int c = 0; c < nvc; ++c)
      _mm512_mask_storeu_ps(o + c * 16, lanes16(dv - c * 16),
                            _mm512_mul_ps(_mm512_load_ps(acc_row[r] + c * 16), iv));
  }
}

// Copies slots [b, e) of one kv head from the pages into contiguous [slot][d] buffers. Empty
// slots are not copied (their rows stay garbage, which the kernel never lets reach a result,
// exactly as with garbage in the cache itself).
void pack_head(const KvPages& kv, int64_t b, int64_t e, const AttnParams& p, int32_t kvh,
               float* kp, float* vp) {
  const int64_t ks = static_cast<int64_t>(p.n_kv_heads) * p.d_qk;
  const int64_t vs = static_cast<int64_t>(p.n_kv_heads) * p.d_v;
  const int64_t ps = kv.page_slots;
  for (int64_t j = b; j < e;) {
    const int64_t pg = j / ps, r0 = j - pg * ps, r1 = imin(ps, r0 + (e - j));
    const int32_t* pos = kv.pos[pg];
    const float* kpage = kv.k[pg] + kvh * p.d_qk;
    const float* vpage = kv.v[pg] + kvh * p.d_v;
    for (int64_t r = r0; r < r1; ++r, ++j) {
      if (pos[r] < 0) continue;
      std::memcpy(kp + j * p.d_qk, kpage + r * ks, sizeof(float) * p.d_qk);
      std::memcpy(vp + j * p.d_v, vpage + r * vs, sizeof(float) * p.d_v);
    }
  }
}

// Long query runs copy each kv head into contiguous buffers first (see the top of the file).
// (Verify-sized calls, one or a few query tiles per kv head, read each head in place.)
bool use_packed_kv(const AttnParams& p, int64_t n_q, int64_t n_kv) {
  const int64_t G = p.n_heads / p.n_kv_heads;
  return n_q * G >= 4 * kTileRows && n_q * G > kMaxRows && n_kv >= 64;
}

}  // namespace

int64_t attention_work_floats(const AttnParams& p, int64_t n_q, int64_t n_kv, int n_threads,
                              KvDtype dtype) {
  const bool pack = dtype == KvDtype::kF32 && use_packed_kv(p, n_q, n_kv);
  return scratch_floats_per_thread(p) * n_threads + (pack ? n_kv * (p.d_qk + p.d_v) : 0);
}

void attention(const float* q, const int32_t* q_pos, int64_t n_q, const KvPages& kvp,
               const AttnParams& p, float* out, ThreadPool& pool, float* work,
               int32_t* pos_work) {
  const int64_t n_kv = kvp.n_slots;
  const int32_t G = p.n_heads / p.n_kv_heads;
  const int64_t per_thread = scratch_floats_per_thread(p);
  const int64_t tq = tile_queries(p, n_q, pool.n_threads()), n_qtiles = (n_q + tq - 1) / tq;
  const int64_t th = tile_heads(p, n_qtiles, pool.n_threads()), n_htiles = (G + th - 1) / th;
  const int nt = pool.n_threads();
  // Runs (query tile, head chunk, kv head) tasks for kv heads [h_begin, h_end); the threads claim
  // chunks of consecutive tasks (query-tile-major) dynamically, so causal work stays balanced and
  // a descheduled thread takes fewer. A task's result doesn't depend on who runs it.
  auto run_tiles = [&](int32_t h_begin, int32_t h_end, auto head_view, auto bf16) {
    const int64_t n_heads = h_end - h_begin;
    const int64_t n_tasks = n_qtiles * n_htiles * n_heads;
    pool.parallel_for_redoable(n_tasks, [&](int64_t t0, int64_t t1, int tid) {
      const TileScratch ts = carve(work + tid * per_thread, p);
      for (int64_t task = t0; task < t1; ++task) {
        const int64_t qt = task / (n_htiles * n_heads);
        const int64_t ht = task / n_heads % n_htiles;
        const int32_t kvh = h_begin + static_cast<int32_t>(task % n_heads);
        const int64_t i0 = qt * tq, nq = imin(tq, n_q - i0);
        const int32_t g0 = static_cast<int32_t>(ht * th);
        const int32_t gn = static_cast<int32_t>(imin(th, G - g0));
        attend_tile<decltype(bf16)::value>(q, q_pos, i0, nq, kvh * G + g0, gn, head_view(kvh), n_kv, p,
                                           out, ts);
      }
    });
  };
  if (kvp.dtype == KvDtype::kBF16) {  // head-major pages: every head read in place
    const int64_t ps = kvp.page_slots;
    run_tiles(0, p.n_kv_heads, [&](int32_t kvh) {
      return KvView{nullptr, nullptr, kvp.pos, p.d_qk, p.d_v, kvh * ps * p.d_qk, kvh * ps * p.d_v,
                    ps, kvp.k16, kvp.v16};
    }, std::true_type{});
    return;
  }
  if (!use_packed_kv(p, n_q, n_kv)) {
    const int64_t ks = static_cast<int64_t>(p.n_kv_heads) * p.d_qk;
    const int64_t vs = static_cast<int64_t>(p.n_kv_heads) * p.d_v;
    run_tiles(0, p.n_kv_heads, [&](int32_t kvh) {
      return KvView{kvp.k, kvp.v, kvp.pos, ks, vs, kvh * p.d_qk, kvh * p.d_v, kvp.page_slots};
    }, std::false_type{});
    return;
  }
  // The copies are one page: contiguous K/V of one head, and the positions (gathered once).
  float* kp = work + per_thread * nt;
  float* vp = kp + n_kv * p.d_qk;
  const int32_t* pos = kvp.pos[0];
  if (n_kv > kvp.page_slots) {
    for (int64_t j = 0, pg = 0; j < n_kv; j += kvp.page_slots, ++pg)
      std::memcpy(pos_work + j, kvp.pos[pg], sizeof(int32_t) * imin(kvp.page_slots, n_kv - j));
    pos = pos_work;
  }
  const float* kpages[1] = {kp};
  const float* vpages[1] = {vp};
  const int32_t* ppages[1] = {pos};
  for (int32_t kvh = 0; kvh < p.n_kv_heads; ++kvh) {
    pool.parallel_for_redoable(n_kv, [&](int64_t b, int64_t e, int) { pack_head(kvp, b, e, p, kvh, kp, vp); }, 64);
    run_tiles(kvh, kvh + 1, [&](int32_t) {
      return KvView{kpages, vpages, ppages, p.d_qk, p.d_v, 0, 0, n_kv};
    }, std::false_type{});
  }
}

}  // namespace dfl::cpu::avx512
