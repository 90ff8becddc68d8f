// Generation for one sequence: target-only decoding, or speculative decoding with a Proposer.
//
// Speculative cycle (DFLASH-SPEC §2.7, §4): the anchor is the newest committed token at
// position s. Draft n tokens → ONE target pass over [anchor, d_1..d_n] at s..s+n with taps →
// verify (greedy prefix or rejection sampling) → commit accepted drafts + one target token →
// truncate the target KV to s + a + 1 (anchor + accepted) → feed those a + 1 rows of taps to the
// proposer → the committed target token becomes the next anchor at s + a + 1.
// At T = 0 the committed tokens equal target-only greedy decoding exactly (kernels are
// batch-invariant, so verifying a row in a block computes the same logits as decoding it alone).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/block_policy.h"
#include "model/model.h"
#include "sampling/sampler.h"
#include "spec/proposer.h"

namespace dfl {

struct GenerateRequest {
  std::vector<int32_t> prompt;
  int32_t max_tokens = 256;
  SamplingParams sampling;
  std::vector<int32_t> stop_ids;  // generation ends after emitting one of these
  int32_t block_size = 0;         // tokens per verify block incl. the anchor; 0 = drafter's own
  bool trace = false;             // keep per-cycle drafted ids and accepted counts
  int32_t seq = 0;                // KV-cache sequence slot to use
  // Auto draft length (`--block-size auto`): when set, each cycle drafts
  // min(block_policy->choose(), block − 1) tokens and the policy learns from every cycle's
  // acceptance and timings (engine/block_policy.h). Owned by the caller.
  BlockPolicy* block_policy = nullptr;
  // BENCH ONLY — figures made with it are PROJECTED, not measured speedups. When set (and not
  // empty), cycle i's verify outcome is overridden by the replayed latent acceptance length
  // L = (*replay_accept)[i % size]: the cycle accepts min(L, drafted) drafts and commits the
  // target's argmax after them, so the real drafter + verify + rollback pipeline runs with a
  // chosen acceptance profile even on random-weight models (dflash bench --assume-tau).
  const std::vector<int32_t>* replay_accept = nullptr;
};

struct CycleTrace {
  std::vector<int32_t> drafted;
  int32_t accepted = 0;
};

struct GenerateStats {
  int32_t prompt_tokens = 0;
  int32_t generated_tokens = 0;
  double prefill_s = 0, decode_s = 0;
  // Speculative decoding only:
  int64_t draft_steps = 0, drafted_tokens = 0, accepted_tokens = 0, target_passes = 0;
  int64_t committed_in_cycles = 0;            // Σ (accepted + 1) over cycles
  std::vector<int64_t> acceptance_histogram;  // [accepted count] → cycles
  std::vector<int64_t> draft_length_histogram;  // [drafted count] → cycles
  double draft_s = 0, verify_s = 0;
  // τ: mean tokens committed per target verify pass (the paper's acceptance length).
  double mean_acceptance_length() const {
    return draft_steps ? double(committed_in_cycles) / double(draft_steps) : 0.0;
  }
};

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated ids (stop token included when hit)
  std::string stop_reason;      // "stop_token" | "max_tokens" | "callback"
  GenerateStats stats;
  std::vector<CycleTrace> cycles;
};

// Called with each committed token in order; return false to stop early.
using TokenCallback = std::function<bool(int32_t token)>;

class Generator {
 public:
  // proposer may be null (target-only decoding).
  Generator(CausalLM& target, Proposer* proposer) : target_(target), proposer_(proposer) {}
  // Throws dfl::Error for an empty prompt or one that does not fit the context.
  GenerateResult generate(const GenerateRequest& req, const TokenCallback& on_token = {});

 private:
  CausalLM& target_;
  Proposer* proposer_;
};

}  // namespace dfl
