#include "engine/generator.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "kernels/ops.h"
#include "sampling/verify.h"

namespace dfl {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}
}  // namespace

GenerateResult Generator::generate(const GenerateRequest& req, const TokenCallback& on_token) {
  GenerateResult res;
  const int32_t n_prompt = static_cast<int32_t>(req.prompt.size());
  KvCache& kv = target_.kv();
  DFL_CHECK(n_prompt > 0, "the prompt is empty");
  DFL_CHECK(n_prompt < kv.max_context(), "the prompt has ", n_prompt,
            " tokens but the context holds at most ", kv.max_context());
  DFL_CHECK(req.max_tokens > 0, "max tokens must be positive");
  const int64_t V = target_.config().vocab_size;
  const int32_t seq = req.seq;
  Rng rng(req.sampling.seed);
  std::vector<float> scratch;
  res.stats.prompt_tokens = n_prompt;

  int32_t budget = std::min(req.max_tokens, kv.max_context() - n_prompt);
  // Emits one committed token; returns false when generation must end.
  auto emit = [&](int32_t tok) {
    res.tokens.push_back(tok);
    ++res.stats.generated_tokens;
    if (on_token && !on_token(tok)) {
      res.stop_reason = "callback";
      return false;
    }
    if (std::find(req.stop_ids.begin(), req.stop_ids.end(), tok) != req.stop_ids.end()) {
      res.stop_reason = "stop_token";
      return false;
    }
    if (res.stats.generated_tokens >= budget) {
      res.stop_reason = "max_tokens";
      return false;
    }
    return true;
  };

  kv.clear(seq);
  if (proposer_) proposer_->reset(seq);

  // Prefill: one batched pass over the prompt (with taps when speculating).
  auto t0 = Clock::now();
  ForwardArgs fa;
  ForwardOut fo;
  fa.seq = seq;
  fa.tokens = req.prompt.data();
  fa.n = n_prompt;
  fa.pos0 = 0;
  fa.logits = LogitsMode::kLast;
  fa.aux = proposer_ ? &proposer_->target_aux() : nullptr;
  target_.forward(fa, fo);
  if (proposer_) proposer_->add_context(seq, fo.aux.data(), n_prompt, 0);
  int32_t anchor = sample_token(fo.logits.data(), V, req.sampling, rng, scratch);
  res.stats.prefill_s = seconds_since(t0);
  t0 = Clock::now();
  if (!emit(anchor)) {
    res.stats.decode_s = seconds_since(t0);
    return res;
  }
  int32_t s = n_prompt;  // position of the anchor (not yet in the target KV)

  if (!proposer_) {
    for (;;) {
      fa.tokens = &anchor;
      fa.n = 1;
      fa.pos0 = s;
      target_.forward(fa, fo);
      anchor = sample_token(fo.logits.data(), V, req.sampling, rng, scratch);
      ++s;
      if (!emit(anchor)) break;
    }
    res.stats.decode_s = seconds_since(t0);
    return res;
  }

  const int32_t block = req.block_size > 0 ? std::min(req.block_size, proposer_->max_draft() + 1)
                                           : proposer_->max_draft() + 1;
  DFL_CHECK(block >= 1, "block size must be at least 1");
  res.stats.acceptance_histogram.assign(block, 0);
  res.stats.draft_length_histogram.assign(block, 0);
  BlockPolicy* policy = req.block_policy;
  const bool replay = req.replay_accept && !req.replay_accept->empty();
  int64_t cycle = 0;
  Draft draft;
  std::vector<int32_t> verify_tokens;
  for (;;) {
    const int32_t remaining = budget - res.stats.generated_tokens;
    const int32_t k = policy ? std::min(block - 1, policy->choose()) : block - 1;
    const int32_t n_draft = std::min({k, remaining - 1, kv.max_context() - s - 1});
    draft.tokens.clear();
    draft.probs.clear();
    auto td = Clock::now();
    if (n_draft > 0) proposer_->propose(seq, anchor, s, n_draft, req.sampling, rng, draft);
    double cycle_draft_s = seconds_since(td);
    res.stats.draft_s += cycle_draft_s;

    // One target pass over [anchor, drafts...] at positions s..s+n_draft.
    auto tv = Clock::now();
    verify_tokens.assign(1, anchor);
    verify_tokens.insert(verify_tokens.end(), draft.tokens.begin(), draft.tokens.end());
    fa.tokens = verify_tokens.data();
    fa.n = static_cast<int32_t>(verify_tokens.size());
    fa.pos0 = s;
    fa.logits = LogitsMode::kAll;
    target_.forward(fa, fo);
    const int32_t nd = static_cast<int32_t>(draft.tokens.size());
    VerifyResult vr =
        req.sampling.greedy()
            ? verify_greedy(draft.tokens.data(), nd, fo.logits.data(), V)
            : verify_rejection(draft.tokens.data(), nd, fo.logits.data(), draft.probs.data(), V,
                               req.sampling, rng);
    if (replay && nd > 0) {  // projected mode: replayed acceptance (see GenerateRequest)
      const auto& L = *req.replay_accept;
      vr.n_accepted = std::clamp(L[size_t(cycle % int64_t(L.size()))], 0, nd);
      vr.next_token = static_cast<int32_t>(
          ops::argmax(fo.logits.data() + size_t(vr.n_accepted) * size_t(V), V));
    }
    const double cycle_verify_s = seconds_since(tv);
    res.stats.verify_s += cycle_verify_s;
    ++res.stats.target_passes;
    if (nd > 0) {
      ++cycle;
      ++res.stats.draft_length_histogram[nd];
      ++res.stats.draft_steps;
      res.stats.drafted_tokens += nd;
      res.stats.accepted_tokens += vr.n_accepted;
      res.stats.committed_in_cycles += vr.n_accepted + 1;
      ++res.stats.acceptance_histogram[vr.n_accepted];
      if (req.trace) res.cycles.push_back({draft.tokens, vr.n_accepted});
    }

    bool go = true;
    for (int32_t j = 0; j < vr.n_accepted && go; ++j) go = emit(draft.tokens[j]);
    if (go) go = emit(vr.next_token);
    if (!go) break;

    // Keep anchor + accepted drafts in the target KV; feed their taps to the proposer.
    kv.truncate(seq, s + vr.n_accepted + 1);
    auto ta = Clock::now();
    proposer_->add_context(seq, fo.aux.data(), vr.n_accepted + 1, s);
    const double ctx_s = seconds_since(ta);
    cycle_draft_s += ctx_s;
    res.stats.draft_s += ctx_s;
    if (policy && nd > 0) {
      policy->observe(nd, vr.n_accepted);
      policy->observe_verify_time(nd + 1, cycle_verify_s);
      policy->observe_draft_time(nd + 1, cycle_draft_s);
    }
    s += vr.n_accepted + 1;
    anchor = vr.next_token;
  }
  res.stats.decode_s = seconds_since(t0);
  return res;
}

}  // namespace dfl
