// matmul vs the scalar reference over shape sweeps, every weight format and ISA level, plus the
// batch-invariance checks (row r of an M-row call == the M=1 call, bit for bit, for any M and
// thread count).
//
// Error bounds (NMSE = Σ(y-ref)²/Σref², ref in double):
//   F32 / F16 / F8_E4M3 weights (fp32 math):               < 1e-10
//   BF16 weights: vs ref fed the same bf16-rounded x on AVX-512 (vdpbf16ps), exact x elsewhere:
//                                                            < 1e-10
//   Q8: vs ref on the dequantized Q8 weights (activation quantization only): < 5e-4
//       vs the original bf16 weights (weight + activation quantization):      < 1e-3 (reported)
//       AVX-512 (VNNI, and AMX-INT8 for M >= 8) and portable: bit-identical (same integer dots,
//       same fp sequence)
#include <gtest/gtest.h>

#include <cstring>

#include "core/cpu_features.h"
#include "kernel_test_util.h"
#include "kernels/ops.h"

namespace dfl {
namespace {

using test::nmse;
using test::randn;

// Owns the storage behind a WeightMatrix of the given dtype made from fp32 values.
struct TestWeight {
  std::vector<float> f32;
  std::vector<uint16_t> u16;
  std::vector<uint8_t> u8;
  std::vector<float> scale;
  QuantizedQ8 q8;
  PackedWeight packed;
  WeightMatrix w;
};

// kBF16Pack / kF16Pack: BF16 / F16 through prepack_weight() (the layout this machine's kernel
// streams, where it has one; else unchanged).
enum class Fmt { kF32, kBF16, kF16, kF8, kQ8, kBF16Pack, kF16Pack };
const char* fmt_name(Fmt f) {
  switch (f) {
    case Fmt::kF32: return "F32";
    case Fmt::kBF16: return "BF16";
    case Fmt::kF16: return "F16";
    case Fmt::kF8: return "F8";
    case Fmt::kQ8: return "Q8";
    case Fmt::kBF16Pack: return "BF16-prepacked";
    case Fmt::kF16Pack: return "F16-prepacked";
  }
  return "?";
}

uint8_t f32_to_e4m3_slow(float f) {  // nearest e4m3 by search (tests only)
  uint8_t best = 0;
  float bd = INFINITY;
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) continue;
    const float d = std::fabs(f8e4m3_to_f32(static_cast<uint8_t>(c)) - f);
    if (d < bd) bd = d, best = static_cast<uint8_t>(c);
  }
  return best;
}

void make_weight(TestWeight& t, Fmt fmt, int64_t N, int64_t K, uint32_t seed) {
  std::vector<float> v = randn(N * K, seed, 0.5f);
  t.w = WeightMatrix{};
  t.w.n_out = N;
  t.w.n_in = K;
  switch (fmt) {
    case Fmt::kF32:
      t.f32 = v;
      t.w.dtype = DType::kF32;
      t.w.data = t.f32.data();
      break;
    case Fmt::kBF16:
    case Fmt::kBF16Pack:
    case Fmt::kQ8:
      t.u16.resize(v.size());
      for (size_t i = 0; i < v.size(); ++i) t.u16[i] = f32_to_bf16(v[i]);
      t.w.dtype = DType::kBF16;
      t.w.data = t.u16.data();
      if (fmt == Fmt::kQ8) {
        t.q8 = quantize_q8(t.w);
        t.w = t.q8.matrix();
      }
      if (fmt == Fmt::kBF16Pack) {
        t.packed = prepack_weight(t.w);
        t.w = t.packed.matrix();
      }
      break;
    case Fmt::kF16:
    case Fmt::kF16Pack:
      t.u16.resize(v.size());
      for (size_t i = 0; i < v.size(); ++i) t.u16[i] = f32_to_f16(v[i]);
      t.w.dtype = DType::kF16;
      t.w.data = t.u16.data();
      if (fmt == Fmt::kF16Pack) {
        t.packed = prepack_weight(t.w);
        t.w = t.packed.matrix();
      }
      break;
    case Fmt::kF8: {
      static std::vector<uint8_t> table;  // value → code, computed once per value
      t.u8.resize(v.size());
      for (size_t i = 0; i < v.size(); ++i) t.u8[i] = f32_to_e4m3_slow(v[i] * 64.0f);
      // Small blocks so the test crosses several scale blocks (with ragged edges) on small shapes.
      t.w.scale_block_out = 5;
      t.w.scale_block_in = 24;
      const int64_t gr = (N + 4) / 5, gc = (K + 23) / 24;
      t.scale = randn(gr * gc, seed + 7, 1.0f);
      for (auto& s : t.scale) s = (0.5f + std::fabs(s)) / 64.0f;
      t.w.dtype = DType::kF8E4M3;
      t.w.data = t.u8.data();
      t.w.scale = t.scale.data();
      break;
    }
  }
}

