// The bf16 prefill attention's AVX-512 BF16 engine, for machines without AMX (Zen 4 / Zen 5,
// AMX disabled): the same packed tiles as the AMX engine (the algorithm, the packing and the
// engine contract: cpu/attention_bf16_prefill.h), each 64-byte tile row read as 16 output lanes
// × one bf16 pair, so a product is a chain of vdpbf16ps over the rows:
//   S[r][slots] += bcast(Q_r pair i) · K row i     (16 pairs per 32-dim chunk, both halves)
//   T[r][dims]  += bcast(P_r pair i) · V row i     (16 slot pairs per 32-slot block)
// 4 query rows at a time share each K / V row load. A row's sums run in the same order
// whatever rows share its group, and a row that sees no slot of the block is never updated, so
// rows are independent of each other (the invariance the header states).
#include <immintrin.h>

#include "kernels/cpu/attention_bf16_prefill.h"

namespace dfl::cpu::avx512 {

namespace {

using bf16_attention::kQT;
using bf16_attention::kTile;
using bf16_attention::update_o;

constexpr int kRows = 4;  // query rows per register tile

inline __m512bh tile_row(const uint16_t* tile, int i) {
  return (__m512bh)_mm512_load_si512(tile + i * 32);
}
inline __m512bh pair_bcast(const uint16_t* row, int i) {
  uint32_t v;
  __builtin_memcpy(&v, row + 2 * i, 4);
  return (__m512bh)_mm512_set1_epi32(static_cast<int>(v));
}

struct Avx512Bf16Engine {
  static void begin() {}
  static void end() {}

  static void scores(const uint16_t* qb, int64_t Dp, const uint16_t* k0, const uint16_t* k1,
                     int64_t dcp, const uint32_t* vis, float* sb) {
    for (int r0 = 0; r0 < kQT; r0 += kRows) {
      if (!(vis[r0] | vis[r0 + 1] | vis[r0 + 2] | vis[r0 + 3])) continue;
      __m512 a[kRows][2];
      for (int i = 0; i < kRows; ++i) a[i][0] = a[i][1] = _mm512_setzero_ps();
      for (int64_t dc = 0; dc < dcp; ++dc) {
        const uint16_t* t0 = k0 + dc * kTile;
        const uint16_t* t1 = k1 + dc * kTile;
        for (int pr = 0; pr < 16; ++pr) {
          const __m512bh ka = tile_row(t0, pr), kb = tile_row(t1, pr);
          for (int i = 0; i < kRows; ++i) {
            const __m512bh qv = pair_bcast(qb + (r0 + i) * Dp + dc * 32, pr);
            a[i][0] = _mm512_dpbf16_ps(a[i][0], qv, ka);
            a[i][1] = _mm512_dpbf16_ps(a[i][1], qv, kb);
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
    for (int r0 = 0; r0 < kQT; r0 += kRows) {
      if (!(vis[r0] | vis[r0 + 1] | vis[r0 + 2] | vis[r0 + 3])) continue;
      for (int64_t c0 = 0; c0 < nvc; c0 += 4) {
        const int cn = static_cast<int>(nvc - c0 < 4 ? nvc - c0 : 4);
        __m512 t[kRows][4];
        for (int i = 0; i < kRows; ++i)
          for (int c = 0; c < 4; ++c) t[i][c] = _mm512_setzero_ps();
        for (int pr = 0; pr < 16; ++pr) {
          __m512bh vv[4];
          for (int c = 0; c < cn; ++c) vv[c] = tile_row(vt + (c0 + c) * kTile, pr);
          for (int i = 0; i < kRows; ++i) {
            const __m512bh pv = pair_bcast(pb + (r0 + i) * 32, pr);
            for (int c = 0; c < cn; ++c) t[i][c] = _mm512_dpbf16_ps(t[i][c], pv, vv[c]);
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
                    int32_t* pos_work) {
  bf16_attention::run<Avx512Bf16Engine>(q, q_pos, n_q, kv, p, out, pool, work, pos_work);
}

}  // namespace dfl::cpu::avx512
