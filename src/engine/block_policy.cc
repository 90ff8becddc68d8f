#include "engine/block_policy.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "model/model.h"

namespace dfl {

BlockPolicy::BlockPolicy(int32_t max_draft, BlockPolicyOptions opt)
    : max_draft_(max_draft), opt_(opt) {
  DFL_CHECK(max_draft >= 1, "auto block size needs a drafter that drafts at least one token");
  succ_.assign(max_draft, 0.0);
  trials_.assign(max_draft, 0.0);
  verify_.assign(max_draft + 2, 0.0);
  draft_.assign(max_draft + 2, 0.0);
}

void BlockPolicy::set_verify_cost(const std::vector<double>& t) {
  for (size_t b = 1; b < verify_.size() && b < t.size(); ++b)
    if (t[b] > 0) verify_[b] = t[b];
}

void BlockPolicy::set_draft_cost(const std::vector<double>& t) {
  for (size_t b = 1; b < draft_.size() && b < t.size(); ++b)
    if (t[b] > 0) draft_[b] = t[b];
}

namespace {
void ema(double& v, double x, double w) { v = v > 0 ? (1 - w) * v + w * x : x; }
}  // namespace

// Online timings: a moving average per B; a timing over 3× the current estimate (a preempted
// pass on a loaded machine) moves it by at most that bound.
void BlockPolicy::observe_verify_time(int32_t B, double s) {
  if (B < 1 || B >= int32_t(verify_.size()) || s <= 0 || opt_.cost_ema <= 0) return;
  if (verify_[B] > 0) s = std::min(s, 3 * verify_[B]);
  ema(verify_[B], s, opt_.cost_ema);
}

void BlockPolicy::observe_draft_time(int32_t B, double s) {
  if (B < 1 || B >= int32_t(draft_.size()) || s <= 0 || opt_.cost_ema <= 0) return;
  if (draft_[B] > 0) s = std::min(s, 3 * draft_[B]);
  ema(draft_[B], s, opt_.cost_ema);
}

void BlockPolicy::observe(int32_t n_drafted, int32_t n_accepted) {
  if (n_drafted <= 0) return;
  n_drafted = std::min(n_drafted, max_draft_);
  n_accepted = std::clamp(n_accepted, 0, n_drafted);
  for (int32_t j = 0; j < max_draft_; ++j) {
    succ_[j] *= opt_.decay;
    trials_[j] *= opt_.decay;
  }
  // Positions 1..a accepted; position a + 1 (if drafted) rejected; later ones unobserved.
  for (int32_t j = 0; j < n_accepted; ++j) {
    succ_[j] += 1;
    trials_[j] += 1;
  }
  if (n_accepted < n_drafted) trials_[n_accepted] += 1;
  ++cycles_;
}

std::vector<double> BlockPolicy::acceptance() const {
  double s = 0, n = 0;
  for (int32_t j = 0; j < max_draft_; ++j) {
    s += succ_[j];
    n += trials_[j];
  }
  const double pooled = (s + 1.0) / (n + 2.0);  // Beta(1, 1) prior
  std::vector<double> a(max_draft_);
  for (int32_t j = 0; j < max_draft_; ++j)
    a[j] = (succ_[j] + opt_.prior_weight * pooled) / (trials_[j] + opt_.prior_weight);
  return a;
}

double BlockPolicy::expected_committed(int32_t k) const {
  const std::vector<double> a = acceptance();
  double e = 1.0, p = 1.0;
  for (int32_t j = 0; j < std::min(k, max_draft_); ++j) {
    p *= a[j];
    e += p;
  }
  return e;
}

double BlockPolicy::lookup(const std::vector<double>& t, int32_t B) {
  if (B >= 1 && B < int32_t(t.size()) && t[B] > 0) return t[B];
  std::vector<int32_t> known;
  for (int32_t b = 1; b < int32_t(t.size()); ++b)
    if (t[b] > 0) known.push_back(b);
  if (known.empty()) return 0.0;
  if (known.size() == 1) return t[known[0]];
  // Neighbours: the measured B just below and just above, else the nearest two on one side.
  auto hi = std::lower_bound(known.begin(), known.end(), B);
  int32_t b0, b1;
  if (hi == known.begin()) {
    b0 = known[0];
    b1 = known[1];
  } else if (hi == known.end()) {
    b0 = known[known.size() - 2];
    b1 = known.back();
  } else {
    b0 = *(hi - 1);
    b1 = *hi;
  }
  const double v = t[b0] + (t[b1] - t[b0]) * double(B - b0) / double(b1 - b0);
  return std::max(v, 0.0);
}

double BlockPolicy::cycle_cost(int32_t k) const {
  return lookup(draft_, k + 1) + lookup(verify_, k + 1);
}

int32_t BlockPolicy::choose() const {
  if (cycles_ < opt_.warmup) return max_draft_;
  const std::vector<double> a = acceptance();
  int32_t best = 1;
  double best_rate = -1, e = 1.0, p = 1.0;
  for (int32_t k = 1; k <= max_draft_; ++k) {
    p *= a[k - 1];
    e += p;
    const double c = cycle_cost(k);
    // Unknown costs: fall back to "verification is free", i.e. the longest useful block.
    const double rate = c > 0 ? e / c : e;
    if (rate > best_rate * (1 + 1e-12)) {  // ties → the shorter block
      best_rate = rate;
      best = k;
    }
  }
  return best;
}

double StepCost::seconds(int32_t R, int32_t D) const {
  const double t = target ? BlockPolicy::lookup(*target, R) : 0.0;
  const double d = draft && D > 0 ? BlockPolicy::lookup(*draft, D) : 0.0;
  return t + d;
}

void choose_batch_draft_lengths(const std::vector<const BlockPolicy*>& seqs,
                                const std::vector<int32_t>& caps, double base_expected,
                                const StepCost& cost, std::vector<int32_t>& out) {
  const size_t n = seqs.size();
  out.assign(n, 0);
  thread_local std::vector<std::vector<double>> alpha;
  thread_local std::vector<double> next_gain;
  alpha.resize(n);
  next_gain.assign(n, 0.0);
  for (size_t i = 0; i < n; ++i) {
    alpha[i] = seqs[i]->acceptance();
    next_gain[i] = caps[i] > 0 && !alpha[i].empty() ? alpha[i][0] : 0.0;
  }
  double E = base_expected;
  int32_t R = cost.target_rows, D = cost.draft_rows;
  for (;;) {
    size_t best = n;
    for (size_t i = 0; i < n; ++i)
      if (out[i] < caps[i] && next_gain[i] > 0 && (best == n || next_gain[i] > next_gain[best])) best = i;
    if (best == n) return;
    const int32_t dD = out[best] == 0 ? 2 : 1;  // the first draft also brings the anchor row
    const double t0 = cost.seconds(R, D), t1 = cost.seconds(R + 1, D + dD);
    // Unknown costs: verification is free, draft everything useful.
    if (t0 > 0 && t1 > 0 && (E + next_gain[best]) / t1 <= E / t0) return;
    E += next_gain[best];
    ++R;
    D += dD;
    const int32_t k = ++out[best];
    next_gain[best] = k < caps[best] && k < int32_t(alpha[best].size()) ? next_gain[best] * alpha[best][size_t(k)] : 0.0;
  }
}

}  // namespace dfl
