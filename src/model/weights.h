// Turning checkpoint tensors into what the kernels read. Every tensor is requested by name with
// its expected dtype family and shape from the config; a mismatch names the tensor and both
// shapes (io/checkpoint.h). Matrices stay in the mapping as stored (no copy); small vectors
// (norms, sinks) are converted to fp32.
#pragma once

#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "kernels/ops.h"
#include "model/model.h"

namespace dfl {

// A [n_out, n_in] Linear weight, F32/BF16/F16 as stored, or F8_E4M3 with its
// `<name minus .weight>.weight_scale_inv` block-scale grid when present.
WeightMatrix load_linear(const Checkpoint& ck, const std::string& name, int64_t n_out, int64_t n_in);

// Load-time copies of weights (Q8 quantizations, prepacked layouts). Moving it keeps every
// WeightMatrix made from it valid (the element buffers stay where they are).
struct OwnedWeights {
  std::vector<QuantizedQ8> q8;
  std::vector<PackedWeight> packed;
};

// Applies the load-time weights format of `opts` to `w`: kQ8 replaces it by its Q8 quantization;
// kAsStored with opts.prepack replaces it by prepack_weight()'s layout when that differs from the
// stored one. The copies go to `store`. `pool` (optional) parallelizes.
void convert_weight(WeightMatrix& w, const LoadOptions& opts, OwnedWeights& store,
                    ThreadPool* pool);

// Bytes a full pass over `w` reads (data + scales), whatever its format.
int64_t weight_bytes(const WeightMatrix& w);

// A [n] vector as fp32.
std::vector<float> load_vector(const Checkpoint& ck, const std::string& name, int64_t n);
// A tensor of any shape as fp32 (row-major).
std::vector<float> load_f32(const Checkpoint& ck, const std::string& name,
                            const std::vector<int64_t>& shape);

// RMSNorm weights as stored (y = n(x)·w), or zero-centred (Qwen3.5: y = n(x)·(1 + w), w stored
// as the offset from 1): the effective weight 1 + w is formed once at load time in fp32.
enum class NormStyle : uint8_t { kPlain, kZeroCentred };
std::vector<float> load_norm(const Checkpoint& ck, const std::string& name, int64_t n,
                             NormStyle style);

// Converts a row range of a stored matrix (embedding table) to fp32: out[r - r0, :].
void rows_to_f32(const WeightMatrix& w, const int32_t* rows, int64_t n_rows, float* out);

}  // namespace dfl