std::vector<float> bf16_round(const std::vector<float>& x) {
  std::vector<float> r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i] = bf16_to_f32(f32_to_bf16(x[i]));
  return r;
}

// What the reference should be fed for `fmt` on `isa`: x rounded to bf16 where the kernel
// multiplies bf16 × bf16 — every AVX-512 BF16 path, and the packed layout on AVX2 too.
std::vector<float> ref_input(const std::vector<float>& x, Fmt fmt, IsaLevel isa) {
  const bool rounded = (fmt == Fmt::kBF16 && isa == IsaLevel::kAvx512) ||
                       (fmt == Fmt::kBF16Pack && isa >= IsaLevel::kAvx2);
  return rounded ? bf16_round(x) : x;
}

double bound(Fmt fmt) { return fmt == Fmt::kQ8 ? 5e-4 : 1e-10; }

TEST(Matmul, MatchesReferenceOverShapes) {
  ThreadPool pool(2);
  const int64_t Ks[] = {1, 7, 32, 33, 64, 130, 257};
  const int64_t Ns[] = {1, 3, 5, 67};
  const int64_t Ms[] = {1, 5, 13};
  for (const test::PathConfig& path : test::matmul_paths()) {
    test::PathScope scope(path);
    const IsaLevel isa = path.isa;
    for (Fmt fmt : {Fmt::kF32, Fmt::kBF16, Fmt::kF16, Fmt::kF8, Fmt::kQ8, Fmt::kBF16Pack, Fmt::kF16Pack}) {
      double num = 0, den = 0;
      for (int64_t K : Ks) {
        for (int64_t N : Ns) {
          TestWeight t;
          make_weight(t, fmt, N, K, static_cast<uint32_t>(K * 131 + N));
          for (int64_t M : Ms) {
            const auto x = randn(M * K, static_cast<uint32_t>(M * 7 + K));
            std::vector<float> y(M * N, NAN), yr(M * N);
            ops::matmul(x.data(), M, t.w, y.data(), pool);
            const auto xr = ref_input(x, fmt, isa);
            ref::matmul(xr.data(), M, t.w, yr.data());
            const double e = nmse(y.data(), yr.data(), y.size());
            // Q8: a handful of outputs gives a noisy NMSE; bound each loosely, the total tightly.
            ASSERT_LT(e, fmt == Fmt::kQ8 ? 2e-2 : bound(fmt))
                << path.name << " " << fmt_name(fmt) << " M=" << M << " N=" << N
                << " K=" << K;
            for (size_t i = 0; i < y.size(); ++i) {
              num += (double(y[i]) - yr[i]) * (double(y[i]) - yr[i]);
              den += double(yr[i]) * yr[i];
            }
          }
        }
      }
      EXPECT_LT(num / den, bound(fmt)) << path.name << " " << fmt_name(fmt) << " overall";
    }
  }
}

TEST(Matmul, RowSweepUpTo70) {
  ThreadPool pool(2);
  const int64_t N = 21, K = 97;
  for (const test::PathConfig& path : test::matmul_paths()) {
    test::PathScope scope(path);
    const IsaLevel isa = path.isa;
    for (Fmt fmt : {Fmt::kF32, Fmt::kBF16, Fmt::kF8, Fmt::kQ8, Fmt::kBF16Pack, Fmt::kF16Pack}) {
      TestWeight t;
      make_weight(t, fmt, N, K, 5);
      const auto x = randn(70 * K, 99);
      const auto xr = ref_input(x, fmt, isa);
      std::vector<float> yr(70 * N);
      ref::matmul(xr.data(), 70, t.w, yr.data());
      for (int64_t M = 1; M <= 70; ++M) {
        std::vector<float> y(M * N, NAN);
        ops::matmul(x.data(), M, t.w, y.data(), pool);
        ASSERT_LT(nmse(y.data(), yr.data(), y.size()), bound(fmt))
            << path.name << " " << fmt_name(fmt) << " M=" << M;
      }
    }
  }
}

