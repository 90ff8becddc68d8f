// The AVX-512 instruction-rate probe (vnni_peak_probe.h), compiled with the AVX-512 flags.
#include <immintrin.h>

#include "vnni_peak_probe.h"

namespace dfl::bench {
namespace {

// 12 accumulators: more than latency × throughput of any of these instructions, so the loop
// runs at the issue rate.
#define DFL_12(op) \
  op(a0) op(a1) op(a2) op(a3) op(a4) op(a5) op(a6) op(a7) op(a8) op(a9) op(a10) op(a11)

template <typename V, typename Step, typename Sum>
void run12(V init, Step step, Sum sum, int64_t iters) {
  V a0 = init, a1 = init, a2 = init, a3 = init, a4 = init, a5 = init, a6 = init, a7 = init,
    a8 = init, a9 = init, a10 = init, a11 = init;
  for (int64_t i = 0; i < iters; ++i) {
#define DFL_STEP(a) a = step(a);
    DFL_12(DFL_STEP)
#undef DFL_STEP
    // an empty asm per register keeps the compiler from folding the chains
#define DFL_KEEP(a) asm volatile("" : "+v"(a));
    DFL_12(DFL_KEEP)
#undef DFL_KEEP
  }
  sum(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11);
}
#undef DFL_12

volatile int g_sink;

// 12 chains of vpdpbusd, each on a 4-byte broadcast load of its own word (a load per
// instruction, as in the kernels; the empty asm makes every iteration reload).
void dpbusd_bcast(int64_t iters) {
  alignas(64) static int32_t x[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  const int32_t* xp = x;
  const __m512i b = _mm512_set1_epi8(3);
  __m512i a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm512_set1_epi32(i);
  for (int64_t it = 0; it < iters; ++it) {
    asm volatile("" : "+r"(xp));
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) a[i] = _mm512_dpbusd_epi32(a[i], b, _mm512_set1_epi32(xp[i]));
  }
  __m512i t = a[0];
  for (int i = 1; i < 12; ++i) t = _mm512_add_epi32(t, a[i]);
  g_sink = _mm512_reduce_add_epi32(t);
}

// 8 rows × 8 weight vectors per block over a 256-block panel (64 KiB activations: L1/L2, as a
// kernel's panel), 8 lane accumulators per row as the kernels hold them.
template <bool kEpilogue>
void dot_group(int64_t iters) {
  constexpr int kBlocks = 64;
  alignas(64) static int8_t panel[kBlocks * 8 * 32];
  alignas(64) static int32_t nc[kBlocks * 8];
  alignas(64) static float dx[kBlocks * 8];
  alignas(64) static float acc[8 * 8 * 16];
  __m512i w[8];
  for (int g = 0; g < 8; ++g) w[g] = _mm512_set1_epi8(static_cast<char>(g + 1));
  const __m512 dw = _mm512_set1_ps(0.5f);
  __m512i keep = _mm512_setzero_si512();
  for (int64_t it = 0; it < iters; ++it) {
    const int64_t b = it % kBlocks;
    const int8_t* xq = panel + b * 8 * 32;
    __m512i dot[8];
    for (int r = 0; r < 8; ++r) dot[r] = kEpilogue ? _mm512_set1_epi32(nc[b * 8 + r]) : _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int g = 0; g < 8; ++g)
#pragma GCC unroll 8
      for (int r = 0; r < 8; ++r) {
        int32_t v;
        __builtin_memcpy(&v, xq + 32 * r + 4 * g, 4);
        dot[r] = _mm512_dpbusd_epi32(dot[r], w[g], _mm512_set1_epi32(v));
      }
    for (int r = 0; r < 8; ++r) {
      if (kEpilogue) {
        float* ap = acc + (r * 8 + b % 8) * 16;
        _mm512_storeu_ps(ap, _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[r]), _mm512_mul_ps(dw, _mm512_set1_ps(dx[b * 8 + r])),
                                             _mm512_loadu_ps(ap)));
      } else {
        keep = _mm512_add_epi32(keep, dot[r]);
      }
    }
  }
  g_sink = _mm512_reduce_add_epi32(keep) + int(acc[0]);
}

}  // namespace

void vnni_peak_probe(VnniProbe kind, int64_t iters) {
  switch (kind) {
    case VnniProbe::kDpbusdZmm: {
      const __m512i b = _mm512_set1_epi8(3), c = _mm512_set1_epi8(5);
      run12(_mm512_set1_epi32(1), [&](__m512i a) { return _mm512_dpbusd_epi32(a, b, c); },
            [](auto... v) { g_sink = _mm512_reduce_add_epi32((... + v)); }, iters);
      return;
    }
    case VnniProbe::kDpbusdYmm: {
      const __m256i b = _mm256_set1_epi8(3), c = _mm256_set1_epi8(5);
      run12(_mm256_set1_epi32(1), [&](__m256i a) { return _mm256_dpbusd_epi32(a, b, c); },
            [](auto... v) { g_sink = _mm256_extract_epi32((... + v), 0); }, iters);
      return;
    }
    case VnniProbe::kDpbf16Zmm: {
      const __m512bh b = (__m512bh)_mm512_set1_epi16(0x3f80), c = b;
      run12(_mm512_setzero_ps(), [&](__m512 a) { return _mm512_dpbf16_ps(a, b, c); },
            [](auto... v) { g_sink = int(_mm512_reduce_add_ps((... + v))); }, iters);
      return;
    }
    case VnniProbe::kFmaZmm: {
      const __m512 b = _mm512_set1_ps(1.0f), c = _mm512_set1_ps(1e-9f);
      run12(_mm512_setzero_ps(), [&](__m512 a) { return _mm512_fmadd_ps(b, c, a); },
            [](auto... v) { g_sink = int(_mm512_reduce_add_ps((... + v))); }, iters);
      return;
    }
    case VnniProbe::kDpbusdBcast: return dpbusd_bcast(iters);
    case VnniProbe::kDpbusdChain: {
      const __m512i b = _mm512_set1_epi8(3), c = _mm512_set1_epi8(5);
      __m512i a = _mm512_set1_epi32(1);
      for (int64_t i = 0; i < iters; ++i) {
        a = _mm512_dpbusd_epi32(a, b, c);
        a = _mm512_dpbusd_epi32(a, b, c);
        a = _mm512_dpbusd_epi32(a, b, c);
        a = _mm512_dpbusd_epi32(a, b, c);
        asm volatile("" : "+v"(a));
      }
      g_sink = _mm512_reduce_add_epi32(a);
      return;
    }
    case VnniProbe::kDotGroupBare: return dot_group<false>(iters);
    case VnniProbe::kDotGroupEpilogue: return dot_group<true>(iters);
    case VnniProbe::kAddChain: {
      uint64_t x = 1;
      for (int64_t i = 0; i < iters; ++i)
        asm volatile("add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0" : "+r"(x));
      g_sink = int(x);
      return;
    }
  }
}

}  // namespace dfl::bench
