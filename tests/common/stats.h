// Small statistics helpers for distribution tests (chi-square goodness of fit).
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <vector>

namespace dfl::test {

// Upper quantile of the chi-square distribution with `df` degrees of freedom for a standard
// normal quantile z (Wilson–Hilferty; good to a few % for df ≥ 3). z = 3.719 ↔ p = 1e-4.
inline double chi2_quantile(int df, double z = 3.719) {
  const double a = 2.0 / (9.0 * df);
  const double t = 1.0 - a + z * std::sqrt(a);
  return df * t * t * t;
}

struct Chi2 {
  double stat = 0.0;
  int df = 0;
  double threshold = 0.0;
  bool reject() const { return stat > threshold; }
};

// Goodness of fit of `counts` (category → count) against probabilities `probs` (category →
// p, summing to 1) over N draws. Categories with expected count < 5 are pooled into one bin
// (so the chi-square approximation holds); a draw in a category with p = 0 makes the statistic
// infinite.
template <typename Key>
Chi2 chi2_gof(const std::map<Key, int64_t>& counts, const std::map<Key, double>& probs, int64_t N,
              double z = 3.719) {
  Chi2 r;
  double pooled_e = 0.0, pooled_o = 0.0;
  int bins = 0;
  for (const auto& [k, p] : probs) {
    const double e = p * N;
    auto it = counts.find(k);
    const double o = it == counts.end() ? 0.0 : double(it->second);
    if (e < 5.0) {
      pooled_e += e;
      pooled_o += o;
      continue;
    }
    r.stat += (o - e) * (o - e) / e;
    ++bins;
  }
  for (const auto& [k, c] : counts) {
    auto it = probs.find(k);
    if (it == probs.end() || it->second <= 0.0) {
      if (c > 0) r.stat = INFINITY;
    }
  }
  if (pooled_e > 0.0) {
    if (pooled_e >= 1.0) {
      r.stat += (pooled_o - pooled_e) * (pooled_o - pooled_e) / pooled_e;
      ++bins;
    } else if (pooled_o > 5.0) {
      r.stat = INFINITY;  // far more draws than a tiny expected mass allows
    }
  }
  r.df = std::max(1, bins - 1);
  r.threshold = chi2_quantile(r.df, z);
  return r;
}

// Total variation distance between an empirical distribution and `probs`.
template <typename Key>
double total_variation(const std::map<Key, int64_t>& counts, const std::map<Key, double>& probs,
                       int64_t N) {
  std::map<Key, double> diff;
  for (const auto& [k, p] : probs) diff[k] -= p;
  for (const auto& [k, c] : counts) diff[k] += double(c) / N;
  double tv = 0.0;
  for (const auto& [k, d] : diff) tv += std::fabs(d);
  return tv / 2;
}

}  // namespace dfl::test
