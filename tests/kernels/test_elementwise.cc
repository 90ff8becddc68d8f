// rms_norm, add_rms_norm, silu_mul, add_inplace, rope_neox vs the scalar reference on odd sizes.
// Bounds: rms_norm NMSE < 1e-12 (fp32 lanes vs double sum of squares); silu_mul max relative
// error < 2e-6 (polynomial exp); add_inplace and rope_neox bit-exact (same operations).
// rms_norm is checked per row for batch invariance (bit-exact across n_rows).
#include <gtest/gtest.h>

#include <cstring>

#include "kernel_test_util.h"
#include "kernels/ops.h"

namespace dfl {
namespace {

using test::randn;

TEST(Elementwise, RmsNorm) {
  for (IsaLevel isa : test::isa_levels()) {
    test::IsaScope scope(isa);
    for (int64_t dim : {1, 15, 16, 17, 33, 128, 1000, 2560}) {
      const int64_t rows = 7;
      const auto x = randn(rows * dim, dim), w = randn(dim, dim + 1);
      std::vector<float> y(x.size()), r(x.size());
      ops::rms_norm(x.data(), w.data(), rows, dim, 1e-6f, y.data());
      ref::rms_norm(x.data(), w.data(), rows, dim, 1e-6f, r.data());
      ASSERT_LT(test::nmse(y.data(), r.data(), y.size()), 1e-12) << isa_name(isa) << " dim " << dim;
      for (int64_t i = 0; i < rows; ++i) {
        std::vector<float> yi(dim);
        ops::rms_norm(x.data() + i * dim, w.data(), 1, dim, 1e-6f, yi.data());
        ASSERT_EQ(0, std::memcmp(yi.data(), y.data() + i * dim, dim * 4));
      }
      // add_rms_norm == add then rms_norm (up to the sum-of-squares order).
      std::vector<float> res = randn(rows * dim, 5), res2 = res, y2(x.size());
      ops::add_rms_norm(res.data(), x.data(), w.data(), rows, dim, 1e-6f, y.data());
      ops::add_inplace(res2.data(), x.data(), rows * dim);
      ref::rms_norm(res2.data(), w.data(), rows, dim, 1e-6f, y2.data());
      ASSERT_EQ(0, std::memcmp(res.data(), res2.data(), res.size() * 4));
      ASSERT_LT(test::nmse(y.data(), y2.data(), y.size()), 1e-12);
    }
  }
}

TEST(Elementwise, SiluMulAndAdd) {
  for (IsaLevel isa : test::isa_levels()) {
    test::IsaScope scope(isa);
    for (int64_t n : {1, 5, 16, 31, 1000}) {
      auto g = randn(n, n, 4.0f), u = randn(n, n + 1);
      g[0] = -100.0f;
      std::vector<float> y(n), r(n);
      ops::silu_mul(g.data(), u.data(), n, y.data());
      ref::silu_mul(g.data(), u.data(), n, r.data());
      for (int64_t i = 0; i < n; ++i)
        ASSERT_LE(std::fabs(y[i] - r[i]), 2e-6 * std::fabs(r[i]) + 1e-30) << isa_name(isa) << " " << i;
      std::vector<float> a = g, b = g;
      ops::add_inplace(a.data(), u.data(), n);
      for (int64_t i = 0; i < n; ++i) b[i] += u[i];
      ASSERT_EQ(0, std::memcmp(a.data(), b.data(), n * 4));
    }
  }
}

TEST(Elementwise, RopeNeox) {
  for (IsaLevel isa : test::isa_levels()) {
    test::IsaScope scope(isa);
    for (int64_t head_dim : {8, 64, 128, 192}) {
      for (int64_t n_rot : {head_dim, head_dim / 2}) {
        const int64_t rows = 5, heads = 3, stride = heads * head_dim + 4;
        auto x = randn(rows * stride, 7);
        const auto cs = randn(rows * n_rot / 2, 8), sn = randn(rows * n_rot / 2, 9);
        auto r = x;
        ops::rope_neox(x.data(), rows, stride, heads, head_dim, n_rot, cs.data(), sn.data());
        ref::rope_neox(r.data(), rows, stride, heads, head_dim, n_rot, cs.data(), sn.data());
        ASSERT_EQ(0, std::memcmp(x.data(), r.data(), x.size() * 4)) << isa_name(isa);
      }
    }
  }
}

// Prefill-sized calls split over a pool give exactly the single-thread result.
TEST(Elementwise, PoolSplitIsBitIdentical) {
  ThreadPool p2(2), p3(3);
  for (IsaLevel isa : test::isa_levels()) {
    test::IsaScope scope(isa);
    const int64_t rows = 301, dim = 260, heads = 4, hd = 64, n_rot = 48;
    const auto x = randn(rows * dim, 1), w = randn(dim, 2), r0 = randn(rows * dim, 3);
    const int64_t n = rows * dim + 37;
    const auto g = randn(n, 4, 4.0f), u = randn(n, 5);
    const auto cs = randn(rows * n_rot / 2, 6), sn = randn(rows * n_rot / 2, 7);
    auto run = [&](ThreadPool* pool) {
      std::vector<float> out;
      std::vector<float> y(x.size()), res = r0, y2(x.size()), s(n), a = g, rp = x;
      ops::rms_norm(x.data(), w.data(), rows, dim, 1e-6f, y.data(), pool);
      ops::add_rms_norm(res.data(), x.data(), w.data(), rows, dim, 1e-6f, y2.data(), pool);
      ops::silu_mul(g.data(), u.data(), n, s.data(), pool);
      ops::add_inplace(a.data(), u.data(), n, pool);
      ops::rope_neox(rp.data(), rows, dim, heads, hd, n_rot, cs.data(), sn.data(), pool);
      for (auto* v : {&y, &res, &y2, &s, &a, &rp}) out.insert(out.end(), v->begin(), v->end());
      return out;
    };
    const auto one = run(nullptr);
    for (ThreadPool* pool : {&p2, &p3}) {
      const auto many = run(pool);
      ASSERT_EQ(0, std::memcmp(one.data(), many.data(), one.size() * 4))
          << isa_name(isa) << " threads " << pool->n_threads();
    }
  }
}

}  // namespace
}  // namespace dfl
