// Speculative verification: which drafted tokens the target accepts, and the token it adds.
//
// Drafts d[0..n) were proposed after the anchor; target_logits has n+1 rows: row j is the
// target's distribution for the token after [anchor, d0..d_{j-1}].
// Greedy: accept the longest prefix with d_j == argmax(row j); the extra token is argmax of the
// first rejected row (a correction) or of row n (a bonus) — output equals target-only decoding.
// Sampling: standard speculative rejection sampling — accept d_j with probability
// min(1, p_j(d_j)/q_j(d_j)); at the first rejection draw from normalize(max(p_j − q_j, 0));
// if all are accepted draw the bonus from p_n. p and q are processed by sampling_probs with the
// same parameters, so the committed tokens are distributed exactly as target-only sampling.
#pragma once

#include <cstdint>
#include <vector>

#include "sampling/sampler.h"

namespace dfl {

struct VerifyResult {
  int32_t n_accepted = 0;  // drafts accepted
  int32_t next_token = 0;  // correction or bonus token
};

VerifyResult verify_greedy(const int32_t* drafts, int32_t n, const float* target_logits,
                           int64_t vocab);
// The same from the rows' argmax picks [n + 1] (BatchOut::argmax: no logits made).
VerifyResult verify_greedy_picks(const int32_t* drafts, int32_t n, const int32_t* picks);

// draft_probs: [n, vocab] processed q rows (from sampling_probs) used to draw the drafts.
VerifyResult verify_rejection(const int32_t* drafts, int32_t n, const float* target_logits,
                              const float* draft_probs, int64_t vocab, const SamplingParams& params,
                              Rng& rng);

}  // namespace dfl
