// Pipeline-parallel stage plan: which contiguous layers each rank holds, what each rank's weights
// weigh, and what crosses each stage boundary per row (docs/DISTRIBUTED.md). No MPI here: `dflash
// inspect --pipeline-parallel N` and the tests use it on one process.
//
// The split: by default the layers are cut so the weight bytes a decode step streams per stage are
// as even as contiguous ranges allow (the lm_head counts on the last stage, the embedding table not
// at all: it is read one row per token); `--pp-layers a,b,...` gives the layer counts per stage
// instead (vLLM's VLLM_PP_LAYER_PARTITION convention). Every stage holds at least one layer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/model.h"

namespace dfl {

class Checkpoint;

// Stored bytes of a checkpoint's tensors: per decoder layer ("...layers.<i>." names), the
// embedding table, the lm_head (0 when tied) and the rest (final norm, ...).
struct WeightBytes {
  std::vector<int64_t> layer;
  int64_t embed = 0, lm_head = 0, other = 0;  // lm_head = the embedding's bytes when tied
  bool tied = false;
  int64_t total() const;
};
WeightBytes weight_bytes_of(const Checkpoint& ck, const ModelConfig& cfg);
// The same from config.json alone (published configs without weights): matrix parameters per
// layer (attention or Gated DeltaNet projections, dense FFN or every expert + router + shared
// expert) at the stored width — FP8 (+ its block scales) when quantization_config says so, else
// torch_dtype (bf16: 2 bytes) — and the embedding / lm_head at 2 bytes. Norms are left out.
WeightBytes estimate_weight_bytes(const ModelConfig& cfg);

// n_stages contiguous ranges covering [0, n_layers): balanced by bytes, or from "a,b,..." counts.
std::vector<StageRange> split_by_bytes(const WeightBytes& w, int32_t n_stages);
std::vector<StageRange> split_from_counts(const std::string& counts_csv, int32_t n_layers,
                                          int32_t n_stages);

// The stage that produces aux index `idx` (0 = the embedding, i = after layer i - 1).
int32_t stage_of_aux(const std::vector<StageRange>& stages, int32_t idx);

// Bytes per target row that cross the boundary after stage s (s < n - 1), fp32: the residual
// stream plus the tapped rows the stages ≤ s produced (relayed on to the drafter on the last
// stage). `aux` = the drafter's tap indices (empty without DFlash).
int64_t boundary_bytes_per_row(const std::vector<StageRange>& stages, int32_t s, int32_t hidden,
                               const std::vector<int32_t>& aux, bool row_has_taps);

// What a rank's weights weigh: its layers, plus the embedding on the first stage and the
// embedding (the drafter reads it), final norm and lm_head on the last.
int64_t stage_weight_bytes(const WeightBytes& w, const std::vector<StageRange>& stages, int32_t s);

// "0-13,14-27" for messages.
std::string stages_str(const std::vector<StageRange>& stages);

}  // namespace dfl
