// Sampler: greedy, temperature, top-k, top-p, min-p (order: T → top-k → top-p → min-p →
// renormalize), seeded reproducibility, and the empirical distribution of draws.
// Expected distributions are computed here in double from the definitions.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <vector>

#include "common/stats.h"
#include "sampling/sampler.h"

namespace dfl {
namespace {

// softmax(logits / T) in double.
std::vector<double> softmax(const std::vector<float>& l, double T) {
  double mx = -INFINITY;
  for (float x : l) mx = std::max(mx, x / T);
  std::vector<double> p(l.size());
  double s = 0;
  for (size_t i = 0; i < l.size(); ++i) s += p[i] = std::exp(l[i] / T - mx);
  for (auto& x : p) x /= s;
  return p;
}

std::vector<double> keep_and_normalize(const std::vector<double>& p, const std::vector<int>& keep) {
  std::vector<double> out(p.size(), 0.0);
  double s = 0;
  for (int i : keep) s += p[i];
  for (int i : keep) out[i] = p[i] / s;
  return out;
}

void expect_probs(const std::vector<float>& got, const std::vector<double>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    if (want[i] == 0.0)
      EXPECT_EQ(got[i], 0.0f) << what << " index " << i;
    else
      EXPECT_NEAR(got[i], want[i], 2e-6) << what << " index " << i;
  }
}

// log-probabilities of a known distribution (sorted: 0.4, 0.25, 0.15, 0.1, 0.06, 0.04), shuffled.
const std::vector<double> kP = {0.1, 0.4, 0.04, 0.25, 0.06, 0.15};
std::vector<float> logits_of(const std::vector<double>& p, float shift = 3.0f) {
  std::vector<float> l;
  for (double x : p) l.push_back(static_cast<float>(std::log(x)) + shift);
  return l;
}

TEST(Sampler, GreedyIsArgmaxFirstOnTies) {
  Rng rng(1);
  std::vector<float> scratch;
  SamplingParams g;
  EXPECT_TRUE(g.greedy());
  const std::vector<float> l = {0.5f, 2.0f, -1.0f, 2.0f, 1.9f};
  for (int i = 0; i < 10; ++i) EXPECT_EQ(sample_token(l.data(), 5, g, rng, scratch), 1);
  g.temperature = -1.0f;
  EXPECT_EQ(sample_token(l.data(), 5, g, rng, scratch), 1);
}

TEST(Sampler, TemperatureSoftmax) {
  const std::vector<float> l = {1.0f, 2.5f, -0.5f, 0.0f, 3.0f, 2.9f, -4.0f};
  for (double T : {0.3, 1.0, 2.0, 10.0}) {
    SamplingParams p;
    p.temperature = static_cast<float>(T);
    std::vector<float> probs;
    sampling_probs(l.data(), l.size(), p, probs);
    expect_probs(probs, softmax(l, T), "temperature");
    EXPECT_NEAR(std::accumulate(probs.begin(), probs.end(), 0.0), 1.0, 1e-6);
  }
  // Large logits do not overflow.
  const std::vector<float> big = {1000.0f, 999.0f, -1000.0f};
  SamplingParams p;
  p.temperature = 0.5f;
  std::vector<float> probs;
  sampling_probs(big.data(), 3, p, probs);
  expect_probs(probs, softmax(big, 0.5), "big logits");
}

TEST(Sampler, TopK) {
  const auto l = logits_of(kP);
  SamplingParams p;
  p.temperature = 1.0f;
  std::vector<float> probs;
  p.top_k = 2;
  sampling_probs(l.data(), l.size(), p, probs);
  expect_probs(probs, keep_and_normalize(kP, {1, 3}), "top_k=2");
  p.top_k = 1;
  sampling_probs(l.data(), l.size(), p, probs);
  expect_probs(probs, keep_and_normalize(kP, {1}), "top_k=1");
  p.top_k = 6;  // = vocab: off
  sampling_probs(l.data(), l.size(), p, probs);
  expect_probs(probs, kP, "top_k=V");
  p.top_k = 100;
  sampling_probs(l.data(), l.size(), p, probs);
  expect_probs(probs, kP, "top_k>V");
}

TEST(Sampler, TopP) {
  const auto l = logits_of(kP);
  SamplingParams p;
  p.temperature = 1.0f;
  std::vector<float> probs;
  // Sorted masses 0.4, 0.25, 0.15, 0.1, 0.06, 0.04; cumulative 0.4, 0.65, 0.8, 0.9, 0.96, 1.
  struct Case { float top_p; std::vector<int> keep; };
  for (const Case& c : {Case{0.3f, {1}}, Case{0.5f, {1, 3}}, Case{0.7f, {1, 3, 5}},
                        Case{0.85f, {1, 3, 5, 0}}, Case{0.93f, {1, 3, 5, 0, 4}},
                        Case{0.99f, {1, 3, 5, 0, 4, 2}}}) {
    p.top_p = c.top_p;
    sampling_probs(l.data(), l.size(), p, probs);
    expect_probs(probs, keep_and_normalize(kP, c.keep), "top_p");
  }
}

TEST(Sampler, MinP) {
  const auto l = logits_of(kP);
  SamplingParams p;
  p.temperature = 1.0f;
  std::vector<float> probs;
  // Threshold = min_p × 0.4.
  p.min_p = 0.5f;  // 0.2: keeps 0.4, 0.25
  sampling_probs(l.data(), l.size(), p, probs);
  expect_probs(probs, keep_and_normalize(kP, {1, 3}), "min_p=0.5");
  p.min_p = 0.2f;  // 0.08: keeps 0.4, 0.25, 0.15, 0.1
  sampling_probs(l.data(), l.size(), p, probs);
  expect_probs(probs, keep_and_normalize(kP, {1, 3, 5, 0}), "min_p=0.2");
  p.min_p = 1.0f;  // only the max
  sampling_probs(l.data(), l.size(), p, probs);
  expect_probs(probs, keep_and_normalize(kP, {1}), "min_p=1");
}

// Order: temperature first, then top-k, then top-p over the renormalized top-k set, then min-p.
TEST(Sampler, FilterOrder) {
  const auto l = logits_of(kP);
  SamplingParams p;
  p.temperature = 2.0f;
  const auto pt = softmax(l, 2.0);  // same order as kP, flatter
  std::vector<int> order = {1, 3, 5, 0, 4, 2};
  // top-k 4 then top-p 0.6 over the renormalized 4.
  p.top_k = 4;
  p.top_p = 0.6f;
  double mass4 = 0;
  for (int i = 0; i < 4; ++i) mass4 += pt[order[i]];
  std::vector<int> keep;
  double cum = 0;
  for (int i = 0; i < 4; ++i) {
    keep.push_back(order[i]);
    cum += pt[order[i]] / mass4;
    if (cum >= 0.6) break;
  }
  std::vector<float> probs;
  sampling_probs(l.data(), l.size(), p, probs);
  expect_probs(probs, keep_and_normalize(pt, keep), "T=2, top_k=4, top_p=0.6");
  // min-p on top: threshold relative to the max.
  p.min_p = 0.9f;
  std::vector<int> keep2;
  for (int i : keep)
    if (pt[i] >= 0.9 * pt[order[0]]) keep2.push_back(i);
  sampling_probs(l.data(), l.size(), p, probs);
  expect_probs(probs, keep_and_normalize(pt, keep2), "+ min_p");
}

TEST(Rng, SeededReproducibility) {
  Rng a(42), b(42), c(43);
  std::vector<uint64_t> va, vb, vc;
  for (int i = 0; i < 100; ++i) {
    va.push_back(a.next());
    vb.push_back(b.next());
    vc.push_back(c.next());
  }
  EXPECT_EQ(va, vb);
  EXPECT_NE(va, vc);
  Rng u(7);
  double s = 0, mn = 1, mx = 0;
  const int N = 200000;
  for (int i = 0; i < N; ++i) {
    const double x = u.uniform();
    ASSERT_GE(x, 0.0);
    ASSERT_LT(x, 1.0);
    s += x;
    mn = std::min(mn, x);
    mx = std::max(mx, x);
  }
  EXPECT_NEAR(s / N, 0.5, 0.005);  // σ = 0.29/√N ≈ 6.5e-4
  EXPECT_LT(mn, 1e-3);
  EXPECT_GT(mx, 1 - 1e-3);
}

TEST(Sampler, SeededTokenStreamsRepeat) {
  const std::vector<float> l = {0.1f, 1.0f, 0.3f, 0.8f, -0.2f, 0.0f, 0.7f};
  SamplingParams p;
  p.temperature = 1.0f;
  std::vector<float> scratch;
  auto stream = [&](uint64_t seed) {
    Rng r(seed);
    std::vector<int32_t> v;
    for (int i = 0; i < 64; ++i) v.push_back(sample_token(l.data(), l.size(), p, r, scratch));
    return v;
  };
  EXPECT_EQ(stream(5), stream(5));
  EXPECT_NE(stream(5), stream(6));
}

// Draws follow the processed distribution (chi-square at p = 1e-4, fixed seed).
TEST(Sampler, EmpiricalDistribution) {
  const auto l = logits_of(kP);
  for (int variant = 0; variant < 3; ++variant) {
    SamplingParams p;
    p.temperature = variant == 1 ? 1.7f : 1.0f;
    if (variant == 2) p.top_k = 3;
    std::vector<float> probs;
    sampling_probs(l.data(), l.size(), p, probs);
    std::map<int, double> want;
    for (size_t i = 0; i < probs.size(); ++i) want[int(i)] = probs[i];
    Rng rng(1234 + variant);
    std::map<int, int64_t> counts;
    std::vector<float> scratch;
    const int N = 100000;
    for (int i = 0; i < N; ++i) ++counts[sample_token(l.data(), l.size(), p, rng, scratch)];
    const auto chi = test::chi2_gof(counts, want, N);
    EXPECT_FALSE(chi.reject()) << "variant " << variant << " chi2 " << chi.stat << " > " << chi.threshold;
    if (variant == 2) {
      EXPECT_EQ(counts.count(0) + counts.count(2) + counts.count(4), 0u);
    }
  }
}

TEST(Sampler, SampleFromEdgeCases) {
  Rng rng(3);
  const std::vector<float> zeros(5, 0.0f);
  EXPECT_EQ(sample_from(zeros.data(), 5, rng), 0);
  const std::vector<float> one = {0, 0, 0, 2.5f, 0};  // unnormalized point mass
  for (int i = 0; i < 20; ++i) EXPECT_EQ(sample_from(one.data(), 5, rng), 3);
  const std::vector<float> two = {0, 1, 0, 3, 0};  // unnormalized: 1/4, 3/4
  int c3 = 0;
  for (int i = 0; i < 40000; ++i) {
    const int t = sample_from(two.data(), 5, rng);
    ASSERT_TRUE(t == 1 || t == 3);
    c3 += t == 3;
  }
  EXPECT_NEAR(c3 / 40000.0, 0.75, 0.01);  // σ ≈ 0.0022
}

}  // namespace
}  // namespace dfl
