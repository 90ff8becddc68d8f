// dflash bench: statistics of repeated timings and the machine's own rooflines (memory read
// bandwidth, peak of the engine's matmul kernel).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/threadpool.h"
#include "model/model.h"

namespace dfl::cli {

// Median and spread of repeated measurements.
struct Stat {
  double median = 0, min = 0, max = 0;
  int n = 0;
  // (max − min) / 2 relative to the median, in percent: the ± column.
  double spread_pct() const { return median > 0 ? 50.0 * (max - min) / median : 0.0; }
};
Stat summarize(std::vector<double> v);
// Runs fn() `warmup` times untimed, then `repeats` times timed; seconds.
Stat time_repeats(int repeats, int warmup, const std::function<void()>& fn);

// Memory read bandwidth in GB/s (1e9 bytes/s): one pass of SIMD loads over a buffer of
// `bytes` (much larger than the caches), split in contiguous chunks over the pool's threads.
// One untimed pass first (page faults, TLB); then `repeats` passes.
Stat measure_read_bandwidth(ThreadPool& pool, size_t bytes, int repeats);

// Peak GFLOP/s (2·M·N·K / t) of ops::matmul on cache-resident random bf16 weights converted as
// the model loader would (opts: Q8, or prepacked, or as stored), the best median over a few row
// counts M. `best_m` receives the M.
Stat measure_matmul_peak(ThreadPool& pool, const LoadOptions& opts, int repeats,
                         int* best_m = nullptr);

// "avx512 (BF16, VNNI)", "avx512 (BF16 off, VNNI, AMX off)", "avx2 (AVX-VNNI)" etc. (what the
// kernels use now), and the CPU model name from /proc/cpuinfo.
std::string isa_description();
std::string cpu_model_name();

}  // namespace dfl::cli
