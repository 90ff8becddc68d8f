// Weight-streaming matmul y[M,N] = x[M,K]·W[N,K]ᵀ for Qwen3 shapes, M = 1..64, every format.
// Counters: bytes_per_second = weight bytes streamed / time; GFLOPs = 2·M·N·K / time.
//   build-kern/bench/bench_matmul --benchmark_filter='BF16/9728x2560'
#include <benchmark/benchmark.h>

#include <string>

#include "bench_util.h"

namespace dfl::bench {
namespace {

void BM_Matmul(benchmark::State& st, WFmt fmt, int64_t N, int64_t K) {
  const int64_t M = st.range(0);
  const OwnedWeight& o = weight(fmt, N, K);
  if (fmt == WFmt::kBF16Amx && !o.packed.repacked()) {
    st.SkipWithError("AMX not usable on this machine");
    return;
  }
  const auto x = random_f32(M * K, 7);
  std::vector<float> y(M * N);
  for (auto _ : st) {
    ops::matmul(x.data(), M, o.w, y.data(), pool());
    benchmark::DoNotOptimize(y.data());
  }
  st.counters["bytes_per_second"] = benchmark::Counter(
      static_cast<double>(o.stream_bytes), benchmark::Counter::kIsIterationInvariantRate,
      benchmark::Counter::kIs1024);
  st.counters["GFLOPs"] = benchmark::Counter(2.0 * M * N * K * 1e-9,
                                             benchmark::Counter::kIsIterationInvariantRate);
}

const struct {
  const char* name;
  int64_t N, K;
} kShapes[] = {
    {"3072x1024", 3072, 1024},      // Qwen3-0.6B gate/up
    {"6144x2048", 6144, 2048},      // Qwen3-1.7B gate/up
    {"9728x2560", 9728, 2560},      // Qwen3-4B gate/up
    {"2560x9728", 2560, 9728},      // Qwen3-4B down
    {"151936x1024", 151936, 1024},  // Qwen3-0.6B lm_head
};

const struct {
  const char* name;
  WFmt fmt;
} kFmts[] = {{"BF16", WFmt::kBF16}, {"BF16AMX", WFmt::kBF16Amx}, {"Q8", WFmt::kQ8},
              {"F8", WFmt::kF8}, {"F32", WFmt::kF32}};

int reg = [] {
  for (auto& f : kFmts)
    for (auto& s : kShapes) {
      if (f.fmt == WFmt::kF32 && s.N > 100000) continue;
      benchmark::RegisterBenchmark((std::string("Matmul/") + f.name + "/" + s.name).c_str(),
                                   BM_Matmul, f.fmt, s.N, s.K)
          ->ArgName("M")
          ->Arg(1)->Arg(2)->Arg(4)->Arg(8)->Arg(16)->Arg(32)->Arg(64)
          ->Unit(benchmark::kMicrosecond)
          ->UseRealTime();
    }
  return 0;
}();

}  // namespace
}  // namespace dfl::bench

BENCHMARK_MAIN();
