#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/ops.h"

namespace dfl {

namespace {
uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
}  // namespace

Rng::Rng(uint64_t seed) {
  for (auto& s : s_) s = splitmix64(seed);
}

uint64_t Rng::next() {
  const uint64_t r = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return r;
}

double Rng::uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

void sampling_probs(const float* logits, int64_t V, const SamplingParams& p,
                    std::vector<float>& probs) {
  probs.resize(V);
  const float inv_t = 1.0f / p.temperature;
  float mx = -INFINITY;
  for (int64_t i = 0; i < V; ++i) mx = std::max(mx, logits[i] * inv_t);
  double sum = 0.0;
  for (int64_t i = 0; i < V; ++i) {
    probs[i] = std::exp(logits[i] * inv_t - mx);
    sum += probs[i];
  }
  for (int64_t i = 0; i < V; ++i) probs[i] = static_cast<float>(probs[i] / sum);
  const bool filter = (p.top_k > 0 && p.top_k < V) || p.top_p < 1.0f || p.min_p > 0.0f;
  if (!filter) return;
  // Sort indices by probability (descending; ties by index for determinism).
  std::vector<int32_t> idx(V);
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return probs[a] > probs[b]; });
  int64_t keep = V;
  if (p.top_k > 0) keep = std::min<int64_t>(keep, p.top_k);
  if (p.top_p < 1.0f) {
    // Smallest prefix whose mass reaches top_p (renormalized over the top-k set).
    double kept_mass = 0.0;
    for (int64_t i = 0; i < keep; ++i) kept_mass += probs[idx[i]];
    double cum = 0.0;
    int64_t n = 0;
    while (n < keep) {
      cum += probs[idx[n]] / kept_mass;
      ++n;
      if (cum >= p.top_p) break;
    }
    keep = std::max<int64_t>(1, n);
  }
  if (p.min_p > 0.0f) {
    const float thresh = p.min_p * probs[idx[0]];
    int64_t n = 1;
    while (n < keep && probs[idx[n]] >= thresh) ++n;
    keep = n;
  }
  double kept = 0.0;
  for (int64_t i = 0; i < keep; ++i) kept += probs[idx[i]];
  std::vector<float> out(V, 0.0f);
  for (int64_t i = 0; i < keep; ++i) out[idx[i]] = static_cast<float>(probs[idx[i]] / kept);
  probs.swap(out);
}

int32_t sample_from(const float* probs, int64_t n, Rng& rng) {
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i) total += probs[i];
  if (!(total > 0.0)) return 0;
  const double u = rng.uniform() * total;
  double cum = 0.0;
  int32_t last_nonzero = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (probs[i] <= 0.0f) continue;
    cum += probs[i];
    last_nonzero = static_cast<int32_t>(i);
    if (u < cum) return static_cast<int32_t>(i);
  }
  return last_nonzero;
}

int32_t sample_token(const float* logits, int64_t V, const SamplingParams& p, Rng& rng,
                     std::vector<float>& scratch) {
  if (p.greedy()) return static_cast<int32_t>(ops::argmax(logits, V));
  sampling_probs(logits, V, p, scratch);
  return sample_from(scratch.data(), V, rng);
}

}  // namespace dfl
