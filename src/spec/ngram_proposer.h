// Prompt-lookup n-gram proposer (vLLM's `method: "ngram"`, llama.cpp's lookup decoding): no
// weights; it drafts what followed the most recent earlier occurrence of the sequence's last N
// committed tokens (the anchor included), up to the step's draft length. No match: no drafts
// (the step verifies the anchor alone). Drafts are deterministic, so for sampling their q is a
// point mass (one-hot rows: rejection sampling then accepts d with probability p(d)).
// It keeps no state: everything it needs is in ProposeJob::tokens.
#pragma once

#include <cstdint>
#include <vector>

#include "spec/proposer.h"

namespace dfl {

class NgramProposer final : public Proposer {
 public:
  // n: the suffix length to look up; max_draft: most tokens per proposal (block − 1).
  NgramProposer(int32_t n, int32_t max_draft, int64_t vocab);

  const std::vector<int32_t>& target_aux() const override { return no_taps_; }
  int32_t max_draft() const override { return max_draft_; }
  void reset(int32_t) override {}
  void add_context(int32_t, const float*, int32_t, int32_t) override {}
  void propose(int32_t, int32_t, int32_t, int32_t, const SamplingParams&, Rng&, Draft&) override;
  void propose_batch(const std::vector<ProposeJob>& jobs) override;

  // The drafts for a committed sequence (its last token is the anchor): at most `n_draft`.
  static void lookup(const std::vector<int32_t>& tokens, int32_t n, int32_t n_draft,
                     std::vector<int32_t>& out);

 private:
  int32_t n_, max_draft_;
  int64_t vocab_;
  std::vector<int32_t> no_taps_;
};

}  // namespace dfl
