#include "kernels/ref/ggml_ref.h"

#include "core/error.h"

namespace dfl::ref {

namespace {

// Unsigned quant value (before the offset / min) of element i, and the block's per-element
// scale factor. Each format's value is then formed exactly as ggml/gguf-py do.
inline int q4_lo_hi(const uint8_t* qs, int64_t i) {  // 32-element layouts (Q4_0/Q4_1/Q5_x)
  return i < 16 ? (qs[i] & 0xF) : (qs[i - 16] >> 4);
}

}  // namespace

float dequant_block_elem(DType t, const uint8_t* b, int64_t i) {
  switch (t) {
    case DType::kQ8_0:
      return static_cast<float>(static_cast<int8_t>(b[2 + i])) * f16_at(b);
    case DType::kQ4_0:
      return f16_at(b) * static_cast<float>(q4_lo_hi(b + 2, i) - 8);
    case DType::kQ4_1:
      return f16_at(b) * static_cast<float>(q4_lo_hi(b + 4, i)) + f16_at(b + 2);
    case DType::kQ5_0: {
      const uint32_t qh = b[2] | (b[3] << 8) | (b[4] << 16) | (uint32_t(b[5]) << 24);
      const int q = q4_lo_hi(b + 6, i) | (((qh >> i) & 1) << 4);
      return f16_at(b) * static_cast<float>(q - 16);
    }
    case DType::kQ5_1: {
      const uint32_t qh = b[4] | (b[5] << 8) | (b[6] << 16) | (uint32_t(b[7]) << 24);
      const int q = q4_lo_hi(b + 8, i) | (((qh >> i) & 1) << 4);
      return f16_at(b) * static_cast<float>(q) + f16_at(b + 2);
    }
    case DType::kQ4_K:
    case DType::kQ5_K: {
      const int j = static_cast<int>(i / 32), l = static_cast<int>(i % 32);
      uint8_t sc, m;
      k4_scale_min(b + 4, j, &sc, &m);
      const float d = f16_at(b) * static_cast<float>(sc);
      const float dm = f16_at(b + 2) * static_cast<float>(m);
      const uint8_t* qs = b + (t == DType::kQ4_K ? 16 : 48);
      int q = (qs[(j / 2) * 32 + l] >> (4 * (j % 2))) & 0xF;
      if (t == DType::kQ5_K) q |= ((b[16 + l] >> j) & 1) << 4;
      return d * static_cast<float>(q) - dm;
    }
    case DType::kQ6_K: {
      const int h = static_cast<int>(i / 128), r = static_cast<int>(i % 128);
      const int g = r / 32, l = r % 32;
      const uint8_t* ql = b;
      const uint8_t* qh = b + 128;
      const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
      const int lo = (ql[64 * h + (g % 2) * 32 + l] >> (4 * (g / 2))) & 0xF;
      const int hi = (qh[32 * h + l] >> (2 * g)) & 3;
      const float d = f16_at(b + 208) * static_cast<float>(sc[i / 16]);
      return d * static_cast<float>((lo | (hi << 4)) - 32);
    }
    default:
      DFL_ASSERT(false && "dequant_block_elem: not a block dtype");
  }
  return 0.0f;
}

// The same values as dequant_block_elem element by element (the same fp operations on the same
// operands), with each block's / sub-block's scale decoded once instead of per element.
void dequant_block(DType t, const uint8_t* b, float* out) {
  switch (t) {
    case DType::kQ8_0: {
      const float d = f16_at(b);
      for (int i = 0; i < 32; ++i) out[i] = static_cast<float>(static_cast<int8_t>(b[2 + i])) * d;
      return;
    }
    case DType::kQ4_0: {
      const float d = f16_at(b);
      for (int i = 0; i < 32; ++i) out[i] = d * static_cast<float>(q4_lo_hi(b + 2, i) - 8);
      return;
    }
    case DType::kQ5_0: {
      const float d = f16_at(b);
      const uint32_t qh = b[2] | (b[3] << 8) | (b[4] << 16) | (uint32_t(b[5]) << 24);
      for (int i = 0; i < 32; ++i) {
        const int q = q4_lo_hi(b + 6, i) | (((qh >> i) & 1) << 4);
        out[i] = d * static_cast<float>(q - 16);
      }
      return;
    }
    case DType::kQ4_K:
    case DType::kQ5_K: {
      const uint8_t* qs = b + (t == DType::kQ4_K ? 16 : 48);
      for (int j = 0; j < 8; ++j) {
        uint8_t sc, m;
        k4_scale_min(b + 4, j, &sc, &m);
        const float d = f16_at(b) * static_cast<float>(sc);
        const float dm = f16_at(b + 2) * static_cast<float>(m);
        for (int l = 0; l < 32; ++l) {
          int q = (qs[(j / 2) * 32 + l] >> (4 * (j % 2))) & 0xF;
          if (t == DType::kQ5_K) q |= ((b[16 + l] >> j) & 1) << 4;
          out[32 * j + l] = d * static_cast<float>(q) - dm;
        }
      }
      return;
    }
    case DType::kQ6_K: {
      const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
      const float d16 = f16_at(b + 208);
      for (int s16 = 0; s16 < 16; ++s16) {
        const float d = d16 * static_cast<float>(sc[s16]);
        for (int i = 16 * s16; i < 16 * s16 + 16; ++i) {
          const int h = i / 128, r = i % 128, g = r / 32, l = r % 32;
          const int lo = (b[64 * h + (g % 2) * 32 + l] >> (4 * (g / 2))) & 0xF;
          const int hi = (b[128 + 32 * h + l] >> (2 * g)) & 3;
          out[i] = d * static_cast<float>((lo | (hi << 4)) - 32);
        }
      }
      return;
    }
    default: {
      const int64_t n = dtype_block_elems(t);
      for (int64_t i = 0; i < n; ++i) out[i] = dequant_block_elem(t, b, i);
    }
  }
}

void dequant_row(DType t, const uint8_t* row, int64_t n, float* out) {
  const int64_t be = dtype_block_elems(t), bb = dtype_block_bytes(t);
  for (int64_t b = 0; b < n / be; ++b) dequant_block(t, row + b * bb, out + b * be);
}

}  // namespace dfl::ref
