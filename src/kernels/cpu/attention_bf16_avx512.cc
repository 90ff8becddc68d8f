// The bf16 prefill attention's AVX-512 engine, for machines without AMX (Zen 4 / Zen 5, Intel
// with AMX off or absent): the same packed tiles as the AMX engine (the algorithm, the packing
// and the engine contract: cpu/attention_bf16_prefill.h), each 64-byte tile row read as 16
// output lanes × one bf16 pair, so a product is a chain of pair products over the rows
// (vdpbf16ps, or its FMA form where that is faster: ops.h Bf16Dot):
//   S[r][slots] += bcast(Q_r pair i) · K row i     (16 pairs per 32-dim chunk, both halves)
//   T[r][dims]  += bcast(P_r pair i) · V row i     (16 slot pairs per 32-slot block)
// 4 query rows at a time share each K / V row load. A row's sums run in the same order
// whatever rows share its group, and a row that sees no slot of the block is never updated, so
// rows are independent of each other (the invariance the header states).
#include <immintrin.h>

#include <vector>

#include "kernels/cpu/attention_bf16_prefill.h"

namespace dfl::cpu::avx512 {

namespace {

using bf16_attention::kQT;
using bf16_attention::kTile;
using bf16_attention::update_o;

constexpr int kRows = 4;  // query rows per register tile

inline __m512i tile_row(const uint16_t* tile, int i) { return _mm512_load_si512(tile + i * 32); }

// The pair product of one tile row, two ways (ops.h Bf16Dot); the engine below is written once
// over them. A is what a query row contributes per pair i (Q or P), W a widened tile row.
//   Dpbf16: vdpbf16ps on the bf16 pair broadcast as one 32-bit word.
//   Fma: the tile row widened to fp32 (even elements: w << 16, odd: w & 0xffff0000), the row's
//     pair as two fp32 broadcasts from an fp32 copy of its bf16 values, odd then even: Intel's
//     vdpbf16ps sequence, the same bits (ops.h), at the FMA rate.
struct Dpbf16Dot {
  using Row = uint16_t;  // row values as the engine gets them (bf16)
  using W = __m512bh;
  struct A {
    __m512bh pair;
  };
  static const Row* rows(const uint16_t* b, int64_t, int64_t) { return b; }
  static W widen(__m512i w) { return (__m512bh)w; }
  static A pair(const Row* row, int i) {
    uint32_t v;
    __builtin_memcpy(&v, row + 2 * i, 4);
    return {(__m512bh)_mm512_set1_epi32(static_cast<int>(v))};
  }
  static __m512 madd(__m512 acc, A a, W w) { return _mm512_dpbf16_ps(acc, a.pair, w); }
};

struct FmaDot {
  using Row = float;  // fp32 copies of the bf16 values
  struct W {
    __m512 even, odd;
  };
  struct A {
    __m512 even, odd;
  };
  // n_rows rows of `len` bf16 values at stride `len` → fp32 copies (per thread, reused).
  static const Row* rows(const uint16_t* b, int64_t n_rows, int64_t len) {
    thread_local std::vector<float> f;
    if (f.size() < static_cast<size_t>(n_rows * len)) f.resize(static_cast<size_t>(n_rows * len));
    for (int64_t i = 0; i < n_rows * len; i += 16)
      _mm512_storeu_ps(f.data() + i, _mm512_castsi512_ps(_mm512_slli_epi32(
                                         _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + i))), 16)));
    return f.data();
  }
  static W widen(__m512i w) {
    return {_mm512_castsi512_ps(_mm512_slli_epi32(w, 16)),
            _mm512_castsi512_ps(_mm512_and_si512(w, _mm512_set1_epi32(static_cast<int>(0xffff0000u))))};
  }
  static A pair(const Row* row, int i) { return {_mm512_set1_ps(row[2 * i]), _mm512_set1_ps(row[2 * i + 1])}; }
  static __m512 madd(__m512 acc, A a, W w) {
    return _mm512_fmadd_ps(w.even, a.even, _mm512_fmadd_ps(w.odd, a.odd, acc));
  }
};