// Row r of an M-row call must equal (memcmp) the same row computed alone, whatever M and the
// thread count.
TEST(Matmul, BatchAndThreadInvariant) {
  ThreadPool p1(1), p2(2), p3(3);
  ThreadPool* pools[] = {&p1, &p2, &p3};
  const int64_t shapes[][2] = {{37, 129}, {67, 300}};
  const int64_t Ms[] = {2, 3, 4, 5, 6, 7, 16, 17, 64, 70};
  for (const test::PathConfig& path : test::matmul_paths()) {
    test::PathScope scope(path);
    for (Fmt fmt : {Fmt::kF32, Fmt::kBF16, Fmt::kF16, Fmt::kF8, Fmt::kQ8, Fmt::kBF16Pack, Fmt::kF16Pack}) {
      for (auto& s : shapes) {
        const int64_t N = s[0], K = s[1];
        TestWeight t;
        make_weight(t, fmt, N, K, 11);
        const auto x = randn(70 * K, 3);
        // M = 1 reference rows, single thread.
        std::vector<float> single(70 * N);
        for (int64_t r = 0; r < 70; ++r) ops::matmul(x.data() + r * K, 1, t.w, single.data() + r * N, p1);
        for (ThreadPool* pool : pools) {
          for (int64_t M : Ms) {
            // Use a shifted window of rows so rows land at different positions of the tiles.
            const int64_t off = (70 - M) / 2;
            std::vector<float> y(M * N);
            ops::matmul(x.data() + off * K, M, t.w, y.data(), *pool);
            for (int64_t r = 0; r < M; ++r)
              ASSERT_EQ(0, std::memcmp(y.data() + r * N, single.data() + (off + r) * N, N * 4))
                  << path.name << " " << fmt_name(fmt) << " N=" << N << " K=" << K
                  << " M=" << M << " row " << r << " threads " << pool->n_threads();
          }
        }
      }
    }
  }
}

// Prefill-sized M on the AMX path: the cache-blocked kernel (M >= 64: several 512-row passes,
// several 256-column blocks per thread, K chunks with the partial sums parked in fp32) must give
// every row bit-identical to the same row computed alone, and match the reference.
TEST(Matmul, AmxBlockedPrefillRowsEqualSingleRows) {
  if (!amx_usable()) GTEST_SKIP() << "no AMX on this machine";
  ThreadPool p1(1), p2(2), p3(3);
  const int64_t M = 600, N = 600, K = 333;
  TestWeight t;
  make_weight(t, Fmt::kBF16Pack, N, K, 17);
  const auto x = randn(M * K, 18);
  std::vector<float> single(M * N), ref_y(M * N);
  for (int64_t r = 0; r < M; ++r) ops::matmul(x.data() + r * K, 1, t.w, single.data() + r * N, p1);
  ref::matmul(x.data(), M, t.w, ref_y.data());
  EXPECT_LT(nmse(single.data(), ref_y.data(), single.size()), 1e-4);
  for (ThreadPool* pool : {&p1, &p2, &p3})
    for (int64_t m : {M, int64_t(64), int64_t(513)}) {
      std::vector<float> y(m * N);
      ops::matmul(x.data() + (M - m) * K, m, t.w, y.data(), *pool);
      ASSERT_EQ(0, std::memcmp(y.data(), single.data() + (M - m) * N, y.size() * 4))
          << "M=" << m << " threads " << pool->n_threads();
    }
}

