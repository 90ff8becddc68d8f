#include "kernels/ref/ggml_ref.h"

#include "core/error.h"

namespace dfl::ref {

namespace {

// Each format's rule once: the unsigned quant of element i and the scale(s) of its block or
// sub-block; the value is then formed exactly as ggml / gguf-py do. dequant_block_elem applies
// a rule to one element, dequant_block to a block with each scale decoded once (same operations
// on the same operands, so the same bits).
inline int q4_lo_hi(const uint8_t* qs, int64_t i) {  // 32-element layouts (Q4_0/Q4_1/Q5_x)
  return i < 16 ? (qs[i] & 0xF) : (qs[i - 16] >> 4);
}
inline uint32_t q5_high_bits(const uint8_t* qh) {
  return qh[0] | (qh[1] << 8) | (qh[2] << 16) | (uint32_t(qh[3]) << 24);
}
inline int q5_quant(const uint8_t* qs, uint32_t qh, int64_t i) {
  return q4_lo_hi(qs, i) | static_cast<int>(((qh >> i) & 1) << 4);
}
inline float q8_0_value(const uint8_t* b, int64_t i, float d) {
  return static_cast<float>(static_cast<int8_t>(b[2 + i])) * d;
}
inline float q4_0_value(const uint8_t* b, int64_t i, float d) {
  return d * static_cast<float>(q4_lo_hi(b + 2, i) - 8);
}
inline float q5_0_value(const uint8_t* b, uint32_t qh, int64_t i, float d) {
  return d * static_cast<float>(q5_quant(b + 6, qh, i) - 16);
}
// Q4_K / Q5_K sub-block j (32 elements): d·sc and dmin·m, and element l's quant.
inline void k45_scales(const uint8_t* b, int j, float* d, float* dm) {
  uint8_t sc, m;
  k4_scale_min(b + 4, j, &sc, &m);
  *d = f16_at(b) * static_cast<float>(sc);
  *dm = f16_at(b + 2) * static_cast<float>(m);
}
inline int k45_quant(DType t, const uint8_t* b, int j, int l) {
  const uint8_t* qs = b + (t == DType::kQ4_K ? 16 : 48);
  int q = (qs[(j / 2) * 32 + l] >> (4 * (j % 2))) & 0xF;
  if (t == DType::kQ5_K) q |= ((b[16 + l] >> j) & 1) << 4;
  return q;
}
// Q6_K: the scale of sub-block i / 16 and element i's signed quant.
inline float q6k_scale(const uint8_t* b, int64_t s16) {
  return f16_at(b + 208) * static_cast<float>(reinterpret_cast<const int8_t*>(b + 192)[s16]);
}
inline int q6k_quant(const uint8_t* b, int64_t i) {
  const int h = static_cast<int>(i / 128), r = static_cast<int>(i % 128);
  const int g = r / 32, l = r % 32;
  const int lo = (b[64 * h + (g % 2) * 32 + l] >> (4 * (g / 2))) & 0xF;
  const int hi = (b[128 + 32 * h + l] >> (2 * g)) & 3;
  return (lo | (hi << 4)) - 32;
}

}  // namespace

float dequant_block_elem(DType t, const uint8_t* b, int64_t i) {
  switch (t) {
    case DType::kQ8_0: return q8_0_value(b, i, f16_at(b));
    case DType::kQ4_0: return q4_0_value(b, i, f16_at(b));
    case DType::kQ4_1: return f16_at(b) * static_cast<float>(q4_lo_hi(b + 4, i)) + f16_at(b + 2);
    case DType::kQ5_0: return q5_0_value(b, q5_high_bits(b + 2), i, f16_at(b));
    case DType::kQ5_1:
      return f16_at(b) * static_cast<float>(q5_quant(b + 8, q5_high_bits(b + 4), i)) + f16_at(b + 2);
    case DType::kQ4_K:
    case DType::kQ5_K: {
      const int j = static_cast<int>(i / 32), l = static_cast<int>(i % 32);
      float d, dm;
      k45_scales(b, j, &d, &dm);
      return d * static_cast<float>(k45_quant(t, b, j, l)) - dm;
    }
    case DType::kQ6_K: return q6k_scale(b, i / 16) * static_cast<float>(q6k_quant(b, i));
    default:
      DFL_ASSERT(false && "dequant_block_elem: not a block dtype");
  }
  return 0.0f;
}

void dequant_block(DType t, const uint8_t* b, float* out) {
  switch (t) {
    case DType::kQ8_0: {
      const float d = f16_at(b);
      for (int i = 0; i < 32; ++i) out[i] = q8_0_value(b, i, d);
      return;
    }
    case DType::kQ4_0: {
      const float d = f16_at(b);
      for (int i = 0; i < 32; ++i) out[i] = q4_0_value(b, i, d);
      return;
    }
    case DType::kQ5_0: {
      const float d = f16_at(b);
      const uint32_t qh = q5_high_bits(b + 2);
      for (int i = 0; i < 32; ++i) out[i] = q5_0_value(b, qh, i, d);
      return;
    }
    case DType::kQ4_K:
    case DType::kQ5_K:
      for (int j = 0; j < 8; ++j) {
        float d, dm;
        k45_scales(b, j, &d, &dm);
        for (int l = 0; l < 32; ++l) out[32 * j + l] = d * static_cast<float>(k45_quant(t, b, j, l)) - dm;
      }
      return;
    case DType::kQ6_K: {  // q6k_quant's bytes in their storage order: 4 elements per (h, l)
      float ds[16];
      for (int s16 = 0; s16 < 16; ++s16) ds[s16] = q6k_scale(b, s16);
      for (int h = 0; h < 2; ++h)
        for (int l = 0; l < 32; ++l) {
          const int lo0 = b[64 * h + l], lo1 = b[64 * h + 32 + l], hb = b[128 + 32 * h + l];
          const int q[4] = {(lo0 & 0xF) | ((hb & 3) << 4), (lo1 & 0xF) | (((hb >> 2) & 3) << 4),
                            (lo0 >> 4) | (((hb >> 4) & 3) << 4), (lo1 >> 4) | (((hb >> 6) & 3) << 4)};
          for (int g = 0; g < 4; ++g) {
            const int i = 128 * h + 32 * g + l;
            out[i] = ds[i / 16] * static_cast<float>(q[g] - 32);
          }
        }
      return;
    }
    default:  // Q4_1, Q5_1: element by element
      for (int64_t i = 0; i < dtype_block_elems(t); ++i) out[i] = dequant_block_elem(t, b, i);
  }
}

void dequant_row(DType t, const uint8_t* row, int64_t n, float* out) {
  const int64_t be = dtype_block_elems(t), bb = dtype_block_bytes(t);
  for (int64_t b = 0; b < n / be; ++b) dequant_block(t, row + b * bb, out + b * be);
}

}  // namespace dfl::ref
