// Reference dequantization of the GGML block formats (core/dtype.h), written to match ggml's
// dequantize_row_* and gguf-py's gguf.quants.dequantize bit for bit: the same fp32 operations in
// the same order (f16 scales widened exactly; d·sc and dmin·m formed first for the K types).
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace dfl::ref {

// Dequantizes one block (dtype_block_elems(t) values) at `blk` into out.
void dequant_block(DType t, const uint8_t* blk, float* out);
// One element `i` (< dtype_block_elems(t)) of the block at `blk`.
float dequant_block_elem(DType t, const uint8_t* blk, int64_t i);
// A row of n elements (n a multiple of the block size) stored as consecutive blocks.
void dequant_row(DType t, const uint8_t* row, int64_t n, float* out);

// Helpers shared with the optimized kernels.
inline float f16_at(const uint8_t* p) {
  return f16_to_f32(static_cast<uint16_t>(p[0] | (p[1] << 8)));
}
// Q4_K / Q5_K 6-bit scale and min of sub-block j (ggml get_scale_min_k4).
inline void k4_scale_min(const uint8_t* s, int j, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
    *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

}  // namespace dfl::ref
