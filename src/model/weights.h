// Turning checkpoint tensors into what the kernels read. Every tensor is requested by name with
// its expected dtype family and shape from the config; a mismatch names the tensor and both
// shapes (io/checkpoint.h). Matrices stay in the mapping as stored (no copy); small vectors
// (norms, sinks) are converted to fp32.
#pragma once

#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "kernels/ops.h"

namespace dfl {

// A [n_out, n_in] Linear weight, F32/BF16/F16 as stored, or F8_E4M3 with its
// `<name minus .weight>.weight_scale_inv` block-scale grid when present.
WeightMatrix load_linear(const Checkpoint& ck, const std::string& name, int64_t n_out, int64_t n_in);

// A [n] vector as fp32.
std::vector<float> load_vector(const Checkpoint& ck, const std::string& name, int64_t n);

// Converts a row range of a stored matrix (embedding table) to fp32: out[r - r0, :].
void rows_to_f32(const WeightMatrix& w, const int32_t* rows, int64_t n_rows, float* out);

}  // namespace dfl
