// Scalar reference ops: straightforward loops, double accumulation where it is cheap, so they
// serve as the oracle that optimized kernels are measured against.
#include <cmath>
#include <cstdint>
#include <numbers>
#include <vector>

#include "core/error.h"
#include "kernels/ops.h"
#include "kernels/ref/ggml_ref.h"

namespace dfl::ref {

float weight_at(const WeightMatrix& w, int64_t row, int64_t col) {
  if (w.packed_format == kPackedQ8) {
    const int64_t nb = (w.n_in + kQ8Block - 1) / kQ8Block;  // tiled layout: see ops.h
    const int64_t tb = (row / kQ8TileN) * nb + col / kQ8Block, j = row % kQ8TileN;
    const int u = static_cast<const uint8_t*>(w.data)[(tb * 16 + col % kQ8Block / 4) * 64 + j * 4 + col % 4];
    return static_cast<float>(u - 128) * w.scale[tb * kQ8TileN + j];
  }
  if (dtype_is_block(w.dtype)) {
    const int64_t be = dtype_block_elems(w.dtype);
    const uint8_t* blk = static_cast<const uint8_t*>(w.data) + row * dtype_row_bytes(w.dtype, w.n_in) +
                         (col / be) * dtype_block_bytes(w.dtype);
    return dequant_block_elem(w.dtype, blk, col % be);
  }
  const int64_t i = row * w.n_in + col;
  switch (w.dtype) {
    case DType::kF32:
      return static_cast<const float*>(w.data)[i];
    case DType::kBF16:
      return bf16_to_f32(static_cast<const uint16_t*>(w.data)[i]);
    case DType::kF16:
      return f16_to_f32(static_cast<const uint16_t*>(w.data)[i]);
    case DType::kF8E4M3: {
      const float v = f8e4m3_to_f32(static_cast<const uint8_t*>(w.data)[i]);
      if (!w.scale) return v;
      const int64_t grid_cols = (w.n_in + w.scale_block_in - 1) / w.scale_block_in;
      return v * w.scale[(row / w.scale_block_out) * grid_cols + col / w.scale_block_in];
    }
    default:
      DFL_ASSERT(false && "ref::weight_at: unsupported weight dtype");
  }
  return 0.0f;
}

void matmul(const float* x, int64_t n_rows, const WeightMatrix& w, float* y) {
  for (int64_t m = 0; m < n_rows; ++m) {
    for (int64_t n = 0; n < w.n_out; ++n) {
      double acc = 0.0;
      for (int64_t k = 0; k < w.n_in; ++k) acc += double(x[m * w.n_in + k]) * weight_at(w, n, k);
      y[m * w.n_out + n] = static_cast<float>(acc);
    }
  }
}

void rms_norm(const float* x, const float* w, int64_t n_rows, int64_t dim, float eps, float* y) {
  for (int64_t r = 0; r < n_rows; ++r) {
    double ss = 0.0;
    for (int64_t i = 0; i < dim; ++i) ss += double(x[r * dim + i]) * x[r * dim + i];
    const float inv = 1.0f / std::sqrt(static_cast<float>(ss / dim) + eps);
    for (int64_t i = 0; i < dim; ++i) y[r * dim + i] = (x[r * dim + i] * inv) * w[i];
  }
}

void silu_mul(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void gelu_tanh_mul(const float* gate, const float* up, int64_t n, float* out) {
  const double c = std::sqrt(2.0 / std::numbers::pi);
  for (int64_t i = 0; i < n; ++i) {
    const double x = gate[i];
    const double u = c * (x + 0.044715 * x * x * x);
    out[i] = static_cast<float>(x / (1.0 + std::exp(-2.0 * u)) * double(up[i]));
  }
}

void softcap(float* x, int64_t n, float cap) {
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(double(cap) * std::tanh(double(x[i]) / cap));
}

void rope_neox(float* x, int64_t n_rows, int64_t row_stride, int64_t n_heads, int64_t head_dim,
               int64_t n_rot, const float* cos, const float* sin) {
  const int64_t half = n_rot / 2;
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* c = cos + r * half;
    const float* s = sin + r * half;
    for (int64_t h = 0; h < n_heads; ++h) {
      float* v = x + r * row_stride + h * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const float a = v[i], b = v[i + half];
        v[i] = a * c[i] - b * s[i];
        v[i + half] = b * c[i] + a * s[i];
      }
    }
  }
}

