// Bench-only proposers (never used by `run` or `serve`). ReplayProposer makes PROJECTED
// figures: it runs the real drafter (so draft cost, context appends and KV work are all real)
// and then replaces its drafts so that each cycle accepts exactly L[i % |L|] of them (i counts
// that request's cycles): the first L drafts are the target's own greedy continuation of the
// request's prompt (from a target-only run; at T = 0 the committed sequence is that
// continuation), the next one is wrong. The verify, commit and rollback path is the production
// one. Requests are told apart by their prompt (ProposeJob::tokens). With no lengths set it
// passes the real drafts through.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <vector>

#include "core/error.h"
#include "spec/proposer.h"

namespace dfl::cli {

class ReplayProposer final : public Proposer {
 public:
  ReplayProposer(Proposer& real, std::vector<int32_t> lengths, int32_t vocab)
      : real_(real), L_(std::move(lengths)), vocab_(vocab) {}
  // The target-only continuation of `prompt`.
  void add_truth(const std::vector<int32_t>& prompt, std::vector<int32_t> continuation) {
    truth_[prompt] = {std::move(continuation), 0};
  }

  // Cycle counters back to 0 (a repeated run replays the same lengths).
  void restart() {
    for (auto& [p, t] : truth_) t.cycle = 0;
  }

  const std::vector<int32_t>& target_aux() const override { return real_.target_aux(); }
  int32_t max_draft() const override { return real_.max_draft(); }
  void reset(int32_t seq) override { real_.reset(seq); }
  KvPool* kv_pool() override { return real_.kv_pool(); }
  void add_context(int32_t seq, const float* taps, int32_t n, int32_t pos0) override {
    real_.add_context(seq, taps, n, pos0);
  }
  void propose(int32_t, int32_t, int32_t, int32_t, const SamplingParams&, Rng&, Draft&) override {
    DFL_ASSERT(false && "ReplayProposer needs propose_batch (the committed tokens)");
  }
  void propose_batch(const std::vector<ProposeJob>& jobs) override {
    real_.propose_batch(jobs);
    if (L_.empty()) return;  // pass-through: the real drafter's drafts
    for (const ProposeJob& j : jobs)
      if (j.n_draft) script(j);
  }
  void set_vocab(int32_t vocab) { vocab_ = vocab; }
  // Replayed acceptance lengths; empty = pass the real drafts through.
  void set_lengths(std::vector<int32_t> L) { L_ = std::move(L); }

 private:
  struct Truth {
    std::vector<int32_t> tokens;
    int64_t cycle;
  };
  void script(const ProposeJob& j) {
    Truth* t = nullptr;
    for (auto& [prompt, tr] : truth_)
      if (j.tokens->size() >= prompt.size() && std::equal(prompt.begin(), prompt.end(), j.tokens->begin())) {
        t = &tr;
        const int32_t accept = L_[size_t(tr.cycle++ % int64_t(L_.size()))];
        for (int32_t k = 0; k < j.n_draft; ++k) {
          const size_t idx = size_t(j.anchor_pos + 1 + k) - prompt.size();
          const int32_t want = idx < tr.tokens.size() ? tr.tokens[idx] : 0;
          (*j.out).tokens[size_t(k)] = k < accept ? want : (want + 1) % vocab_;
        }
        break;
      }
    DFL_ASSERT(t != nullptr);
  }

  Proposer& real_;
  std::vector<int32_t> L_;
  int32_t vocab_;
  std::map<std::vector<int32_t>, Truth> truth_;
};

}  // namespace dfl::cli
