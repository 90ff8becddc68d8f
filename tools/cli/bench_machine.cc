#include "bench_machine.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>

#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/error.h"
#include "kernels/ops.h"
#include "model/weights.h"

namespace dfl::cli {

namespace {
using Clock = std::chrono::steady_clock;

// One pass over [p, p + n) 64-byte lines with four independent accumulators (the result is
// returned so the loads cannot be dropped). `n` is a multiple of 256 bytes.
__attribute__((target("avx512f"))) uint64_t read_pass_avx512(const uint8_t* p, size_t n) {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i < n; i += 256) {
    a0 = _mm512_add_epi64(a0, _mm512_load_si512(p + i));
    a1 = _mm512_add_epi64(a1, _mm512_load_si512(p + i + 64));
    a2 = _mm512_add_epi64(a2, _mm512_load_si512(p + i + 128));
    a3 = _mm512_add_epi64(a3, _mm512_load_si512(p + i + 192));
  }
  a0 = _mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3));
  return _mm512_reduce_add_epi64(a0);
}

__attribute__((target("avx2"))) uint64_t read_pass_avx2(const uint8_t* p, size_t n) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i < n; i += 128) {
    a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    a2 = _mm256_add_epi64(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    a3 = _mm256_add_epi64(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  a0 = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
  alignas(32) uint64_t t[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(t), a0);
  return t[0] + t[1] + t[2] + t[3];
}

uint64_t read_pass_scalar(const uint8_t* p, size_t n) {
  const uint64_t* q = reinterpret_cast<const uint64_t*>(p);
  uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
  for (size_t i = 0; i < n / 8; i += 4) {
    a0 += q[i];
    a1 += q[i + 1];
    a2 += q[i + 2];
    a3 += q[i + 3];
  }
  return a0 + a1 + a2 + a3;
}

uint64_t read_pass(const uint8_t* p, size_t n) {
  const CpuFeatures& f = cpu_features();
  if (f.avx512f && f.os_avx512) return read_pass_avx512(p, n);
  if (f.avx2 && f.os_avx) return read_pass_avx2(p, n);
  return read_pass_scalar(p, n);
}

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
}  // namespace

Stat summarize(std::vector<double> v) {
  Stat s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.n = int(v.size());
  s.min = v.front();
  s.max = v.back();
  s.median = v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
  return s;
}

Stat time_repeats(int repeats, int warmup, const std::function<void()>& fn) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> t;
  for (int i = 0; i < std::max(repeats, 1); ++i) {
    const auto t0 = Clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return summarize(t);
}

Stat measure_read_bandwidth(ThreadPool& pool, size_t bytes, int repeats) {
  const int nt = pool.n_threads();
  const size_t chunk = (bytes / size_t(nt)) / 256 * 256;
  DFL_CHECK(chunk > 0, "bandwidth buffer too small");
  const size_t total = chunk * size_t(nt);
  std::unique_ptr<uint8_t, FreeDeleter> buf(static_cast<uint8_t*>(std::aligned_alloc(4096, total)));
  DFL_CHECK(buf, "cannot allocate ", total, " bytes for the bandwidth test");
  uint8_t* p = buf.get();
  // First touch by the thread that reads the chunk (NUMA-friendly, page faults out of the timing).
  pool.run_on_all([&](int tid) { std::memset(p + size_t(tid) * chunk, tid + 1, chunk); });
  std::vector<uint64_t> sink(size_t(nt) * 8, 0);
  auto pass = [&] {
    pool.run_on_all([&](int tid) { sink[size_t(tid) * 8] += read_pass(p + size_t(tid) * chunk, chunk); });
  };
  Stat t = time_repeats(repeats, 1, pass);
  volatile uint64_t keep = 0;
  for (uint64_t v : sink) keep = keep + v;
  (void)keep;
  Stat gbs;  // bandwidth: invert the times (the fastest time is the highest bandwidth)
  gbs.n = t.n;
  gbs.median = double(total) / t.median / 1e9;
  gbs.min = double(total) / t.max / 1e9;
  gbs.max = double(total) / t.min / 1e9;
  return gbs;
}

Stat measure_matmul_peak(ThreadPool& pool, const LoadOptions& opts, int repeats, int* best_m) {
  // 4096 × 1024 bf16 weights = 8 MiB: L3-resident on the machines we target, so the kernel's
  // arithmetic (not DRAM) sets the time for large M.
  const int64_t N = 4096, K = 1024;
  std::vector<uint16_t> wb(size_t(N * K));
  uint32_t st = 12345;
  for (auto& v : wb) {
    st = st * 1664525u + 1013904223u;
    v = f32_to_bf16((float(st >> 8) / float(1u << 24) - 0.5f) * 0.04f);
  }
  WeightMatrix w;
  w.dtype = DType::kBF16;
  w.n_out = N;
  w.n_in = K;
  w.data = wb.data();
  OwnedWeights owned;
  convert_weight(w, opts, owned, &pool);
  Stat best;
  for (int64_t M : {16, 64, 128, 256}) {
    std::vector<float> x(size_t(M * K)), y(size_t(M * N));
    for (size_t i = 0; i < x.size(); ++i) x[i] = float(int64_t(i * 37 % 101) - 50) * 0.01f;
    const Stat t = time_repeats(std::max(repeats, 5), 2, [&] { ops::matmul(x.data(), M, w, y.data(), pool); });
    const double flop = 2.0 * double(M) * double(N) * double(K);
    Stat g;
    g.n = t.n;
    g.median = flop / t.median / 1e9;
    g.min = flop / t.max / 1e9;
    g.max = flop / t.min / 1e9;
    if (g.median > best.median) {
      best = g;
      if (best_m) *best_m = int(M);
    }
  }
  return best;
}

std::string isa_description() {
  const CpuFeatures& f = cpu_features();
  std::string s = isa_name(cpu_isa());
  if (cpu_isa() == IsaLevel::kAvx512) {
    s += " (";
    s += avx512_bf16_usable() ? "BF16" : f.avx512bf16 ? "BF16 off" : "no BF16";
    s += avx512_vnni_usable() ? ", VNNI" : f.avx512vnni ? ", VNNI off" : ", no VNNI";
    s += amx_usable() ? ", AMX" : f.amx_bf16 ? ", AMX off" : "";
    s += ")";
  } else if (cpu_isa() == IsaLevel::kAvx2 && f.avx_vnni) {
    s += avx_vnni_usable() ? " (AVX-VNNI)" : " (AVX-VNNI off)";
  }
  return s;
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      const auto c = line.find(':');
      if (c != std::string::npos) return line.substr(c + 2);
    }
  return "unknown CPU";
}

}  // namespace dfl::cli
