#include "bench_util.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <random>
#include <sstream>

#include "core/error.h"

namespace dfl::cli {

std::vector<double> parse_list(const std::string& s, const char* flag) {
  std::vector<double> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    const double x = std::strtod(item.c_str(), &end);
    DFL_CHECK(!item.empty() && end && *end == '\0', flag, ": '", item, "' is not a number");
    v.push_back(x);
  }
  DFL_CHECK(!v.empty(), flag, " needs at least one value");
  return v;
}

std::vector<int32_t> parse_ints(const std::string& s, const char* flag) {
  std::vector<int32_t> v;
  for (double x : parse_list(s, flag)) {
    DFL_CHECK(x >= 1 && x == std::floor(x) && x < 1e6, flag, ": '", x, "' is not a positive integer");
    v.push_back(int32_t(x));
  }
  return v;
}

// Rate statistic of `work` units done in the timed seconds t.
Stat rate(const Stat& t, double work) {
  Stat r;
  r.n = t.n;
  r.median = t.median > 0 ? work / t.median : 0;
  r.min = t.max > 0 ? work / t.max : 0;
  r.max = t.min > 0 ? work / t.min : 0;
  return r;
}

std::vector<int32_t> random_tokens(int32_t n, int32_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = int32_t(rng() % uint64_t(std::min(vocab, 150000)));
  return t;
}

// Latent acceptance lengths for the projected mode. Per-position acceptance is a constant α
// (geometric), capped at `max_draft` drafts: E[min(L, D)] = Σ_{j=1..D} α^j, and α is solved so
// that the mean committed per cycle at the full block, 1 + E[min(L, D)], equals τ. The sequence
// is stratified: each run of 16 cycles holds the 16 midpoint quantiles in bit-reversed order
// (0, 8, 4, 12, ...), so any prefix of a run is spread evenly over the distribution and even a
// short run replays a mean close to τ.
std::vector<int32_t> replay_lengths(double tau, int32_t D, double* alpha_out) {
  const int kChunk = 16;  // 4-bit reversal
  auto make = [&](double a) {
    auto quantile = [&](double u) {  // smallest j with P(L ≤ j) ≥ u; P(L ≤ j) = 1 − α^{j+1}
      for (int32_t j = 0; j < D; ++j)
        if (1.0 - std::pow(a, j + 1) >= u) return j;
      return D;
    };
    std::vector<int32_t> chunk(kChunk);
    for (int i = 0; i < kChunk; ++i) {
      int r = 0;
      for (int bit = 0; bit < 4; ++bit) r |= ((i >> bit) & 1) << (3 - bit);
      chunk[i] = quantile((r + 0.5) / kChunk);
    }
    return chunk;
  };
  auto mean = [](const std::vector<int32_t>& v) {
    double s = 0;
    for (int32_t x : v) s += x;
    return s / double(v.size());
  };
  // The chunk mean is a non-decreasing step function of α: bisect on it directly, so the
  // replayed mean (not only the model's expectation) matches τ − 1 to within a step (1/16).
  double lo = 0, hi = 1;
  for (int i = 0; i < 60; ++i) {
    const double mid = 0.5 * (lo + hi);
    (mean(make(mid)) < tau - 1 ? lo : hi) = mid;
  }
  const std::vector<int32_t> a = make(lo), b = make(hi);
  const bool use_lo = std::abs(mean(a) - (tau - 1)) < std::abs(mean(b) - (tau - 1));
  if (alpha_out) *alpha_out = use_lo ? lo : hi;
  return use_lo ? a : b;  // the generator cycles through it
}

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

std::string now_utc() {
  std::time_t t = std::time(nullptr);
  char b[64];
  std::strftime(b, sizeof b, "%Y-%m-%d %H:%M UTC", std::gmtime(&t));
  return b;
}

std::string loadavg() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

}  // namespace dfl::cli
