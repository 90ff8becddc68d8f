// BlockPolicy (engine/block_policy.h): the auto draft-length rule.
#include "engine/block_policy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace dfl {
namespace {

// t(B) = t1 · (1 + slope · (B − 1)), a constant drafter cost.
void set_linear_costs(BlockPolicy& p, double t1, double slope, double draft) {
  std::vector<double> v(p.max_draft() + 2), d(p.max_draft() + 2);
  for (int32_t b = 1; b <= p.max_draft() + 1; ++b) {
    v[b] = t1 * (1 + slope * (b - 1));
    d[b] = draft;
  }
  p.set_verify_cost(v);
  p.set_draft_cost(d);
}

// Feeds n cycles whose latent acceptance lengths are geometric with per-position rate alpha.
void feed(BlockPolicy& p, double alpha, int n, uint32_t seed = 1) {
  std::mt19937 rng(seed);
  std::bernoulli_distribution acc(alpha);
  for (int i = 0; i < n; ++i) {
    const int32_t k = p.choose();
    int32_t a = 0;
    while (a < k && acc(rng)) ++a;
    p.observe(k, a);
  }
}

TEST(BlockPolicy, WarmupDraftsTheFullBlock) {
  BlockPolicy p(15);
  EXPECT_EQ(p.choose(), 15);
}

TEST(BlockPolicy, PicksOneWhenNothingIsAccepted) {
  BlockPolicy p(15);
  set_linear_costs(p, 1.0, 0.05, 0.2);
  for (int i = 0; i < 50; ++i) p.observe(p.choose(), 0);
  EXPECT_EQ(p.choose(), 1);
  EXPECT_LT(p.acceptance()[0], 0.1);
}

TEST(BlockPolicy, PicksLargeBlockWhenAcceptanceHighAndVerifyCheap) {
  BlockPolicy p(15);
  set_linear_costs(p, 1.0, 0.02, 0.2);
  for (int i = 0; i < 50; ++i) p.observe(p.choose(), p.choose());  // everything accepted
  EXPECT_EQ(p.choose(), 15);
  feed(p, 0.97, 200);
  EXPECT_GE(p.choose(), 12);
}

TEST(BlockPolicy, NeverExceedsTheTrainedBlock) {
  BlockPolicy p(7);
  for (int i = 0; i < 20; ++i) {
    p.observe(7, 7);
    EXPECT_LE(p.choose(), 7);
    EXPECT_GE(p.choose(), 1);
  }
  p.observe(40, 40);  // clamped, not out of bounds
  EXPECT_EQ(p.acceptance().size(), 7u);
  EXPECT_LE(p.choose(), 7);
}

TEST(BlockPolicy, ExpensiveVerifyShortensTheBlock) {
  BlockPolicy cheap(15), dear(15);
  set_linear_costs(cheap, 1.0, 0.02, 0.1);
  set_linear_costs(dear, 1.0, 0.5, 0.1);
  feed(cheap, 0.8, 300);
  feed(dear, 0.8, 300);
  EXPECT_LT(dear.choose(), cheap.choose());
  EXPECT_LE(dear.choose(), 4);
}

TEST(BlockPolicy, ExpectedCommittedMatchesTheFormula) {
  BlockPolicy p(4, {.warmup = 0, .decay = 1.0, .prior_weight = 1e-9});
  // Position 1: 3 of 4 accepted; position 2: 1 of 3; positions 3, 4: 1 of 1.
  p.observe(4, 0);
  p.observe(4, 1);
  p.observe(4, 1);
  p.observe(4, 4);
  const auto a = p.acceptance();
  EXPECT_NEAR(a[0], 0.75, 1e-6);
  EXPECT_NEAR(a[1], 1.0 / 3.0, 1e-6);
  EXPECT_NEAR(p.expected_committed(2), 1 + 0.75 + 0.25, 1e-6);
}

TEST(BlockPolicy, ChoiceMaximizesTokensPerSecond) {
  BlockPolicy p(15);
  set_linear_costs(p, 1.0, 0.1, 0.3);
  feed(p, 0.7, 400);
  const int32_t k = p.choose();
  const double best = p.expected_committed(k) / p.cycle_cost(k);
  for (int32_t j = 1; j <= 15; ++j)
    EXPECT_LE(p.expected_committed(j) / p.cycle_cost(j), best * (1 + 1e-9)) << j;
}

TEST(BlockPolicy, InterpolatesUnmeasuredCosts) {
  BlockPolicy p(15);
  std::vector<double> v(17, 0.0);
  v[1] = 1.0;
  v[16] = 2.5;
  p.set_verify_cost(v);
  EXPECT_NEAR(p.cycle_cost(0), 1.0, 1e-12);   // B = 1
  EXPECT_NEAR(p.cycle_cost(15), 2.5, 1e-12);  // B = 16
  EXPECT_NEAR(p.cycle_cost(5), 1.0 + 1.5 * 5 / 15, 1e-12);  // B = 6
  p.observe_verify_time(6, 3.0);  // an online timing replaces the interpolation
  EXPECT_NEAR(p.cycle_cost(5), 3.0, 1e-12);
}

}  // namespace
}  // namespace dfl
