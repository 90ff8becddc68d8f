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
  ProposeJob j;
  j.seq = seq;
  j.anchor = anchor;
  j.anchor_pos = anchor_pos;
  j.ctx_pos0 = anchor_pos;
  j.n_draft = n_draft;
  j.params = &params;
  j.rng = &rng;
  j.out = &out;
  propose_batch({j});
}

void DFlashProposer::propose_batch(const std::vector<ProposeJob>& jobs) {
  const int32_t mask = drafter_->dflash().mask_token_id;
  blocks_.clear();
  for (const ProposeJob& j : jobs) {
    DFL_ASSERT(j.n_draft >= 0 && j.n_draft <= max_draft());
    if (!j.n_draft) continue;
    blocks_.push_back(j.anchor);  // [anchor, MASK × n_draft] at positions anchor_pos ..
    blocks_.insert(blocks_.end(), size_t(j.n_draft), mask);
  }
  jobs_.resize(jobs.size());
  size_t b = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const ProposeJob& j = jobs[i];
    DraftJob& d = jobs_[i];
    d.seq = j.seq;
    d.ctx_taps = j.taps;
    d.n_ctx = j.n_ctx;
    d.block = j.n_draft ? blocks_.data() + b : nullptr;
    d.n_block = j.n_draft ? j.n_draft + 1 : 0;
    b += size_t(d.n_block);
  }
  const DFlash2Parts* v2 = drafter_->dflash2();
  const bool selector = v2 && v2->spec().has_selector();
  // Greedy drafts of a plain DFlash drafter need only each row's argmax (no logits made).
  bool greedy = !v2;
  for (const ProposeJob& j : jobs) greedy &= !j.n_draft || j.params->greedy();
  drafter_->run(jobs_, target_, logits_, selector ? &hidden_ : nullptr, greedy ? &picks_ : nullptr);
  if (greedy) {
    const std::vector<int32_t>& ids = drafter_->draft_to_target();
    size_t row = 0;
    for (const ProposeJob& j : jobs) {
      if (!j.n_draft) continue;
      j.out->probs.clear();
      j.out->tokens.resize(size_t(j.n_draft));
      for (int32_t k = 0; k < j.n_draft; ++k, ++row)
        j.out->tokens[size_t(k)] = ids.empty() ? picks_[row] : ids[size_t(picks_[row])];
    }
    return;
  }
  const int64_t V = drafter_->out_vocab();
  const int32_t H = drafter_->config().hidden_size;
  size_t row = 0, hrow = 0;
  for (const ProposeJob& j : jobs) {
    if (!j.n_draft) continue;
    float* lg = logits_.data() + row * size_t(V);
    if (selector)
      pick_selected(j, lg, hidden_.data() + (hrow + 1) * size_t(H));  // rows 1.. of the block
    else {
      if (v2) v2->transform(lg, int64_t(j.n_draft) * V);  // DFlash2 without a selector
      pick(j, lg);
    }
    row += size_t(j.n_draft);
    hrow += size_t(j.n_draft) + 1;
  }
}

// DFlash2: walk the candidate selector from the anchor (model/dflash2_draft.h); each row's
// predecessor is the token drafted for the row before. At T > 0 the draft distribution is the
// selector's softmax over its K candidates (zero elsewhere), so rejection sampling stays exact.
void DFlashProposer::pick_selected(const ProposeJob& j, const float* logits, const float* hidden) {
  const DFlash2Parts& v2 = *drafter_->dflash2();
  const int64_t V = target_.config().vocab_size;
  const int32_t r = v2.spec().selector_rank;
  Draft& out = *j.out;
  out.tokens.resize(size_t(j.n_draft));
  proj_.resize(size_t(j.n_draft) * r);
  v2.project(hidden, j.n_draft, proj_.data(), drafter_->pool());
  const bool greedy = j.params->greedy();
  if (greedy) out.probs.clear();
  else out.probs.assign(size_t(j.n_draft) * V, 0.0f);
  int32_t prev = j.anchor;
  for (int32_t k = 0; k < j.n_draft; ++k) {
    v2.score(logits + k * V, V, proj_.data() + size_t(k) * r, prev, sel_);
    int32_t c;
    if (greedy) {
      c = DFlash2Parts::best(sel_);
    } else {
      DFlash2Parts::distribution(sel_, j.params->temperature, q_);
      float* qrow = out.probs.data() + size_t(k) * V;
      for (size_t i = 0; i < sel_.ids.size(); ++i) qrow[sel_.ids[i]] = q_[i];
      c = sample_from(q_.data(), int64_t(q_.size()), *j.rng);
    }
    out.tokens[k] = prev = sel_.ids[c];
  }
}

void DFlashProposer::pick(const ProposeJob& j, const float* logits) {
  // Logits rows are over the drafter's vocabulary Vd (= the target's unless it has its own head);
  // `ids` maps a draft id to its target id (empty = identity).
  const int64_t Vd = drafter_->out_vocab(), Vt = target_.config().vocab_size;
  const std::vector<int32_t>& ids = drafter_->draft_to_target();
  auto to_target = [&](int64_t i) { return ids.empty() ? int32_t(i) : ids[size_t(i)]; };
  Draft& out = *j.out;
  out.tokens.resize(size_t(j.n_draft));
  if (j.params->greedy()) {
    out.probs.clear();
    for (int32_t k = 0; k < j.n_draft; ++k) out.tokens[k] = to_target(ops::argmax(logits + k * Vd, Vd));
    return;
  }
  // q over the target vocabulary: the draft distribution at the mapped ids, zero elsewhere (a
  // token with q = 0 is never proposed; rejection sampling stays exact, sampling/verify.h).
  out.probs.assign(size_t(j.n_draft) * size_t(Vt), 0.0f);
  for (int32_t k = 0; k < j.n_draft; ++k) {
    sampling_probs(logits + k * Vd, Vd, *j.params, q_);
    float* row = out.probs.data() + size_t(k) * size_t(Vt);
    for (int64_t i = 0; i < Vd; ++i) row[to_target(i)] = q_[size_t(i)];
    out.tokens[k] = to_target(sample_from(q_.data(), Vd, *j.rng));
  }
}

}  // namespace dfl
