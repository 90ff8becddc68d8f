// AVX-512 without the BF16 instructions (core/cpu_features.h avx512_bf16_usable(): Cascade
// Lake, Ice Lake, Tiger Lake run the AVX-512 kernels without vdpbf16ps / vcvtne2ps2bf16).
// On a machine that has the instructions, switching them off must change no bit:
//   - the integer rounding of cpu/simd_avx512.h equals vcvtneps2bf16 / vcvtne2ps2bf16 on every
//     class of input (normals, ties, denormals — which the instructions read as zero —, ±0,
//     ±inf, NaNs) and on random bit patterns;
//   - the kernels that round through them (the packed bf16 matmul's fp32-FMA form, the bf16
//     prefill attention's Q, P and fp32-K/V rounding) give the same outputs, denormal inputs
//     included;
//   - a Bf16Dot::kDpbf16 request runs as kFma (ops.h bf16_dot());
//   - in the kernel sources, the BF16 conversion intrinsics appear only in the guarded helpers
//     (and the AMX files, which need the instructions anyway), vdpbf16ps only in the two
//     kDpbf16 engines.
// The other kernel tests run every path with the instructions off as "avx512-no-bf16"
// (kernel_test_util.h paths_with_bf16_fma) against their references.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>
#include <string>
#include <random>
#include <vector>

#include "bf16_round_probe.h"
#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/threadpool.h"
#include "kernel_test_util.h"
#include "kernels/ops.h"

namespace dfl {
namespace {

bool have_bf16_instructions() {
  return cpu_isa() == IsaLevel::kAvx512 && cpu_features().avx512bf16;
}

struct Bf16Off {
  Bf16Off() { set_avx512_bf16_enabled(false); }
  ~Bf16Off() { set_avx512_bf16_enabled(true); }
};

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Every upper half with lower halves around the rounding points, then random patterns.
std::vector<float> rounding_inputs() {
  std::vector<float> x;
  const uint32_t lows[] = {0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xffff, 0x4000, 0xc000};
  for (uint32_t hi = 0; hi < 0x10000; ++hi)
    for (uint32_t lo : lows) x.push_back(from_bits(hi << 16 | lo));
  std::mt19937 rng(7);
  for (int i = 0; i < (1 << 20); ++i) x.push_back(from_bits(static_cast<uint32_t>(rng())));
  x.resize((x.size() + 31) / 32 * 32, 0.0f);
  return x;
}

TEST(NoBf16, IntegerRoundingEqualsTheInstructions) {
  if (!have_bf16_instructions()) GTEST_SKIP() << "no AVX512_BF16 here to compare with";
  const std::vector<float> x = rounding_inputs();
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<uint16_t> hw1(n), hw2(n), em1(n), em2(n);
  test::bf16_round_probe(x.data(), n, hw1.data(), hw2.data(), true);
  test::bf16_round_probe(x.data(), n, em1.data(), em2.data(), false);
  int64_t denormals = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, &x[i], 4);
    ASSERT_EQ(hw1[i], em1[i]) << std::hex << "input 0x" << u;
    ASSERT_EQ(hw2[i], em2[i]) << std::hex << "input 0x" << u << " (two-source form)";
    ASSERT_EQ(hw1[i], hw2[i]) << std::hex << "input 0x" << u;
    const bool denormal = (u & 0x7f800000u) == 0 && (u & 0x007fffffu) != 0;
    denormals += denormal;
    // Away from denormals this is the project's one rounding rule (core/dtype.h).
    if (!denormal) ASSERT_EQ(em1[i], f32_to_bf16(x[i])) << std::hex << "input 0x" << u;
    else ASSERT_EQ(em1[i], (u >> 16) & 0x8000u) << std::hex << "input 0x" << u;
  }
  EXPECT_GT(denormals, 1000);
}

TEST(NoBf16, Dpbf16RequestRunsAsFma) {
  const Bf16Dot before = bf16_dot();
  set_bf16_dot(Bf16Dot::kDpbf16);
  {
    Bf16Off off;
    EXPECT_FALSE(avx512_bf16_usable());
    EXPECT_FALSE(amx_usable());
    EXPECT_EQ(bf16_dot(), Bf16Dot::kFma);
  }
  if (have_bf16_instructions()) {
    EXPECT_EQ(bf16_dot(), Bf16Dot::kDpbf16);
  }
  set_bf16_dot(before);
}

// Values with some denormals (which the instructions read as zero) and a wide range.
std::vector<float> with_denormals(size_t n, uint32_t seed) {
  std::vector<float> v = test::randn(n, seed);
  std::mt19937 rng(seed);
  for (size_t i = 0; i < n; ++i)
    if (rng() % 13 == 0) v[i] = from_bits((rng() & 0x807fffffu) | 1u);
  return v;
}

