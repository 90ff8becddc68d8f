// Token sampling: greedy, temperature, top-k, top-p, min-p, with a seeded RNG.
//
// The processed distribution (sampling_probs) is the one every sampling decision uses — target
// sampling, draft sampling and speculative rejection sampling — so p and q in the rejection test
// are built by exactly the same rule. Order: temperature → top-k → top-p → min-p → renormalize.
#pragma once

#include <cstdint>
#include <vector>

namespace dfl {

struct SamplingParams {
  float temperature = 0.0f;  // 0 → greedy (argmax)
  int32_t top_k = 0;         // 0 → off
  float top_p = 1.0f;        // 1 → off
  float min_p = 0.0f;        // 0 → off
  uint64_t seed = 0;
  bool greedy() const { return temperature <= 0.0f; }
};

// xoshiro256** seeded through splitmix64: same seed, same stream, on every platform.
class Rng {
 public:
  explicit Rng(uint64_t seed = 0);
  uint64_t next();
  double uniform();  // [0, 1)
 private:
  uint64_t s_[4];
};

// probs[V] ← the processed distribution of logits[V] (sums to 1; zero outside the kept set).
// Requires !params.greedy().
void sampling_probs(const float* logits, int64_t vocab, const SamplingParams& params,
                    std::vector<float>& probs);

// Draws an index from a distribution (probs need not be normalized; all-zero → argmax of 0s = 0).
int32_t sample_from(const float* probs, int64_t n, Rng& rng);

// Greedy argmax when params.greedy(), else a draw from sampling_probs.
int32_t sample_token(const float* logits, int64_t vocab, const SamplingParams& params, Rng& rng,
                     std::vector<float>& scratch);

}  // namespace dfl