// The FMA form of the packed BF16 kernel (ops.h Bf16Dot::kFma) performs, per output, the
// operations Intel's SDM gives vdpbf16ps: on Intel CPUs the two engines must agree bit for bit
// (so choosing one is a speed decision only); elsewhere (AMD's vdpbf16ps may round otherwise)
// they agree to fp32 rounding. Every row count the tile dispatch distinguishes, ragged K and N.
TEST(Matmul, PackedBf16FmaIsVdpbf16psOnIntel) {
  if (cpu_isa() != IsaLevel::kAvx512) GTEST_SKIP() << "no AVX-512 BF16 on this machine";
  test::PathScope scope({IsaLevel::kAvx512, false, "avx512"});
  ThreadPool pool(2);
  int64_t compared = 0, differing = 0;
  for (int64_t K : {32, 70, 333, 1024})
    for (int64_t N : {16, 67, 200}) {
      TestWeight t;
      make_weight(t, Fmt::kBF16Pack, N, K, static_cast<uint32_t>(N * 7 + K));
      for (int64_t M : {1, 2, 3, 4, 5, 8, 9, 12, 13, 16, 17, 33}) {
        const auto x = randn(M * K, static_cast<uint32_t>(M + K + N));
        std::vector<float> yd(M * N), yf(M * N);
        set_bf16_dot(Bf16Dot::kDpbf16);
        ops::matmul(x.data(), M, t.w, yd.data(), pool);
        set_bf16_dot(Bf16Dot::kFma);
        ops::matmul(x.data(), M, t.w, yf.data(), pool);
        for (size_t i = 0; i < yd.size(); ++i) differing += std::memcmp(&yd[i], &yf[i], 4) != 0;
        compared += static_cast<int64_t>(yd.size());
        // (elsewhere the two may round each pair's sum differently: fp32 rounding apart at most)
        ASSERT_LT(nmse(yf.data(), yd.data(), yd.size()), 1e-8) << "M=" << M << " N=" << N << " K=" << K;
      }
    }
  std::printf("packed BF16, FMA vs vdpbf16ps: %lld of %lld outputs differ (Intel: %d)\n",
              static_cast<long long>(differing), static_cast<long long>(compared),
              cpu_features().intel);
  if (cpu_features().intel) {
    EXPECT_EQ(differing, 0);
  }
}

// The packed 16-bit kernels on AVX2 (cpu/packed_fma_avx2.cc) perform, per output, the operations
// of AVX-512's FMA forms (BF16 pairs; F16 in k order): the same bytes on every row count the pass split distinguishes (G = 4,
// 3, 2, then one tile in equal passes of ≤ 6 rows), ragged K and N, one and two threads. x holds
// the BF16 rounding's edge cases: ties (1 + 2^-8: RNE keeps the even 1), values just past a tie, ±0,
// and a row of denormals only (the instruction reads them as ±0, so that row's outputs are 0;
// unflushed they would sum to a nonzero denormal; F16 multiplies them as they are).
TEST(Matmul, Packed16BitAvx2IsTheAvx512FmaForm) {
  if (cpu_isa() != IsaLevel::kAvx512) GTEST_SKIP() << "no AVX-512 to compare with on this machine";
  ThreadPool p1(1), p2(2);
  int64_t compared = 0;
  for (Fmt fmt : {Fmt::kBF16Pack, Fmt::kF16Pack})
  for (int64_t K : {32, 70, 333, 1024})
    for (int64_t N : {16, 67, 200}) {
      TestWeight t;
      make_weight(t, fmt, N, K, static_cast<uint32_t>(N * 5 + K));
      ASSERT_TRUE(t.packed.repacked());
      for (int64_t M : {1, 2, 3, 4, 5, 6, 7, 8, 12, 13, 16, 17, 33}) {
        auto x = randn(M * K, static_cast<uint32_t>(3 * M + K + N));
        const uint32_t edges[] = {0x3f808000u, 0xbf808000u, 0x3f818000u, 0x3f808001u, 0x00000000u, 0x80000000u};
        for (int64_t i = 0; i < M * K; i += 7) std::memcpy(&x[size_t(i)], &edges[(i / 7) % 6], 4);
        for (int64_t k = 0; k < K; ++k) {  // the last row: denormals of both signs
          const uint32_t d = (k % 2 ? 0x80000000u : 0u) | static_cast<uint32_t>(1 + k * 7919 % 0x7fffff);
          std::memcpy(&x[size_t((M - 1) * K + k)], &d, 4);
        }
        for (ThreadPool* pool : {&p1, &p2}) {
          std::vector<float> y512(M * N), y2(M * N);
          {
            test::PathScope scope({IsaLevel::kAvx512, false, "avx512+bf16-fma", Bf16Dot::kFma});
            ops::matmul(x.data(), M, t.w, y512.data(), *pool);
          }
          {
            test::PathScope scope({IsaLevel::kAvx2, false, "avx2"});
            ops::matmul(x.data(), M, t.w, y2.data(), *pool);
          }
          ASSERT_EQ(0, std::memcmp(y512.data(), y2.data(), y2.size() * 4))
              << fmt_name(fmt) << " M=" << M << " N=" << N << " K=" << K << " threads " << pool->n_threads();
          if (fmt == Fmt::kBF16Pack)
            for (int64_t n = 0; n < N; ++n) ASSERT_EQ(y2[size_t((M - 1) * N + n)], 0.0f) << "denormal row";
          compared += static_cast<int64_t>(y2.size());
        }
      }
    }
  std::printf("packed BF16 and F16, AVX2 vs AVX-512 FMA form: %lld outputs, the same bytes\n",
              static_cast<long long>(compared));
}

