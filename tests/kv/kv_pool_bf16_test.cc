// KvPool with dtype kBF16: what view() exposes is the written fp32 K/V rounded to bf16 (RNE, the
// core/dtype.h rounding) in the head-major page layout of kernels/ops.h KvPages, for paged full
// layers and for sliding rings (capacity rounded up to 16 slots); speculative rows rolled back
// and rewritten leave exactly the accepted values; the byte accounting is half of fp32's page
// for page, and kv_bytes_per_sequence agrees with the pool.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "kv/kv_pool.h"

namespace dfl {
namespace {

constexpr int kHeads = 3, kDk = 40, kDv = 24;

// Layer 0 full (paged), layer 1 sliding (window 5).
std::vector<KvLayerSpec> layers() {
  return {KvLayerSpec{kHeads, kDk, kDv, 0}, KvLayerSpec{kHeads, kDk, kDv, 5}};
}

KvPoolOptions options(KvDtype dt) {
  KvPoolOptions po;
  po.max_seqs = 2;
  po.max_context = 200;
  po.slack = 8;
  po.dtype = dt;
  return po;
}

struct Rows {
  std::vector<float> k, v;  // [n, heads, d]
};

Rows random_rows(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 3.0f);
  Rows r;
  r.k.resize(size_t(n) * kHeads * kDk);
  r.v.resize(size_t(n) * kHeads * kDv);
  for (float& x : r.k) x = g(rng);
  for (float& x : r.v) x = g(rng);
  return r;
}

// Checks that slot positions [p0, p0 + n) of (seq, il) hold rows (bf16-rounded) in the layout.
void expect_holds(const KvPool& kv, int seq, int il, int p0, int n, const Rows& rows) {
  KvViewScratch sc;
  const KvPages pg = kv.view(seq, il, sc);
  ASSERT_EQ(pg.dtype, KvDtype::kBF16);
  ASSERT_EQ(pg.page_slots % 16, 0);
  int found = 0;
  for (int64_t s = 0; s < pg.n_slots; ++s) {
    const int64_t page = s / pg.page_slots, row = s % pg.page_slots;
    const int32_t pos = pg.pos[page][row];
    if (pos < p0 || pos >= p0 + n) continue;
    ++found;
    const int i = pos - p0;
    for (int h = 0; h < kHeads; ++h) {
      for (int d = 0; d < kDk; ++d)
        ASSERT_EQ(pg.k16[page][kv_bf16_k_index(pg.page_slots, kDk, h, row, d)],
                  f32_to_bf16(rows.k[(size_t(i) * kHeads + h) * kDk + d]))
            << "layer " << il << " pos " << pos << " head " << h << " k dim " << d;
      for (int d = 0; d < kDv; ++d)
        ASSERT_EQ(pg.v16[page][kv_bf16_v_index(pg.page_slots, kDv, h, row, d)],
                  f32_to_bf16(rows.v[(size_t(i) * kHeads + h) * kDv + d]))
            << "layer " << il << " pos " << pos << " head " << h << " v dim " << d;
    }
  }
  EXPECT_EQ(found, n) << "layer " << il;
}

// Writes rows [0, n) at positions p0.. in chunks of at most the slack (8), as forwards do.
void write_all(KvPool& kv, int seq, int p0, const Rows& r, int n) {
  ASSERT_TRUE(kv.ensure(seq, p0 + n));
  for (int i = 0; i < n; i += 8) {
    const int m = std::min(8, n - i);
    for (int il = 0; il < kv.n_layers(); ++il)
      kv.write(seq, il, p0 + i, m, r.k.data() + size_t(i) * kHeads * kDk,
               r.v.data() + size_t(i) * kHeads * kDv);
    kv.commit_length(seq, p0 + i + m);
  }
}

TEST(KvPoolBf16, ViewHoldsTheRoundedRowsHeadMajor) {
  KvPool kv(layers(), options(KvDtype::kBF16));
  EXPECT_EQ(kv.dtype(), KvDtype::kBF16);
  // Two sequences interleaved, so their pages alternate in memory.
  const Rows a = random_rows(37, 1), b = random_rows(37, 2);
  for (int p0 = 0; p0 < 37; p0 += 6) {
    const int n = std::min(6, 37 - p0);
    Rows ra, rb;
    ra.k.assign(a.k.begin() + size_t(p0) * kHeads * kDk, a.k.begin() + size_t(p0 + n) * kHeads * kDk);
    ra.v.assign(a.v.begin() + size_t(p0) * kHeads * kDv, a.v.begin() + size_t(p0 + n) * kHeads * kDv);
    rb.k.assign(b.k.begin() + size_t(p0) * kHeads * kDk, b.k.begin() + size_t(p0 + n) * kHeads * kDk);
    rb.v.assign(b.v.begin() + size_t(p0) * kHeads * kDv, b.v.begin() + size_t(p0 + n) * kHeads * kDv);
    write_all(kv, 0, p0, ra, n);
    write_all(kv, 1, p0, rb, n);
  }
  expect_holds(kv, 0, 0, 0, 37, a);
  expect_holds(kv, 1, 0, 0, 37, b);
  // The ring keeps the last window + slack positions (capacity 13 rounded up to 16).
  KvViewScratch sc;
  EXPECT_EQ(kv.view(0, 1, sc).n_slots, 16);
  Rows tail;
  tail.k.assign(a.k.begin() + size_t(21) * kHeads * kDk, a.k.end());
  tail.v.assign(a.v.begin() + size_t(21) * kHeads * kDv, a.v.end());
  expect_holds(kv, 0, 1, 21, 16, tail);
}

TEST(KvPoolBf16, RollbackThenRewriteLeavesTheAcceptedRows) {
  KvPool kv(layers(), options(KvDtype::kBF16));
  const Rows good = random_rows(30, 5), spec = random_rows(30, 6);
  write_all(kv, 0, 0, good, 20);
  Rows sg;  // a speculative block of 8 at 20..27, then rollback to 23 and the accepted rewrite
  sg.k.assign(spec.k.begin(), spec.k.begin() + size_t(8) * kHeads * kDk);
  sg.v.assign(spec.v.begin(), spec.v.begin() + size_t(8) * kHeads * kDv);
  write_all(kv, 0, 20, sg, 8);
  kv.truncate(0, 23);
  Rows acc;
  acc.k.assign(good.k.begin() + size_t(23) * kHeads * kDk, good.k.begin() + size_t(30) * kHeads * kDk);
  acc.v.assign(good.v.begin() + size_t(23) * kHeads * kDv, good.v.begin() + size_t(30) * kHeads * kDv);
  write_all(kv, 0, 23, acc, 7);
  expect_holds(kv, 0, 0, 23, 7, acc);
  expect_holds(kv, 0, 1, 23, 7, acc);
  kv.clear(0);
  EXPECT_EQ(kv.blocks_used(), 0);
}

TEST(KvPoolBf16, BytesAreHalfOfFp32AndAgreeWithTheLayoutFigure) {
  const KvPool f32(layers(), options(KvDtype::kF32)), b16(layers(), options(KvDtype::kBF16));
  EXPECT_EQ(b16.bytes_per_block() * 2, f32.bytes_per_block());
  EXPECT_EQ(b16.bytes_per_block(), int64_t(16) * kHeads * (kDk + kDv) * 2);
  // Rings: 13 slots in fp32, 16 in bf16 (the head-major page's multiple of 16).
  EXPECT_EQ(f32.ring_bytes_per_seq(), int64_t(13) * kHeads * (kDk + kDv) * 4);
  EXPECT_EQ(b16.ring_bytes_per_seq(), int64_t(16) * kHeads * (kDk + kDv) * 2);
  for (int32_t ctx : {16, 64, 160}) {
    EXPECT_EQ(kv_bytes_per_sequence(layers(), ctx, 8, KvDtype::kBF16), b16.bytes_per_sequence(ctx)) << ctx;
    EXPECT_EQ(kv_bytes_per_sequence(layers(), ctx, 8), f32.bytes_per_sequence(ctx)) << ctx;
  }
}

}  // namespace
}  // namespace dfl
