// Bench-only proposers (never used by `run` or `serve`). ReplayProposer makes PROJECTED
// figures: it runs the real drafter (so draft cost, context appends and KV work are all real)
// and then replaces its drafts so that cycle i accepts exactly L[i % |L|] of them: the first L
// drafts are the target's own greedy continuation (known from a target-only run of the same
// prompt; at T = 0 the committed sequence is that continuation), the next one is wrong. The
// verify, commit and rollback path is then the production one.
#pragma once

#include <cstdint>
#include <vector>

#include "spec/proposer.h"

namespace dfl::cli {

class ReplayProposer final : public Proposer {
 public:
  // truth: the target-only greedy tokens after a prompt of n_prompt tokens.
  ReplayProposer(Proposer& real, std::vector<int32_t> truth, int32_t n_prompt,
                 std::vector<int32_t> lengths, int32_t vocab)
      : real_(real), truth_(std::move(truth)), n_prompt_(n_prompt), L_(std::move(lengths)),
        vocab_(vocab) {}
  const std::vector<int32_t>& target_aux() const override { return real_.target_aux(); }
  int32_t max_draft() const override { return real_.max_draft(); }
  void reset(int32_t seq) override {
    cycle_ = 0;
    real_.reset(seq);
  }
  KvPool* kv_pool() override { return real_.kv_pool(); }
  void add_context(int32_t seq, const float* taps, int32_t n, int32_t pos0) override {
    real_.add_context(seq, taps, n, pos0);
  }
  void propose(int32_t seq, int32_t anchor, int32_t anchor_pos, int32_t n_draft,
               const SamplingParams& params, Rng& rng, Draft& out) override {
    real_.propose(seq, anchor, anchor_pos, n_draft, params, rng, out);
    script(anchor_pos, n_draft, out);
  }
  void propose_batch(const std::vector<ProposeJob>& jobs) override {
    real_.propose_batch(jobs);
    for (const ProposeJob& j : jobs)
      if (j.n_draft) script(j.anchor_pos, j.n_draft, *j.out);
  }

 private:
  void script(int32_t anchor_pos, int32_t n_draft, Draft& out) {
    const int32_t accept = L_.empty() ? n_draft : L_[size_t(cycle_++ % int64_t(L_.size()))];
    for (int32_t j = 0; j < n_draft; ++j) {
      const size_t idx = size_t(anchor_pos + 1 + j - n_prompt_);
      const int32_t t = idx < truth_.size() ? truth_[idx] : 0;
      out.tokens[size_t(j)] = j < accept ? t : (t + 1) % vocab_;
    }
  }

  Proposer& real_;
  std::vector<int32_t> truth_;
  int32_t n_prompt_;
  std::vector<int32_t> L_;
  int32_t vocab_;
  int64_t cycle_ = 0;
};

}  // namespace dfl::cli