// Slot j of a paged cache: page j / page_slots, row j % page_slots (ops.h KvPages), in either
// dtype (bf16 values widened exactly).
namespace {
struct Slot {
  const float* k = nullptr;  // kF32
  const float* v = nullptr;
  const uint16_t* k16 = nullptr;  // kBF16: K dims contiguous, V dims 2 apart (slot pairs)
  const uint16_t* v16 = nullptr;
  int32_t pos;
  double k_at(int32_t d) const { return k ? double(k[d]) : double(bf16_to_f32(k16[d])); }
  double v_at(int32_t d) const { return v ? double(v[d]) : double(bf16_to_f32(v16[2 * d])); }
};
Slot slot_at(const KvPages& kv, const AttnParams& p, int64_t j, int32_t kvh) {
  const int64_t page = j / kv.page_slots, row = j % kv.page_slots;
  Slot s;
  s.pos = kv.pos[page][row];
  const KvRow r = kv_row(kv, p, kvh, page, row);
  s.k = r.k;
  s.v = r.v;
  s.k16 = r.k16;
  s.v16 = r.v16;
  return s;
}
}  // namespace

void attention(const float* q, const int32_t* q_pos, int64_t n_q, const KvPages& kv,
               const AttnParams& p, float* out) {
  DFL_ASSERT(kv.n_slots == 0 || kv.page_slots > 0);
  const int64_t n_kv = kv.n_slots;
  const int32_t group = p.n_heads / p.n_kv_heads;
  std::vector<double> logits(n_kv);
  for (int64_t i = 0; i < n_q; ++i) {
    for (int32_t h = 0; h < p.n_heads; ++h) {
      const int32_t kvh = h / group;
      const float* qv = q + (i * p.n_heads + h) * p.d_qk;
      double mx = p.sinks ? double(p.sinks[h]) : -INFINITY;
      for (int64_t j = 0; j < n_kv; ++j) {
        const Slot sl = slot_at(kv, p, j, kvh);
        if (!kv_visible(q_pos[i], sl.pos, p.window)) {
          logits[j] = -INFINITY;
          continue;
        }
        double dot = 0.0;
        for (int32_t d = 0; d < p.d_qk; ++d) dot += double(qv[d]) * sl.k_at(d);
        logits[j] = dot * p.scale;
        if (logits[j] > mx) mx = logits[j];
      }
      float* o = out + (i * p.n_heads + h) * p.d_v;
      std::vector<double> acc(p.d_v, 0.0);
      double denom = p.sinks ? std::exp(double(p.sinks[h]) - mx) : 0.0;
      if (std::isinf(mx)) {  // nothing visible and no sink
        for (int32_t d = 0; d < p.d_v; ++d) o[d] = 0.0f;
        continue;
      }
      for (int64_t j = 0; j < n_kv; ++j) {
        if (std::isinf(logits[j])) continue;
        const double e = std::exp(logits[j] - mx);
        denom += e;
        const Slot sv = slot_at(kv, p, j, kvh);
        for (int32_t d = 0; d < p.d_v; ++d) acc[d] += e * sv.v_at(d);
      }
      for (int32_t d = 0; d < p.d_v; ++d) o[d] = denom > 0 ? static_cast<float>(acc[d] / denom) : 0.0f;
    }
  }
}

void attention(const float* q, const int32_t* q_pos, int64_t n_q, const float* k, const float* v,
               const int32_t* k_pos, int64_t n_kv, const AttnParams& p, float* out) {
  const float* kp[1] = {k};
  const float* vp[1] = {v};
  const int32_t* pp[1] = {k_pos};
  DFL_ASSERT(n_kv <= INT32_MAX);
  const KvPages kv{kp, vp, pp, n_kv, static_cast<int32_t>(n_kv > 0 ? n_kv : 1)};
  attention(q, q_pos, n_q, kv, p, out);
}

}  // namespace dfl::ref
