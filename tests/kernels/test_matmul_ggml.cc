// GGML block weights (Q8_0 ... Q6_K): the matmul against the scalar reference (dequantized
// weights, double accumulation), the same bits on every ISA level, batch / thread invariance,
// and dequantize_rows. The dequantization itself is checked bit-exact against gguf-py in
// tests/kernels/test_ggml_dequant.cc.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "kernels/ops.h"
#include "kernel_test_util.h"

namespace dfl {
namespace {

const DType kTypes[] = {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kQ5_0,
                        DType::kQ5_1, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};

using test::random_blocks;

std::vector<int64_t> widths(DType t) {
  if (dtype_block_elems(t) == 256) return {256, 768, 2048};
  return {32, 96, 640, 2080};
}

using test::ActScope;

class MatmulGgmlAct : public ::testing::TestWithParam<GgmlActivations> {};
INSTANTIATE_TEST_SUITE_P(Act, MatmulGgmlAct,
                         ::testing::Values(GgmlActivations::kFp32, GgmlActivations::kInt8,
                                           GgmlActivations::kInt8x2),
                         [](const auto& i) {
                           return i.param == GgmlActivations::kFp32   ? "fp32"
                                  : i.param == GgmlActivations::kInt8 ? "int8"
                                                                      : "int8x2";
                         });

TEST_P(MatmulGgmlAct, MatchesReferenceOnEveryIsaLevel) {
  ActScope act(GetParam());
  // int8 activations: NMSE bound 1e-3 (observed ≤ 5.4e-4); int8x2 (~15-bit activations): 1e-7;
  // fp32: 1e-9 (summation order only).
  const double bound = GetParam() == GgmlActivations::kFp32   ? 1e-9
                       : GetParam() == GgmlActivations::kInt8 ? 1e-3
                                                              : 1e-7;
  ThreadPool pool(2);
  double worst = 0;
  for (DType t : kTypes) {
    for (int64_t K : widths(t)) {
      for (int64_t N : {1, 17, 40}) {
        const auto wb = random_blocks(t, N, K, 7 + static_cast<uint32_t>(K + N));
        const WeightMatrix w = ggml_weight(t, N, K, wb.data());
        const int64_t M = 5;
        const auto x = test::randn(static_cast<size_t>(M * K), 3);
        std::vector<float> want(M * N), got(M * N), first;
        ref::matmul(x.data(), M, w, want.data());
        for (IsaLevel isa : test::isa_levels()) {
          test::IsaScope scope(isa);
          ops::matmul(x.data(), M, w, got.data(), pool);
          const double e = test::nmse(got.data(), want.data(), got.size());
          worst = std::max(worst, e);
          EXPECT_LT(e, bound) << dtype_name(t) << " K=" << K << " N=" << N << " isa=" << isa_name(isa);
          if (first.empty()) {
            first = got;
          } else {
            EXPECT_EQ(0, std::memcmp(first.data(), got.data(), got.size() * 4))
                << dtype_name(t) << " K=" << K << " N=" << N << ": " << isa_name(isa)
                << " differs from the portable kernel";
          }
        }
      }
    }
  }
  std::printf("worst NMSE vs reference: %.3g\n", worst);
}

TEST_P(MatmulGgmlAct, BatchAndThreadInvariant) {
  ActScope act(GetParam());
  ThreadPool p1(1), p2(2), p3(3);
  ThreadPool* pools[] = {&p1, &p2, &p3};
  for (DType t : kTypes) {
    const int64_t K = dtype_block_elems(t) == 256 ? 512 : 160, N = 37, Mmax = 35;
    const auto wb = random_blocks(t, N, K, 11);
    const WeightMatrix w = ggml_weight(t, N, K, wb.data());
    const auto x = test::randn(static_cast<size_t>(Mmax * K), 5);
    for (IsaLevel isa : test::isa_levels()) {
      test::IsaScope scope(isa);
      std::vector<float> solo(Mmax * N);
      for (int64_t m = 0; m < Mmax; ++m) ops::matmul(x.data() + m * K, 1, w, solo.data() + m * N, p1);
      for (int64_t M : {2, 3, 8, 15, 16, 17, 33, 35}) {
        for (ThreadPool* pool : pools) {
          std::vector<float> y(M * N);
          ops::matmul(x.data(), M, w, y.data(), *pool);
          EXPECT_EQ(0, std::memcmp(y.data(), solo.data(), y.size() * 4))
              << dtype_name(t) << " M=" << M << " threads=" << pool->n_threads()
              << " isa=" << isa_name(isa);
        }
      }
    }
  }
}

TEST(MatmulGgml, DequantizeRowsEqualsWeightAt) {
  for (DType t : kTypes) {
    const int64_t K = dtype_block_elems(t) == 256 ? 512 : 96, N = 6;
    const auto wb = random_blocks(t, N, K, 13);
    const WeightMatrix w = ggml_weight(t, N, K, wb.data());
    std::vector<float> out(3 * K);
    dequantize_rows(w, 2, 3, out.data());
    for (int64_t r = 0; r < 3; ++r)
      for (int64_t k = 0; k < K; ++k)
        ASSERT_EQ(out[r * K + k], ref::weight_at(w, 2 + r, k)) << dtype_name(t);
  }
}

}  // namespace
}  // namespace dfl