template <class Dot>
struct Avx512Engine {
  static void begin() {}
  static void end() {}

  static void scores(const uint16_t* qb, int64_t Dp, const uint16_t* k0, const uint16_t* k1,
                     int64_t dcp, const uint32_t* vis, float* sb) {
    const typename Dot::Row* q = Dot::rows(qb, kQT, Dp);
    for (int r0 = 0; r0 < kQT; r0 += kRows) {
      if (!(vis[r0] | vis[r0 + 1] | vis[r0 + 2] | vis[r0 + 3])) continue;
      __m512 a[kRows][2];
      for (int i = 0; i < kRows; ++i) a[i][0] = a[i][1] = _mm512_setzero_ps();
      for (int64_t dc = 0; dc < dcp; ++dc) {
        const uint16_t* t0 = k0 + dc * kTile;
        const uint16_t* t1 = k1 + dc * kTile;
        for (int pr = 0; pr < 16; ++pr) {
          const typename Dot::W ka = Dot::widen(tile_row(t0, pr)), kb = Dot::widen(tile_row(t1, pr));
          for (int i = 0; i < kRows; ++i) {
            const typename Dot::A qv = Dot::pair(q + (r0 + i) * Dp + dc * 32, pr);
            a[i][0] = Dot::madd(a[i][0], qv, ka);
            a[i][1] = Dot::madd(a[i][1], qv, kb);
          }
        }
      }
      for (int i = 0; i < kRows; ++i) {
        _mm512_store_ps(sb + (r0 + i) * 32, a[i][0]);
        _mm512_store_ps(sb + (r0 + i) * 32 + 16, a[i][1]);
      }
    }
  }

  static void accumulate(const uint16_t* pb, const uint16_t* vt, int64_t nvc,
                         const uint32_t* vis, bool rescale, const float* corr, float* o,
                         float* /*tb*/) {
    const typename Dot::Row* pr_rows = Dot::rows(pb, kQT, 32);
    for (int r0 = 0; r0 < kQT; r0 += kRows) {
      if (!(vis[r0] | vis[r0 + 1] | vis[r0 + 2] | vis[r0 + 3])) continue;
      for (int64_t c0 = 0; c0 < nvc; c0 += 4) {
        const int cn = static_cast<int>(nvc - c0 < 4 ? nvc - c0 : 4);
        __m512 t[kRows][4];
        for (int i = 0; i < kRows; ++i)
          for (int c = 0; c < 4; ++c) t[i][c] = _mm512_setzero_ps();
        for (int pr = 0; pr < 16; ++pr) {
          typename Dot::W vv[4];
          for (int c = 0; c < cn; ++c) vv[c] = Dot::widen(tile_row(vt + (c0 + c) * kTile, pr));
          for (int i = 0; i < kRows; ++i) {
            const typename Dot::A pv = Dot::pair(pr_rows + (r0 + i) * 32, pr);
            for (int c = 0; c < cn; ++c) t[i][c] = Dot::madd(t[i][c], pv, vv[c]);
          }
        }
        for (int i = 0; i < kRows; ++i) {
          if (!vis[r0 + i]) continue;  // P = 0: O stays exactly as it is
          for (int c = 0; c < cn; ++c)
            update_o(o + ((r0 + i) * nvc + c0 + c) * 16, t[i][c], rescale, corr[r0 + i]);
        }
      }
    }
  }
};

}  // namespace

int64_t bf16_prefill_attention_work_floats(const AttnParams& p, int64_t n_kv, int n_threads) {
  return bf16_attention::work_floats(p, n_kv, n_threads);
}

void attention_bf16(const float* q, const int32_t* q_pos, int64_t n_q, const KvPages& kv,
                    const AttnParams& p, float* out, ThreadPool& pool, float* work,
                    int32_t* pos_work, bool fma) {
  if (fma)
    bf16_attention::run<Avx512Engine<FmaDot>>(q, q_pos, n_q, kv, p, out, pool, work, pos_work);
  else
    bf16_attention::run<Avx512Engine<Dpbf16Dot>>(q, q_pos, n_q, kv, p, out, pool, work, pos_work);
}

}  // namespace dfl::cpu::avx512