// Runs f once with the instructions and once without (AMX off both times, fp32-FMA products)
// and compares the bytes.
template <class F>
void expect_same_bits(const char* what, size_t n_out, F&& f) {
  std::vector<float> with(n_out), without(n_out);
  set_amx_enabled(false);
  const Bf16Dot before = bf16_dot();
  set_bf16_dot(Bf16Dot::kFma);
  f(with.data());
  {
    Bf16Off off;
    f(without.data());
  }
  set_bf16_dot(before);
  set_amx_enabled(true);
  EXPECT_EQ(0, std::memcmp(with.data(), without.data(), n_out * 4)) << what;
}

TEST(NoBf16, PackedBf16MatmulSameBits) {
  if (!have_bf16_instructions()) GTEST_SKIP() << "no AVX512_BF16 here to compare with";
  ThreadPool pool(2);
  for (int64_t K : {64, 200, 1024}) {
    const int64_t N = 80;
    const test::Bf16Weight b = test::bf16_weight(N, K, 3, 0.5f);
    set_amx_enabled(false);
    const PackedWeight packed = prepack_weight(b.w);
    set_amx_enabled(true);
    for (int64_t M : {1, 5, 16, 40}) {
      std::vector<float> x = with_denormals(M * K, static_cast<uint32_t>(K + M));
      for (int64_t k = 0; k < K; ++k)  // a row of denormals only: its outputs show the flush
        x[(M - 1) * K + k] = from_bits((static_cast<uint32_t>(k * 2654435761u) & 0x807fffffu) | 1u);
      expect_same_bits("matmul", M * N, [&](float* y) { ops::matmul(x.data(), M, packed.matrix(), y, pool); });
    }
  }
}

TEST(NoBf16, Bf16PrefillAttentionSameBits) {
  if (!have_bf16_instructions()) GTEST_SKIP() << "no AVX512_BF16 here to compare with";
  ThreadPool pool(2);
  const test::AttnCase c{8, 2, 72, 64};
  const int64_t n_q = kPrefillAttentionMinQueries + 17, n_kv = 300;
  test::AttnData d;
  d.q = with_denormals(n_q * c.n_heads * c.d_qk, 1);
  d.k = with_denormals(n_kv * c.n_kv_heads * c.d_qk, 2);
  d.v = with_denormals(n_kv * c.n_kv_heads * c.d_v, 3);
  d.sinks = test::randn(c.n_heads, 4);
  d.k_pos.resize(n_kv);
  std::iota(d.k_pos.begin(), d.k_pos.end(), 0);
  d.q_pos.resize(n_q);
  for (int64_t i = 0; i < n_q; ++i) d.q_pos[i] = static_cast<int32_t>(n_kv - n_q + i);
  ASSERT_TRUE(uses_prefill_attention(n_q));
  for (bool sinks : {false, true}) {
    const AttnParams p = test::attn_params(c, Window{-1, 0}, d, sinks);
    expect_same_bits("prefill attention", n_q * c.n_heads * c.d_v, [&](float* out) {
      ops::attention(d.q.data(), d.q_pos.data(), n_q, d.k.data(), d.v.data(), d.k_pos.data(), n_kv, p,
                     out, pool);
    });
  }
}

// A source audit: a new unguarded use would crash an Ice Lake with SIGILL, which no test on a
// machine with the instructions can see.
TEST(NoBf16, Bf16InstructionsOnlyBehindTheirGuards) {
  const char* root = std::getenv("DFL_ROOT");
  if (!root) GTEST_SKIP() << "DFL_ROOT not set (ctest sets it)";
  const std::filesystem::path dir = std::filesystem::path(root) / "src" / "kernels" / "cpu";
  ASSERT_TRUE(std::filesystem::is_directory(dir)) << dir;
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    std::ifstream in(e.path());
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string text = ss.str();
    ++files;
    const bool amx = name.find("amx") != std::string::npos;
    for (const char* conv : {"cvtne2ps_pbh", "cvtneps_pbh"}) {
      if (!amx && name != "simd_avx512.h") {
        EXPECT_EQ(text.find(conv), std::string::npos) << name << " uses " << conv << " directly";
      }
    }
    if (!amx && name != "matmul_avx512.cc" && name != "attention_bf16_avx512.cc") {
      EXPECT_EQ(text.find("dpbf16_ps"), std::string::npos) << name << " uses vdpbf16ps";
    }
  }
  EXPECT_GT(files, 10);
}

}  // namespace
}  // namespace dfl
