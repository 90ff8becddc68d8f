// KvCache rollback: speculating a block and truncating back to any accepted length leaves the
// cache exactly as if only the accepted tokens had ever been appended — for full layers and for
// sliding-window rings (causal and symmetric windows) — as seen by every future query.
#include <gtest/gtest.h>

#include <map>
#include <tuple>
#include <vector>

#include "kernels/visibility.h"
#include "kv/kv_cache.h"

namespace dfl {
namespace {

constexpr int kHeads = 2, kDk = 3, kDv = 2;

// The "true" K/V of position p (what the accepted token's forward writes) and a different
// "speculative" value for rejected drafts.
float kval(int p, int i, bool spec) { return (spec ? -1000.0f : 0.0f) + p * 10.0f + i * 0.25f; }
float vval(int p, int i, bool spec) { return (spec ? 5000.0f : 0.0f) - p * 3.0f + i * 0.5f; }

// Writes positions [p0, p0+n) to every layer; positions ≥ spec_from get speculative values.
void append(KvCache& kv, int seq, int p0, int n, int spec_from = 1 << 30) {
  std::vector<float> k(size_t(n) * kHeads * kDk), v(size_t(n) * kHeads * kDv);
  for (int r = 0; r < n; ++r) {
    const bool spec = p0 + r >= spec_from;
    for (int i = 0; i < kHeads * kDk; ++i) k[r * kHeads * kDk + i] = kval(p0 + r, i, spec);
    for (int i = 0; i < kHeads * kDv; ++i) v[r * kHeads * kDv + i] = vval(p0 + r, i, spec);
  }
  for (int il = 0; il < kv.n_layers(); ++il) kv.write(seq, il, p0, n, k.data(), v.data());
  kv.commit_length(seq, p0 + n);
}

// What a query at q sees in layer il: position → (K row, V row).
using View = std::map<int, std::pair<std::vector<float>, std::vector<float>>>;
View visible(const KvCache& kv, int seq, int il, int q, Window w) {
  View out;
  const int32_t* pos = kv.pos(seq, il);
  for (int s = 0; s < kv.n_slots(seq, il); ++s) {
    if (!kv_visible(q, pos[s], w)) continue;
    EXPECT_EQ(out.count(pos[s]), 0u) << "position " << pos[s] << " held twice";
    out[pos[s]] = {std::vector<float>(kv.k(seq, il) + s * kHeads * kDk, kv.k(seq, il) + (s + 1) * kHeads * kDk),
                   std::vector<float>(kv.v(seq, il) + s * kHeads * kDv, kv.v(seq, il) + (s + 1) * kHeads * kDv)};
  }
  return out;
}

// The windows each layer is read with (a ring layer of W keys: causal (W−1,0) or symmetric).
struct LayerDef {
  int window;  // 0 = full
  Window read;
};

// Every query a future step can issue (q in [len, len + slack)) sees the same keys and values.
void expect_same_state(const KvCache& a, const KvCache& b, int seq, const std::vector<LayerDef>& defs,
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
  const int max_ctx = 200;
  KvCache base(specs, 2, max_ctx, slack);
  // Sequence 1 is a bystander that must never change.
  append(base, 1, 0, std::min(slack, 5));
  const KvCache bystander = base;

  // Prefill in chunks of ≤ slack (the ring contract), then many speculate/rollback cycles.
  int len = 0;
  for (const int n : {slack, 1, slack, 3}) {
    append(base, 0, len, std::min(n, slack));
    len += std::min(n, slack);
  }
  KvCache never = base;  // the cache that only ever sees accepted tokens
  int cycle = 0;
  for (int step = 0; step < 12; ++step) {
    const int b = 1 + (step * 5) % slack;  // block length 1..slack
    const int a = (step * 7) % (b + 1);    // accepted 0..b
    KvCache next_base, next_never;
    for (int acc = 0; acc <= b; ++acc) {
      // Try every accepted length on a copy; keep `a` for the running state.
      KvCache spec = base;
      append(spec, 0, len, b, len + acc);  // first acc rows true, the rest speculative
      spec.truncate(0, len + acc);
      KvCache ref = never;
      if (acc) append(ref, 0, len, acc);
      expect_same_state(spec, ref, 0, defs, "cycle " + std::to_string(cycle) + " acc " + std::to_string(acc));
      // Continue: the next block (true values) must also agree.
      const int nb = std::min(slack, 3);
      append(spec, 0, len + acc, nb);
      append(ref, 0, len + acc, nb);
      expect_same_state(spec, ref, 0, defs, "after continue, cycle " + std::to_string(cycle));
      expect_same_state(spec, bystander, 1, defs, "bystander");
      if (acc == a) next_base = spec, next_never = ref;
      ++cycle;
    }
    base = next_base;
    never = next_never;
    len += a + std::min(slack, 3);
    ASSERT_EQ(base.length(0), len);
    if (len + 2 * slack + 4 >= max_ctx) break;
  }
}

INSTANTIATE_TEST_SUITE_P(Slack, KvRollback, ::testing::Values(1, 2, 4, 8, 16));

TEST(KvCache, LengthsAndClear) {
  KvCache kv({{1, 2, 2, 0}, {1, 2, 2, 3}}, 2, 64, 4);
  EXPECT_EQ(kv.length(0), 0);
  append(kv, 0, 0, 4);
  append(kv, 0, 4, 4);
  EXPECT_EQ(kv.length(0), 8);
  EXPECT_EQ(kv.length(1), 0);
  kv.truncate(0, 6);
  EXPECT_EQ(kv.length(0), 6);
  kv.clear(0);
  EXPECT_EQ(kv.length(0), 0);
  for (int il = 0; il < 2; ++il)
    for (int s = 0; s < kv.n_slots(0, il); ++s) EXPECT_EQ(kv.pos(0, il)[s], kEmptySlot);
  // After clear the sequence restarts from 0 with the old data gone.
  append(kv, 0, 0, 2);
  EXPECT_EQ(kv.length(0), 2);
  const View v = visible(kv, 0, 1, 2, {2, 0});
  EXPECT_EQ(v.size(), 2u);
}

// Sliding rings have a fixed size (window + slack); full layers grow with the context.
TEST(KvCache, SlidingBytesBoundedAtLongContext) {
  const int W = 128, slack = 16, max_ctx = 1 << 20;
  KvCache ring({{2, 16, 16, W}, {2, 16, 16, W}}, 1, max_ctx, slack);
  KvCache full({{2, 16, 16, 0}}, 1, max_ctx, slack);
  const int64_t per_slot = 2 * (16 + 16) * int64_t(sizeof(float));
  for (int ctx : {1, 100, 1000, 100000, 1 << 20}) {
    EXPECT_EQ(ring.bytes_per_sequence(ctx), 2 * std::min(ctx, W + slack) * per_slot) << ctx;
    EXPECT_EQ(full.bytes_per_sequence(ctx), int64_t(ctx) * per_slot) << ctx;
  }
  EXPECT_EQ(ring.capacity(0), W + slack);
  // And the ring really holds only W + slack slots while running a long sequence.
  for (int p = 0; p < 5000; p += slack) append(ring, 0, p, slack);
  EXPECT_EQ(ring.n_slots(0, 0), W + slack);
  EXPECT_EQ(ring.length(0), 5000 + (slack - 5000 % slack) % slack);
  const View v = visible(ring, 0, 0, ring.length(0), {W - 1, 0});
  EXPECT_EQ(int(v.size()), W - 1);
}

}  // namespace
}  // namespace dfl
