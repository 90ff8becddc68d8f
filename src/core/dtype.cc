#include "core/dtype.h"

#include <cmath>
#include <cstring>

namespace dfl {

namespace {
struct DTypeInfo {
  DType type;
  const char* name;
  size_t size;
};
constexpr DTypeInfo kInfos[] = {
    {DType::kF32, "F32", 4},       {DType::kBF16, "BF16", 2},     {DType::kF16, "F16", 2},
    {DType::kF8E4M3, "F8_E4M3", 1}, {DType::kF8E5M2, "F8_E5M2", 1}, {DType::kI8, "I8", 1},
    {DType::kI16, "I16", 2},       {DType::kI32, "I32", 4},       {DType::kI64, "I64", 8},
    {DType::kU8, "U8", 1},         {DType::kBool, "BOOL", 1},     {DType::kF64, "F64", 8},
};
struct BlockInfo {
  DType type;
  const char* name;
  int64_t elems, bytes;
};
constexpr BlockInfo kBlocks[] = {
    {DType::kQ8_0, "Q8_0", 32, 34},  {DType::kQ4_0, "Q4_0", 32, 18},
    {DType::kQ4_1, "Q4_1", 32, 20},  {DType::kQ5_0, "Q5_0", 32, 22},
    {DType::kQ5_1, "Q5_1", 32, 24},  {DType::kQ4_K, "Q4_K", 256, 144},
    {DType::kQ5_K, "Q5_K", 256, 176}, {DType::kQ6_K, "Q6_K", 256, 210},
};
const BlockInfo* block_info(DType t) {
  for (const auto& b : kBlocks)
    if (b.type == t) return &b;
  return nullptr;
}
}  // namespace

bool dtype_is_block(DType t) { return block_info(t) != nullptr; }
int64_t dtype_block_elems(DType t) {
  const BlockInfo* b = block_info(t);
  return b ? b->elems : 1;
}
int64_t dtype_block_bytes(DType t) {
  const BlockInfo* b = block_info(t);
  return b ? b->bytes : static_cast<int64_t>(dtype_size(t));
}

size_t dtype_size(DType t) {
  for (const auto& i : kInfos)
    if (i.type == t) return i.size;
  return 0;
}

const char* dtype_name(DType t) {
  for (const auto& i : kInfos)
    if (i.type == t) return i.name;
  if (const BlockInfo* b = block_info(t)) return b->name;
  return "?";
}

bool dtype_from_safetensors(std::string_view s, DType* out) {
  for (const auto& i : kInfos) {
    if (s == i.name) {
      *out = i.type;
      return true;
    }
  }
  return false;
}

float f16_to_f32(uint16_t h) {
  // Exact in every case: a normal half is re-biased into the float's fields (exponent + 112,
  // mantissa << 13); a subnormal is man · 2⁻²⁴, exact in float. (std::ldexp did the same math
  // through scalbnf and was most of a GGUF load's dequantization time.)
  const uint32_t sign = (h >> 15) & 1u, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  float v;
  if (exp == 0) {
    v = static_cast<float>(man) * 0x1p-24f;
  } else if (exp == 31) {
    v = man ? NAN : INFINITY;
  } else {
    const uint32_t bits = ((exp + 112u) << 23) | (man << 13);
    std::memcpy(&v, &bits, sizeof v);
  }
  return sign ? -v : v;
}

uint16_t f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow → inf
  if (a < 0x38800000u) {  // subnormal or zero in f16: round x·2^24 to nearest even integer
    float af;
    std::memcpy(&af, &a, 4);
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(af * 16777216.0f)));
  }
  a += 0xc8000fffu + ((a >> 13) & 1u);  // rebias exponent (-112 << 23) and round to nearest even
  return static_cast<uint16_t>(sign | (a >> 13));
}

float f8e4m3_to_f32(uint8_t v) {
  const uint32_t sign = v >> 7, exp = (v >> 3) & 0xfu, man = v & 0x7u;
  float r;
  if (exp == 0xf && man == 0x7) {
    r = NAN;
  } else if (exp == 0) {
    r = std::ldexp(static_cast<float>(man), -9);
  } else {
    r = std::ldexp(static_cast<float>(man | 0x8u), static_cast<int>(exp) - 10);
  }
  return sign ? -r : r;
}

float f8e5m2_to_f32(uint8_t v) { return f16_to_f32(static_cast<uint16_t>(v) << 8); }

}  // namespace dfl
