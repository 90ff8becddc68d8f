// ops::matmul_argmax against its definition — ops::argmax over ops::matmul's row — on every
// kernel path, raw and prepacked blocks, every activation mode; near-ties built so that the q1
// half alone picks wrongly (the screen must finish them exactly), exact ties (the first index
// wins), non-finite rows, and rows whose screen would not pay (computed in full).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/ggml_internal.h"
#include "kernels/ops.h"
#include "kernel_test_util.h"

namespace dfl {
namespace {

using test::ActScope;

std::vector<int32_t> reference_argmax(const float* x, int64_t M, const WeightMatrix& w,
                                      ThreadPool& pool) {
  std::vector<float> y(static_cast<size_t>(M * w.n_out));
  ops::matmul(x, M, w, y.data(), pool);
  std::vector<int32_t> r(static_cast<size_t>(M));
  for (int64_t m = 0; m < M; ++m) r[m] = int32_t(ops::argmax(y.data() + m * w.n_out, w.n_out));
  return r;
}

std::vector<int32_t> screened_argmax(const float* x, int64_t M, const WeightMatrix& w,
                                     const ops::ArgmaxScreen& s, ThreadPool& pool) {
  std::vector<int32_t> r(static_cast<size_t>(M), -7);
  ops::matmul_argmax(x, M, w, s, r.data(), pool);
  return r;
}

TEST(MatmulArgmax, SameIndexAsTheLogitsOnEveryPath) {
  ThreadPool pool(2);
  for (GgmlActivations mode :
       {GgmlActivations::kInt8x2, GgmlActivations::kInt8, GgmlActivations::kFp32}) {
    ActScope act(mode);
    for (DType t : {DType::kQ8_0, DType::kQ4_0, DType::kQ5_0, DType::kQ6_K, DType::kQ4_K}) {
      const int64_t K = dtype_block_elems(t) == 256 ? 768 : 640, N = 1501;
      const auto wb = test::random_blocks(t, N, K, 5 + static_cast<uint32_t>(t));
      const WeightMatrix w = ggml_weight(t, N, K, wb.data());
      const ops::ArgmaxScreen screen = ops::argmax_screen(w, &pool);
      EXPECT_EQ(screen.empty(), t == DType::kQ4_K) << dtype_name(t);  // two terms per block
      const PackedWeight pw = prepack_weight(w, &pool);
      for (const test::PathConfig& path : test::matmul_paths()) {
        test::PathScope scope(path);
        for (int64_t M : {1, 3, 16, 17, 40, 64}) {
          const auto x = test::randn(static_cast<size_t>(M * K), 11 + uint32_t(M));
          const auto want = reference_argmax(x.data(), M, w, pool);
          EXPECT_EQ(screened_argmax(x.data(), M, w, screen, pool), want)
              << dtype_name(t) << " " << path.name << " M=" << M;
          EXPECT_EQ(screened_argmax(x.data(), M, pw.matrix(), screen, pool), want)
              << dtype_name(t) << " prepacked " << path.name << " M=" << M;
        }
      }
    }
  }
}

// Q8_0, K = 640 (20 blocks). x: per block an element 127·s (so d1 = s) and the others s·n_k + ε_k
// with |ε_k| < 0.45 s: the q1 half is exactly n, the q2 half carries ε. Rows 0..kNear−1 are a
// base row (scale 0.05, quants 10·n_k, 0 at the 127·s elements) with the quant at one
// candidate position k raised by c: output = base + 0.05·s·c·(n_k + ε_k) exactly, but base +
// 0.05·s·c·n_k for the q1 half. One row has c·n = 7 (n = 7, c = 1), the others c·n = 6 (n = 2,
// c = 3 / n = 3, c = 2 / n = 6, c = 1): the q1 half always picks the 7, the exact output often a
// 6 with a large c·ε (7.2 from 6 + 3·0.4). Some rows repeat a position and c (identical rows:
// exact ties). The other rows are random with scale 0.001, far below.
constexpr int64_t kK = 640, kN = 2048, kNear = 48;

struct NearTies {
  std::vector<uint8_t> blocks;
  std::vector<float> x;  // [kRows, kK]
  static constexpr int64_t kRows = 24;
};

NearTies near_ties() {
  std::mt19937 rng(99);
  const float s = 0x1p-4f;
  std::uniform_int_distribution<int> nd(-2, 2);
  std::uniform_real_distribution<float> ed(-0.45f, 0.45f);
  std::vector<int> n(kK), cand, inc;
  for (int64_t k = 0; k < kK; ++k) n[k] = (k % 32 == 0) ? 127 : nd(rng);
  const int kinds[4][2] = {{2, 3}, {3, 2}, {6, 1}, {7, 1}};  // {n, c}
  for (int i = 0; i < kNear; ++i) {
    const int kind = i == 0 ? 3 : i % 3;
    int k;
    do k = int(rng() % kK); while (k % 32 == 0 || std::count(cand.begin(), cand.end(), k));
    if (i % 8 == 7) {  // a repeated candidate: an identical row
      cand.push_back(cand[size_t(i - 3)]);
      inc.push_back(inc[size_t(i - 3)]);
      continue;
    }
    n[size_t(k)] = kinds[kind][0];
    cand.push_back(k);
    inc.push_back(kinds[kind][1]);
  }
  NearTies t;
  t.blocks = test::random_blocks(DType::kQ8_0, kN, kK, 3);
  for (int64_t r = 0; r < kN; ++r)
    for (int64_t b = 0; b < kK / 32; ++b) {
      uint8_t* blk = t.blocks.data() + (r * (kK / 32) + b) * 34;
      test::put_f16(blk, r < kNear ? 0.05f : 0.001f);
      for (int i = 0; r < kNear && i < 32; ++i) {
        const int64_t k = b * 32 + i;
        int q = n[size_t(k)] == 127 ? 0 : 10 * n[size_t(k)];
        if (k == cand[size_t(r)]) q += inc[size_t(r)];
        blk[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(q));
      }
    }
  t.x.resize(size_t(NearTies::kRows * kK));
  for (int64_t m = 0; m < NearTies::kRows; ++m)
    for (int64_t k = 0; k < kK; ++k)
      t.x[size_t(m * kK + k)] = n[size_t(k)] == 127 ? 127 * s : s * (float(n[size_t(k)]) + ed(rng));
  return t;
}

TEST(MatmulArgmax, NearTiesTheQ1HalfGetsWrongAreFinishedExactly) {
  ThreadPool pool(2);
  const NearTies t = near_ties();
  const WeightMatrix w = ggml_weight(DType::kQ8_0, kN, kK, t.blocks.data());
  const ops::ArgmaxScreen screen = ops::argmax_screen(w, &pool);
  const PackedWeight pw = prepack_weight(w, &pool);
  const int64_t M = NearTies::kRows;
  for (const test::PathConfig& path : test::matmul_paths()) {
    test::PathScope scope(path);
    std::vector<int32_t> q1_only, want;
    {
      ActScope act(GgmlActivations::kInt8);  // the q1 half alone
      q1_only = reference_argmax(t.x.data(), M, w, pool);
    }
    ActScope act(GgmlActivations::kInt8x2);
    want = reference_argmax(t.x.data(), M, w, pool);
    int wrong = 0;
    for (int64_t m = 0; m < M; ++m) {
      ASSERT_LT(want[m], kNear) << "the construction: a near-tie row must win";
      wrong += q1_only[m] != want[m];
    }
    EXPECT_GE(wrong, M / 4) << "the construction: the q1 half alone must pick wrongly";
    const ops::ArgmaxStats before = ops::argmax_stats();
    EXPECT_EQ(screened_argmax(t.x.data(), M, w, screen, pool), want) << path.name;
    EXPECT_EQ(screened_argmax(t.x.data(), M, pw.matrix(), screen, pool), want) << path.name;
    const ops::ArgmaxStats after = ops::argmax_stats();
    EXPECT_EQ(after.screened_rows - before.screened_rows, uint64_t(2 * M)) << path.name;
    EXPECT_EQ(after.full_rows, before.full_rows) << path.name;
    // Every near-tie row is a candidate, the random rows are not.
    EXPECT_GE(after.candidates - before.candidates, uint64_t(2 * M * kNear)) << path.name;
    EXPECT_LT(after.candidates - before.candidates, uint64_t(2 * M * (kNear + 64))) << path.name;
  }
}

TEST(MatmulArgmax, IdenticalRowsGiveTheFirstIndex) {
  ThreadPool pool(2);
  ActScope act(GgmlActivations::kInt8x2);
  auto wb = test::random_blocks(DType::kQ8_0, 500, kK, 8);
  const int64_t rb = (kK / 32) * 34;
  for (int64_t b = 0; b < kK / 32; ++b) test::put_f16(wb.data() + 7 * rb + b * 34, 0.05f);
  for (int64_t r : {19, 300, 301}) std::copy_n(wb.data() + 7 * rb, rb, wb.data() + r * rb);
  const WeightMatrix w = ggml_weight(DType::kQ8_0, 500, kK, wb.data());
  std::vector<float> x(static_cast<size_t>(3 * kK));
  dequantize_rows(w, 7, 1, x.data());  // x = row 7: rows 7, 19, 300, 301 are the best
  dequantize_rows(w, 7, 1, x.data() + kK);
  for (int64_t k = kK; k < 2 * kK; ++k) x[size_t(k)] *= 3.0f;
  dequantize_rows(w, 7, 1, x.data() + 2 * kK);
  const ops::ArgmaxScreen screen = ops::argmax_screen(w, &pool);
  for (const test::PathConfig& path : test::matmul_paths()) {
    test::PathScope scope(path);
    EXPECT_EQ(screened_argmax(x.data(), 3, w, screen, pool), (std::vector<int32_t>{7, 7, 7}))
        << path.name;
  }
}

// kTied identical Q8_0 rows of kK: every output ties with every other.
constexpr int64_t kTied = 900;
std::vector<uint8_t> all_tied_blocks() {
  const auto row = test::random_blocks(DType::kQ8_0, 1, kK, 4);
  std::vector<uint8_t> same;
  for (int64_t r = 0; r < kTied; ++r) same.insert(same.end(), row.begin(), row.end());
  return same;
}

TEST(MatmulArgmax, NonFiniteAndAllTiedRowsAreComputedInFull) {
  ThreadPool pool(2);
  ActScope act(GgmlActivations::kInt8x2);
  // Every row identical: every output is a candidate, more than a screen is worth.
  const std::vector<uint8_t> same = all_tied_blocks();
  const WeightMatrix w = ggml_weight(DType::kQ8_0, kTied, kK, same.data());
  const ops::ArgmaxScreen screen = ops::argmax_screen(w, &pool);
  auto x = test::randn(size_t(4 * kK), 2);
  x[5] = INFINITY;                          // row 0
  x[kK + 9] = NAN;                          // row 1
  x[2 * kK + 3] = 3e38f;                    // row 2: finite, y1 huge
  const ops::ArgmaxStats before = ops::argmax_stats();
  EXPECT_EQ(screened_argmax(x.data(), 4, w, screen, pool), reference_argmax(x.data(), 4, w, pool));
  EXPECT_EQ(ops::argmax_stats().full_rows - before.full_rows, 4u);
}

// Flat rows (every output tied) fall back every time; after a few such calls the screen steps
// aside for a while (logits path: no double work), and the picks stay the same.
TEST(MatmulArgmax, AScreenThatKeepsFailingStepsAside) {
  ThreadPool pool(2);
  ActScope act(GgmlActivations::kInt8x2);
  const std::vector<uint8_t> same = all_tied_blocks();
  const WeightMatrix w = ggml_weight(DType::kQ8_0, kTied, kK, same.data());
  const ops::ArgmaxScreen screen = ops::argmax_screen(w, &pool);
  const auto x = test::randn(size_t(2 * kK), 3);
  const auto want = reference_argmax(x.data(), 2, w, pool);
  uint64_t last = ops::argmax_stats().full_rows, grew = 0;
  for (int call = 0; call < 20; ++call) {
    EXPECT_EQ(screened_argmax(x.data(), 2, w, screen, pool), want);
    const uint64_t now = ops::argmax_stats().full_rows;
    grew += now > last;
    last = now;
  }
  EXPECT_LE(grew, 8u) << "the screen kept running on rows it cannot settle";
  EXPECT_GE(grew, 3u);
}

// A plane test's picks: under kInt8x2 and kInt8 (y = the q1 half alone, which the plane screens
// too), on the AVX2 and AVX-512 paths, each with and without its VNNI (AMX off — the plane for
// every call — then on where usable: a call that takes the AMX kernel screens on it instead
// under kInt8x2, takes the logits under kInt8, as where ops::int8_plane_pays says no),
// M = 1, 3, 16, 17, 33, raw and
// prepacked w, row m of x = mask(k)·(1 + 0.25·(m % 5)) (rows differ in scale only): every pick is
// `winner` and equals the logits', every row screened, on the plane unless AMX took the call,
// none in full; `finished`(M), when given, the outputs finished with their q2 half (kInt8x2).
template <class Mask>
void expect_plane_picks(const WeightMatrix& w, const ops::ArgmaxScreen& screen, int64_t winner,
                        Mask&& mask, int64_t finished_per_row, ThreadPool& pool) {
  const int64_t K = w.n_in;
  const PackedWeight pw = prepack_weight(w, &pool);
  const std::vector<std::pair<GgmlActivations, test::PathConfig>> runs = [] {
    std::vector<std::pair<GgmlActivations, test::PathConfig>> r;
    for (const GgmlActivations mode : {GgmlActivations::kInt8x2, GgmlActivations::kInt8})
      for (const test::PathConfig& path : test::ggml_paths())
        if (path.isa >= IsaLevel::kAvx2) r.emplace_back(mode, path);
    return r;
  }();
  for (const auto& [mode, path] : runs) {
    ActScope act(mode);
    const bool x2 = mode == GgmlActivations::kInt8x2;
    test::PathScope scope(path);
    for (int64_t M : {1, 3, 16, 17, 33}) {
      std::vector<float> x(size_t(M * K));
      for (int64_t m = 0; m < M; ++m)
        for (int64_t k = 0; k < K; ++k) x[size_t(m * K + k)] = mask(k) * (1.0f + 0.25f * float(m % 5));
      const auto want = reference_argmax(x.data(), M, w, pool);
      ASSERT_EQ(want, std::vector<int32_t>(size_t(M), int32_t(winner))) << "the construction";
      for (const WeightMatrix* wm : {&w, &pw.matrix()}) {
        // kInt8 where the plane does not pay: the logits (nothing screened)
        const bool amx = ops::ggml_amx_for(*wm, std::min<int64_t>(M, cpu::amx::kGgmlAmxMaxRows), int8_isa());
        const bool logits = !x2 && (amx || !ops::int8_plane_pays(w.dtype, M));
        EXPECT_TRUE(path.amx || !amx) << path.name;
        const ops::ArgmaxStats before = ops::argmax_stats();
        const std::string at = path.name + (x2 ? " int8x2" : " int8") + " M=" + std::to_string(M);
        EXPECT_EQ(screened_argmax(x.data(), M, *wm, screen, pool), want) << at;
        const ops::ArgmaxStats after = ops::argmax_stats();
        EXPECT_EQ(after.plane_rows - before.plane_rows, amx || logits ? 0u : uint64_t(M)) << at;
        EXPECT_EQ(after.full_rows, before.full_rows) << at;
        EXPECT_EQ(after.screened_rows - before.screened_rows, logits ? 0u : uint64_t(M)) << at;
        if (finished_per_row > 0 && !amx && x2) {
          EXPECT_EQ(after.candidates - before.candidates, uint64_t(finished_per_row * M)) << at;
        }
      }
    }
  }
}

// The 6-bit plane of a Q8_0 head (AVX2 and AVX-512): a row whose dropped low bits all lean its way must
// stay a candidate. x = all ones (q1 exact, q2 = 0). Row kA: q = 23 = 4·5 + 3 everywhere: y =
// 0.01·640·23 = 147.2, but the plane reads 4·5 + 1.5: ŷ1 = 137.6. Row kB: q = 22 (h 5, l 2) on
// 600 elements and 24 (h 6, l 0) on 40: y = 141.6 < 147.2, ŷ1 = 139.2 > 137.6 — on the plane
// alone kB wins; only the bound term P·||x̂1|| keeps kA. Row kA2 repeats kA (an exact tie: kA
// wins). The other rows are random at scale 0.001. N = 1003: a partial last tile.
TEST(MatmulArgmax, PlaneRowsWhoseLowBitsLeanTheirWayStayCandidates) {
  if (cpu_isa() < IsaLevel::kAvx2) GTEST_SKIP() << "the plane is built on AVX2 and AVX-512 machines";
  ThreadPool pool(2);
  ActScope act(GgmlActivations::kInt8x2);
  constexpr int64_t N = 1003, nb = kK / 32, kA = 611, kA2 = 998, kB = 5;
  auto wb = test::random_blocks(DType::kQ8_0, N, kK, 12);
  for (int64_t r = 0; r < N; ++r)
    for (int64_t b = 0; b < nb; ++b) test::put_f16(wb.data() + (r * nb + b) * 34, 0.001f);
  for (int64_t r : {kA, kA2, kB})
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* blk = wb.data() + (r * nb + b) * 34;
      test::put_f16(blk, 0.01f);
      for (int i = 0; i < 32; ++i) {
        const int64_t k = 32 * b + i;
        blk[2 + i] = uint8_t(r == kB ? (k % 16 == 0 ? 24 : 22) : 23);
      }
    }
  const WeightMatrix w = ggml_weight(DType::kQ8_0, N, kK, wb.data());
  const ops::ArgmaxScreen screen = ops::argmax_screen(w, &pool);
  ASSERT_TRUE(screen.plane) << "a Q8_0 screen on AVX2 / AVX-512 has its plane";
  expect_plane_picks(w, screen, kA, [](int64_t) { return 1.0f; }, 0, pool);
  // On the portable level the same screen runs without its plane, with the same picks.
  test::IsaScope portable(IsaLevel::kScalar);
  const std::vector<float> x(size_t(2 * kK), 1.0f);
  const ops::ArgmaxStats before = ops::argmax_stats();
  EXPECT_EQ(screened_argmax(x.data(), 2, w, screen, pool), (std::vector<int32_t>{int32_t(kA), int32_t(kA)}));
  EXPECT_EQ(ops::argmax_stats().plane_rows, before.plane_rows);
}

// The screens' exact finish on AVX-512 (cpu::avx512::ggml_row_dot): one output of one int8 row
// by the row kernels, bit for bit the matmul's output (prepacked weights: the tile kernels).
TEST(MatmulArgmax, RowDotIsTheMatmulsBits) {
  if (cpu_isa() != IsaLevel::kAvx512) GTEST_SKIP() << "an AVX-512 kernel";
  ThreadPool pool(2);
  ActScope act(GgmlActivations::kInt8);
  test::IsaScope isa(IsaLevel::kAvx512);
  constexpr int64_t K = 512, N = 37, M = 5;
  for (DType t : {DType::kQ8_0, DType::kQ4_0, DType::kQ5_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    const auto wb = test::random_blocks(t, N, K, 40 + static_cast<uint32_t>(t));
    const WeightMatrix w = ggml_weight(t, N, K, wb.data());
    const PackedWeight pw = prepack_weight(w, &pool);
    const auto x = test::randn(size_t(M * K), 41);
    std::vector<float> y(size_t(M * N));
    ops::matmul(x.data(), M, pw.matrix(), y.data(), pool);
    ops::GgmlActRows a;
    a.reserve(M, K, ops::act_block(t));
    a.quantize(x.data(), M, 0, nullptr, IsaLevel::kAvx512, pool);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        const float v = cpu::avx512::ggml_row_dot(a.view(m), w, n), want = y[size_t(m * N + n)];
        EXPECT_EQ(std::memcmp(&v, &want, 4), 0) << dtype_name(t) << " m=" << m << " n=" << n << ": " << v << " vs " << want;
      }
  }
}

// One Q6_K superblock (ggml's block_q6_K: ql[128], qh[64], scales[16], d f16) from d, the 16
// sub-block scales and the 256 values v ∈ [−32, 31]: element e is d·sc[e / 16]·v[e].
void put_q6k(uint8_t* blk, float d, const int8_t* sc, const int* v) {
  std::memset(blk, 0, 210);
  for (int e = 0; e < 256; ++e) {  // e = 128n + 32i + l: ql[64n + 32(i % 2) + l], qh[32n + l]
    const int u = v[e] + 32, n = e / 128, i = (e % 128) / 32, l = e % 32;
    blk[64 * n + 32 * (i % 2) + l] |= uint8_t(i < 2 ? (u & 15) : (u & 15) << 4);
    blk[128 + 32 * n + l] |= uint8_t(((u >> 4) & 3) << (2 * i));
  }
  std::memcpy(blk + 192, sc, 16);
  test::put_f16(blk + 208, d);
}

// The 6-bit plane of a Q6_K head (AVX-512: the head of most Q4_K_M files), made from its
// dequantized values (ggml_argmax.cc, "Q6_K heads"): a row the plane reads high must not hide
// the true winner it reads low. K = 512, d = 1/64; x = 1 on the odd sub-blocks of 16, 0 on the
// even ones (x̂1 exact). Row kA: every value 31 (sc 64, v 31): the plane's scale rounds 31/127 up
// to 0.244140625 and reads q = 127 as 125.5·that = 30.640, so y = 256·31 = 7936, ŷ1 = 7843.8.
// Row kB: even sub-blocks 31.125 (sc 83, v 24: they set the 32-block's plane scale to
// 0.2451171875, x = 0 there), odd ones 30.5 (sc 122, v 16: q = 124, read as 125.5·0.2451 =
// 30.762): y = 7808 < 7936, ŷ1 = 7875.1 > 7843.8 — on the plane alone kB wins. kA2 repeats kA
// (the first wins). The other rows are random at d = 1e-4 (|y| ≤ ~100). N = 1003.
TEST(MatmulArgmax, Q6kPlaneRowsReadHighDoNotHideTheWinner) {
  if (cpu_isa() < IsaLevel::kAvx2) GTEST_SKIP() << "the plane is built on AVX2 and AVX-512 machines";
  ThreadPool pool(2);
  ActScope act(GgmlActivations::kInt8x2);
  constexpr int64_t N = 1003, K = 512, ns = K / 256, kA = 611, kA2 = 998, kB = 5;
  auto wb = test::random_blocks(DType::kQ6_K, N, K, 21);
  for (int64_t r = 0; r < N; ++r)
    for (int64_t s = 0; s < ns; ++s) test::put_f16(wb.data() + (r * ns + s) * 210 + 208, 1e-4f);
  for (int64_t r : {kA, kA2, kB})
    for (int64_t s = 0; s < ns; ++s) {
      int8_t sc[16];
      int v[256];
      for (int j = 0; j < 16; ++j) sc[j] = int8_t(r == kB ? (j % 2 ? 122 : 83) : 64);
      for (int e = 0; e < 256; ++e) v[e] = r == kB ? ((e / 16) % 2 ? 16 : 24) : 31;
      put_q6k(wb.data() + (r * ns + s) * 210, 1.0f / 64, sc, v);
    }
  const WeightMatrix w = ggml_weight(DType::kQ6_K, N, K, wb.data());
  const ops::ArgmaxScreen screen = ops::argmax_screen(w, &pool);
  ASSERT_TRUE(screen.plane) << "a Q6_K screen on AVX2 / AVX-512 has its plane";
  // kA, kA2 and kB pass the plane's screen; on their exact q1 halves kB falls out, so kA and
  // kA2 alone are finished (without the plane kB never passes).
  expect_plane_picks(w, screen, kA, [](int64_t k) { return (k / 16) % 2 ? 1.0f : 0.0f; }, 2, pool);
}

// BF16 heads (prepacked: the packed kernels of AVX-512 without AMX and of AVX2) and F16 heads
// (prepacked: their F16 form) are screened on a 6-bit plane of their own (ggml_argmax.cc, "BF16 heads", "F16
// heads"); the screen is built with AMX off, as the engine on a machine without AMX builds it.
// The tests below run both dtypes.
struct Head16 {
  std::vector<uint16_t> w;  // [N, K] bf16 or f16
  PackedWeight packed;
  ops::ArgmaxScreen screen;
};
Head16 head16(std::vector<float> v, int64_t N, int64_t K, ThreadPool& pool, DType dt = DType::kBF16) {
  Head16 h;
  h.w.resize(v.size());
  for (size_t i = 0; i < v.size(); ++i) h.w[i] = dt == DType::kF16 ? f32_to_f16(v[i]) : f32_to_bf16(v[i]);
  WeightMatrix w;
  w.dtype = dt;
  w.n_out = N;
  w.n_in = K;
  w.data = h.w.data();
  set_amx_enabled(false);
  h.packed = prepack_weight(w, &pool);
  h.screen = ops::argmax_screen(h.packed.matrix(), &pool);
  set_amx_enabled(true);
  return h;
}
constexpr DType kHeadDtypes[] = {DType::kBF16, DType::kF16};

TEST(MatmulArgmax, Head16SameIndexAsTheLogitsOnEveryPath) {
  if (cpu_isa() < IsaLevel::kAvx2) GTEST_SKIP() << "BF16 heads are screened on AVX2 and AVX-512";
  ThreadPool pool(2);
  constexpr int64_t N = 1501, K = 640;
  for (DType dt : kHeadDtypes) {
    const Head16 h = head16(test::randn(size_t(N * K), 21, 0.5f), N, K, pool, dt);
    ASSERT_TRUE(h.screen.plane) << "a prepacked " << dtype_name(dt) << " head has its plane";
    for (const test::PathConfig& path : test::ggml_paths()) {
      test::PathScope scope(path);
      const bool on_plane = path.isa >= IsaLevel::kAvx2 && (dt == DType::kF16 || !amx_usable());
      for (int64_t M : {1, 3, 16, 17, 40, 64}) {
        const auto x = test::randn(static_cast<size_t>(M * K), 31 + uint32_t(M));
        const auto want = reference_argmax(x.data(), M, h.packed.matrix(), pool);
        // A fresh health per call: a few of this small flat head's rows overflow the candidate
        // cap, and misses make the screen step aside (Head16WhoseRowsOverflowTheCapStepsAside);
        // here every call must take the plane.
        h.screen.health->misses = 0;
        h.screen.health->skip = 0;
        const ops::ArgmaxStats before = ops::argmax_stats();
        EXPECT_EQ(screened_argmax(x.data(), M, h.packed.matrix(), h.screen, pool), want)
            << dtype_name(dt) << " " << path.name << " M=" << M;
        const ops::ArgmaxStats after = ops::argmax_stats();
        EXPECT_EQ(after.plane_rows - before.plane_rows, on_plane ? uint64_t(M) : 0u) << dtype_name(dt) << " " << path.name;
        // (random rows are flat: now and then one has more candidates than a screen is worth)
        EXPECT_LE(after.full_rows - before.full_rows, uint64_t(M / 8)) << dtype_name(dt) << " " << path.name << " M=" << M;
      }
    }
  }
}

// Rows whose candidates overflow the cap (a head of near-copies of one row: every output is
// within the screen's bound of the best) are computed in full and noted as misses, so after a
// few such calls the screen steps aside to the logits for a while — with the same picks
// throughout — and comes back. N = 1501, 16 rows per call.
TEST(MatmulArgmax, Head16WhoseRowsOverflowTheCapStepsAside) {
  if (cpu_isa() != IsaLevel::kAvx512 || amx_usable()) GTEST_SKIP() << "the BF16 plane runs on AVX-512 without AMX";
  ThreadPool pool(2);
  constexpr int64_t N = 1501, K = 640, M = 16;
  const auto base = test::randn(size_t(K), 20, 0.5f), noise = test::randn(size_t(N * K), 21, 0.5f);
  std::vector<float> wf(size_t(N * K));
  for (int64_t i = 0; i < N * K; ++i) wf[size_t(i)] = base[size_t(i % K)] + 1e-3f * noise[size_t(i)];
  for (DType dt : kHeadDtypes) {
    const Head16 h = head16(wf, N, K, pool, dt);
    const auto x = test::randn(static_cast<size_t>(M * K), 47);
    const auto want = reference_argmax(x.data(), M, h.packed.matrix(), pool);
    int plane_calls = 0;
    uint64_t full_rows = 0;
    for (int call = 0; call < 100; ++call) {
      const ops::ArgmaxStats before = ops::argmax_stats();
      ASSERT_EQ(screened_argmax(x.data(), M, h.packed.matrix(), h.screen, pool), want) << dtype_name(dt) << " call " << call;
      plane_calls += ops::argmax_stats().plane_rows > before.plane_rows;
      full_rows += ops::argmax_stats().full_rows - before.full_rows;
    }
    EXPECT_GT(full_rows, uint64_t(plane_calls) * M / 2) << "the construction: most rows overflow the cap";
    EXPECT_GE(plane_calls, 3) << "the screen is tried again after stepping aside";
    EXPECT_LE(plane_calls, 30) << "the screen kept trying on rows it gives up";
  }
}

// Rows whose plane values lean the wrong way: x = all ones. Row kA: every weight a (q = 127 =
// 4·31 + 3 on the plane's grid: read as 125.5, 1.2 % low). Row kB: b ≈ 0.985·a on all but one
// element per block, which is b·127/124 and sets the block's scale, so the others are q = 124 =
// 4·31 + 0 (read as 125.5: 1.2 % high). Exact: y_A = 640a > y_B ≈ 631a; on the plane ŷ_B > ŷ_A,
// and only the bound keeps kA. kA2 repeats kA (an exact tie: the first wins). Other rows: random
// at scale 0.001. N = 1003: a partial last tile.
TEST(MatmulArgmax, Head16RowsWhosePlaneLeansTheWrongWayAreFinishedExactly) {
  if (cpu_isa() < IsaLevel::kAvx2) GTEST_SKIP() << "BF16 heads are screened on AVX2 and AVX-512";
  ThreadPool pool(2);
  constexpr int64_t N = 1003, K = 640, kA = 611, kA2 = 998, kB = 5;
  auto v = test::randn(size_t(N * K), 22, 0.001f);
  const float a = 0.0234375f, b = bf16_to_f32(f32_to_bf16(0.985f * a));
  for (int64_t k = 0; k < K; ++k) {
    v[size_t(kA * K + k)] = v[size_t(kA2 * K + k)] = a;
    v[size_t(kB * K + k)] = k % 32 == 7 ? b * 127.0f / 124.0f : b;
  }
  for (DType dt : kHeadDtypes) {
    const Head16 h = head16(v, N, K, pool, dt);
    ASSERT_TRUE(h.screen.plane) << dtype_name(dt);
    set_amx_enabled(false);
    for (const test::PathConfig& path : test::ggml_paths()) {
      if (path.isa < IsaLevel::kAvx2 || path.amx) continue;
      test::PathScope scope(path);
      for (int64_t M : {1, 2, 16, 33}) {
        std::vector<float> x(size_t(M * K));
        for (int64_t m = 0; m < M; ++m)  // rows differ in scale only: kA everywhere
          for (int64_t k = 0; k < K; ++k) x[size_t(m * K + k)] = 1.0f + 0.25f * float(m % 5);
        const auto want = reference_argmax(x.data(), M, h.packed.matrix(), pool);
        ASSERT_EQ(want, std::vector<int32_t>(size_t(M), int32_t(kA))) << "the construction";
        const ops::ArgmaxStats before = ops::argmax_stats();
        EXPECT_EQ(screened_argmax(x.data(), M, h.packed.matrix(), h.screen, pool), want)
            << dtype_name(dt) << " " << path.name << " M=" << M;
        const ops::ArgmaxStats after = ops::argmax_stats();
        EXPECT_EQ(after.plane_rows - before.plane_rows, uint64_t(M)) << dtype_name(dt) << " " << path.name;
        EXPECT_EQ(after.screened_rows - before.screened_rows, uint64_t(M)) << path.name;
        EXPECT_EQ(after.full_rows, before.full_rows) << path.name;
        // kA, kA2 and kB are candidates in every row; the random rows are not.
        EXPECT_GE(after.candidates - before.candidates, uint64_t(3 * M)) << path.name;
        EXPECT_LT(after.candidates - before.candidates, uint64_t(8 * M)) << path.name;
      }
    }
    set_amx_enabled(true);
  }
}

// A BF16 head whose rows all tie (x = 0: every logit 0) or whose x is not finite: the screen
// gives those rows up (every output a candidate / a non-finite ŷ1), the logits decide.
uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// cpu::avx512:: and cpu::avx2::packed16_rows_finish (the screen's finish on listed outputs, from
// the row-major weights): on each listed (row, output) the same bits as that ISA's
// matmul_bf16_packed(_many) in each of its product forms (BF16) and as matmul_f16_packed_many
// (F16), every other output left as it was. K = 650 (a partial last k chunk), rows with 0, 1,
// 16, 17 and many outputs (short groups of 16, a short last group of the micro-kernel's 8),
// outputs in the partial last tile, and a row whose list is refused (count −1).
TEST(MatmulArgmax, Packed16RowsFinishEqualsTheMatmulOnItsOutputs) {
  if (cpu_isa() < IsaLevel::kAvx2) GTEST_SKIP() << "the packed kernels run on AVX2 and AVX-512";
  ThreadPool pool(2);
  constexpr int64_t N = 1003, K = 650, M = 6, cap = 400;
  for (DType dt : kHeadDtypes) {
    const Head16 h = head16(test::randn(size_t(N * K), 27, 0.5f), N, K, pool, dt);
    const WeightMatrix& w = h.packed.matrix();
    ASSERT_EQ(w.packed_format, dt == DType::kF16 ? kPackedF16x16 : kPackedAmxBf16)
        << "the construction: packed for the AVX-512 kernel";
    ASSERT_NE(w.data, nullptr) << "the construction: the row-major weights kept";
    const auto x = test::randn(size_t(M * K), 28);
    std::vector<int32_t> idx(size_t(M * cap));
    std::vector<int64_t> counts(M, 0);
    auto list = [&](int64_t r, int64_t n) { idx[size_t(r * cap + counts[r]++)] = int32_t(n); };
    list(1, 7);                                               // one
    for (int64_t n = 0; n < 16; ++n) list(2, 3 * n + 1);      // one full group
    for (int64_t n = 0; n < 17; ++n) list(3, 50 * n + 2);     // a group and one
    for (int64_t n = 0; n < N; n += 3) list(4, n);            // many, the last tile's among them
    counts[5] = -1;                                           // refused: nothing
    const float kUntouched = -12345.0f;
    for (int form = 0; form < 3; ++form) {  // AVX-512 vdpbf16ps, AVX-512 FMA, AVX2 (FMA)
      const bool avx2 = form == 2, fma = form > 0;
      if ((dt == DType::kF16 && !fma) || (!avx2 && cpu_isa() != IsaLevel::kAvx512)) continue;  // (F16: one form)
      std::vector<float> want(size_t(M * N)), got(size_t(M * N), kUntouched);
      std::vector<float> xb(size_t(M * cpu::fma_x_stride(K)));
      const WeightMatrix* ws[1] = {&w};
      float* ys[1] = {want.data()};
      if (avx2 && dt == DType::kF16)
        cpu::avx2::matmul_f16_packed_many(x.data(), M, ws, ys, 1, pool, xb.data());
      else if (avx2)
        cpu::avx2::matmul_bf16_packed_many(x.data(), M, ws, ys, 1, pool, xb.data());
      else if (dt == DType::kF16)
        cpu::avx512::matmul_f16_packed_many(x.data(), M, ws, ys, 1, pool, xb.data());
      else
        cpu::avx512::matmul_bf16_packed(x.data(), M, w, want.data(), pool,
                                        reinterpret_cast<uint16_t*>(xb.data()), fma);
      if (avx2)
        cpu::avx2::packed16_rows_finish(x.data(), M, w, idx.data(), counts.data(), cap, got.data(), pool);
      else
        cpu::avx512::packed16_rows_finish(x.data(), M, w, idx.data(), counts.data(), cap, fma, got.data(), pool);
      std::vector<bool> listed(size_t(M * N), false);
      for (int64_t r = 0; r < M; ++r)
        for (int64_t i = 0; i < counts[r]; ++i) listed[size_t(r * N + idx[size_t(r * cap + i)])] = true;
      for (int64_t i = 0; i < M * N; ++i) {
        if (listed[size_t(i)])
          ASSERT_EQ(float_bits(got[size_t(i)]), float_bits(want[size_t(i)]))
              << dtype_name(dt) << (avx2 ? " avx2" : fma ? " fma" : " vdpbf16ps") << " row " << i / N
              << " output " << i % N;
        else
          ASSERT_EQ(got[size_t(i)], kUntouched) << "row " << i / N << " output " << i % N;
      }
    }
  }
}

TEST(MatmulArgmax, Head16TiedAndNonFiniteRowsAreComputedInFull) {
  if (cpu_isa() < IsaLevel::kAvx2) GTEST_SKIP() << "BF16 heads are screened on AVX2 and AVX-512";
  ThreadPool pool(2);
  constexpr int64_t N = 900, K = 640;
  for (DType dt : kHeadDtypes) {
    const Head16 h = head16(test::randn(size_t(N * K), 23, 0.5f), N, K, pool, dt);
    set_amx_enabled(false);
    auto x = test::randn(size_t(3 * K), 24);
    std::fill(x.begin(), x.begin() + K, 0.0f);  // row 0: all tied
    x[size_t(K + 9)] = NAN;                     // row 1
    const ops::ArgmaxStats before = ops::argmax_stats();
    EXPECT_EQ(screened_argmax(x.data(), 3, h.packed.matrix(), h.screen, pool),
              reference_argmax(x.data(), 3, h.packed.matrix(), pool));
    EXPECT_EQ(ops::argmax_stats().full_rows - before.full_rows, 2u) << dtype_name(dt);
    set_amx_enabled(true);
  }
}

// The one-pass screen (cpu::avx512:: and cpu::avx2::screen_row) against its definition, the two
// passes: the same candidates in the same order, the same give-ups. Rows: random; ascending (the running
// threshold lags far behind: what it keeps overflows cap, and the exact pass must take over);
// descending (the seed is the maximum); a few large outputs late; a NaN or a huge value; every
// length mod 16, with and without the second bound.
struct ScreenFns {
  const char* name;
  decltype(&cpu::avx2::screen_lower_max) lower_max;
  decltype(&cpu::avx2::screen_candidates) candidates;
  decltype(&cpu::avx2::screen_row) row;
};

void expect_one_pass_is_two_pass(const ScreenFns& f) {
  std::mt19937 rng(5);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::uniform_real_distribution<float> u(0.5f, 1.5f);
  int cases = 0, overflowed = 0;
  for (int64_t V : {5, 16, 40, 1000, 1024, 1031, 4096, 5000})
    for (int kind = 0; kind < 6; ++kind)
      for (int second = 0; second < 2; ++second) {
        const size_t nv = static_cast<size_t>(V);
        std::vector<float> y(nv), b(nv), b2(nv);
        for (int64_t n = 0; n < V; ++n) {
          const float t = float(n) / float(V);
          y[size_t(n)] = kind == 0 ? g(rng) : kind == 1 ? 10 * t : kind == 2 ? 10 * (1 - t) : g(rng);
          b[size_t(n)] = 0.01f * u(rng);
          b2[size_t(n)] = 0.02f * u(rng);
        }
        if (kind == 3)
          for (int64_t n = V - 1; n >= 0 && n > V - 40; n -= 7) y[size_t(n)] = 8.0f + 0.001f * float(n);
        if (kind == 4) y[size_t(V / 2)] = NAN;
        if (kind == 5) y[size_t(V - 1)] = 3e38f;
        const float R = 0.5f, R2 = second ? 0.25f : 0.0f, rel = 0x1p-21f, huge = 1e30f;
        const float* bp2 = second ? b2.data() : nullptr;
        const int64_t cap = V / 16 + 64;
        bool bad_ref = false;
        const float L = f.lower_max(y.data(), b.data(), V, R, rel, huge, &bad_ref, bp2, R2);
        const size_t nc = static_cast<size_t>(cap);
        std::vector<int32_t> want(nc), got(nc);
        const int64_t n_want =
            bad_ref ? -1 : f.candidates(y.data(), b.data(), V, R, rel, L, want.data(), cap, bp2, R2);
        std::vector<float> hi(nc);
        bool bad = false;
        const int64_t n_got = f.row(y.data(), b.data(), V, R, rel, huge, &bad, got.data(), hi.data(), cap, bp2, R2);
        const std::string what = std::string(f.name) + " V=" + std::to_string(V) + " kind=" + std::to_string(kind);
        EXPECT_EQ(bad, bad_ref) << what;
        ASSERT_EQ(n_got, n_want) << what;
        for (int64_t i = 0; i < n_want; ++i) EXPECT_EQ(got[size_t(i)], want[size_t(i)]) << what << " i=" << i;
        ++cases;
        // The construction: outputs 1024..2047 face the seed's threshold (the lower max of the
        // first 1024); where more than cap of them clear it, the one pass overflows.
        if (V >= 2048 && !bad_ref) {
          bool ignored;
          const float seed = f.lower_max(y.data(), b.data(), 1024, R, rel, huge, &ignored, bp2, R2);
          std::vector<int32_t> past(1024);
          overflowed += f.candidates(y.data() + 1024, b.data() + 1024, 1024, R, rel, seed, past.data(), 1024,
                                     bp2 ? bp2 + 1024 : nullptr, R2) > cap;
        }
      }
  EXPECT_EQ(cases, 96) << f.name;
  EXPECT_GE(overflowed, 4) << f.name << ": the construction: the ascending rows must overflow cap";
}

TEST(MatmulArgmax, OnePassScreenIsTheTwoPassScreen) {
  if (cpu_isa() < IsaLevel::kAvx2) GTEST_SKIP() << "AVX2 and AVX-512 kernels";
  expect_one_pass_is_two_pass({"avx2", cpu::avx2::screen_lower_max, cpu::avx2::screen_candidates, cpu::avx2::screen_row});
  if (cpu_isa() == IsaLevel::kAvx512)
    expect_one_pass_is_two_pass(
        {"avx512", cpu::avx512::screen_lower_max, cpu::avx512::screen_candidates, cpu::avx512::screen_row});
}

// The plane kernels of every ISA on the same plane and activation panel: the same bits (AVX2,
// its AVX-VNNI form, AVX-512), for 1..32 rows and a partial last tile; and the build steps of
// one plane block (plane_block_absmax / _values): the same bytes, the same sums within the
// roundings of their order.
TEST(MatmulArgmax, PlaneKernelsGiveOneAnothersBits) {
  if (cpu_isa() < IsaLevel::kAvx2) GTEST_SKIP() << "AVX2 and AVX-512 kernels";
  std::mt19937 rng(8);
  constexpr int64_t nb = 7, n_out = 45, tiles = (n_out + 15) / 16;
  std::vector<uint8_t> plane(size_t(tiles * nb * cpu::kQ8PlaneBlockBytes));
  for (uint8_t& v : plane) v = uint8_t(rng());
  for (int64_t t = 0; t < tiles; ++t)  // sane f16 scales
    for (int64_t b = 0; b < nb; ++b)
      for (int o = 0; o < 16; ++o)
        test::put_f16(plane.data() + (t * nb + b) * cpu::kQ8PlaneBlockBytes + 384 + 2 * o,
                      0.001f * float(1 + rng() % 1000));
  for (int64_t M : {1, 2, 5, 8, 16, 17, 32}) {
    std::vector<int8_t> q(size_t(nb * M * 32));
    std::vector<int32_t> nc(size_t(nb * M));
    std::vector<float> dx4(size_t(nb * M)), c(size_t(nb * M));
    for (int8_t& v : q) v = int8_t(int(rng() % 255) - 127);
    for (size_t i = 0; i < nc.size(); ++i) {
      int32_t sum = 0;
      for (int k = 0; k < 32; ++k) sum += q[i * 32 + size_t(k)];
      nc[i] = -32 * sum;
      dx4[i] = 0.004f * float(1 + rng() % 500);
      c[i] = 1.5f * dx4[i] / 4 * float(sum);
    }
    auto run = [&](auto fn) {
      std::vector<float> y(size_t(M * n_out), -1.0f);
      fn(q.data(), nc.data(), dx4.data(), c.data(), M, plane.data(), nb, n_out, y.data(), 0, tiles);
      return y;
    };
    const std::vector<float> want = run(cpu::avx2::q8_0_plane_tiles);
    auto same = [&](const std::vector<float>& got, const char* what) {
      ASSERT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0) << what << " M=" << M;
    };
    if (avx_vnni_usable()) same(run(cpu::avx2_vnni::q8_0_plane_tiles), "avx2_vnni");
    if (int8_isa() == IsaLevel::kAvx512) same(run(cpu::avx512::q8_0_plane_tiles), "avx512");
  }
  if (cpu_isa() != IsaLevel::kAvx512) return;
  for (int trial = 0; trial < 50; ++trial) {
    std::normal_distribution<float> g(0.0f, trial % 2 ? 1.0f : 1e-3f);
    float w[32];
    for (float& v : w) v = g(rng);
    const float a2 = cpu::avx2::plane_block_absmax(w);
    ASSERT_EQ(a2, cpu::avx512::plane_block_absmax(w));
    const uint16_t d16 = f32_to_f16(a2 / 127);
    uint8_t u2[32], u5[32];
    double s2[3] = {}, s5[3] = {};
    cpu::avx2::plane_block_values(w, d16, u2, s2);
    cpu::avx512::plane_block_values(w, d16, u5, s5);
    ASSERT_EQ(std::memcmp(u2, u5, 32), 0) << "trial " << trial;
    for (int i = 0; i < 3; ++i) EXPECT_NEAR(s2[i], s5[i], 1e-12 * s5[i]) << "trial " << trial << " sum " << i;
  }
}

}  // namespace
}  // namespace dfl
