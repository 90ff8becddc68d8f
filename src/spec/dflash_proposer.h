// DFlash proposer: one drafter pass per step drafts a whole block for every speculating
// sequence at once (model/dflash_draft.h).
#pragma once

#include <memory>
#include <string>

#include "model/dflash_draft.h"
#include "spec/proposer.h"

namespace dfl {

class DFlashProposer final : public Proposer {
 public:
  DFlashProposer(std::unique_ptr<DFlashDraftModel> drafter, CausalLM& target);

  const std::vector<int32_t>& target_aux() const override { return drafter_->target_aux_indices(); }
  int32_t max_draft() const override { return drafter_->dflash().block_size - 1; }
  void reset(int32_t seq) override { drafter_->kv().clear(seq); }
  void add_context(int32_t seq, const float* taps, int32_t n, int32_t pos0) override;
  void propose(int32_t seq, int32_t anchor, int32_t anchor_pos, int32_t n_draft,
               const SamplingParams& params, Rng& rng, Draft& out) override;
  void propose_batch(const std::vector<ProposeJob>& jobs) override;
  KvPool* kv_pool() override { return &drafter_->kv(); }

  DFlashDraftModel& drafter() { return *drafter_; }

 private:
  // Drafts of job j from its logits rows [n_draft, vocab].
  void pick(const ProposeJob& j, const float* logits);
  // DFlash2 drafts of job j through the candidate selector; hidden [n_draft, H] drafted rows.
  void pick_selected(const ProposeJob& j, const float* logits, const float* hidden);

  std::unique_ptr<DFlashDraftModel> drafter_;
  CausalLM& target_;
  std::vector<DraftJob> jobs_;
  std::vector<int32_t> blocks_;   // every job's [anchor, MASK × n_draft]
  std::vector<float> logits_, q_, hidden_, proj_;
  std::vector<int32_t> picks_;  // greedy drafts: each row's argmax
  SelectorRow sel_;
};

}  // namespace dfl
