// verify_greedy / verify_rejection: exact acceptance semantics and the distribution of what is
// committed (speculative rejection sampling must reproduce the target distribution).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "common/stats.h"
#include "sampling/sampler.h"
#include "sampling/verify.h"

namespace dfl {
namespace {

constexpr int V = 6;

// Logits rows with a chosen argmax per row.
std::vector<float> rows_with_argmax(const std::vector<int>& am) {
  std::vector<float> l(am.size() * V);
  for (size_t r = 0; r < am.size(); ++r)
    for (int i = 0; i < V; ++i) l[r * V + i] = (i == am[r]) ? 5.0f : 0.1f * float((i * 7 + r) % 5);
  return l;
}

TEST(VerifyGreedy, AcceptsLongestMatchingPrefix) {
  const std::vector<int> am = {2, 4, 1, 0};  // target argmax after anchor, d0, d1, d2
  const auto l = rows_with_argmax(am);
  struct Case { std::vector<int32_t> d; int acc; int next; };
  for (const Case& c : {Case{{2, 4, 1}, 3, 0},   // all accepted → bonus from row 3
                        Case{{2, 4, 5}, 2, 1},   // third wrong → correction = row 2 argmax
                        Case{{2, 3, 1}, 1, 4},   // later match after a miss does not count
                        Case{{0, 4, 1}, 0, 2},
                        Case{{2}, 1, 4},
                        Case{{}, 0, 2}}) {
    const VerifyResult r = verify_greedy(c.d.data(), int32_t(c.d.size()), l.data(), V);
    EXPECT_EQ(r.n_accepted, c.acc);
    EXPECT_EQ(r.next_token, c.next);
  }
}

TEST(VerifyGreedy, TiesResolveToFirstIndexLikeTargetOnlyDecoding) {
  std::vector<float> l(2 * V, 1.0f);  // every row flat: argmax = 0
  const std::vector<int32_t> d = {0};
  VerifyResult r = verify_greedy(d.data(), 1, l.data(), V);
  EXPECT_EQ(r.n_accepted, 1);
  EXPECT_EQ(r.next_token, 0);
  const std::vector<int32_t> d3 = {3};
  r = verify_greedy(d3.data(), 1, l.data(), V);
  EXPECT_EQ(r.n_accepted, 0);
  EXPECT_EQ(r.next_token, 0);
}

std::vector<float> logits_of(const std::vector<double>& p) {
  std::vector<float> l;
  for (double x : p) l.push_back(x > 0 ? float(std::log(x)) : -1e30f);
  return l;
}

std::vector<float> probs_of(const std::vector<float>& logits, const SamplingParams& sp) {
  std::vector<float> q;
  sampling_probs(logits.data(), V, sp, q);
  return q;
}

// q = p ⇒ every draft is accepted (u·q < p for u < 1); p(d) = 0 ⇒ always rejected.
TEST(VerifyRejection, AcceptanceExtremes) {
  SamplingParams sp;
  sp.temperature = 1.0f;
  const std::vector<double> p = {0.3, 0.2, 0.1, 0.25, 0.1, 0.05};
  const auto l = logits_of(p);
  std::vector<float> logits2;
  for (int r = 0; r < 3; ++r) logits2.insert(logits2.end(), l.begin(), l.end());
  std::vector<float> q2;
  for (int r = 0; r < 2; ++r) {
    auto q = probs_of(l, sp);
    q2.insert(q2.end(), q.begin(), q.end());
  }
  Rng rng(11);
  for (int t = 0; t < 2000; ++t) {
    const std::vector<int32_t> d = {int32_t(t % V), int32_t((t / V) % V)};
    const VerifyResult r = verify_rejection(d.data(), 2, logits2.data(), q2.data(), V, sp, rng);
    ASSERT_EQ(r.n_accepted, 2);
  }
  // Target puts zero mass on token 5 (top-k 5 removes the smallest); draft proposes 5.
  SamplingParams k5 = sp;
  k5.top_k = 5;
  std::vector<float> q(V, 0.0f);
  q[5] = 1.0f;  // draft point mass on 5
  const int32_t d5 = 5;
  std::map<int, int64_t> counts;
  for (int t = 0; t < 20000; ++t) {
    const VerifyResult r = verify_rejection(&d5, 1, logits2.data(), q.data(), V, k5, rng);
    ASSERT_EQ(r.n_accepted, 0);
    ++counts[r.next_token];
  }
  // Residual = max(p − q, 0) = p here (q only on 5, where p = 0).
  const auto pk = probs_of(l, k5);
  std::map<int, double> want;
  for (int i = 0; i < V; ++i) want[i] = pk[i];
  EXPECT_FALSE(test::chi2_gof(counts, want, 20000).reject());
}

// The committed first token is distributed as p whatever q is; acceptance happens with
// probability Σ min(p, q); after a rejection the token follows normalize(max(p − q, 0)).
TEST(VerifyRejection, CommittedTokenFollowsTarget) {
  SamplingParams sp;
  sp.temperature = 1.0f;
  const std::vector<double> p = {0.3, 0.2, 0.1, 0.25, 0.1, 0.05};
  const std::vector<double> qd = {0.05, 0.4, 0.3, 0.05, 0.1, 0.1};
  const auto lp = logits_of(p), lq = logits_of(qd);
  std::vector<float> logits2 = lp;
  logits2.insert(logits2.end(), lp.begin(), lp.end());  // row 1 (bonus) = p too
  const auto q = probs_of(lq, sp);
  double accept_p = 0, rmass = 0;
  std::vector<double> resid(V);
  for (int i = 0; i < V; ++i) {
    accept_p += std::min(p[i], qd[i]);
    resid[i] = std::max(p[i] - qd[i], 0.0);
    rmass += resid[i];
  }
  std::map<int, double> want_p, want_res;
  for (int i = 0; i < V; ++i) {
    want_p[i] = p[i];
    want_res[i] = resid[i] / rmass;
  }
  Rng rng(99);
  const int N = 200000;
  std::map<int, int64_t> committed, after_reject;
  int64_t accepted = 0, rejected = 0;
  for (int t = 0; t < N; ++t) {
    const int32_t d = sample_from(q.data(), V, rng);
    const VerifyResult r = verify_rejection(&d, 1, logits2.data(), q.data(), V, sp, rng);
    if (r.n_accepted == 1) {
      ++accepted;
      ++committed[d];
    } else {
      ++rejected;
      ++committed[r.next_token];
      ++after_reject[r.next_token];
    }
  }
  const auto c1 = test::chi2_gof(committed, want_p, N);
  EXPECT_FALSE(c1.reject()) << "committed ~ p: chi2 " << c1.stat << " > " << c1.threshold;
  const auto c2 = test::chi2_gof(after_reject, want_res, rejected);
  EXPECT_FALSE(c2.reject()) << "residual: chi2 " << c2.stat << " > " << c2.threshold;
  const double sd = std::sqrt(accept_p * (1 - accept_p) / N);
  EXPECT_NEAR(double(accepted) / N, accept_p, 5 * sd);
  // Power: the draft distribution itself is far from p (a verifier accepting everything would
  // commit q and fail the first check by a wide margin).
  std::map<int, int64_t> q_counts;
  Rng r2(5);
  for (int t = 0; t < N; ++t) ++q_counts[sample_from(q.data(), V, r2)];
  EXPECT_TRUE(test::chi2_gof(q_counts, want_p, N).reject());
}

// A reduced-vocabulary drafter (d2t): q is the processed distribution over its own 3-token
// vocabulary {1, 3, 4} scattered into the target vocabulary, zero elsewhere (as DFlashProposer
// builds it). Tokens 0, 2, 5 can never be proposed; their mass comes from the residual, and the
// committed token still follows p exactly.
TEST(VerifyRejection, SparseDraftSupportStaysExact) {
  SamplingParams sp;
  sp.temperature = 1.0f;
  const std::vector<double> p = {0.3, 0.2, 0.1, 0.25, 0.1, 0.05};
  const std::vector<int32_t> d2t_ids = {1, 3, 4};
  const std::vector<double> qd_small = {0.5, 0.2, 0.3};
  const auto lp = logits_of(p);
  std::vector<float> logits2 = lp;
  logits2.insert(logits2.end(), lp.begin(), lp.end());
  std::vector<float> small_logits;
  for (double v : qd_small) small_logits.push_back(float(std::log(v)));
  std::vector<float> q_small;
  sampling_probs(small_logits.data(), 3, sp, q_small);
  std::vector<float> q(V, 0.0f);
  for (int i = 0; i < 3; ++i) q[d2t_ids[i]] = q_small[i];
  std::map<int, double> want_p;
  for (int i = 0; i < V; ++i) want_p[i] = p[i];
  Rng rng(123);
  const int N = 200000;
  std::map<int, int64_t> committed;
  int64_t accepted = 0;
  for (int t = 0; t < N; ++t) {
    const int32_t d = d2t_ids[sample_from(q_small.data(), 3, rng)];
    const VerifyResult r = verify_rejection(&d, 1, logits2.data(), q.data(), V, sp, rng);
    accepted += r.n_accepted;
    ++committed[r.n_accepted ? d : r.next_token];
  }
  const auto c = test::chi2_gof(committed, want_p, N);
  EXPECT_FALSE(c.reject()) << "committed ~ p: chi2 " << c.stat << " > " << c.threshold;
  double accept_p = 0;  // Σ min(p, q) over the draft support
  for (int i = 0; i < 3; ++i) accept_p += std::min(p[d2t_ids[i]], double(q_small[i]));
  EXPECT_NEAR(double(accepted) / N, accept_p, 5 * std::sqrt(accept_p * (1 - accept_p) / N));
  EXPECT_GT(accepted, N / 4) << "drafts must be accepted often for this to test anything";
}

// All drafts accepted ⇒ the bonus is drawn from the last row's p.
TEST(VerifyRejection, BonusFromLastRow) {
  SamplingParams sp;
  sp.temperature = 1.0f;
  const std::vector<double> p0 = {0.5, 0.5, 0, 0, 0, 0};
  const std::vector<double> p1 = {0.1, 0.1, 0.1, 0.2, 0.2, 0.3};
  auto l = logits_of(p0);
  const auto l1 = logits_of(p1);
  l.insert(l.end(), l1.begin(), l1.end());
  std::vector<float> q(V, 0.0f);
  q[0] = 0.5f;
  q[1] = 0.5f;  // q = p on row 0 → always accepted
  Rng rng(8);
  std::map<int, int64_t> bonus;
  const int N = 50000;
  for (int t = 0; t < N; ++t) {
    const int32_t d = t % 2;
    const VerifyResult r = verify_rejection(&d, 1, l.data(), q.data(), V, sp, rng);
    ASSERT_EQ(r.n_accepted, 1);
    ++bonus[r.next_token];
  }
  std::map<int, double> want;
  for (int i = 0; i < V; ++i) want[i] = p1[i];
  EXPECT_FALSE(test::chi2_gof(bonus, want, N).reject());
}

}  // namespace
}  // namespace dfl
