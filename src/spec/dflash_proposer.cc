#include "spec/dflash_proposer.h"

#include "core/error.h"
#include "kernels/ops.h"

namespace dfl {

DFlashProposer::DFlashProposer(std::unique_ptr<DFlashDraftModel> drafter, CausalLM& target)
    : drafter_(std::move(drafter)), target_(target) {}

void DFlashProposer::add_context(int32_t seq, const float* taps, int32_t n, int32_t pos0) {
  drafter_->append_context(seq, taps, n, pos0);
}

void DFlashProposer::propose(int32_t seq, int32_t anchor, int32_t anchor_pos, int32_t n_draft,
                             const SamplingParams& params, Rng& rng, Draft& out) {
  DFL_ASSERT(n_draft >= 1 && n_draft <= max_draft());
  const int64_t V = target_.config().vocab_size;
  block_.assign(n_draft + 1, drafter_->dflash().mask_token_id);
  block_[0] = anchor;  // [anchor, MASK × n_draft] at positions anchor_pos ..
  logits_.resize(size_t(n_draft) * V);
  drafter_->draft_block(seq, block_.data(), n_draft + 1, anchor_pos, target_, logits_.data());
  out.tokens.resize(n_draft);
  if (params.greedy()) {
    out.probs.clear();
    for (int32_t j = 0; j < n_draft; ++j)
      out.tokens[j] = static_cast<int32_t>(ops::argmax(logits_.data() + j * V, V));
    return;
  }
  out.probs.resize(size_t(n_draft) * V);
  std::vector<float> q;
  for (int32_t j = 0; j < n_draft; ++j) {
    sampling_probs(logits_.data() + j * V, V, params, q);
    std::copy(q.begin(), q.end(), out.probs.begin() + size_t(j) * V);
    out.tokens[j] = sample_from(q.data(), V, rng);
  }
}

}  // namespace dfl
