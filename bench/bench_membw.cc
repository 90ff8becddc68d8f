// Memory read bandwidth: one pass of AVX-512 loads (summed, so nothing is optimized away) over a
// 1 GiB buffer, 1 and 2 threads — the roofline the M=1 matmul is measured against.
//   build-kern/bench/bench_membw
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <cstdlib>
#include <cstring>

#include "bench_util.h"
#include "core/cpu_features.h"

namespace dfl::bench {
namespace {

constexpr size_t kBytes = size_t(1) << 30;

__attribute__((target("avx512f"))) float sum_avx512(const float* p, size_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i < n; i += 64) {
    a0 = _mm512_add_ps(a0, _mm512_load_ps(p + i));
    a1 = _mm512_add_ps(a1, _mm512_load_ps(p + i + 16));
    a2 = _mm512_add_ps(a2, _mm512_load_ps(p + i + 32));
    a3 = _mm512_add_ps(a3, _mm512_load_ps(p + i + 48));
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

float* buffer() {
  static float* p = [] {
    float* b = static_cast<float*>(std::aligned_alloc(64, kBytes));
    std::memset(b, 0, kBytes);
    return b;
  }();
  return p;
}

void BM_ReadBandwidth(benchmark::State& st) {
  if (cpu_isa_max() != IsaLevel::kAvx512) {
    st.SkipWithError("needs AVX-512");
    return;
  }
  const int nt = static_cast<int>(st.range(0));
  ThreadPool local(nt);
  const float* b = buffer();
  const size_t n = kBytes / 4;
  float sink[8] = {};
  for (auto _ : st) {
    local.parallel_for(static_cast<int64_t>(n / 64), [&](int64_t c0, int64_t c1, int tid) {
      sink[tid] += sum_avx512(b + c0 * 64, static_cast<size_t>(c1 - c0) * 64);
    });
    benchmark::DoNotOptimize(sink);
  }
  st.counters["bytes_per_second"] = benchmark::Counter(
      static_cast<double>(kBytes), benchmark::Counter::kIsIterationInvariantRate,
      benchmark::Counter::kIs1024);
}

BENCHMARK(BM_ReadBandwidth)->ArgName("threads")->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace dfl::bench

BENCHMARK_MAIN();
