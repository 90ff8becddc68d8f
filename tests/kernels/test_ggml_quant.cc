// The AVX-512 and AVX2 activation quantization of the GGML int8 kernels (cpu/ggml_quant_avx512.cc,
// cpu/ggml_quant_avx2.cc) against
// a scalar transcription of the rule in kernels/ggml_matmul.cc's top comment: every byte of q,
// every bit of d, s16, s32 and the int8x2 residual, on random rows, rounding ties, all-zero
// blocks, tiny and huge values, ±0, ±inf and NaN.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/cpu_features.h"
#include "kernels/cpu/cpu_kernels.h"

namespace dfl {
namespace {

struct Quant {
  std::vector<int8_t> q;
  std::vector<float> d, r;
  std::vector<int32_t> s16, s32;
  Quant(int64_t M, int64_t K, int64_t ab)
      : q(M * (K + 256), 99), d(M * (K / ab)), r(M * K), s16(M * (K / 16)), s32(M * (K / 32)) {}
};

// The rule, element by element, as the scalar code states it.
void scalar_quant(const float* x, int64_t M, int64_t K, int64_t ab, Quant* o) {
  const int64_t ldq = K + 256;
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t b = 0; b < K / ab; ++b) {
      float amax = 0.0f;
      for (int64_t k = 0; k < ab; ++k) amax = std::max(amax, std::fabs(x[m * K + b * ab + k]));
      const float dd = amax / 127.0f, id = dd != 0.0f ? 1.0f / dd : 0.0f;
      for (int64_t k = 0; k < ab; ++k) {
        float v = std::nearbyint(x[m * K + b * ab + k] * id);
        v = std::min(127.0f, std::max(-127.0f, v));
        o->q[m * ldq + b * ab + k] = static_cast<int8_t>(v);
      }
      o->d[m * (K / ab) + b] = dd;
    }
    for (int64_t k = 0; k < 256; ++k) o->q[m * ldq + K + k] = 0;
    for (int64_t g = 0; g < K / 16; ++g) {
      int32_t s = 0;
      for (int k = 0; k < 16; ++k) s += o->q[m * ldq + 16 * g + k];
      o->s16[m * (K / 16) + g] = s;
    }
    for (int64_t b = 0; b < K / 32; ++b)
      o->s32[m * (K / 32) + b] = o->s16[m * (K / 16) + 2 * b] + o->s16[m * (K / 16) + 2 * b + 1];
    for (int64_t k = 0; k < K; ++k) {
      volatile float dq = static_cast<float>(o->q[m * ldq + k]) * o->d[m * (K / ab) + k / ab];
      o->r[m * K + k] = x[m * K + k] - dq;
    }
  }
}

using QuantFn = void (*)(const float*, int64_t, int64_t, int64_t, int8_t*, float*, int32_t*,
                        int32_t*);
using ResidualFn = void (*)(const float*, const int8_t*, const float*, int64_t, int64_t, int64_t,
                            float*);

void expect_same_bits_as_scalar_rule(QuantFn quantize, ResidualFn residual) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  for (int64_t ab : {32, 256}) {
    for (int64_t K : {ab, 4 * ab, int64_t{2048}}) {
      const int64_t M = 7;
      std::vector<float> x(M * K);
      for (int64_t m = 0; m < M; ++m) {
        for (int64_t k = 0; k < K; ++k) {
          float v = nd(rng);
          switch (m) {
            case 1: v = std::ldexp(std::round(v * 8) / 8, 0) * 127.0f / 4; break;  // many ties
            case 2: v = (k / ab) % 2 ? 0.0f : -0.0f; break;                         // zero blocks
            case 3: v *= 1e-38f; break;                                              // subnormal scale
            case 4: v *= 3e38f; break;                                               // near overflow
            case 5: v = k % 37 == 0 ? (k % 2 ? inf : -inf) : v; break;
            case 6: v = k % 41 == 0 ? nan : v; break;
            default: break;
          }
          x[m * K + k] = v;
        }
      }
      Quant want(M, K, ab), got(M, K, ab);
      scalar_quant(x.data(), M, K, ab, &want);
      quantize(x.data(), M, K, ab, got.q.data(), got.d.data(), got.s16.data(), got.s32.data());
      residual(x.data(), got.q.data(), got.d.data(), M, K, ab, got.r.data());
      EXPECT_EQ(want.q, got.q) << "ab=" << ab << " K=" << K;
      EXPECT_EQ(0, std::memcmp(want.d.data(), got.d.data(), want.d.size() * 4)) << "ab=" << ab << " K=" << K;
      EXPECT_EQ(want.s16, got.s16) << "ab=" << ab << " K=" << K;
      EXPECT_EQ(want.s32, got.s32) << "ab=" << ab << " K=" << K;
      EXPECT_EQ(0, std::memcmp(want.r.data(), got.r.data(), want.r.size() * 4)) << "ab=" << ab << " K=" << K;
    }
  }
}

TEST(GgmlQuant, Avx512SameBitsAsScalarRule) {
  if (cpu_isa() < IsaLevel::kAvx512) GTEST_SKIP() << "no AVX-512 on this machine";
  expect_same_bits_as_scalar_rule(cpu::avx512::quantize_ggml_act, cpu::avx512::ggml_act_residual);
}

TEST(GgmlQuant, Avx2SameBitsAsScalarRule) {
  if (cpu_isa() < IsaLevel::kAvx2) GTEST_SKIP() << "no AVX2 on this machine";
  expect_same_bits_as_scalar_rule(cpu::avx2::quantize_ggml_act, cpu::avx2::ggml_act_residual);
}

}  // namespace
}  // namespace dfl
