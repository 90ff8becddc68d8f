// Shared set-up for the micro-benchmarks: one thread pool, cached random weights.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "core/dtype.h"
#include "core/threadpool.h"
#include "kernels/ops.h"

namespace dfl::bench {

// DFL_THREADS (default: all hardware threads).
inline ThreadPool& pool() {
  static ThreadPool p([] {
    const char* s = std::getenv("DFL_THREADS");
    return s ? std::atoi(s) : hardware_threads();
  }());
  return p;
}

inline uint64_t xorshift(uint64_t& s) {
  s ^= s << 13;
  s ^= s >> 7;
  s ^= s << 17;
  return s;
}

// Uniform in [-1, 1).
inline float urand(uint64_t& s) { return static_cast<float>((xorshift(s) >> 40) * (2.0 / 16777216.0) - 1.0); }

inline std::vector<float> random_f32(size_t n, uint64_t seed) {
  std::vector<float> v(n);
  uint64_t s = seed * 2654435761u + 1;
  for (auto& x : v) x = urand(s);
  return v;
}

enum class WFmt { kF32, kBF16, kF8, kQ8, kBF16Amx };

struct OwnedWeight {
  std::vector<uint8_t> bytes;
  std::vector<float> scale;
  QuantizedQ8 q8;
  PackedWeight packed;
  WeightMatrix w;
  size_t stream_bytes = 0;  // bytes the kernel reads per call
};

inline const OwnedWeight& weight(WFmt fmt, int64_t N, int64_t K) {
  static std::map<std::tuple<int, int64_t, int64_t>, std::unique_ptr<OwnedWeight>> cache;
  auto& slot = cache[{static_cast<int>(fmt), N, K}];
  if (slot) return *slot;
  // Keep at most one big weight alive at a time (RAM).
  cache.clear();
  auto& s2 = cache[{static_cast<int>(fmt), N, K}];
  s2 = std::make_unique<OwnedWeight>();
  OwnedWeight& o = *s2;
  uint64_t s = 12345 + N * 7 + K;
  o.w.n_out = N;
  o.w.n_in = K;
  const size_t n = static_cast<size_t>(N) * K;
  if (fmt == WFmt::kF32) {
    o.bytes.resize(n * 4);
    float* p = reinterpret_cast<float*>(o.bytes.data());
    for (size_t i = 0; i < n; ++i) p[i] = urand(s) * 0.05f;
    o.w.dtype = DType::kF32;
  } else if (fmt == WFmt::kBF16 || fmt == WFmt::kQ8 || fmt == WFmt::kBF16Amx) {
    o.bytes.resize(n * 2);
    uint16_t* p = reinterpret_cast<uint16_t*>(o.bytes.data());
    for (size_t i = 0; i < n; ++i) p[i] = f32_to_bf16(urand(s) * 0.05f);
    o.w.dtype = DType::kBF16;
  } else {
    o.bytes.resize(n);
    for (size_t i = 0; i < n; ++i) o.bytes[i] = static_cast<uint8_t>(xorshift(s) & 0x77);  // finite
    o.w.dtype = DType::kF8E4M3;
    o.scale.assign(((N + 127) / 128) * ((K + 127) / 128), 0.01f);
    o.w.scale = o.scale.data();
  }
  o.w.data = o.bytes.data();
  o.stream_bytes = o.bytes.size() + o.scale.size() * 4;
  if (fmt == WFmt::kBF16Amx) {
    o.packed = prepack_weight(o.w, &pool());
    o.w = o.packed.matrix();  // original bytes stay alive (fallback path)
  }
  if (fmt == WFmt::kQ8) {
    o.q8 = quantize_q8(o.w, &pool());
    o.bytes.clear();
    o.bytes.shrink_to_fit();
    o.w = o.q8.matrix();
    o.stream_bytes = o.q8.bytes();
  }
  return o;
}

}  // namespace dfl::bench
