// One request, run to completion through the batched scheduler (engine/scheduler.h) with a
// single slot: the convenience form for tests and tools that hold a loaded target (and
// proposer). Servers and the CLI use the Engine (engine/engine.h).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/scheduler.h"
#include "model/model.h"
#include "sampling/sampler.h"
#include "spec/proposer.h"

namespace dfl {

struct GenerateRequest {
  std::vector<int32_t> prompt;
  int32_t max_tokens = 256;
  SamplingParams sampling;
  std::vector<int32_t> stop_ids;  // generation ends after emitting one of these
  int32_t block_size = 0;         // verify rows incl. the anchor; 0 = drafter's own (capped to it);
                                  // kBlockAuto = per-cycle choice (engine/block_policy.h)
  std::vector<double> verify_cost;  // t(B) seeding kBlockAuto (measure_verify_curve)
  bool trace = false;             // keep per-cycle drafted ids and accepted counts
};

using GenerateStats = RequestStats;

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated ids (stop token included when hit)
  std::string stop_reason;      // "stop_token" | "max_tokens" | "callback"
  GenerateStats stats;
  std::vector<CycleTrace> cycles;
  double prefill_s = 0, decode_s = 0;  // submit → first token, first token → end
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
