// `dflash bench --concurrency 1,4,16`: aggregate throughput of the batched engine with c requests
// at once (each: a 32-token random prompt, `tokens` generated, eos ignored), target-only and with
// the drafter (real drafts, or PROJECTED with replayed acceptance lengths of mean --assume-tau),
// plus median TTFT and inter-token latency, and the KV pages left after each run (must be 0).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine.h"

namespace dfl::cli {

struct ConcurrencyBench {
  EngineOptions engine;
  std::vector<int32_t> levels;   // concurrent requests per run
  int32_t tokens = 128;          // generated per request
  int32_t prompt = 32;
  int32_t repeats = 3;
  int32_t block = kBlockDefault; // block size of the DFlash runs (kBlockAuto allowed)
  double assume_tau = 0;         // > 0: replay acceptance lengths of this mean (PROJECTED)
  std::vector<int32_t> replay;   // the lengths (made by the caller from assume_tau)
};

// Runs the sweep; returns the JSON fields (concurrency_tok_s, concurrency_dflash_tok_s,
// concurrency_ttft_ms, concurrency_itl_ms, ..., kv_blocks_leaked). `note` gets progress lines.
nlohmann::ordered_json run_concurrency_bench(const ConcurrencyBench& b,
                                             const std::function<void(const std::string&)>& note);

}  // namespace dfl::cli