// ops::matmul_same_input (a layer's q, k, v or gate and up): each output bit-identical to its own
// ops::matmul, on every path — packed BF16 (without AMX: both product forms) or packed F16
// weights of one input run as one pool job on AVX-512 and AVX2, and a group that mixes formats or
// inputs falls back to one matmul after another. Shapes with partial tiles and partial tile groups.
TEST(Matmul, SameInputMatmulsEqualOneByOne) {
  ThreadPool pool(2);
  const Bf16Dot dot_before = bf16_dot();
  for (const test::PathConfig& path : test::matmul_paths()) {
    test::PathScope scope(path);
    constexpr int64_t K = 333;
    TestWeight a, b, c, f, h1, h2;
    make_weight(a, Fmt::kBF16Pack, 200, K, 1);
    make_weight(b, Fmt::kBF16Pack, 67, K, 2);
    make_weight(c, Fmt::kBF16Pack, 1003, K, 3);
    make_weight(f, Fmt::kF32, 40, K, 4);
    make_weight(h1, Fmt::kF16Pack, 200, K, 5);
    make_weight(h2, Fmt::kF16Pack, 67, K, 6);
    for (Bf16Dot dot : {Bf16Dot::kDpbf16, Bf16Dot::kFma}) {
      set_bf16_dot(dot);
      for (int64_t M : {1, 3, 16, 17}) {
        const auto x = randn(M * K, static_cast<uint32_t>(M + 5));
        for (const std::vector<const TestWeight*>& group :
             {std::vector<const TestWeight*>{&a, &b}, {&a, &b, &c}, {&c, &a, &b, &c}, {&a, &f}, {&h1, &h2},
              {&h2, &h1, &h2}, {&a, &h1}}) {
          std::vector<std::vector<float>> want, got;
          std::vector<ops::MatmulOut> outs;
          for (const TestWeight* t : group) {
            want.emplace_back(size_t(M * t->w.n_out));
            got.emplace_back(size_t(M * t->w.n_out), -7.0f);
            ops::matmul(x.data(), M, t->w, want.back().data(), pool);
          }
          for (size_t i = 0; i < group.size(); ++i) outs.push_back({&group[i]->w, got[i].data()});
          ops::matmul_same_input(x.data(), M, outs.data(), int(outs.size()), pool);
          for (size_t i = 0; i < group.size(); ++i)
            ASSERT_EQ(0, std::memcmp(want[i].data(), got[i].data(), want[i].size() * 4))
                << path.name << " dot " << int(dot) << " M=" << M << " group of " << group.size()
                << " weight " << i;
        }
      }
    }
  }
  set_bf16_dot(dot_before);
}

