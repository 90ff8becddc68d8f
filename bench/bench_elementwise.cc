// Row-wise ops at decode/verify sizes (Qwen3-4B hidden 2560, intermediate 9728).
//   build-kern/bench/bench_elementwise
#include <benchmark/benchmark.h>

#include <cmath>

#include "bench_util.h"

namespace dfl::bench {
namespace {

void BM_RmsNorm(benchmark::State& st) {
  const int64_t rows = st.range(0), dim = 2560;
  const auto x = random_f32(rows * dim, 1), w = random_f32(dim, 2);
  std::vector<float> y(x.size());
  for (auto _ : st) {
    ops::rms_norm(x.data(), w.data(), rows, dim, 1e-6f, y.data());
    benchmark::DoNotOptimize(y.data());
  }
}
BENCHMARK(BM_RmsNorm)->Arg(1)->Arg(16);

void BM_AddRmsNorm(benchmark::State& st) {
  const int64_t rows = st.range(0), dim = 2560;
  auto res = random_f32(rows * dim, 1);
  const auto x = random_f32(rows * dim, 3), w = random_f32(dim, 2);
  std::vector<float> y(x.size());
  for (auto _ : st) {
    ops::add_rms_norm(res.data(), x.data(), w.data(), rows, dim, 1e-6f, y.data());
    benchmark::DoNotOptimize(y.data());
  }
}
BENCHMARK(BM_AddRmsNorm)->Arg(1)->Arg(16);

void BM_SiluMul(benchmark::State& st) {
  const int64_t n = st.range(0) * 9728;
  const auto g = random_f32(n, 1), u = random_f32(n, 2);
  std::vector<float> y(n);
  for (auto _ : st) {
    ops::silu_mul(g.data(), u.data(), n, y.data());
    benchmark::DoNotOptimize(y.data());
  }
}
BENCHMARK(BM_SiluMul)->Arg(1)->Arg(16);

void BM_GeluTanhMul(benchmark::State& st) {
  const int64_t n = st.range(0) * 9728;
  const auto g = random_f32(n, 1), u = random_f32(n, 2);
  std::vector<float> y(n);
  for (auto _ : st) {
    ops::gelu_tanh_mul(g.data(), u.data(), n, y.data());
    benchmark::DoNotOptimize(y.data());
  }
}
BENCHMARK(BM_GeluTanhMul)->Arg(1)->Arg(16);

// Gemma's final-logit soft-capping over a 262144-entry vocabulary (rows of logits).
void BM_Softcap(benchmark::State& st) {
  const int64_t n = st.range(0) * 262144;
  auto x = random_f32(n, 1);
  for (auto _ : st) {
    ops::softcap(x.data(), n, 30.0f);
    benchmark::DoNotOptimize(x.data());
  }
}
BENCHMARK(BM_Softcap)->Arg(1)->Arg(16);

void BM_Rope(benchmark::State& st) {
  const int64_t rows = st.range(0), heads = 32, hd = 128;
  auto x = random_f32(rows * heads * hd, 1);
  // Real rotations (|c|² + |s|² = 1): random factors would drive x into denormals.
  std::vector<float> c(rows * hd / 2), s(rows * hd / 2);
  for (size_t i = 0; i < c.size(); ++i) {
    c[i] = std::cos(0.001f * static_cast<float>(i));
    s[i] = std::sin(0.001f * static_cast<float>(i));
  }
  for (auto _ : st) {
    ops::rope_neox(x.data(), rows, heads * hd, heads, hd, hd, c.data(), s.data());
    benchmark::DoNotOptimize(x.data());
  }
}
BENCHMARK(BM_Rope)->Arg(1)->Arg(16);

}  // namespace
}  // namespace dfl::bench

BENCHMARK_MAIN();
