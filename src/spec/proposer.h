// Proposer: anything that drafts tokens for the target to verify (DFlash now; n-gram or a
// draft LM later). The engine owns the loop; a proposer only keeps its own state per sequence.
#pragma once

#include <cstdint>
#include <vector>

#include "sampling/sampler.h"

namespace dfl {

struct Draft {
  std::vector<int32_t> tokens;  // [n]
  std::vector<float> probs;     // [n, vocab] processed draft distributions q (sampling only)
};

class Proposer {
 public:
  virtual ~Proposer() = default;
  // Target aux hidden-state indices to capture on every target pass (model/model.h protocol).
  virtual const std::vector<int32_t>& target_aux() const = 0;
  // Most tokens one proposal may hold (block size − 1 for DFlash).
  virtual int32_t max_draft() const = 0;
  // Forgets everything about `seq`.
  virtual void reset(int32_t seq) = 0;
  // Target features for committed positions [pos0, pos0 + n): taps [n, aux.size() × hidden].
  virtual void add_context(int32_t seq, const float* taps, int32_t n, int32_t pos0) = 0;
  // Drafts n_draft tokens that follow `anchor`, the newest committed token, at `anchor_pos`.
  // With params.greedy() drafts are argmax; otherwise each is sampled from q (kept in out.probs).
  virtual void propose(int32_t seq, int32_t anchor, int32_t anchor_pos, int32_t n_draft,
                       const SamplingParams& params, Rng& rng, Draft& out) = 0;
};

}  // namespace dfl
