// Internals of the GGML block matmul shared by kernels/ggml_matmul.cc (the matmul) and
// kernels/ggml_argmax.cc (the screened argmax): the activation rows, the kernel dispatch and the
// portable per-output dot that every kernel reproduces bit for bit. Not an API: ops.h is.
#pragma once

#include <cstdint>
#include <vector>

#include "core/cpu_features.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/ops.h"

namespace dfl::ops {

bool is_k_type(DType t);
// Elements per activation quantization block: 256 for the K formats, 32 for the others.
inline int64_t act_block(DType t) { return is_k_type(t) ? 256 : 32; }

// Quantized activation rows (the layout cpu::GgmlAct views): q [rows, K + 256] (the padding
// zeroed), d [rows, K / ab], s16 [rows, K / 16], s32 [rows, K / 32]. Grown on demand, never
// shrunk.
struct GgmlActRows {
  std::vector<int8_t> q;
  std::vector<float> d;
  std::vector<int32_t> s16, s32;
  int64_t K = 0, ab = 32;

  void reserve(int64_t rows, int64_t K, int64_t ab);
  // Rows [row0, row0 + M) := the int8 quantization of x [M, K] (ggml_matmul.cc, top comment);
  // resid (optional) [M, K] := x − d·q, the input of an int8x2 call's second half.
  void quantize(const float* x, int64_t M, int64_t row0, float* resid, IsaLevel isa,
                ThreadPool& pool);
  // Zeroes rows [row0, row0 + n) (the pad rows an AMX tile loads).
  void zero(int64_t row0, int64_t n);
  // The rows from row0 on, as plain rows (pair = 0).
  cpu::GgmlAct view(int64_t row0) const;
};

// Whether a kernel call of q_rows int8 activation rows on w takes AMX-INT8 (then the call has
// at most cpu::amx::kGgmlAmxMaxRows rows, padded with zeroed rows to a multiple of 16).
bool ggml_amx_for(const WeightMatrix& w, int64_t q_rows, IsaLevel isa);
// One kernel call: y [M, n_out] from M int8 activation rows (a.pair as cpu_kernels.h says).
// M ≤ kGgmlRowChunk, or ≤ kGgmlAmxMaxRows when amx.
void ggml_kernel(const cpu::GgmlAct& a, int64_t M, const WeightMatrix& w, float* y,
                 ThreadPool& pool, IsaLevel isa, bool amx);
// Under kInt8 (y = the q1 half alone) matmul_argmax screens a call of n_rows rows on the head's
// 6-bit plane (where it has one) only where that beats the weight's own kernel (ggml_argmax.cc):
// Q6_K at every size, Q8_0 up to 4 rows (past that both are compute-bound, the Q8_0 kernel the
// cheaper). Under kInt8x2 the plane is taken at every size.
bool int8_plane_pays(DType t, int64_t n_rows);
// Output n of activation row m (a.pair ignored), computed by the portable kernel from the
// original blocks in w.data: the bits every kernel writes for it.
float ggml_portable_dot(const cpu::GgmlAct& a, int64_t m, const WeightMatrix& w, int64_t n);

}  // namespace dfl::ops
