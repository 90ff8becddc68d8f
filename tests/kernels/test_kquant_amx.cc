// AMX-INT8 kernels of the repacked K formats (cpu/kquant_ggml_amx.cc) against the AVX-512 VNNI
// kernels of the same layouts (cpu/ggml_avx512.cc, themselves checked bit for bit against the
// portable int8 kernel in test_matmul_ggml.cc), on the same quantized activations: every bit of
// the output must agree, for row counts across and past the 16-row tiles and the 64-row chunk,
// every thread count, random and extreme quant / scale patterns (the byte-split products at their
// bounds), and activation pad rows full of garbage (they must never be used).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "core/cpu_features.h"
#include "core/dtype.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/ops.h"

namespace dfl {
namespace {

void put_f16(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  p[0] = h & 0xff;
  p[1] = h >> 8;
}

// Blocks of type t: quant (and packed-scale) bytes random or all equal to `fill` (fill < 0:
// random), f16 scales sane.
std::vector<uint8_t> k_blocks(DType t, int64_t n_out, int64_t n_in, uint32_t seed, int fill) {
  const int64_t nb = n_in / 256, bb = dtype_block_bytes(t);
  std::vector<uint8_t> v(static_cast<size_t>(n_out * nb * bb));
  std::mt19937 rng(seed);
  for (auto& b : v) b = static_cast<uint8_t>(fill < 0 ? rng() : fill);
  std::uniform_real_distribution<float> sd(0.001f, 0.01f);
  for (int64_t i = 0; i < n_out * nb; ++i) {
    uint8_t* b = v.data() + i * bb;
    if (t == DType::kQ4_K) {
      put_f16(b, sd(rng) / 8);
      put_f16(b + 2, sd(rng) / 8);
    } else {
      put_f16(b + 208, sd(rng) / 16);
    }
  }
  return v;
}

// Quantized activations as GgmlAct holds them: round_up(M, 16) rows of K + 256 int8 (rows past
// M and the per-row padding: garbage), d per (row, superblock), s16 / s32 sums of q.
struct Act {
  std::vector<int8_t> q;
  std::vector<float> d;
  std::vector<int32_t> s16, s32;
  cpu::GgmlAct a;
  Act(int64_t M, int64_t K, uint32_t seed, int q_fill) {
    const int64_t ldq = K + 256, rows = (M + 15) / 16 * 16;
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> qd(-127, 127);
    q.resize(static_cast<size_t>(rows * ldq));
    for (auto& v : q) v = static_cast<int8_t>(qd(rng));  // garbage where unused
    for (int64_t m = 0; m < M; ++m)
      for (int64_t k = 0; k < K; ++k)
        if (q_fill != 0) q[m * ldq + k] = static_cast<int8_t>(q_fill == 1 ? 127 : q_fill == -1 ? -127 : ((k & 1) ? 127 : -127));
    std::uniform_real_distribution<float> dd(1e-3f, 1e-1f);
    d.resize(static_cast<size_t>(M * (K / 256)));
    for (auto& v : d) v = dd(rng);
    s16.resize(static_cast<size_t>(M * (K / 16)));
    s32.resize(static_cast<size_t>(M * (K / 32)));
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t g = 0; g < K / 16; ++g) {
        int32_t s = 0;
        for (int k = 0; k < 16; ++k) s += q[m * ldq + 16 * g + k];
        s16[m * (K / 16) + g] = s;
      }
      for (int64_t b = 0; b < K / 32; ++b)
        s32[m * (K / 32) + b] = s16[m * (K / 16) + 2 * b] + s16[m * (K / 16) + 2 * b + 1];
    }
    a.q = q.data();
    a.d = d.data();
    a.s16 = s16.data();
    a.s32 = s32.data();
    a.K = K;
  }
};

// The VNNI kernel takes at most kGgmlRowChunk rows per call: run it in such chunks.
void vnni(DType t, const cpu::GgmlAct& a, int64_t M, const WeightMatrix& w, float* y, ThreadPool& pool) {
  const int64_t K = a.K, ldq = K + 256;
  for (int64_t m0 = 0; m0 < M; m0 += cpu::kGgmlRowChunk) {
    cpu::GgmlAct c = a;
    c.q += m0 * ldq;
    c.d += m0 * (K / 256);
    c.s16 += m0 * (K / 16);
    c.s32 += m0 * (K / 32);
    const int64_t Mc = std::min<int64_t>(cpu::kGgmlRowChunk, M - m0);
    if (t == DType::kQ4_K)
      cpu::avx512::matmul_q4k16(c, Mc, w, y + m0 * w.n_out, pool);
    else
      cpu::avx512::matmul_q6k16(c, Mc, w, y + m0 * w.n_out, pool);
  }
}

bool amx_int8_usable() { return amx_usable() && cpu_features().amx_int8; }

struct ActModeScope {  // prepack_weight repacks K formats only for the int8 activation modes
  ActModeScope() : old(ggml_activations()) { set_ggml_activations(GgmlActivations::kInt8x2); }
  ~ActModeScope() { set_ggml_activations(old); }
  GgmlActivations old;
};

TEST(KquantAmx, SameBitsAsVnni) {
  if (!amx_int8_usable()) GTEST_SKIP() << "AMX-INT8 not usable on this machine (or DFL_AMX=0)";
  ActModeScope mode;
  ThreadPool p1(1), p2(2), p3(3);
  int cases = 0;
  for (DType t : {DType::kQ4_K, DType::kQ6_K}) {
    for (int64_t K : {256, 768, 2048, 4352}) {  // 4352: 17 superblocks, lanes accumulate 3 times
      for (int64_t N : {1, 17, 40}) {
        for (int fill : {-1, 0x00, 0xFF, 0x80, 0x7F}) {
          if (fill >= 0 && (K != 768 || N != 17)) continue;
          const auto wb = k_blocks(t, N, K, 31 + static_cast<uint32_t>(K + N), fill);
          const PackedWeight pw = prepack_weight(ggml_weight(t, N, K, wb.data()), &p2);
          const WeightMatrix& w = pw.matrix();
          ASSERT_EQ(w.packed_format, t == DType::kQ4_K ? kPackedQ4K16 : kPackedQ6K16);
          for (int64_t M : {1, 2, 3, 5, 15, 16, 17, 32, 33, 48, 63, 64, 65, 100}) {
            if (fill >= 0 && M != 33) continue;
            for (int q_fill : {0, 1, -1, 2}) {
              if (q_fill != 0 && (fill < 0 ? M != 17 || K != 768 || N != 17 : false)) continue;
              Act act(M, K, 5 + static_cast<uint32_t>(M), q_fill);
              std::vector<float> want(M * N), got(M * N);
              vnni(t, act.a, M, w, want.data(), p1);
              for (ThreadPool* pool : {&p1, &p2, &p3}) {
                std::fill(got.begin(), got.end(), -1.0f);
                if (t == DType::kQ4_K)
                  cpu::amx::matmul_q4k16(act.a, M, w, got.data(), *pool);
                else
                  cpu::amx::matmul_q6k16(act.a, M, w, got.data(), *pool);
                ASSERT_EQ(0, std::memcmp(want.data(), got.data(), got.size() * 4))
                    << dtype_name(t) << " K=" << K << " N=" << N << " M=" << M << " fill=" << fill
                    << " q_fill=" << q_fill << " threads=" << pool->n_threads();
                ++cases;
              }
            }
          }
        }
      }
    }
  }
  std::printf("%d cases bit-identical\n", cases);
}

}  // namespace
}  // namespace dfl
