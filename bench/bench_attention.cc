// Attention: decode (1 query), verify blocks (16 queries) and prefill (512 queries over their own
// 512 keys) over a causal cache, Qwen3-4B-like heads (32 query heads, 8 kv heads, d 128),
// Qwen3-0.6B-like (16 / 8), Gemma-3-270M-like (4 / 1, d 256) and MiMo-like d_qk 192 / d_v 128 with a window. The flops counter
// counts visible (query, key) pairs × 2 × (d_qk + d_v) per head. BM_AttentionPaged: the same
// calls over a paged cache (ops.h KvPages, 16-slot pages in shuffled order).
//   build/bench/bench_attention --benchmark_filter=qwen3_4b
#include <benchmark/benchmark.h>

#include <algorithm>
#include <numeric>

#include "bench_util.h"
#include "kv/kv_pool.h"

namespace dfl::bench {
namespace {

void BM_Attention(benchmark::State& st, int32_t H, int32_t KVH, int32_t dqk, int32_t dv,
                  Window win) {
  const int64_t n_q = st.range(0), n_kv = st.range(1);
  const auto q = random_f32(n_q * H * dqk, 1), k = random_f32(n_kv * KVH * dqk, 2),
             v = random_f32(n_kv * KVH * dv, 3);
  std::vector<int32_t> kp(n_kv), qp(n_q);
  std::iota(kp.begin(), kp.end(), 0);
  for (int64_t i = 0; i < n_q; ++i) qp[i] = static_cast<int32_t>(n_kv - n_q + i);
  AttnParams p;
  p.n_heads = H;
  p.n_kv_heads = KVH;
  p.d_qk = dqk;
  p.d_v = dv;
  p.scale = 0.088f;
  p.window = win;
  std::vector<float> out(n_q * H * dv);
  for (auto _ : st) {
    ops::attention(q.data(), qp.data(), n_q, k.data(), v.data(), kp.data(), n_kv, p, out.data(),
                   pool());
    benchmark::DoNotOptimize(out.data());
  }
  int64_t pairs = 0;
  for (int64_t i = 0; i < n_q; ++i)
    for (int64_t j = 0; j < n_kv; ++j) pairs += kv_visible(qp[i], kp[j], win) ? 1 : 0;
  st.counters["flops"] = benchmark::Counter(static_cast<double>(pairs) * H * 2 * (dqk + dv),
                                            benchmark::Counter::kIsIterationInvariantRate);
  st.counters["kv_bytes_per_second"] = benchmark::Counter(
      static_cast<double>((k.size() + v.size()) * 4), benchmark::Counter::kIsIterationInvariantRate,
      benchmark::Counter::kIs1024);
}

// The same over a paged cache (ops.h KvPages): pages of `page_slots` slots placed in a pool
// in shuffled order (as a block table hands them out after some churn). Compare with the
// contiguous case of the same n_q / n_kv: the difference is the paging overhead.
void BM_AttentionPaged(benchmark::State& st, int32_t H, int32_t KVH, int32_t dqk, int32_t dv,
                       Window win) {
  const int64_t n_q = st.range(0), n_kv = st.range(1), ps = st.range(2);
  const int64_t n_pages = (n_kv + ps - 1) / ps;
  const auto q = random_f32(n_q * H * dqk, 1), k = random_f32(n_pages * ps * KVH * dqk, 2),
             v = random_f32(n_pages * ps * KVH * dv, 3);
  std::vector<int32_t> kp(n_pages * ps, kEmptySlot), qp(n_q);
  std::iota(kp.begin(), kp.begin() + n_kv, 0);
  for (int64_t i = 0; i < n_q; ++i) qp[i] = static_cast<int32_t>(n_kv - n_q + i);
  // Logical page g lives at physical page perm[g] (a fixed pseudo-random shuffle).
  std::vector<int64_t> perm(n_pages);
  std::iota(perm.begin(), perm.end(), 0);
  uint64_t s = 99;
  for (int64_t g = n_pages - 1; g > 0; --g) std::swap(perm[g], perm[xorshift(s) % (g + 1)]);
  std::vector<float> kpool(k.size()), vpool(v.size());
  std::vector<int32_t> ppool(kp.size());
  std::vector<const float*> kt(n_pages), vt(n_pages);
  std::vector<const int32_t*> pt(n_pages);
  const int64_t kr = ps * KVH * dqk, vr = ps * KVH * dv;
  for (int64_t g = 0; g < n_pages; ++g) {
    std::copy(k.begin() + g * kr, k.begin() + (g + 1) * kr, kpool.begin() + perm[g] * kr);
    std::copy(v.begin() + g * vr, v.begin() + (g + 1) * vr, vpool.begin() + perm[g] * vr);
    std::copy(kp.begin() + g * ps, kp.begin() + (g + 1) * ps, ppool.begin() + perm[g] * ps);
    kt[g] = kpool.data() + perm[g] * kr;
    vt[g] = vpool.data() + perm[g] * vr;
    pt[g] = ppool.data() + perm[g] * ps;
  }
  const KvPages kv{kt.data(), vt.data(), pt.data(), n_kv, static_cast<int32_t>(ps)};
  AttnParams p;
  p.n_heads = H;
  p.n_kv_heads = KVH;
  p.d_qk = dqk;
  p.d_v = dv;
  p.scale = 0.088f;
  p.window = win;
  std::vector<float> out(n_q * H * dv);
  for (auto _ : st) {
    ops::attention(q.data(), qp.data(), n_q, kv, p, out.data(), pool());
    benchmark::DoNotOptimize(out.data());
  }
  int64_t pairs = 0;
  for (int64_t i = 0; i < n_q; ++i)
    for (int64_t j = 0; j < n_kv; ++j) pairs += kv_visible(qp[i], kp[j], win) ? 1 : 0;
  st.counters["flops"] = benchmark::Counter(static_cast<double>(pairs) * H * 2 * (dqk + dv),
                                            benchmark::Counter::kIsIterationInvariantRate);
}

// One attention call's inputs beside a cache: n_q random queries at the last n_q of n_kv positions.
struct AttnCall {
  std::vector<float> q, out;
  std::vector<int32_t> qp;
  AttnParams p;
  AttnCall(int32_t H, int32_t KVH, int32_t d, int64_t n_q, int64_t n_kv)
      : q(random_f32(n_q * H * d, 1)), out(static_cast<size_t>(n_q * H * d)), qp(static_cast<size_t>(n_q)) {
    for (int64_t i = 0; i < n_q; ++i) qp[size_t(i)] = static_cast<int32_t>(n_kv - n_q + i);
    p.n_heads = H;
    p.n_kv_heads = KVH;
    p.d_qk = p.d_v = d;
    p.scale = 0.088f;
  }
  void run(const KvPages& pages) {
    ops::attention(q.data(), qp.data(), static_cast<int64_t>(qp.size()), pages, p, out.data(), pool());
    benchmark::DoNotOptimize(out.data());
  }
};

// The engine's own cache: one full layer of a KvPool (16-slot pages) in fp32 (kv = 0) or bf16
// head-major (kv = 1, --kv-dtype bf16), filled by KvPool::write and read through view(): the
// fp32 vs bf16 cost of decode / verify / prefill attention at the same shape.
void BM_AttentionKvPool(benchmark::State& st, int32_t H, int32_t KVH, int32_t d) {
  const int64_t n_q = st.range(0), n_kv = st.range(1);
  const KvDtype dt = st.range(2) ? KvDtype::kBF16 : KvDtype::kF32;
  KvPoolOptions po;
  po.max_context = static_cast<int32_t>(n_kv);
  po.slack = 16;
  po.dtype = dt;
  KvPool kv({KvLayerSpec{KVH, d, d, 0}}, po);
  const auto k = random_f32(n_kv * KVH * d, 2), v = random_f32(n_kv * KVH * d, 3);
  kv.ensure(0, static_cast<int32_t>(n_kv));
  kv.write(0, 0, 0, static_cast<int32_t>(n_kv), k.data(), v.data());
  kv.commit_length(0, static_cast<int32_t>(n_kv));
  KvViewScratch sc;
  const KvPages pages = kv.view(0, 0, sc);
  AttnCall call(H, KVH, d, n_q, n_kv);
  for (auto _ : st) call.run(pages);
  st.counters["kv_bytes_per_second"] = benchmark::Counter(
      static_cast<double>(n_kv * KVH * 2 * d * kv_dtype_bytes(dt)),
      benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1024);
}

// The same over a cache larger than the last-level cache, as in a model's forward (Qwen3-0.6B's
// 28 layers at a 2,048-token context hold 235 MB of bf16 K/V, and a step's weights stream
// through the cache between two layers' attention): `layers` layers of one bf16 KvPool, each
// iteration the next layer's, so every call reads its K/V from DRAM.
void BM_AttentionKvPoolCold(benchmark::State& st, int32_t H, int32_t KVH, int32_t d) {
  const int64_t n_q = st.range(0), n_kv = st.range(1), layers = st.range(2);
  KvPoolOptions po;
  po.max_context = static_cast<int32_t>(n_kv);
  po.slack = 16;
  po.dtype = KvDtype::kBF16;
  KvPool kv(std::vector<KvLayerSpec>(size_t(layers), KvLayerSpec{KVH, d, d, 0}), po);
  const auto k = random_f32(n_kv * KVH * d, 2), v = random_f32(n_kv * KVH * d, 3);
  kv.ensure(0, static_cast<int32_t>(n_kv));
  for (int32_t il = 0; il < layers; ++il) kv.write(0, il, 0, static_cast<int32_t>(n_kv), k.data(), v.data());
  kv.commit_length(0, static_cast<int32_t>(n_kv));
  std::vector<KvViewScratch> sc(static_cast<size_t>(layers));
  std::vector<KvPages> pages;
  for (int32_t il = 0; il < layers; ++il) pages.push_back(kv.view(0, il, sc[size_t(il)]));
  AttnCall call(H, KVH, d, n_q, n_kv);
  int64_t il = 0;
  for (auto _ : st) {
    call.run(pages[size_t(il)]);
    il = (il + 1) % layers;
  }
  st.counters["kv_bytes_per_second"] = benchmark::Counter(
      static_cast<double>(n_kv * KVH * 2 * d * 2), benchmark::Counter::kIsIterationInvariantRate,
      benchmark::Counter::kIs1024);
}

BENCHMARK_CAPTURE(BM_AttentionKvPoolCold, qwen3_0_6b, 16, 8, 128)
    ->ArgNames({"n_q", "n_kv", "layers"})
    ->Args({1, 2048, 48})->Args({16, 2048, 48})
    ->Unit(benchmark::kMicrosecond)->UseRealTime();

BENCHMARK_CAPTURE(BM_AttentionKvPool, qwen3_0_6b, 16, 8, 128)
    ->ArgNames({"n_q", "n_kv", "bf16"})
    ->ArgsProduct({{1, 16}, {2048, 8192}, {0, 1}})->Args({256, 2048, 0})->Args({256, 2048, 1})
    ->Unit(benchmark::kMicrosecond)->UseRealTime();

// Gemma-3-270M (4 query heads, 1 kv head, d 256): a verify block over `dflash bench`'s 128-token
// context, decode, and the second 256-token prefill chunk of a 512-token prompt.
BENCHMARK_CAPTURE(BM_AttentionKvPool, gemma3_270m, 4, 1, 256)
    ->ArgNames({"n_q", "n_kv", "bf16"})
    ->Args({1, 129, 1})->Args({16, 144, 1})->Args({16, 144, 0})->Args({256, 512, 1})->Args({256, 4096, 1})
    ->Unit(benchmark::kMicrosecond)->UseRealTime();

BENCHMARK_CAPTURE(BM_Attention, qwen3_4b_causal, 32, 8, 128, 128, Window{-1, 0})
    ->ArgNames({"n_q", "n_kv"})
    ->Args({1, 1024})->Args({1, 4096})->Args({1, 8192})->Args({16, 1024})->Args({16, 4096})
    ->Args({16, 8192})->Args({512, 512})
    ->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_AttentionPaged, qwen3_4b_causal, 32, 8, 128, 128, Window{-1, 0})
    ->ArgNames({"n_q", "n_kv", "page"})
    ->Args({1, 1024, 16})->Args({1, 4096, 16})->Args({16, 1024, 16})->Args({16, 4096, 16})
    ->Args({512, 512, 16})
    ->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Attention, qwen3_0_6b_causal, 16, 8, 128, 128, Window{-1, 0})
    ->ArgNames({"n_q", "n_kv"})
    ->Args({1, 512})->Args({16, 512})->Args({512, 512})
    ->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Attention, mimo_swa128, 64, 8, 192, 128, Window{127, 0})
    ->ArgNames({"n_q", "n_kv"})
    ->Args({1, 160})->Args({16, 160})
    ->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace
}  // namespace dfl::bench

BENCHMARK_MAIN();
