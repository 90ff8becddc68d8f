#include "engine/generator.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"

namespace dfl {

GenerateResult Generator::generate(const GenerateRequest& req, const TokenCallback& on_token) {
  using Clock = std::chrono::steady_clock;
  SchedulerOptions so;
  so.max_seqs = 1;
  // Prompt cuts that every ring can take at once (the target's and the proposer's).
  so.prefill_chunk = 256;
  if (target_.kv().has_rings()) so.prefill_chunk = std::min(so.prefill_chunk, target_.kv().slack());
  if (KvPool* pk = proposer_ ? proposer_->kv_pool() : nullptr; pk && pk->has_rings())
    so.prefill_chunk = std::min(so.prefill_chunk, pk->slack());
  so.verify_cost = req.verify_cost;
  Scheduler sched(target_, proposer_, so);
  SeqRequest sr;
  sr.prompt = req.prompt;
  sr.max_tokens = req.max_tokens;
  sr.sampling = req.sampling;
  sr.stop_ids = req.stop_ids;
  sr.trace = req.trace;
  sr.block_size = req.block_size;
  if (proposer_ && req.block_size > 0) sr.block_size = std::min(req.block_size, proposer_->max_draft() + 1);
  GenerateResult res;
  bool stopped_by_callback = false;
  FinishReason reason = FinishReason::kNone;
  const auto t0 = Clock::now();
  Clock::time_point t_first{};
  auto cb = [&](const SeqEvent& ev) {
    for (int32_t i = 0; i < ev.n; ++i) {
      if (res.tokens.empty()) t_first = Clock::now();
      res.tokens.push_back(ev.tokens[i]);
      if (on_token && !on_token(ev.tokens[i])) {
        stopped_by_callback = true;
        return false;
      }
    }
    if (ev.finished) {
      reason = ev.reason;
      res.stats = *ev.stats;
      res.cycles = *ev.trace;
    }
    return true;
  };
  try {
    sched.submit(std::move(sr), cb);
  } catch (const RequestRefused& r) {
    throw Error(r.message);
  }
  while (sched.step()) {
  }
  const auto t1 = Clock::now();
  res.stats.generated_tokens = int32_t(res.tokens.size());
  res.stop_reason = stopped_by_callback         ? "callback"
                    : reason == FinishReason::kStop ? "stop_token"
                                                    : "max_tokens";
  if (!res.tokens.empty()) {
    res.prefill_s = std::chrono::duration<double>(t_first - t0).count();
    res.decode_s = std::chrono::duration<double>(t1 - t_first).count();
  }
  return res;
}

}  // namespace dfl
