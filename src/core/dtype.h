// Element types of stored tensors and their scalar conversions.
//
// Activations are always fp32 inside the engine; weights keep their stored type (F32, BF16, F16,
// F8_E4M3 + block scales, or Q8 produced at load time) and are converted inside the kernels.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace dfl {

enum class DType : uint8_t {
  kF32,
  kBF16,
  kF16,
  kF8E4M3,  // OCP e4m3fn: 1 sign, 4 exponent (bias 7), 3 mantissa; no inf; 0x7f/0xff are NaN
  kF8E5M2,
  kI8,
  kI16,
  kI32,
  kI64,
  kU8,
  kBool,
  kF64,
  // GGML block-quantized formats (GGUF). A row of n elements is n / dtype_block_elems() blocks
  // of dtype_block_bytes() bytes each, laid out exactly as ggml stores them (ggml-common.h):
  //   Q8_0 (32 el, 34 B): f16 d, i8 q[32]                          w = d·q
  //   Q4_0 (32, 18): f16 d, u8 qs[16] (lo nibbles = el 0..15, hi = 16..31)     w = d·(q − 8)
  //   Q4_1 (32, 20): f16 d, f16 m, u8 qs[16]                       w = d·q + m
  //   Q5_0 (32, 22): f16 d, u8 qh[4] (bit j = 5th bit of el j), qs[16]         w = d·(q − 16)
  //   Q5_1 (32, 24): f16 d, f16 m, qh[4], qs[16]                   w = d·q + m
  //   Q4_K (256, 144): f16 d, f16 dmin, u8 scales[12] (8 × 6-bit scale + 6-bit min), qs[128]
  //   Q5_K (256, 176): f16 d, f16 dmin, scales[12], qh[32], qs[128]
  //   Q6_K (256, 210): u8 ql[128], qh[64], i8 scales[16], f16 d
  kQ8_0,
  kQ4_0,
  kQ4_1,
  kQ5_0,
  kQ5_1,
  kQ4_K,
  kQ5_K,
  kQ6_K,
};

// Block geometry: 1 element of dtype_size() bytes for the plain types; see above for the
// block-quantized ones (for which dtype_size() is 0).
bool dtype_is_block(DType t);
int64_t dtype_block_elems(DType t);
int64_t dtype_block_bytes(DType t);
// Bytes of one row of n elements (n must be a multiple of dtype_block_elems; checked by callers).
inline int64_t dtype_row_bytes(DType t, int64_t n) {
  return n / dtype_block_elems(t) * dtype_block_bytes(t);
}

// Bytes per element (0 for the block-quantized types).
size_t dtype_size(DType t);
// The safetensors spelling ("F32", "BF16", "F8_E4M3", ...); ggml's for block types ("Q4_K").
const char* dtype_name(DType t);
// Parses a safetensors dtype string; returns false for unknown names.
bool dtype_from_safetensors(std::string_view s, DType* out);

inline float bf16_to_f32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round-to-nearest-even, NaN preserved (same as torch's float → bfloat16 cast).
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// e4m3fn → f32 (exact; every e4m3 value is representable in f32).
float f8e4m3_to_f32(uint8_t v);
float f8e5m2_to_f32(uint8_t v);

}  // namespace dfl
