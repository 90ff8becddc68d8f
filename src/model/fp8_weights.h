// FP8 (F8_E4M3) weights with 128×128 block scales as published (DeepSeek-V3 / MiMo convention:
// `weight_scale_inv` multiplies the stored value), including the per-tensor-parallel-shard grids
// of MiMo checkpoints (TARGETS-SPEC §3.3): a [R, C] weight exported by `T` TP ranks along its
// rows has a scale grid of T·ceil((R/T)/128) rows, not ceil(R/128). E.g. MiMo-V2-Flash
// full-attention k_proj [768, 4096] carries scales [8, 32] (4 shards × ceil(192/128) = 2).
//
// The matmul reads one uniform grid per WeightMatrix (kernels/ops.h: block bo×bi), so a per-shard
// grid is re-expressed exactly as a uniform grid with bo = gcd(128, R/T): every bo-row block then
// lies inside one shard and inside one of that shard's 128-row blocks, and gets that block's
// scale. Only the (small) fp32 scale table is copied; the FP8 data stays in the mapping and is
// dequantized inside the matmul.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "kernels/ops.h"

namespace dfl {

// How a scale grid maps onto its weight.
struct Fp8Grid {
  int64_t row_shards = 1;  // 1: one grid for the whole tensor; T: per-shard ceil grids
  int64_t block_out = 128, block_in = 128;  // the checkpoint's block size
};

// Decides how a `weight_scale_inv` of shape [scale_rows, scale_cols] maps onto a [n_out, n_in]
// weight whose rows may have been exported in `row_shards` TP shards. A per-shard grid wins
// whenever its row count matches and the shards cut through a block (that is how the published
// checkpoints were written, and a uniform reading of the same count would put the scales on the
// wrong rows); otherwise the uniform grid ceil(n_out/bo) × ceil(n_in/bi) must match. Anything
// else throws dfl::Error naming the tensor and the accepted shapes.
Fp8Grid resolve_fp8_grid(const std::string& name, int64_t n_out, int64_t n_in, int64_t scale_rows,
                         int64_t scale_cols, int64_t row_shards, int64_t block_out = 128,
                         int64_t block_in = 128);

// Re-expresses a per-shard grid as the uniform grid the kernels read (see file comment).
// scales: [row_shards·ceil(R/bo), ceil(n_in/bi)] with R = n_out / row_shards.
// Returns the new table [n_out / b, ceil(n_in/bi)] and sets *block_out_out = b = gcd(bo, R).
std::vector<float> regrid_per_shard_scales(const float* scales, const Fp8Grid& g, int64_t n_out,
                                           int64_t n_in, int64_t* block_out_out);

// Owns re-gridded scale tables; must outlive the WeightMatrix objects that point into it.
// (std::deque: growing it never moves the stored vectors.)
struct Fp8ScaleStore {
  std::deque<std::vector<float>> tables;
};

// Loads a [n_out, n_in] Linear weight: F32 / BF16 / F16 as stored, or F8_E4M3 with its
// `weight_scale_inv` resolved by resolve_fp8_grid (per-shard grids re-gridded into `store`).
WeightMatrix load_linear_fp8(const Checkpoint& ck, const std::string& name, int64_t n_out,
                             int64_t n_in, int64_t row_shards, Fp8ScaleStore& store,
                             int64_t block_out = 128, int64_t block_in = 128);

}  // namespace dfl
