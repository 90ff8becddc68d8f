// Kernel-only timing of the GGML K-format kernels on quantized activations (no activation
// quantization, no int8x2 split: M is the number of int8 rows a kernel call sees — 2 per token
// under the default int8x2), VNNI (cpu/ggml_avx512.cc, in 16-row calls as ggml_matmul makes
// them) against AMX-INT8 (cpu/kquant_ggml_amx.cc), and the activation quantization itself.
//   DFL_THREADS=1 build/bench/bench_ggml_kernels --benchmark_min_time=0.2
#include <benchmark/benchmark.h>

#include <algorithm>
#include <string>
#include <vector>

#include "bench_util.h"
#include "core/cpu_features.h"
#include "kernels/cpu/cpu_kernels.h"

namespace dfl::bench {
namespace {

constexpr int64_t kN = 640, kK = 2048;  // Gemma-3-270M ffn_down

struct Setup {
  std::vector<uint8_t> blocks;
  PackedWeight packed;
  std::vector<int8_t> q;
  std::vector<float> d;
  std::vector<int32_t> s16, s32;
  cpu::GgmlAct act(int64_t m0) const {
    cpu::GgmlAct a;
    a.q = q.data() + m0 * (kK + 256);
    a.d = d.data() + m0 * (kK / 256);
    a.s16 = s16.data() + m0 * (kK / 16);
    a.s32 = s32.data() + m0 * (kK / 32);
    a.K = kK;
    return a;
  }
};

const Setup& setup(DType t) {
  static std::map<int, std::unique_ptr<Setup>> cache;
  auto& s = cache[static_cast<int>(t)];
  if (s) return *s;
  s = std::make_unique<Setup>();
  const int64_t bb = dtype_block_bytes(t), nsb = kN * kK / 256;
  s->blocks.resize(static_cast<size_t>(nsb * bb));
  uint64_t r = 12345;
  for (auto& b : s->blocks) b = static_cast<uint8_t>(xorshift(r));
  for (int64_t i = 0; i < nsb; ++i) {  // f16 scales 2^-7
    uint8_t* b = s->blocks.data() + i * bb + (t == DType::kQ6_K ? 208 : 0);
    b[0] = 0; b[1] = 0x20;
    if (t == DType::kQ4_K) { b[2] = 0; b[3] = 0x20; }
  }
  const GgmlActivations old = ggml_activations();
  set_ggml_activations(GgmlActivations::kInt8x2);
  s->packed = prepack_weight(ggml_weight(t, kN, kK, s->blocks.data()), &pool());
  set_ggml_activations(old);
  const int64_t rows = 64;
  const auto x = random_f32(static_cast<size_t>(rows * kK), 3);
  s->q.resize(static_cast<size_t>(rows * (kK + 256)));
  s->d.resize(static_cast<size_t>(rows * (kK / 256)));
  s->s16.resize(static_cast<size_t>(rows * (kK / 16)));
  s->s32.resize(static_cast<size_t>(rows * (kK / 32)));
  cpu::avx512::quantize_ggml_act(x.data(), rows, kK, 256, s->q.data(), s->d.data(), s->s16.data(),
                                 s->s32.data());
  return *s;
}

void BM_Kernel(benchmark::State& st, DType t, bool amx) {
  if (cpu_isa() != IsaLevel::kAvx512 || (amx && !(amx_usable() && cpu_features().amx_int8))) {
    st.SkipWithError("needs AVX-512 (and AMX-INT8)");
    return;
  }
  const int64_t M = st.range(0);
  const Setup& s = setup(t);
  const WeightMatrix& w = s.packed.matrix();
  std::vector<float> y(static_cast<size_t>(M * kN));
  for (auto _ : st) {
    if (amx) {
      if (t == DType::kQ4_K) cpu::amx::matmul_q4k16(s.act(0), M, w, y.data(), pool());
      else cpu::amx::matmul_q6k16(s.act(0), M, w, y.data(), pool());
    } else {
      for (int64_t m0 = 0; m0 < M; m0 += cpu::kGgmlRowChunk) {
        const int64_t Mc = std::min<int64_t>(cpu::kGgmlRowChunk, M - m0);
        if (t == DType::kQ4_K) cpu::avx512::matmul_q4k16(s.act(m0), Mc, w, y.data() + m0 * kN, pool());
        else cpu::avx512::matmul_q6k16(s.act(m0), Mc, w, y.data() + m0 * kN, pool());
      }
    }
    benchmark::DoNotOptimize(y.data());
  }
  st.counters["GOPs"] = benchmark::Counter(2.0 * M * kN * kK * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_Quantize(benchmark::State& st) {
  if (cpu_isa() != IsaLevel::kAvx512) {
    st.SkipWithError("needs AVX-512");
    return;
  }
  const int64_t M = st.range(0), ab = st.range(1);
  const auto x = random_f32(static_cast<size_t>(M * kK), 5);
  std::vector<int8_t> q(static_cast<size_t>(M * (kK + 256)));
  std::vector<float> d(static_cast<size_t>(M * kK / ab)), r(static_cast<size_t>(M * kK));
  std::vector<int32_t> s16(static_cast<size_t>(M * kK / 16)), s32(static_cast<size_t>(M * kK / 32));
  for (auto _ : st) {
    cpu::avx512::quantize_ggml_act(x.data(), M, kK, ab, q.data(), d.data(), s16.data(), s32.data());
    cpu::avx512::ggml_act_residual(x.data(), q.data(), d.data(), M, kK, ab, r.data());
    benchmark::DoNotOptimize(r.data());
  }
}

int reg = [] {
  for (auto [name, t] : {std::make_pair("Q4_K", DType::kQ4_K), std::make_pair("Q6_K", DType::kQ6_K)})
    for (bool amx : {false, true})
      benchmark::RegisterBenchmark((std::string("Kernel/") + name + "/640x2048/" + (amx ? "amx" : "vnni")).c_str(),
                                   BM_Kernel, t, amx)
          ->ArgName("rows")->Arg(2)->Arg(4)->Arg(8)->Arg(16)->Arg(32)->Arg(64)
          ->Unit(benchmark::kMicrosecond)->UseRealTime();
  // One quantization and its residual (the first half of int8x2), blocks of 256 (K formats)
  // and 32 (Q8_0 / Q5_0 / Q4_0).
  benchmark::RegisterBenchmark("Quantize/int8x2/K2048", BM_Quantize)
      ->ArgNames({"rows", "ab"})->ArgsProduct({{1, 16}, {256, 32}})
      ->Unit(benchmark::kMicrosecond)->UseRealTime();
  return 0;
}();

}  // namespace
}  // namespace dfl::bench

BENCHMARK_MAIN();
