// Weight-streaming matmul y[M,N] = x[M,K]·W[N,K]ᵀ for Qwen3 shapes, M = 1..64, every format.
// Counters: bytes_per_second = weight bytes streamed / time; GFLOPs = 2·M·N·K / time.
//   build-kern/bench/bench_matmul --benchmark_filter='BF16/9728x2560'
// MatmulStream/*: Q8 vs AMX-BF16 decode shapes of Qwen3-4B, cycling through copies of the weight
// that add up to >= 1 GiB, so every call streams from DRAM (this box reports a 480 MiB L3: the
// single-weight Matmul/* numbers at M = 1 are partly cache hits).
//   build-kern/bench/bench_matmul --benchmark_filter='MatmulStream' --benchmark_repetitions=5
#include <benchmark/benchmark.h>

#include <cstring>
#include <deque>
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
          ->Arg(1)->Arg(2)->Arg(4)->Arg(8)->Arg(12)->Arg(16)->Arg(32)->Arg(64)
          ->Unit(benchmark::kMicrosecond)
          ->UseRealTime();
    }
  return 0;
}();

// GGML block formats (GGUF weights) on Gemma-3-270M shapes, beside Q8 and BF16 on the same
// shapes. Random quant bytes with sane f16 scales (speed does not depend on the values).
//   bench/bench_matmul --benchmark_filter='Gemma'
struct GgmlWeight {
  std::vector<uint8_t> bytes;
  PackedWeight packed;  // prepack_weight (Q4_K → kPackedQ4K16 on AVX-512)
  WeightMatrix w;
};
const GgmlWeight& ggml_weight_cached(DType t, int64_t N, int64_t K) {
  static std::map<std::tuple<int, int64_t, int64_t>, std::unique_ptr<GgmlWeight>> cache;
  auto key = std::make_tuple(static_cast<int>(t), N, K);
  if (auto it = cache.find(key); it != cache.end()) return *it->second;
  cache.clear();
  auto& g = cache[key];
  g = std::make_unique<GgmlWeight>();
  const int64_t nb = N * K / dtype_block_elems(t), bb = dtype_block_bytes(t);
  g->bytes.resize(static_cast<size_t>(nb * bb));
  uint64_t s = 99 + N + K;
  for (auto& b : g->bytes) b = static_cast<uint8_t>(xorshift(s));
  const uint16_t d = f32_to_f16(0.002f);
  const int at = t == DType::kQ6_K ? 208 : 0;
  for (int64_t i = 0; i < nb; ++i) {
    std::memcpy(g->bytes.data() + i * bb + at, &d, 2);
    if (t == DType::kQ4_K || t == DType::kQ5_K || t == DType::kQ4_1 || t == DType::kQ5_1)
      std::memcpy(g->bytes.data() + i * bb + 2, &d, 2);
  }
  g->packed = prepack_weight(ggml_weight(t, N, K, g->bytes.data()), &pool());
  g->w = g->packed.matrix();
  return *g;
}

void BM_MatmulGgml(benchmark::State& st, DType t, int64_t N, int64_t K) {
  const int64_t M = st.range(0);
  const GgmlWeight& g = ggml_weight_cached(t, N, K);
  const auto x = random_f32(M * K, 7);
  std::vector<float> y(M * N);
  for (auto _ : st) {
    ops::matmul(x.data(), M, g.w, y.data(), pool());
    benchmark::DoNotOptimize(y.data());
  }
  st.counters["bytes_per_second"] = benchmark::Counter(
      static_cast<double>(g.bytes.size()), benchmark::Counter::kIsIterationInvariantRate,
      benchmark::Counter::kIs1024);
  st.counters["GFLOPs"] = benchmark::Counter(2.0 * M * N * K * 1e-9,
                                             benchmark::Counter::kIsIterationInvariantRate);
}

