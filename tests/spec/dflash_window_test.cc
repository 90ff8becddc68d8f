// Metamorphic window tests at the drafter level. Context K/V are computed from each context row
// alone (no layer-to-layer flow for context), so with every layer sliding (window W, non-causal)
// the block at s..s+B−1 can only depend on context rows at positions ≥ s − (W − 1): rewriting
// older rows must leave the draft bit-identical, rewriting a row inside the window must not.
// A full-attention layer anywhere makes every row matter. Runs at a context several times the
// ring capacity so the sliding rings wrap many times.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "common/golden.h"
#include "common/models.h"
#include "model/dflash_draft.h"
#include "model/model.h"

namespace dfl {
namespace {

// Appends `taps` (rows for positions 0..n−1) in engine-like chunks, then drafts a block at n.
std::vector<float> draft_after(const std::string& dname, const std::vector<float>& taps, int32_t n,
                               const std::vector<int32_t>& block) {
  auto pool = test::make_pool(1);
  const auto meta = test::read_json(test::fixture("dflash/" + dname + "/meta.json"));
  auto target = load_causal_lm(test::repo_root() + "/" + meta.at("target").get<std::string>(), LoadOptions{}, *pool);
  DFlashDraftModel d(test::fixture("dflash/" + dname + "/draft"), *target, LoadOptions{}, *pool);
  const size_t row = taps.size() / n;
  // First a long chunk (split internally by the drafter), then cycles of 1..5 rows.
  int32_t p = 0;
  const int32_t first = n / 2;
  d.append_context(0, taps.data(), first, 0);
  p = first;
  int32_t step = 1;
  while (p < n) {
    const int32_t m = std::min(step, n - p);
    // A throw-away draft between context appends, as in the engine loop.
    std::vector<float> scratch(size_t(block.size() - 1) * target->config().vocab_size);
    d.draft_block(0, block.data(), int32_t(block.size()), p, *target, scratch.data());
    d.append_context(0, taps.data() + size_t(p) * row, m, p);
    p += m;
    step = step % 5 + 1;
  }
  std::vector<float> hidden(block.size() * d.config().hidden_size);
  std::vector<float> logits(size_t(block.size() - 1) * target->config().vocab_size);
  d.draft_block(0, block.data(), int32_t(block.size()), n, *target, logits.data(), hidden.data());
  return hidden;
}

bool same(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(DFlashWindow, OnlyRowsInsideTheWindowMatter) {
  struct Case {
    std::string name;
    int32_t window;  // every layer sliding with this W (0 = some layer is full)
  };
  for (const Case& c : {Case{"dflash2_noncausal", 3}, Case{"mimo_style", 4}, Case{"mixed_swa", 0},
                        Case{"zlab_full", 0}}) {
    test::Golden g(test::fixture("dflash/" + c.name + "/golden.safetensors"));
    const size_t row = g.shape("taps")[1];
    const int32_t n = 300;
    std::mt19937 rng(123);
    std::normal_distribution<float> N01(0.0f, 1.0f);
    std::vector<float> taps(size_t(n) * row);
    for (auto& x : taps) x = 2.0f * N01(rng);
    const auto block = g.i32("block_ids");
    const auto base = draft_after(c.name, taps, n, block);

    // Rewrite every row older than the window (or just row 0 for full-attention drafters).
    std::vector<float> old = taps;
    const int32_t oldest_visible = c.window ? n - (c.window - 1) : 1;
    for (int32_t p = 0; p < oldest_visible; ++p)
      for (size_t i = 0; i < row; ++i) old[p * row + i] += 1.0f + N01(rng);
    const auto changed_old = draft_after(c.name, old, n, block);
    if (c.window)
      EXPECT_TRUE(same(base, changed_old)) << c.name << ": a row outside the window changed the draft";
    else
      EXPECT_GT(test::max_abs_diff(base, changed_old), 1e-4) << c.name << ": full attention ignores an old row";

    // Rewrite the oldest row inside the window: the draft must change.
    if (c.window) {
      std::vector<float> in = taps;
      const int32_t p = n - (c.window - 1);
      for (size_t i = 0; i < row; ++i) in[p * row + i] += 1.0f + N01(rng);
      EXPECT_GT(test::max_abs_diff(base, draft_after(c.name, in, n, block)), 1e-4)
          << c.name << ": the oldest row inside the window is ignored";
    }
  }
}

}  // namespace
}  // namespace dfl
