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
};

// Bytes per element.
size_t dtype_size(DType t);
// The safetensors spelling ("F32", "BF16", "F8_E4M3", ...).
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
