// Measuring a target's verify cost curve t(B), which seeds the auto draft length
// (engine/block_policy.h).
#pragma once

#include <cstdint>
#include <vector>

#include "model/model.h"
#include "spec/proposer.h"

namespace dfl {

// Measures the verify cost t(B) of the target for each B in `blocks` (seconds, median of
// `repeats` passes: a verify-shaped pass, all logits (argmax_only: the rows' greedy picks) + the `aux` taps, appending B tokens after a
// context of `context` tokens on sequence `seq`; that sequence's cache is cleared afterwards;
// two unmeasured passes per B first: the first grows the buffers of B rows, the second those
// the one-sequence forward swaps its logits through — a steady-state figure, as a server sees).
// The tokens: `text` cycled (real text: the greedy picks' screen sees real distributions), or
// a fixed synthetic sequence. Returns t indexed by B (size max(blocks) + 1, 0 = not measured). Used by
// `dflash run --block-size auto` to seed BlockPolicy, and by `dflash bench`.
std::vector<double> measure_verify_curve(CausalLM& target, int32_t seq,
                                         const std::vector<int32_t>& blocks, int32_t context = 64,
                                         int32_t repeats = 3,
                                         const std::vector<int32_t>* aux = nullptr,
                                         bool argmax_only = false,
                                         const std::vector<int32_t>* text = nullptr);

// Measures a proposer's cost over total drafter rows: for each n in `n_seqs`, one propose_batch
// of n jobs (slots 0..n−1, one context row each, then a full block of `block` rows) — seconds,
// median of `repeats`, indexed by drafter rows n·block (0 = not measured). The slots are reset
// afterwards. Auto draft lengths weigh a draft token's drafter cost with it.
std::vector<double> measure_draft_curve(Proposer& proposer, int32_t hidden, int32_t block,
                                        const std::vector<int32_t>& n_seqs, int32_t repeats = 1);

}  // namespace dfl