TEST(Matmul, Q8ErrorVsBf16IsSmall) {
  ThreadPool pool(2);
  const int64_t M = 8, N = 96, K = 1000;
  TestWeight tb, tq;
  make_weight(tb, Fmt::kBF16, N, K, 42);
  make_weight(tq, Fmt::kQ8, N, K, 42);  // same values, quantized
  const auto x = randn(M * K, 43);
  std::vector<float> yb(M * N), yq(M * N);
  ref::matmul(x.data(), M, tb.w, yb.data());
  ops::matmul(x.data(), M, tq.w, yq.data(), pool);
  const double e = nmse(yq.data(), yb.data(), yb.size());
  std::printf("Q8 vs bf16 weights, NMSE = %.3g (K=%lld)\n", e, static_cast<long long>(K));
  EXPECT_LT(e, 1e-3);
  const int64_t Kp = (K + kQ8Block - 1) / kQ8Block * kQ8Block;
  EXPECT_EQ(tq.q8.bytes(), static_cast<size_t>(N * Kp + N * (Kp / kQ8Block) * 4));
}

// The Q8 format rounds the same way on every level (exact int32 block dots, then
// acc + dot * (x_scale * w_scale)): AVX-512 VNNI and portable results are bit-identical. Also
// checks the tiled layout against the row-major meaning of the weights (ref::weight_at) with
// N and K that are not multiples of the 16-row tile / 64-wide block.
TEST(Matmul, Q8SameBitsOnEveryIsaLevelAndLayoutRoundTrips) {
  ThreadPool pool(2);
  for (const auto& nk : {std::pair<int64_t, int64_t>{37, 200}, {16, 64}, {1, 1}, {70, 1000}}) {
    const int64_t N = nk.first, K = nk.second, M = 9;
    TestWeight tb, tq;
    make_weight(tb, Fmt::kBF16, N, K, 77);
    make_weight(tq, Fmt::kQ8, N, K, 77);
    const int64_t nb = (K + kQ8Block - 1) / kQ8Block, n_tiles = (N + kQ8TileN - 1) / kQ8TileN;
    EXPECT_EQ(tq.q8.q.size(), static_cast<size_t>(n_tiles * kQ8TileN * nb * kQ8Block));
    EXPECT_EQ(tq.q8.d.size(), static_cast<size_t>(n_tiles * kQ8TileN * nb));
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) {
        const float w = ref::weight_at(tb.w, n, k), wq = ref::weight_at(tq.w, n, k);
        const float d = tq.q8.d[((n / kQ8TileN) * nb + k / kQ8Block) * kQ8TileN + n % kQ8TileN];
        ASSERT_LE(std::fabs(w - wq), 0.5f * d * 1.0001f) << "n=" << n << " k=" << k;
      }
    // M up to 40 rows: the register micro-kernel (M ≤ 8, M > 32) and the block-outer one
    // (8 < M ≤ 32, accumulators in memory) on the AVX-512 level.
    const int64_t Mmax = 40;
    const auto x = randn(Mmax * K, 5);
    for (int64_t Mr : {M, int64_t(1), int64_t(8), int64_t(16), int64_t(31), int64_t(32), Mmax}) {
      std::vector<std::vector<float>> ys;
      for (IsaLevel isa : test::isa_levels()) {
        test::IsaScope scope(isa);
        ys.emplace_back(Mr * N);
        ops::matmul(x.data(), Mr, tq.w, ys.back().data(), pool);
      }
      if (cpu_features().avx_vnni && cpu_isa() >= IsaLevel::kAvx2) {  // AVX2 without AVX-VNNI too
        test::IsaScope scope(IsaLevel::kAvx2);
        set_avx_vnni_enabled(false);
        ys.emplace_back(Mr * N);
        ops::matmul(x.data(), Mr, tq.w, ys.back().data(), pool);
        set_avx_vnni_enabled(true);
      }
      if (cpu_isa() == IsaLevel::kAvx512) {  // AVX-512 without its VNNI (Skylake-SP)
        set_avx512_vnni_enabled(false);
        ys.emplace_back(Mr * N);
        ops::matmul(x.data(), Mr, tq.w, ys.back().data(), pool);
        set_avx512_vnni_enabled(true);
      }
      for (size_t l = 1; l < ys.size(); ++l)
        ASSERT_EQ(0, std::memcmp(ys[0].data(), ys[l].data(), Mr * N * 4)) << "level " << l << " N=" << N << " M=" << Mr;
    }
  }
}

