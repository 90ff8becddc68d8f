#include "sampling/verify.h"

#include <algorithm>

#include "kernels/ops.h"

namespace dfl {

namespace {
// The greedy rule over the target's pick of each row (pick(j): row j's argmax, asked in order).
template <class Pick>
VerifyResult greedy_walk(const int32_t* drafts, int32_t n, Pick&& pick) {
  VerifyResult r;
  for (int32_t j = 0; j <= n; ++j) {
    const int32_t t = pick(j);
    if (j < n && drafts[j] == t) continue;
    r.n_accepted = j;
    r.next_token = t;
    break;
  }
  return r;
}
}  // namespace

VerifyResult verify_greedy_picks(const int32_t* drafts, int32_t n, const int32_t* picks) {
  return greedy_walk(drafts, n, [&](int32_t j) { return picks[j]; });
}

VerifyResult verify_greedy(const int32_t* drafts, int32_t n, const float* logits, int64_t V) {
  return greedy_walk(drafts, n,
                     [&](int32_t j) { return static_cast<int32_t>(ops::argmax(logits + j * V, V)); });
}

VerifyResult verify_rejection(const int32_t* drafts, int32_t n, const float* logits,
                              const float* q, int64_t V, const SamplingParams& params, Rng& rng) {
  // Per-thread scratch, grown once: no allocation per verify once warm.
  thread_local std::vector<float> p, residual;
  for (int32_t j = 0; j < n; ++j) {
    sampling_probs(logits + j * V, V, params, p);
    const float pj = p[drafts[j]];
    const float qj = q[j * V + drafts[j]];
    // Accept with probability min(1, p/q): u·q < p.
    if (qj > 0.0f && rng.uniform() * qj < pj) continue;
    residual.resize(size_t(V));
    double mass = 0.0;
    for (int64_t i = 0; i < V; ++i) {
      residual[i] = std::max(0.0f, p[i] - q[j * V + i]);
      mass += residual[i];
    }
    VerifyResult r;
    r.n_accepted = j;
    r.next_token = mass > 0.0 ? sample_from(residual.data(), V, rng) : sample_from(p.data(), V, rng);
    return r;
  }
  sampling_probs(logits + int64_t(n) * V, V, params, p);
  VerifyResult r;
  r.n_accepted = n;
  r.next_token = sample_from(p.data(), V, rng);
  return r;
}

}  // namespace dfl
