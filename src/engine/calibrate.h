// Measuring a target's verify cost curve t(B), which seeds the auto draft length
// (engine/block_policy.h).
#pragma once

#include <cstdint>
#include <vector>

#include "model/model.h"

namespace dfl {

// Measures the verify cost t(B) of the target for each B in `blocks` (seconds, median of
// `repeats` passes: a verify-shaped pass, all logits + the `aux` taps, appending B tokens after a
// context of `context` tokens on sequence `seq`; that sequence's cache is cleared afterwards).
// Returns t indexed by B (size max(blocks) + 1, 0 = not measured). Used by
// `dflash run --block-size auto` to seed BlockPolicy, and by `dflash bench`.
std::vector<double> measure_verify_curve(CausalLM& target, int32_t seq,
                                         const std::vector<int32_t>& blocks, int32_t context = 64,
                                         int32_t repeats = 3,
                                         const std::vector<int32_t>* aux = nullptr);

}  // namespace dfl