// Q8 on AMX-INT8 (cpu/q8_amx.cc, M >= 8 where AMX is usable) against the VNNI kernel (AMX off)
// and the portable one: every row of every M, bit for bit, on 1/2/3 threads. K covers 1..16
// blocks (the kernel's 4-deep block pipeline with short tails), N ragged 16-row tiles, M up to 50
// (several 16-row blocks with partial ones), rows shifted to land at every tile position.
TEST(Matmul, Q8AmxInt8BitIdenticalToVnniAndPortable) {
  set_amx_enabled(true);
  if (!amx_usable() || !cpu_features().amx_int8) GTEST_SKIP() << "no AMX-INT8 on this machine";
  ThreadPool p1(1), p2(2), p3(3);
  ThreadPool* pools[] = {&p1, &p2, &p3};
  for (const auto& nk : {std::pair<int64_t, int64_t>{16, 1}, {37, 64}, {21, 65}, {50, 130},
                         {16, 200}, {33, 257}, {70, 1000}}) {
    const int64_t N = nk.first, K = nk.second, rows = 60;
    TestWeight tq;
    make_weight(tq, Fmt::kQ8, N, K, 123 + static_cast<uint32_t>(K));
    const auto x = randn(rows * K, 321 + static_cast<uint32_t>(N), 2.0f);
    // The same rows one at a time on the VNNI kernel and on the portable one.
    std::vector<float> vnni(rows * N), portable(rows * N);
    set_amx_enabled(false);
    ops::matmul(x.data(), rows, tq.w, vnni.data(), p1);
    {
      test::IsaScope scope(IsaLevel::kScalar);
      ops::matmul(x.data(), rows, tq.w, portable.data(), p1);
    }
    set_amx_enabled(true);
    ASSERT_EQ(0, std::memcmp(vnni.data(), portable.data(), vnni.size() * 4)) << "N=" << N << " K=" << K;
    int n = 0;
    for (int64_t M = 1; M <= 50; M += (M < 20 ? 1 : 7)) {
      const int64_t off = (M * 7) % (rows - M + 1);
      ThreadPool& pool = *pools[n++ % 3];
      std::vector<float> y(M * N, NAN);
      ops::matmul(x.data() + off * K, M, tq.w, y.data(), pool);
      ASSERT_EQ(0, std::memcmp(y.data(), vnni.data() + off * N, y.size() * 4))
          << "N=" << N << " K=" << K << " M=" << M << " threads " << pool.n_threads();
    }
  }
}

TEST(Matmul, PrepackUsesAmxWhereAvailable) {
  TestWeight t;
  make_weight(t, Fmt::kBF16Pack, 40, 70, 1);
  std::printf("AMX usable: %d, prepacked: %d\n", amx_usable(), t.packed.repacked());
  EXPECT_EQ(t.packed.repacked(), amx_usable() || cpu_isa() >= IsaLevel::kAvx2);
  // Without AMX, AVX-512 and AVX2 still pack (their lanes-are-outputs kernels); the scalar
  // level does not.
  for (IsaLevel isa : test::isa_levels()) {
    test::PathScope scope({isa, false, isa_name(isa)});
    TestWeight t2;
    make_weight(t2, Fmt::kBF16Pack, 40, 70, 1);
    EXPECT_EQ(t2.packed.repacked(), isa >= IsaLevel::kAvx2) << isa_name(isa);
    make_weight(t2, Fmt::kF16Pack, 40, 70, 1);
    EXPECT_EQ(t2.packed.repacked(), isa >= IsaLevel::kAvx2) << isa_name(isa) << " F16";
  }
}

TEST(Matmul, ThreadPoolRunsEveryChunkOnce) {
  for (int nt : {1, 2, 3}) {
    ThreadPool pool(nt);
    for (int rep = 0; rep < 50; ++rep) {
      std::vector<int> hit(1000, 0);
      pool.parallel_for(1000, [&](int64_t b, int64_t e, int) {
        for (int64_t i = b; i < e; ++i) hit[i]++;
      }, 7);
      for (int h : hit) ASSERT_EQ(h, 1);
    }
  }
}

}  // namespace
}  // namespace dfl
