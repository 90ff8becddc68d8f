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
