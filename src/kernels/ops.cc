// Portable CPU implementations of ops.h (the baseline before SIMD dispatch). Work is split over
// output rows / (query, head) pairs; every output element is computed by one fixed sequence of
// operations, which is what makes the results batch-invariant and thread-count-invariant.
#include "kernels/ops.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"

namespace dfl::ops {

namespace {

// One dot product of an fp32 activation row with weight row `n`, accumulated in 8 fp32 lanes
// then reduced pairwise: fixed order, independent of how many rows are processed.
float dot_row(const float* x, const WeightMatrix& w, int64_t n) {
  float lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  const int64_t K = w.n_in;
  int64_t k = 0;
  switch (w.dtype) {
    case DType::kF32: {
      const float* row = static_cast<const float*>(w.data) + n * K;
      for (; k + 8 <= K; k += 8)
        for (int l = 0; l < 8; ++l) lanes[l] += x[k + l] * row[k + l];
      for (; k < K; ++k) lanes[k & 7] += x[k] * row[k];
      break;
    }
    case DType::kBF16: {
      const uint16_t* row = static_cast<const uint16_t*>(w.data) + n * K;
      for (; k + 8 <= K; k += 8)
        for (int l = 0; l < 8; ++l) lanes[l] += x[k + l] * bf16_to_f32(row[k + l]);
      for (; k < K; ++k) lanes[k & 7] += x[k] * bf16_to_f32(row[k]);
      break;
    }
    default:
      for (; k < K; ++k) lanes[k & 7] += x[k] * ref::weight_at(w, n, k);
      break;
  }
  return ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5])) + ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]));
}

}  // namespace

void matmul(const float* x, int64_t n_rows, const WeightMatrix& w, float* y, ThreadPool& pool) {
  pool.parallel_for(
      w.n_out,
      [&](int64_t n0, int64_t n1, int) {
        for (int64_t m = 0; m < n_rows; ++m) {
          const float* xr = x + m * w.n_in;
          float* yr = y + m * w.n_out;
          for (int64_t n = n0; n < n1; ++n) yr[n] = dot_row(xr, w, n);
        }
      },
      16);
}

void rms_norm(const float* x, const float* w, int64_t n_rows, int64_t dim, float eps, float* y) {
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    float ss = 0.0f;
    for (int64_t i = 0; i < dim; ++i) ss += xr[i] * xr[i];
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(dim) + eps);
    for (int64_t i = 0; i < dim; ++i) yr[i] = (xr[i] * inv) * w[i];
  }
}

void silu_mul(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void add_inplace(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void rope_neox(float* x, int64_t n_rows, int64_t row_stride, int64_t n_heads, int64_t head_dim,
               int64_t n_rot, const float* cos, const float* sin) {
  ref::rope_neox(x, n_rows, row_stride, n_heads, head_dim, n_rot, cos, sin);
}

void attention(const float* q, const int32_t* q_pos, int64_t n_q, const float* k, const float* v,
               const int32_t* k_pos, int64_t n_kv, const AttnParams& p, float* out,
               ThreadPool& pool) {
  const int32_t group = p.n_heads / p.n_kv_heads;
  pool.parallel_for(n_q * p.n_heads, [&](int64_t b, int64_t e, int) {
    std::vector<float> acc(p.d_v);
    for (int64_t qh = b; qh < e; ++qh) {
      const int64_t i = qh / p.n_heads;
      const int32_t h = static_cast<int32_t>(qh % p.n_heads);
      const int32_t kvh = h / group;
      const float* qv = q + qh * p.d_qk;
      // Online softmax: running max m, running denominator l, running weighted sum acc.
      float m = p.sinks ? p.sinks[h] : -INFINITY;
      float l = p.sinks ? 1.0f : 0.0f;
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t j = 0; j < n_kv; ++j) {
        if (!kv_visible(q_pos[i], k_pos[j], p.window)) continue;
        const float* kv = k + (j * p.n_kv_heads + kvh) * p.d_qk;
        float dot = 0.0f;
        for (int32_t d = 0; d < p.d_qk; ++d) dot += qv[d] * kv[d];
        const float s = dot * p.scale;
        const float* vv = v + (j * p.n_kv_heads + kvh) * p.d_v;
        if (s > m) {
          const float c = std::exp(m - s);  // exp(-inf) = 0 on the first key
          l = l * c + 1.0f;
          for (int32_t d = 0; d < p.d_v; ++d) acc[d] = acc[d] * c + vv[d];
          m = s;
        } else {
          const float e2 = std::exp(s - m);
          l += e2;
          for (int32_t d = 0; d < p.d_v; ++d) acc[d] += e2 * vv[d];
        }
      }
      float* o = out + qh * p.d_v;
      const float inv = l > 0.0f ? 1.0f / l : 0.0f;
      for (int32_t d = 0; d < p.d_v; ++d) o[d] = acc[d] * inv;
    }
  });
}

int64_t argmax(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  return best;
}

}  // namespace dfl::ops