int reg_gemma = [] {
  const struct {
    const char* name;
    int64_t N, K;
  } shapes[] = {
      {"640x2048", 640, 2048},        // Gemma-3-270M ffn_down
      {"2048x640", 2048, 640},        // gate / up (K = 640: 32-element formats only)
      {"262144x640", 262144, 640},    // tied embedding / head (Q8_0 in the real file)
      {"262144x768", 262144, 768},    // the same with K a multiple of 256 (K formats)
  };
  const struct {
    const char* name;
    DType t;
  } gfmts[] = {{"Q4_K", DType::kQ4_K}, {"Q5_K", DType::kQ5_K}, {"Q6_K", DType::kQ6_K},
               {"Q8_0", DType::kQ8_0}, {"Q5_0", DType::kQ5_0}, {"Q4_0", DType::kQ4_0}};
  for (auto& sh : shapes) {
    for (auto& f : gfmts) {
      if (sh.K % dtype_block_elems(f.t) != 0) continue;
      benchmark::RegisterBenchmark((std::string("Gemma/") + f.name + "/" + sh.name).c_str(),
                                   BM_MatmulGgml, f.t, sh.N, sh.K)
          ->ArgName("M")->Arg(1)->Arg(2)->Arg(4)->Arg(8)->Arg(16)
          ->Unit(benchmark::kMicrosecond)->UseRealTime();
    }
    for (auto& f : {std::make_pair("Q8", WFmt::kQ8), std::make_pair("BF16", WFmt::kBF16)})
      benchmark::RegisterBenchmark((std::string("Gemma/") + f.first + "/" + sh.name).c_str(),
                                   BM_Matmul, f.second, sh.N, sh.K)
          ->ArgName("M")->Arg(1)->Arg(4)->Arg(16)
          ->Unit(benchmark::kMicrosecond)->UseRealTime();
  }
  return 0;
}();

// The greedy picks of the Gemma-3-270M head (ops::matmul_argmax) against its logits
// (BM_MatmulGgml above, same weight). Each x row is a weight row plus noise, so one output
// stands out as on real text (random x: flat rows, the screen finishes thousands of outputs).
//   bench/bench_matmul --benchmark_filter='GemmaHead'
void BM_ArgmaxGgml(benchmark::State& st, DType t, int64_t N, int64_t K) {
  const int64_t M = st.range(0);
  const GgmlWeight& g = ggml_weight_cached(t, N, K);
  const ops::ArgmaxScreen screen = ops::argmax_screen(g.w, &pool());
  auto x = random_f32(M * K, 7);
  std::vector<float> row(static_cast<size_t>(K));
  for (int64_t m = 0; m < M; ++m) {
    dequantize_rows(g.w, (m * 7919) % N, 1, row.data());
    for (int64_t k = 0; k < K; ++k) x[m * K + k] = 0.1f * x[m * K + k] + 40.0f * row[k];
  }
  std::vector<int32_t> out(static_cast<size_t>(M));
  const ops::ArgmaxStats s0 = ops::argmax_stats();
  for (auto _ : st) {
    ops::matmul_argmax(x.data(), M, g.w, screen, out.data(), pool());
    benchmark::DoNotOptimize(out.data());
  }
  const ops::ArgmaxStats s1 = ops::argmax_stats();
  st.counters["finished_per_row"] =
      s1.screened_rows > s0.screened_rows
          ? double(s1.candidates - s0.candidates) / double(s1.screened_rows - s0.screened_rows) : 0.0;
  st.counters["full_rows"] = double(s1.full_rows - s0.full_rows);
}

int reg_gemma_head = [] {
  for (auto f : {std::make_pair("Q8_0", DType::kQ8_0), std::make_pair("Q6_K", DType::kQ6_K)}) {
    const int64_t K = f.second == DType::kQ6_K ? 768 : 640;
    const std::string shape = std::string("262144x") + std::to_string(K);
    benchmark::RegisterBenchmark((std::string("GemmaHead/logits/") + f.first + "/" + shape).c_str(),
                                 BM_MatmulGgml, f.second, int64_t{262144}, K)
        ->ArgName("M")->Arg(1)->Arg(4)->Arg(8)->Arg(16)->Unit(benchmark::kMicrosecond)->UseRealTime();
    benchmark::RegisterBenchmark((std::string("GemmaHead/argmax/") + f.first + "/" + shape).c_str(),
                                 BM_ArgmaxGgml, f.second, int64_t{262144}, K)
        ->ArgName("M")->Arg(1)->Arg(4)->Arg(8)->Arg(16)->Unit(benchmark::kMicrosecond)->UseRealTime();
  }
  return 0;
}();

