// Cost of the recurrent-state rollback mechanisms per linear-attention layer at real Qwen3.5
// shapes (docs/BENCHMARKS.md "Recurrent state rollback"):
//   BM_Replay/<shape>/k    re-running the recurrence (conv + gated delta rule) over k saved rows
//                          from the pre-verify buffer: what rollback costs here (k = accepted + 1;
//                          k = 16 is also the recurrence cost of the verify block itself)
//   BM_SnapshotCopy/<shape>/n  copying the layer state n times: what per-position snapshots cost
//                          in a verify block of n (llama.cpp style), and n = 1 a pre-verify copy
// Shapes: 27B (Hv 48, Hk 16, d 128, conv 10240) and 35B-A3B (Hv 32, conv 8192). Multiply by the
// linear layers (48 / 30) for a whole model.
#include <benchmark/benchmark.h>

#include <cstring>
#include <random>

#include "core/threadpool.h"
#include "model/gdn.h"

namespace dfl {
namespace {

GdnSpec shape(int which) {
  GdnSpec g;
  g.n_k_heads = 16;
  g.n_v_heads = which == 0 ? 48 : 32;
  g.d_k = g.d_v = 128;
  g.conv_kernel = 4;
  return g;
}

struct Setup {
  GdnSpec g;
  GdnWeights w;
  RecurrentState st;
  GdnScratch sc;
  explicit Setup(int which) : g(shape(which)) {
    std::mt19937 rng(1);
    std::normal_distribution<float> n(0, 0.3f);
    w.conv.resize(size_t(g.conv_dim()) * g.conv_kernel);
    for (float& v : w.conv) v = n(rng);
    w.neg_a.assign(g.n_v_heads, -1.0f);
    w.dt_bias.assign(g.n_v_heads, 0.1f);
    w.layer = 0;
    RecurrentSpec s;
    s.n_layers = 1;
    s.conv_dim = g.conv_dim();
    s.conv_keep = g.conv_kernel - 1;
    s.n_v_heads = g.n_v_heads;
    s.d_k = g.d_k;
    s.d_v = g.d_v;
    s.row_width = g.conv_dim() + 2 * g.n_v_heads;
    st = RecurrentState(s, 1, 16);
    st.begin_forward(0, 0, 16);
    float* r = st.rows(0, 0);
    for (int64_t i = 0; i < int64_t(16) * s.row_width; ++i) r[i] = n(rng);
    st.end_forward(0);
  }
};

ThreadPool& pool() {
  static ThreadPool p(2);
  return p;
}

void BM_Replay(benchmark::State& state) {
  Setup s(int(state.range(0)));
  const int32_t k = int32_t(state.range(1));
  for (auto _ : state) gdn_replay(s.w, s.g, s.st, 0, k, s.sc, pool());
  state.counters["state_MB"] = double(recurrent_state_bytes(s.st.spec())) / 1e6;
}

void BM_SnapshotCopy(benchmark::State& state) {
  Setup s(int(state.range(0)));
  const int32_t n = int32_t(state.range(1));
  const int64_t f = s.st.spec().conv_floats() + s.st.spec().ssm_floats();
  std::vector<float> snaps(size_t(f) * n);
  const float* src = s.st.conv(0, 0);
  for (auto _ : state) {
    for (int32_t i = 0; i < n; ++i) std::memcpy(snaps.data() + size_t(i) * f, src, size_t(f) * 4);
    benchmark::DoNotOptimize(snaps.data());
  }
}

BENCHMARK(BM_Replay)->ArgsProduct({{0, 1}, {1, 4, 8, 16}})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SnapshotCopy)->ArgsProduct({{0, 1}, {1, 16}})->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace dfl

BENCHMARK_MAIN();
