// Proposer: anything that drafts tokens for the target to verify (DFlash now; n-gram or a
// draft LM later). The engine owns the loop; a proposer only keeps its own state per sequence
// slot (the same slot ids as the target's KV pool).
//
// Protocol per sequence, in order: add_context() for committed positions as they get target
// features (contiguous from 0), then propose() after the anchor (the newest committed token,
// whose own features come with the next add_context). The engine calls propose_batch() once per
// step with every sequence's share; its default runs the single-sequence calls in job order.
#pragma once

#include <cstdint>
#include <vector>

#include "sampling/sampler.h"

namespace dfl {

class KvPool;

struct Draft {
  std::vector<int32_t> tokens;  // [n]
  std::vector<float> probs;     // [n, vocab] processed draft distributions q (sampling only)
};

// One sequence's share of a step.
struct ProposeJob {
  int32_t seq = 0;
  const float* taps = nullptr;  // [n_ctx, aux.size() × hidden] features of new committed positions
  int32_t n_ctx = 0;
  int32_t ctx_pos0 = 0;         // first of those positions
  int32_t anchor = 0;           // newest committed token, at anchor_pos = ctx_pos0 + n_ctx
  int32_t anchor_pos = 0;
  int32_t n_draft = 0;          // 0 = context only
  const std::vector<int32_t>* tokens = nullptr;  // the sequence's committed tokens (prompt +
                                                 // generated; back() is the anchor)
  const SamplingParams* params = nullptr;
  Rng* rng = nullptr;
  Draft* out = nullptr;
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
  // The proposer's own KV pool (same slot ids as the target's), if it has one: the engine makes
  // room in it before each step and preempts when it is full.
  virtual KvPool* kv_pool() { return nullptr; }
  // Every sequence's share of one step (see file comment).
  virtual void propose_batch(const std::vector<ProposeJob>& jobs) {
    for (const ProposeJob& j : jobs) {
      if (j.n_ctx) add_context(j.seq, j.taps, j.n_ctx, j.ctx_pos0);
      if (j.n_draft) propose(j.seq, j.anchor, j.anchor_pos, j.n_draft, *j.params, *j.rng, *j.out);
    }
  }
};

}  // namespace dfl