// Copies of one weight (same values), together >= kStreamBytes, so a call never hits the LLC.
constexpr double kStreamBytes = 1.1 * (1 << 30);
struct StreamSet {
  std::vector<uint16_t> src;          // bf16 source (AMX fallback data)
  std::deque<QuantizedQ8> q8;
  std::deque<PackedWeight> packed;
  std::vector<WeightMatrix> w;
  size_t bytes = 0;                   // streamed bytes per call
};

const StreamSet& stream_set(WFmt fmt, int64_t N, int64_t K) {
  static std::map<std::tuple<int, int64_t, int64_t>, std::unique_ptr<StreamSet>> cache;
  auto key = std::make_tuple(static_cast<int>(fmt), N, K);
  if (auto it = cache.find(key); it != cache.end()) return *it->second;
  cache.clear();  // one set alive at a time (RAM)
  auto& set = cache[key];
  set = std::make_unique<StreamSet>();
  set->src.resize(static_cast<size_t>(N * K));
  uint64_t s = 12345 + N * 7 + K;
  for (auto& v : set->src) v = f32_to_bf16(urand(s) * 0.05f);
  WeightMatrix b;
  b.dtype = DType::kBF16;
  b.n_out = N;
  b.n_in = K;
  b.data = set->src.data();
  do {
    if (fmt == WFmt::kQ8) {
      set->q8.push_back(quantize_q8(b, &pool()));
      set->w.push_back(set->q8.back().matrix());
      set->bytes = set->q8.back().bytes();
    } else {
      set->packed.push_back(prepack_weight(b, &pool()));
      set->w.push_back(set->packed.back().matrix());
      set->bytes = static_cast<size_t>(N * K * 2);
    }
  } while (static_cast<double>(set->w.size() * set->bytes) < kStreamBytes);
  return *set;
}

void BM_MatmulStream(benchmark::State& st, WFmt fmt, int64_t N, int64_t K) {
  const int64_t M = st.range(0);
  const StreamSet& set = stream_set(fmt, N, K);
  if (fmt == WFmt::kBF16Amx && set.w[0].packed_format != kPackedAmxBf16) {
    st.SkipWithError("AMX not usable on this machine");
    return;
  }
  const auto x = random_f32(M * K, 7);
  std::vector<float> y(M * N);
  size_t i = 0;
  for (auto _ : st) {
    ops::matmul(x.data(), M, set.w[i], y.data(), pool());
    benchmark::DoNotOptimize(y.data());
    i = (i + 1) % set.w.size();
  }
  st.counters["bytes_per_second"] = benchmark::Counter(
      static_cast<double>(set.bytes), benchmark::Counter::kIsIterationInvariantRate,
      benchmark::Counter::kIs1024);
  st.counters["copies"] = static_cast<double>(set.w.size());
}

int reg_stream = [] {
  const struct {
    const char* name;
    int64_t N, K;
  } shapes[] = {{"9728x2560", 9728, 2560}, {"2560x9728", 2560, 9728}, {"151936x2560", 151936, 2560}};
  for (auto& f : {std::make_pair("Q8", WFmt::kQ8), std::make_pair("BF16AMX", WFmt::kBF16Amx)})
    for (auto& sh : shapes)
      benchmark::RegisterBenchmark((std::string("MatmulStream/") + f.first + "/" + sh.name).c_str(),
                                   BM_MatmulStream, f.second, sh.N, sh.K)
          ->ArgName("M")
          ->Arg(1)->Arg(2)->Arg(16)
          ->Unit(benchmark::kMicrosecond)
          ->UseRealTime();
  return 0;
}();

}  // namespace
}  // namespace dfl::bench

BENCHMARK_MAIN();
