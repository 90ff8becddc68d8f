// Backend-neutral op signatures. Activations are fp32, row-major, outermost dimension first.
// Each op has a scalar reference in kernels/ref/ (the oracle, never optimized) and may have an
// optimized CPU version in kernels/cpu/ chosen at runtime by CPU features. Tests compare the two
// over shape sweeps.
//
// Batch invariance (needed for bit-exact lossless speculative decoding): for every op here, the
// result for one row depends only on that row's inputs — never on how many rows are computed
// together, on the thread count, or on the block size.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/threadpool.h"
#include "kernels/visibility.h"

namespace dfl {

// A weight matrix in torch Linear layout: W[n_out, n_in], y = x · Wᵀ.
// kF8E4M3: `scale` holds the block scale grid [ceil(n_out/bo), ceil(n_in/bi)] (weight_scale_inv,
// the factor that multiplies the stored value), with bo = scale_block_out, bi = scale_block_in.
// `packed` is an optional kernel-specific layout made once at load time (see prepack_weight).
struct WeightMatrix {
  DType dtype = DType::kF32;
  int64_t n_out = 0;
  int64_t n_in = 0;
  const void* data = nullptr;     // [n_out, n_in] elements of dtype, contiguous
  const float* scale = nullptr;   // F8 block scales, row-major grid
  int64_t scale_block_out = 128;
  int64_t scale_block_in = 128;
  const void* packed = nullptr;   // optional repacked copy owned elsewhere
  int32_t packed_format = 0;      // 0 = none; meaning defined by kernels/cpu
};

struct AttnParams {
  int32_t n_heads = 0;
  int32_t n_kv_heads = 0;  // GQA: query head h reads kv head h / (n_heads / n_kv_heads)
  int32_t d_qk = 0;
  int32_t d_v = 0;
  float scale = 1.0f;      // logit scale (usually d_qk^-0.5)
  Window window;           // the layer's resolved visibility window (kernels/visibility.h)
  const float* sinks = nullptr;  // [n_heads] learned sink logits (unscaled), or nullptr
};

namespace ops {

// y[m, :] = x[m, :] · Wᵀ for m < n_rows.     x: [n_rows, n_in]   y: [n_rows, n_out]
void matmul(const float* x, int64_t n_rows, const WeightMatrix& w, float* y, ThreadPool& pool);

// y[m, :] = x[m, :] / sqrt(mean(x[m, :]²) + eps) ⊙ w     x, y: [n_rows, dim]   w: [dim] fp32
// (in place allowed: y == x)
void rms_norm(const float* x, const float* w, int64_t n_rows, int64_t dim, float eps, float* y);

// out[i] = silu(gate[i]) * up[i], i < n.    (out may alias gate)
void silu_mul(const float* gate, const float* up, int64_t n, float* out);

// y[i] += x[i]
void add_inplace(float* y, const float* x, int64_t n);

// NeoX (rotate-half) RoPE on the leading `n_rot` dims of each head, in place.
//   x: [n_rows, n_heads, head_dim] (row stride `row_stride` floats)
//   cos, sin: [n_rows, n_rot / 2] (already include any attention scaling, e.g. YaRN mscale)
// Pair (i, i + n_rot/2): x_i' = x_i·c − x_{i+h}·s ; x_{i+h}' = x_{i+h}·c + x_i·s
void rope_neox(float* x, int64_t n_rows, int64_t row_stride, int64_t n_heads, int64_t head_dim,
               int64_t n_rot, const float* cos, const float* sin);


// Attention of n_q queries over n_kv cache slots with online softmax in fp32.
//   q:     [n_q, n_heads, d_qk]            q_pos: [n_q] absolute positions
//   k:     [n_kv, n_kv_heads, d_qk]        k_pos: [n_kv] absolute positions, kEmptySlot = skip
//   v:     [n_kv, n_kv_heads, d_v]
//   out:   [n_q, n_heads, d_v]
// Keys are visited in slot order; a query with no visible key and no sink gets zeros.
// Sinks add exp(s_h) to the softmax denominator with no value.
void attention(const float* q, const int32_t* q_pos, int64_t n_q, const float* k, const float* v,
               const int32_t* k_pos, int64_t n_kv, const AttnParams& p, float* out,
               ThreadPool& pool);

// Index of the largest element (first one on ties).
int64_t argmax(const float* x, int64_t n);

}  // namespace ops

// Scalar references with the same contracts (the oracle for tests).
namespace ref {
void matmul(const float* x, int64_t n_rows, const WeightMatrix& w, float* y);
void rms_norm(const float* x, const float* w, int64_t n_rows, int64_t dim, float eps, float* y);
void silu_mul(const float* gate, const float* up, int64_t n, float* out);
void rope_neox(float* x, int64_t n_rows, int64_t row_stride, int64_t n_heads, int64_t head_dim,
               int64_t n_rot, const float* cos, const float* sin);
void attention(const float* q, const int32_t* q_pos, int64_t n_q, const float* k, const float* v,
               const int32_t* k_pos, int64_t n_kv, const AttnParams& p, float* out);
// Dequantizes one weight element (any supported dtype, including F8 with block scales).
float weight_at(const WeightMatrix& w, int64_t row, int64_t col);
}  // namespace ref

}  // namespace dfl