namespace dfl {
namespace {

// ops::matmul_same_input on GGML weights of one input (a layer's q, k, v; gate and up): each
// output bit-identical to its own ops::matmul in every activation mode and on every ISA level,
// raw blocks and prepacked — weights of one activation block size share one quantization of x,
// a group mixing block sizes (or too many rows for one kernel call) falls back.
TEST_P(MatmulGgmlAct, SameInputMatmulsEqualOneByOne) {
  ActScope act(GetParam());
  ThreadPool pool(2);
  constexpr int64_t K = 512;
  const auto b1 = random_blocks(DType::kQ5_0, 40, K, 31), b2 = random_blocks(DType::kQ8_0, 17, K, 32);
  const auto b3 = random_blocks(DType::kQ4_K, 33, K, 33), b4 = random_blocks(DType::kQ6_K, 16, K, 34);
  const WeightMatrix q5 = ggml_weight(DType::kQ5_0, 40, K, b1.data()), q8 = ggml_weight(DType::kQ8_0, 17, K, b2.data());
  const WeightMatrix q4k = ggml_weight(DType::kQ4_K, 33, K, b3.data()), q6k = ggml_weight(DType::kQ6_K, 16, K, b4.data());
  const auto b5 = random_blocks(DType::kQ4_0, 48, K, 35);
  const WeightMatrix q4 = ggml_weight(DType::kQ4_0, 48, K, b5.data());
  const PackedWeight p5 = prepack_weight(q5, &pool), p8 = prepack_weight(q8, &pool);
  const PackedWeight p4k = prepack_weight(q4k, &pool), p6k = prepack_weight(q6k, &pool);
  const PackedWeight p4 = prepack_weight(q4, &pool);
  // Packed groups run as one pool job on AVX-512 (each format its own panel: the 32-element
  // formats' chain offsets, the K formats' sums); a raw weight in the group falls back.
  const std::vector<std::vector<const WeightMatrix*>> groups = {
      {&q5, &q8, &q5}, {&p5.matrix(), &p8.matrix()}, {&p4k.matrix(), &p6k.matrix(), &q4k},
      {&p5.matrix(), &p4k.matrix()}, {&p8.matrix(), &p4.matrix(), &p5.matrix(), &p8.matrix()},
      {&p6k.matrix(), &p4k.matrix(), &p6k.matrix()}};
  for (IsaLevel isa : test::isa_levels()) {
    test::IsaScope scope(isa);
    for (int64_t M : {1, 3, 16, 17}) {
      const auto x = test::randn(static_cast<size_t>(M * K), 41 + uint32_t(M));
      for (const auto& group : groups) {
        std::vector<std::vector<float>> want, got;
        for (const WeightMatrix* w : group) {
          want.emplace_back(size_t(M * w->n_out));
          got.emplace_back(size_t(M * w->n_out), -7.0f);
          ops::matmul(x.data(), M, *w, want.back().data(), pool);
        }
        std::vector<ops::MatmulOut> outs;
        for (size_t i = 0; i < group.size(); ++i) outs.push_back({group[i], got[i].data()});
        ops::matmul_same_input(x.data(), M, outs.data(), int(outs.size()), pool);
        for (size_t i = 0; i < group.size(); ++i)
          ASSERT_EQ(0, std::memcmp(want[i].data(), got[i].data(), want[i].size() * 4))
              << isa_name(isa) << " M=" << M << " group of " << group.size() << " weight " << i;
      }
    }
  }
}

// The packed layouts' kernels on every level that packs (AVX2 with and without AVX-VNNI,
// AVX-512) against the portable kernel on the original blocks, bit for bit.
TEST(MatmulGgml, PrepackedSameBitsAsBlocks) {
  struct Level {
    IsaLevel isa;
    bool vnni;  // AVX-VNNI for the AVX2 level, AVX-512 VNNI for the AVX-512 one
  };
  std::vector<Level> levels;
  for (IsaLevel isa : test::isa_levels()) {
    if (isa == IsaLevel::kScalar) continue;
    levels.push_back({isa, true});
    if ((isa == IsaLevel::kAvx2 && cpu_features().avx_vnni) ||
        (isa == IsaLevel::kAvx512 && cpu_features().avx512vnni))
      levels.push_back({isa, false});
  }
  for (GgmlActivations mode :
       {GgmlActivations::kFp32, GgmlActivations::kInt8, GgmlActivations::kInt8x2}) {
  for (DType t : {DType::kQ4_K, DType::kQ6_K, DType::kQ8_0, DType::kQ5_0, DType::kQ4_0}) {
  ActScope act(mode);
  ThreadPool p1(1), p2(2);
  const bool k = t == DType::kQ4_K || t == DType::kQ6_K;
  for (int64_t K : {int64_t{k ? 256 : 32}, int64_t{k ? 768 : 640}, int64_t{2048}}) {
    for (int64_t N : {1, 17, 40}) {
      const auto wb = random_blocks(t, N, K, 21 + static_cast<uint32_t>(N));
      const WeightMatrix w = ggml_weight(t, N, K, wb.data());
      // M ≥ 4 (K formats: ≥ 16) int8 rows take the AMX-INT8 kernels where usable (DFL_AMX=0:
      // VNNI), up to 64 rows per call: 48 and 64 fill it, 33 splits it.
      const int64_t Ms[] = {1, 2, 3, 5, 16, 17, 33, 48, 64};
      std::vector<std::vector<float>> want;
      {
        test::IsaScope portable(IsaLevel::kScalar);
        for (int64_t M : Ms) {
          const auto x = test::randn(static_cast<size_t>(M * K), 17);
          want.emplace_back(size_t(M * N));
          ops::matmul(x.data(), M, w, want.back().data(), p1);
        }
      }
      for (const Level& level : levels) {
        test::IsaScope scope(level.isa);
        set_avx_vnni_enabled(level.vnni);
        set_avx512_vnni_enabled(level.vnni);
        const PackedWeight pw = prepack_weight(w, &p2);
        if (mode != GgmlActivations::kFp32) {
          EXPECT_EQ(pw.matrix().packed_format,
                    t == DType::kQ4_K ? kPackedQ4K16 : t == DType::kQ6_K ? kPackedQ6K16 : kPackedQ32x16);
        }
        for (size_t mi = 0; mi < std::size(Ms); ++mi) {
          const int64_t M = Ms[mi];
          const auto x = test::randn(static_cast<size_t>(M * K), 17);
          std::vector<float> b(M * N);
          for (ThreadPool* pool : {&p1, &p2}) {
            ops::matmul(x.data(), M, pw.matrix(), b.data(), *pool);
            EXPECT_EQ(0, std::memcmp(want[mi].data(), b.data(), b.size() * 4))
                << dtype_name(t) << " K=" << K << " N=" << N << " M=" << M << " on "
                << isa_name(level.isa) << (level.vnni ? "" : " without VNNI");
          }
        }
        set_avx_vnni_enabled(true);
        set_avx512_vnni_enabled(true);
      }
    }
  }
  }
  }
}

}  // namespace
}  // namespace dfl
