// Lossless speculative decoding at T = 0 on the MiMo targets with the MiMo-style DFlash drafter
// (use_swa non-causal windows, sinks, partial rotary, value scale, mask_embedding.pt, a tap on the
// last target layer): the committed tokens equal target-only greedy decoding for several prompts
// and every block size, and the statistics add up.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>

#include "common/golden.h"
#include "common/models.h"
#include "engine/generator.h"
#include "model/dflash_draft.h"
#include "spec/dflash_proposer.h"

namespace dfl {
namespace {

std::vector<std::vector<int32_t>> prompts(const std::vector<int32_t>& golden_prompt) {
  std::vector<std::vector<int32_t>> ps = {golden_prompt};
  std::mt19937 rng(1234);
  for (int len : {1, 9, 30}) {
    std::vector<int32_t> p;
    for (int i = 0; i < len; ++i) p.push_back(int32_t(rng() % 506));
    ps.push_back(p);
  }
  return ps;
}

class MiMoLossless : public ::testing::TestWithParam<std::string> {};

TEST_P(MiMoLossless, GreedyDFlashEqualsTargetOnly) {
  const std::string tdir = test::fixture("mimo/" + GetParam());
  auto pool = test::make_pool(1);  // one thread: many tiny per-expert matmuls; the idle-sleeping pool makes 2 threads ~100x slower here
  auto target = load_causal_lm(tdir, LoadOptions{}, *pool);
  auto drafter = std::make_unique<DFlashDraftModel>(test::fixture("mimo/dflash/draft"), *target,
                                                    LoadOptions{}, *pool);
  ASSERT_TRUE(drafter->has_mask_embedding());
  const int32_t B = drafter->dflash().block_size;
  DFlashProposer dflash(std::move(drafter), *target);
  Generator plain(*target, nullptr);
  Generator spec(*target, &dflash);
  test::Golden g(tdir + "/golden.safetensors");
  int64_t runs = 0, drafted = 0, accepted = 0, steps = 0, committed = 0;
  for (const auto& p : prompts(g.i32("prompt_ids"))) {
    GenerateRequest req;
    req.prompt = p;
    req.max_tokens = 32;
    const GenerateResult want = plain.generate(req);
    ASSERT_EQ(want.tokens.size(), 32u);
    for (int32_t b : {2, 4, 8}) {
      ASSERT_LE(b, B);
      req.block_size = b;
      req.trace = true;
      const GenerateResult got = spec.generate(req);
      const std::string what = GetParam() + " prompt len " + std::to_string(p.size()) + " block " + std::to_string(b);
      ASSERT_EQ(got.tokens, want.tokens) << what;
      const GenerateStats& s = got.stats;
      EXPECT_EQ(s.generated_tokens, 32) << what;
      EXPECT_GE(s.target_passes, s.draft_steps) << what;
      EXPECT_EQ(s.generated_tokens, 1 + s.committed_in_cycles + (s.target_passes - s.draft_steps)) << what;
      EXPECT_LE(s.accepted_tokens, s.drafted_tokens) << what;
      EXPECT_EQ(s.committed_in_cycles, s.accepted_tokens + s.draft_steps) << what;
      int64_t hist = 0;
      for (int64_t h : s.acceptance_histogram) hist += h;
      EXPECT_EQ(hist, s.draft_steps) << what;
      EXPECT_EQ(int64_t(got.cycles.size()), s.draft_steps) << what;
      ++runs;
      drafted += s.drafted_tokens;
      accepted += s.accepted_tokens;
      steps += s.draft_steps;
      committed += s.committed_in_cycles;
    }
  }
  std::printf("[mimo lossless] %s: %lld runs identical to target-only; drafted %lld accepted %lld, "
              "tau %.3f (random weights)\n",
              GetParam().c_str(), (long long)runs, (long long)drafted, (long long)accepted,
              double(committed) / double(std::max<int64_t>(1, steps)));
}

INSTANTIATE_TEST_SUITE_P(All, MiMoLossless, ::testing::Values("flash_split", "v25_fused"));

// A random-weight drafter is never right, so acceptance stays 0 above. This proposer drafts the
// known target continuation with one mistake at a random place (or none), so every acceptance
// length occurs and the MiMo target's rings and full layers are rolled back by every amount.
class ScriptedProposer final : public Proposer {
 public:
  ScriptedProposer(std::vector<int32_t> truth, int32_t n_prompt, int32_t max_draft, uint32_t seed)
      : truth_(std::move(truth)), n_(n_prompt), max_draft_(max_draft), rng_(seed) {}
  const std::vector<int32_t>& target_aux() const override { return aux_; }
  int32_t max_draft() const override { return max_draft_; }
  void reset(int32_t) override {}
  void add_context(int32_t, const float*, int32_t, int32_t) override {}
  void propose(int32_t, int32_t, int32_t anchor_pos, int32_t n_draft, const SamplingParams&, Rng&,
               Draft& out) override {
    out.tokens.clear();
    const int32_t bad = int32_t(rng_() % (n_draft + 2));  // n_draft, n_draft + 1: all correct
    for (int32_t j = 0; j < n_draft; ++j) {
      const size_t idx = size_t(anchor_pos + 1 + j - n_);
      int32_t t = idx < truth_.size() ? truth_[idx] : 0;
      if (j == bad) t = (t + 1 + int32_t(rng_() % 500)) % 506;
      out.tokens.push_back(t);
    }
  }

 private:
  std::vector<int32_t> truth_;
  int32_t n_, max_draft_;
  std::vector<int32_t> aux_;
  std::mt19937 rng_;
};

TEST(MiMoLossless, ScriptedDraftsExerciseEveryAcceptanceLength) {
  const std::string tdir = test::fixture("mimo/flash_split");
  auto pool = test::make_pool(1);  // one thread: many tiny per-expert matmuls; the idle-sleeping pool makes 2 threads ~100x slower here
  auto target = load_causal_lm(tdir, LoadOptions{}, *pool);
  Generator plain(*target, nullptr);
  test::Golden g(tdir + "/golden.safetensors");
  for (const auto& p : prompts(g.i32("prompt_ids"))) {
    GenerateRequest req;
    req.prompt = p;
    req.max_tokens = 40;
    const GenerateResult want = plain.generate(req);
    for (int32_t b : {3, 8, 16}) {
      ScriptedProposer sp(want.tokens, int32_t(p.size()), b - 1, 99u + uint32_t(b));
      Generator spec(*target, &sp);
      req.block_size = b;
      const GenerateResult got = spec.generate(req);
      ASSERT_EQ(got.tokens, want.tokens) << "prompt len " << p.size() << " block " << b;
      int used = 0;
      for (int64_t h : got.stats.acceptance_histogram) used += h > 0;
      EXPECT_GE(used, 2) << "block " << b;
      EXPECT_GT(got.stats.mean_acceptance_length(), 1.5) << "block " << b;
    }
  }
}

}  // namespace
}  // namespace dfl
