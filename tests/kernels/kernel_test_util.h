// Shared helpers for the kernel tests: random data, error measures, ISA levels to sweep.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/cpu_features.h"
#include "core/dtype.h"

namespace dfl::test {

inline std::vector<float> randn(size_t n, uint32_t seed, float stddev = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// Normalized mean squared error  Σ(a-b)² / Σb²  (b = reference).
inline double nmse(const float* a, const float* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return den > 0 ? num / den : num;
}

inline double max_abs_diff(const float* a, const float* b, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; ++i) m = std::fmax(m, std::fabs(double(a[i]) - b[i]));
  return m;
}

// Every ISA level this process can run, lowest first: up to the CPU's best, capped by DFL_ISA
// (so a level name in a failure message is the level that actually ran). Call outside IsaScope.
inline std::vector<IsaLevel> isa_levels() {
  std::vector<IsaLevel> v;
  for (int l = 0; l <= static_cast<int>(cpu_isa()); ++l) v.push_back(static_cast<IsaLevel>(l));
  return v;
}

// Attention has no AVX2 kernel (AVX2 runs the portable one): scalar and the best level.
inline std::vector<IsaLevel> attention_levels() {
  std::vector<IsaLevel> v{IsaLevel::kScalar};
  if (cpu_isa() == IsaLevel::kAvx512) v.push_back(IsaLevel::kAvx512);
  return v;
}

// Sets the ISA cap for one scope.
struct IsaScope {
  explicit IsaScope(IsaLevel l) { set_cpu_isa_limit(l); }
  ~IsaScope() { set_cpu_isa_limit(IsaLevel::kAvx512); }
};

}  // namespace dfl::test
