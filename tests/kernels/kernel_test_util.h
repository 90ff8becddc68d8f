// Shared helpers for the kernel tests: random data, error measures, ISA levels to sweep.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "core/dtype.h"
#include "kernels/ops.h"

namespace dfl::test {

inline std::vector<float> randn(size_t n, uint32_t seed, float stddev = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

inline void put_f16(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  p[0] = h & 0xff;
  p[1] = h >> 8;
}

// Random GGML blocks of dtype t for an [n_out, n_in] weight: every quant bit pattern, sane f16
// scales (so the weights look like real ones: |w| ~ 0.01 .. 0.1).
inline std::vector<uint8_t> random_blocks(DType t, int64_t n_out, int64_t n_in, uint32_t seed) {
  const int64_t nb = n_in / dtype_block_elems(t), bb = dtype_block_bytes(t);
  std::vector<uint8_t> v(static_cast<size_t>(n_out * nb * bb));
  std::mt19937 rng(seed);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> sd(0.001f, 0.01f), sm(0.0f, 0.01f);
  for (int64_t i = 0; i < n_out * nb; ++i) {
    uint8_t* b = v.data() + i * bb;
    switch (t) {
      case DType::kQ8_0: case DType::kQ4_0: case DType::kQ5_0: put_f16(b, sd(rng)); break;
      case DType::kQ4_1: case DType::kQ5_1: put_f16(b, sd(rng)); put_f16(b + 2, -sm(rng) * 8); break;
      case DType::kQ4_K: case DType::kQ5_K: put_f16(b, sd(rng) / 8); put_f16(b + 2, sm(rng) / 8); break;
      case DType::kQ6_K: put_f16(b + 208, sd(rng) / 16); break;
      default: break;
    }
  }
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

// A random [n_out, n_in] BF16 weight (normal, stddev) and the matrix over its bits.
struct Bf16Weight {
  std::vector<uint16_t> bits;
  WeightMatrix w;
};
inline Bf16Weight bf16_weight(int64_t n_out, int64_t n_in, uint32_t seed, float stddev) {
  Bf16Weight b;
  const std::vector<float> v = randn(static_cast<size_t>(n_out * n_in), seed, stddev);
  b.bits.resize(v.size());
  for (size_t i = 0; i < v.size(); ++i) b.bits[i] = f32_to_bf16(v[i]);
  b.w.dtype = DType::kBF16;
  b.w.n_out = n_out;
  b.w.n_in = n_in;
  b.w.data = b.bits.data();  // the heap buffer moves with the vector
  return b;
}

// Every ISA level this process can run, lowest first: up to the CPU's best, capped by DFL_ISA
// (so a level name in a failure message is the level that actually ran). Call outside IsaScope.
inline std::vector<IsaLevel> isa_levels() {
  std::vector<IsaLevel> v;
  for (int l = 0; l <= static_cast<int>(cpu_isa()); ++l) v.push_back(static_cast<IsaLevel>(l));
  return v;
}

// Attention kernels: portable, AVX2, AVX-512.
inline std::vector<IsaLevel> attention_levels() { return isa_levels(); }

// Sets the GGUF activation mode (ops.h GgmlActivations) for one scope.
struct ActScope {
  explicit ActScope(GgmlActivations a) : old(ggml_activations()) { set_ggml_activations(a); }
  ~ActScope() { set_ggml_activations(old); }
  GgmlActivations old;
};

// Sets the ISA cap for one scope.
struct IsaScope {
  explicit IsaScope(IsaLevel l) { set_cpu_isa_limit(l); }
  ~IsaScope() { set_cpu_isa_limit(IsaLevel::kAvx512); }
};

// A kernel path: an ISA cap, AMX on or off, the BF16 product engine without AMX (ops.h
// Bf16Dot) and whether the AVX-512 BF16 instructions may run (core/cpu_features.h
// avx512_bf16_usable(): off = a Cascade Lake / Ice Lake); PathScope selects one for a scope.
struct PathConfig {
  IsaLevel isa;
  bool amx;
  std::string name;
  Bf16Dot bf16 = Bf16Dot::kDpbf16;
  bool bf16_hw = true;
  bool avx_vnni = true;     // AVX-VNNI for the AVX2 level's int8 kernels (avx_vnni_usable())
  bool avx512_vnni = true;  // off: AVX-512 without VNNI, its int8 kernels AVX2's (int8_isa())
};
// Each of `levels` with AMX off, then AVX-512 + AMX where usable.
inline std::vector<PathConfig> paths_over(const std::vector<IsaLevel>& levels) {
  std::vector<PathConfig> v;
  for (IsaLevel isa : levels) v.push_back({isa, false, isa_name(isa)});
  set_amx_enabled(true);
  if (amx_usable()) v.push_back({IsaLevel::kAvx512, true, "avx512+amx"});
  return v;
}
// `levels` as paths_over gives them, with AVX-512's bf16 pair products also on fp32 FMA
// (ops.h Bf16Dot) right after the vdpbf16ps path, then AVX-512 without the BF16 instructions
// where the CPU has them (where it has not, the plain AVX-512 path is that one).
inline std::vector<PathConfig> paths_with_bf16_fma(const std::vector<IsaLevel>& levels) {
  std::vector<PathConfig> v = paths_over(levels);
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i].isa == IsaLevel::kAvx512 && !v[i].amx) {
      const auto at = v.begin() + static_cast<std::ptrdiff_t>(i) + 1;
      if (avx512_bf16_usable())
        v.insert(at, {{IsaLevel::kAvx512, false, "avx512+bf16-fma", Bf16Dot::kFma},
                      {IsaLevel::kAvx512, false, "avx512-no-bf16", Bf16Dot::kFma, false}});
      break;
    }
  return v;
}

// Attention: its levels (scalar, AVX-512 with vdpbf16ps, then FMA) with AMX off, then the AMX
// prefill kernel.
inline std::vector<PathConfig> attention_paths() { return paths_with_bf16_fma(attention_levels()); }

// The matmul paths a machine has: every ISA level with AMX off (BF16 weights prepacked on
// AVX-512 run the lanes-are-outputs kernel there, on vdpbf16ps), AVX-512 with that kernel on
// fp32 FMA, then AVX-512 + AMX where usable.
inline std::vector<PathConfig> matmul_paths() { return paths_with_bf16_fma(isa_levels()); }

// matmul_paths() and, where the CPU has them, the AVX2 level without AVX-VNNI and the AVX-512
// level without its VNNI (the int8 kernels have those forms).
inline std::vector<PathConfig> ggml_paths() {
  std::vector<PathConfig> v = matmul_paths();
  if (cpu_features().avx_vnni && cpu_isa() >= IsaLevel::kAvx2) {
    PathConfig c{IsaLevel::kAvx2, false, "avx2-no-vnni"};
    c.avx_vnni = false;
    v.push_back(c);
  }
  if (cpu_isa() == IsaLevel::kAvx512) {
    PathConfig c{IsaLevel::kAvx512, false, "avx512-no-vnni"};
    c.avx512_vnni = false;
    v.push_back(c);
  }
  return v;
}

struct PathScope {
  IsaScope isa;
  Bf16Dot bf16_before = bf16_dot();
  explicit PathScope(const PathConfig& c) : isa(c.isa) {
    set_avx512_bf16_enabled(c.bf16_hw);
    set_avx_vnni_enabled(c.avx_vnni);
    set_avx512_vnni_enabled(c.avx512_vnni);
    set_amx_enabled(c.amx);
    set_bf16_dot(c.bf16);
  }
  ~PathScope() {
    set_avx512_bf16_enabled(true);
    set_avx_vnni_enabled(true);
    set_avx512_vnni_enabled(true);
    set_amx_enabled(true);
    set_bf16_dot(bf16_before);
  }
};

// Attention test shapes and data (tests/kernels/test_attention*.cc).
struct AttnCase {
  int32_t n_heads, n_kv_heads, d_qk, d_v;
};
struct AttnData {
  std::vector<float> q, k, v, sinks;
  std::vector<int32_t> q_pos, k_pos;
};
inline AttnParams attn_params(const AttnCase& c, Window w, const AttnData& d, bool sinks) {
  AttnParams p;
  p.n_heads = c.n_heads;
  p.n_kv_heads = c.n_kv_heads;
  p.d_qk = c.d_qk;
  p.d_v = c.d_v;
  p.scale = 1.0f / std::sqrt(static_cast<float>(c.d_qk));
  p.window = w;
  p.sinks = sinks ? d.sinks.data() : nullptr;
  return p;
}

}  // namespace dfl::test
