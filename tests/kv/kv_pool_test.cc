// KvPool rollback: speculating a block and truncating back to any accepted length leaves the
// pool exactly as if only the accepted tokens had ever been written (full paged layers and
// sliding rings, causal and symmetric windows, several slack sizes); paging and the budget:
// pages shared by all full layers of a sequence, returned on truncate / clear, never leaked,
// and ensure() refusing (without side effects) when the pool is out of pages.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <vector>

#include "kernels/visibility.h"
#include "kv/kv_pool.h"

namespace dfl {
namespace {

constexpr int kHeads = 2, kDk = 3, kDv = 2;

// The "true" K/V of position p (what the accepted token's forward writes) and a different
// "speculative" value for rejected drafts.
float kval(int p, int i, bool spec) { return (spec ? -1000.0f : 0.0f) + p * 10.0f + i * 0.25f; }
float vval(int p, int i, bool spec) { return (spec ? 5000.0f : 0.0f) - p * 3.0f + i * 0.5f; }

// Writes positions [p0, p0+n) to every layer; positions ≥ spec_from get speculative values.
void append(KvPool& kv, int seq, int p0, int n, int spec_from = 1 << 30) {
  ASSERT_TRUE(kv.ensure(seq, p0 + n));
  std::vector<float> k(size_t(n) * kHeads * kDk), v(size_t(n) * kHeads * kDv);
  for (int r = 0; r < n; ++r) {
    const bool spec = p0 + r >= spec_from;
    for (int i = 0; i < kHeads * kDk; ++i) k[r * kHeads * kDk + i] = kval(p0 + r, i, spec);
    for (int i = 0; i < kHeads * kDv; ++i) v[r * kHeads * kDv + i] = vval(p0 + r, i, spec);
  }
  for (int il = 0; il < kv.n_layers(); ++il) kv.write(seq, il, p0, n, k.data(), v.data());
  kv.commit_length(seq, p0 + n);
}

// A pool's history: the operations that made its state. States are rebuilt by replaying
// (pools are not copyable: they own their storage).
struct Op {
  int seq, p0, n, spec_from;  // n < 0: truncate to p0
};
using History = std::vector<Op>;
void replay(KvPool& kv, const History& h) {
  for (const Op& o : h) {
    if (o.n < 0)
      kv.truncate(o.seq, o.p0);
    else
      append(kv, o.seq, o.p0, o.n, o.spec_from);
  }
}

// What a query at q sees in layer il: position → (K row, V row), read through view().
using View = std::map<int, std::pair<std::vector<float>, std::vector<float>>>;
View visible(const KvPool& kv, int seq, int il, int q, Window w) {
  View out;
  KvViewScratch sc;
  const KvPages pg = kv.view(seq, il, sc);
  for (int64_t s = 0; s < pg.n_slots; ++s) {
    const int64_t page = s / pg.page_slots, row = s % pg.page_slots;
    const int32_t pos = pg.pos[page][row];
    if (!kv_visible(q, pos, w)) continue;
    EXPECT_EQ(out.count(pos), 0u) << "position " << pos << " held twice";
    const float* k = pg.k[page] + row * kHeads * kDk;
    const float* v = pg.v[page] + row * kHeads * kDv;
    out[pos] = {std::vector<float>(k, k + kHeads * kDk), std::vector<float>(v, v + kHeads * kDv)};
  }
  return out;
}

// The windows each layer is read with (a ring layer of W keys: causal (W−1,0) or symmetric).
struct LayerDef {
  int window;  // 0 = full
  Window read;
};

// Every query a future step can issue (q in [len, len + slack)) sees the same keys and values.
void expect_same_state(const KvPool& a, const KvPool& b, int seq, const std::vector<LayerDef>& defs,
                       const std::string& what) {
  ASSERT_EQ(a.length(seq), b.length(seq)) << what;
  const int len = a.length(seq);
  for (int il = 0; il < a.n_layers(); ++il) {
    for (int q = len; q < len + a.slack(); ++q) {
      const View va = visible(a, seq, il, q, defs[il].read), vb = visible(b, seq, il, q, defs[il].read);
      ASSERT_EQ(va, vb) << what << " layer " << il << " query " << q;
      // Nothing at or beyond the length is visible (rejected drafts are gone).
      for (const auto& [p, kv] : va) ASSERT_LT(p, len) << what << " layer " << il;
      // Every committed position inside the window is visible (nothing evicted too early).
      const int lo = defs[il].read.left < 0 ? 0 : std::max(0, q - defs[il].read.left);
      for (int p = lo; p < len; ++p) ASSERT_EQ(va.count(p), 1u) << what << " layer " << il << " q " << q << " p " << p;
    }
  }
}

class KvRollback : public ::testing::TestWithParam<int /*slack*/> {};

TEST_P(KvRollback, TruncateToEveryAcceptedLengthEqualsNeverSpeculating) {
  const int slack = GetParam();
  const std::vector<LayerDef> defs = {
      {0, {-1, 0}},   // full causal
      {0, {-1, -1}},  // full non-causal
      {4, {3, 0}},    // causal sliding W=4
      {4, {3, 3}},    // symmetric sliding W=4
      {1, {0, 0}},    // W=1: only itself
      {7, {6, 6}},
  };
  std::vector<KvLayerSpec> specs;
  for (const auto& d : defs) specs.push_back({kHeads, kDk, kDv, d.window});
  KvPoolOptions po;
  po.max_seqs = 2;
  po.max_context = 200;
  po.slack = slack;
  auto fresh = [&] { return KvPool(specs, po); };
  // Sequence 1 is a bystander that must never change.
  History base = {{1, 0, std::min(slack, 5), 1 << 30}};
  History bystander = base;

  // Prefill in chunks of ≤ slack (the ring contract), then many speculate/rollback cycles.
  int len = 0;
  for (const int n : {slack, 1, slack, 3}) {
    base.push_back({0, len, std::min(n, slack), 1 << 30});
    len += std::min(n, slack);
  }
  History never = base;  // the pool that only ever sees accepted tokens
  int cycle = 0;
  for (int step = 0; step < 12; ++step) {
    const int b = 1 + (step * 5) % slack;  // block length 1..slack
    const int a = (step * 7) % (b + 1);    // accepted 0..b
    History next_base, next_never;
    for (int acc = 0; acc <= b; ++acc) {
      // Try every accepted length; keep `a` for the running state.
      History spec = base, ref = never;
      spec.push_back({0, len, b, len + acc});  // first acc rows true, the rest speculative
      spec.push_back({0, len + acc, -1, 0});
      if (acc) ref.push_back({0, len, acc, 1 << 30});
      KvPool ps = fresh(), pr = fresh(), pb = fresh();
      replay(ps, spec);
      replay(pr, ref);
      expect_same_state(ps, pr, 0, defs, "cycle " + std::to_string(cycle) + " acc " + std::to_string(acc));
      // Continue: the next block (true values) must also agree.
      const int nb = std::min(slack, 3);
      spec.push_back({0, len + acc, nb, 1 << 30});
      ref.push_back({0, len + acc, nb, 1 << 30});
      append(ps, 0, len + acc, nb);
      append(pr, 0, len + acc, nb);
      expect_same_state(ps, pr, 0, defs, "after continue, cycle " + std::to_string(cycle));
      replay(pb, bystander);
      expect_same_state(ps, pb, 1, defs, "bystander");
      if (acc == a) next_base = spec, next_never = ref;
      ++cycle;
    }
    base = next_base;
    never = next_never;
    len += a + std::min(slack, 3);
    if (len + 2 * slack + 4 >= po.max_context) break;
  }
}

INSTANTIATE_TEST_SUITE_P(Slack, KvRollback, ::testing::Values(1, 2, 4, 8, 16));

TEST(KvPool, PagesAreSharedByFullLayersFreedOnTruncateAndNeverLeaked) {
  KvPoolOptions po;
  po.max_seqs = 3;
  po.max_context = 256;
  po.slack = 16;
  po.block_slots = 16;
  po.n_blocks = 10;
  KvPool kv({{kHeads, kDk, kDv, 0}, {kHeads, kDk, kDv, 4}, {kHeads, kDk, kDv, 0}}, po);
  EXPECT_EQ(kv.blocks_total(), 10);
  EXPECT_EQ(kv.blocks_needed(0, 33), 3);
  append(kv, 0, 0, 16);
  append(kv, 0, 16, 16);
  append(kv, 0, 32, 1);  // 33 positions: 3 pages for BOTH full layers together
  EXPECT_EQ(kv.blocks_used(), 3);
  append(kv, 1, 0, 5);
  EXPECT_EQ(kv.blocks_used(), 4);
  kv.truncate(0, 17);  // (the ring allows rolling back by up to slack = 16)
  EXPECT_EQ(kv.blocks_used(), 3);
  EXPECT_EQ(kv.length(0), 17);
  append(kv, 0, 17, 15);
  kv.truncate(0, 16);  // pages wholly past 16 return
  EXPECT_EQ(kv.blocks_used(), 2);
  EXPECT_EQ(kv.length(0), 16);
  // Out of pages: ensure refuses and changes nothing.
  EXPECT_FALSE(kv.ensure(2, 16 * 9));
  EXPECT_EQ(kv.blocks_used(), 2);
  EXPECT_TRUE(kv.ensure(2, 16 * 8));
  EXPECT_EQ(kv.blocks_free(), 0);
  EXPECT_FALSE(kv.ensure(1, 17));
  for (int s = 0; s < 3; ++s) kv.clear(s);
  EXPECT_EQ(kv.blocks_used(), 0);
  // A reused page starts empty: nothing of the old sequence is visible.
  append(kv, 2, 0, 3);
  EXPECT_EQ(visible(kv, 2, 0, 100, {-1, 0}).size(), 3u);
  EXPECT_EQ(visible(kv, 2, 2, 100, {-1, 0}).size(), 3u);
}

TEST(KvPool, RandomOpsKeepAccountingExact) {
  KvPoolOptions po;
  po.max_seqs = 4;
  po.max_context = 300;
  po.slack = 16;
  po.n_blocks = 30;
  KvPool kv({{1, 2, 2, 0}, {1, 2, 3, 0}}, po);
  std::mt19937 rng(7);
  std::vector<int> len(4, 0);
  for (int it = 0; it < 3000; ++it) {
    const int s = int(rng() % 4);
    const int op = int(rng() % 10);
    if (op < 6) {
      const int n = 1 + int(rng() % 16);
      if (len[s] + n > po.max_context || !kv.ensure(s, len[s] + n)) continue;
      append(kv, s, len[s], n);
      len[s] += n;
    } else if (op < 9) {
      const int back = int(rng() % 17);
      len[s] = std::max(0, len[s] - back);
      kv.truncate(s, len[s]);
    } else {
      kv.clear(s);
      len[s] = 0;
    }
    int64_t want = 0;
    for (int q = 0; q < 4; ++q) want += (len[q] + 15) / 16;
    ASSERT_EQ(kv.blocks_used(), want) << "op " << it;
    ASSERT_EQ(kv.length(s), len[s]);
  }
  for (int q = 0; q < 4; ++q) kv.clear(q);
  EXPECT_EQ(kv.blocks_used(), 0);
}

TEST(KvPool, LengthsAndClear) {
  KvPoolOptions po;
  po.max_seqs = 2;
  po.max_context = 64;
  po.slack = 4;
  KvPool kv({{1, 2, 2, 0}, {1, 2, 2, 3}}, po);
  EXPECT_EQ(kv.length(0), 0);
  append(kv, 0, 0, 4);
  append(kv, 0, 4, 4);
  EXPECT_EQ(kv.length(0), 8);
  EXPECT_EQ(kv.length(1), 0);
  kv.truncate(0, 6);
  EXPECT_EQ(kv.length(0), 6);
  kv.clear(0);
  EXPECT_EQ(kv.length(0), 0);
  for (int il = 0; il < 2; ++il) EXPECT_TRUE(visible(kv, 0, il, 3, {-1, -1}).empty());
  // After clear the sequence restarts from 0 with the old data gone.
  append(kv, 0, 0, 2);
  EXPECT_EQ(kv.length(0), 2);
  const View v = visible(kv, 0, 1, 2, {2, 0});
  EXPECT_EQ(v.size(), 2u);
}

// Sliding rings have a fixed size (window + slack); full layers grow with the context, in pages.
TEST(KvPool, SlidingBytesBoundedAtLongContext) {
  const int W = 128, slack = 16, max_ctx = 1 << 20;
  KvPoolOptions po;
  po.max_seqs = 1;
  po.max_context = max_ctx;
  po.slack = slack;
  KvPool ring({{2, 16, 16, W}, {2, 16, 16, W}}, po);
  po.n_blocks = 64;
  KvPool full({{2, 16, 16, 0}}, po);
  const int64_t per_slot = 2 * (16 + 16) * int64_t(sizeof(float));
  for (int ctx : {1, 100, 1000, 100000, 1 << 20}) {
    EXPECT_EQ(ring.bytes_per_sequence(ctx), 2 * (W + slack) * per_slot) << ctx;
    EXPECT_EQ(full.bytes_per_sequence(ctx), int64_t((ctx + 15) / 16 * 16) * per_slot) << ctx;
  }
  // And the ring really holds only W + slack slots while running a long sequence.
  for (int p = 0; p < 5000; p += slack) append(ring, 0, p, slack);
  KvViewScratch sc;
  EXPECT_EQ(ring.view(0, 0, sc).n_slots, W + slack);
  EXPECT_EQ(ring.length(0), 5000 + (slack - 5000 % slack) % slack);
  const View v = visible(ring, 0, 0, ring.length(0), {W - 1, 0});
  EXPECT_EQ(int(v.size()), W - 1);
}

}  // namespace
}  // namespace dfl
