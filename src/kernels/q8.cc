// Q8 weights (ops.h kPackedQ8): load-time quantization, activation quantization and the
// portable matmul; the AVX-512 VNNI kernel is in cpu/q8_avx512.cc, the AVX2 one in cpu/q8_avx2.cc.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/cpu_features.h"
#include "core/error.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/ops.h"

namespace dfl {

WeightMatrix QuantizedQ8::matrix() const {
  WeightMatrix w;
  w.dtype = DType::kI8;
  w.n_out = n_out;
  w.n_in = n_in;
  w.data = q.data();
  w.scale = d.data();
  w.scale_block_out = 1;
  w.scale_block_in = kQ8Block;
  w.packed_format = kPackedQ8;
  return w;
}

QuantizedQ8 quantize_q8(const WeightMatrix& src, ThreadPool* pool) {
  DFL_CHECK(src.packed_format == kPackedNone, "quantize_q8: source is already packed");
  DFL_CHECK(src.dtype == DType::kF32 || src.dtype == DType::kBF16 || src.dtype == DType::kF16 ||
                src.dtype == DType::kF8E4M3,
            "quantize_q8: unsupported weight dtype ", dtype_name(src.dtype));
  QuantizedQ8 out;
  out.n_out = src.n_out;
  out.n_in = src.n_in;
  out.n_blocks = (src.n_in + kQ8Block - 1) / kQ8Block;
  const int64_t nb = out.n_blocks, Kp = nb * kQ8Block;
  const int64_t n_tiles = (src.n_out + kQ8TileN - 1) / kQ8TileN;
  out.q.reset(static_cast<size_t>(n_tiles * kQ8TileN * Kp));  // filled with 128 per tile below
  out.d = HugeArray<float>(static_cast<size_t>(n_tiles * kQ8TileN * nb));  // zeros
  auto tiles = [&](int64_t t0, int64_t t1, int) {
    std::memset(out.q.data() + t0 * kQ8TileN * Kp, 128, static_cast<size_t>((t1 - t0) * kQ8TileN * Kp));
    std::vector<float> row(Kp, 0.0f);
    for (int64_t n = t0 * kQ8TileN; n < std::min(t1 * kQ8TileN, src.n_out); ++n) {
      const int64_t t = n / kQ8TileN, j = n % kQ8TileN;
      if (src.dtype == DType::kF32) {
        const float* p = static_cast<const float*>(src.data) + n * src.n_in;
        for (int64_t k = 0; k < src.n_in; ++k) row[k] = p[k];
      } else if (src.dtype == DType::kBF16) {
        const uint16_t* p = static_cast<const uint16_t*>(src.data) + n * src.n_in;
        for (int64_t k = 0; k < src.n_in; ++k) row[k] = bf16_to_f32(p[k]);
      } else {
        for (int64_t k = 0; k < src.n_in; ++k) row[k] = ref::weight_at(src, n, k);
      }
      for (int64_t b = 0; b < nb; ++b) {
        float amax = 0.0f;
        for (int64_t k = b * kQ8Block; k < (b + 1) * kQ8Block; ++k)
          amax = std::fmax(amax, std::fabs(row[k]));
        const float d = amax / 127.0f;
        const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
        out.d[(t * nb + b) * kQ8TileN + j] = d;
        uint8_t* q = out.q.data() + (t * nb + b) * kQ8TileN * kQ8Block + j * 4;
        for (int64_t k = 0; k < kQ8Block; ++k) {
          const float v = std::nearbyint(row[b * kQ8Block + k] * inv);
          q[(k / 4) * kQ8TileN * 4 + k % 4] =
              static_cast<uint8_t>(static_cast<int>(std::fmax(-127.0f, std::fmin(127.0f, v))) + 128);
        }
      }
    }
  };
  if (pool)
    pool->parallel_for(n_tiles, tiles, 4);
  else
    tiles(0, n_tiles, 0);
  return out;
}

namespace ops {

namespace {

void quantize_act_portable(const float* x, int64_t M, int64_t K, int8_t* q, float* d, int32_t* c) {
  const int64_t nb = (K + kQ8Block - 1) / kQ8Block;
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t b = 0; b < nb; ++b) {
      const float* xr = x + m * K + b * kQ8Block;
      const int64_t n = std::min<int64_t>(kQ8Block, K - b * kQ8Block);
      float amax = 0.0f;
      for (int64_t k = 0; k < n; ++k) amax = std::fmax(amax, std::fabs(xr[k]));
      const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
      int8_t* qr = q + m * nb * kQ8Block + b * kQ8Block;
      int32_t sum = 0;
      for (int64_t k = 0; k < kQ8Block; ++k) {
        const int v = k < n ? static_cast<int>(std::nearbyint(xr[k] * inv)) : 0;
        qr[k] = static_cast<int8_t>(v);
        sum += v;
      }
      d[m * nb + b] = amax / 127.0f;
      c[m * nb + b] = -128 * sum;
    }
  }
}

}  // namespace

// Calls of at least this many rows take AMX-INT8 where it is usable (cpu/q8_amx.cc): measured
// crossover (docs/BENCHMARKS.md): below 8 rows the VNNI kernel is as fast (weight-bound), from 8
// AMX is 0.8x at M = 8 and 0.5-0.57x at M = 16. Either kernel gives the same bits.
constexpr int64_t kAmxQ8MinRows = 8;

void matmul_q8(const float* x, int64_t n_rows, const WeightMatrix& w, float* y, ThreadPool& pool,
               IsaLevel isa) {
  const int64_t nb = (w.n_in + kQ8Block - 1) / kQ8Block;
  thread_local std::vector<int8_t> qbuf;
  thread_local std::vector<float> dbuf;
  thread_local std::vector<int32_t> cbuf;
  // Activation rows padded to a multiple of 16: the AMX kernel loads whole 16-row tiles.
  const int64_t q_rows = (n_rows + 15) / 16 * 16;
  if (qbuf.size() < static_cast<size_t>(q_rows * nb * kQ8Block)) qbuf.resize(q_rows * nb * kQ8Block);
  if (dbuf.size() < static_cast<size_t>(n_rows * nb)) dbuf.resize(n_rows * nb);
  if (cbuf.size() < static_cast<size_t>(n_rows * nb)) cbuf.resize(n_rows * nb);
  cpu::Q8Act a{qbuf.data(), dbuf.data(), cbuf.data(), nb};
  if (isa == IsaLevel::kAvx512) {
    cpu::avx512::quantize_act_q8(x, n_rows, w.n_in, qbuf.data(), dbuf.data(), cbuf.data());
    if (n_rows >= kAmxQ8MinRows && amx_usable() && cpu_features().amx_int8)
      cpu::amx::matmul_q8(a, n_rows, w, y, pool);  // same bits as the VNNI kernel
    else
      cpu::avx512::matmul_q8(a, n_rows, w, y, pool);
    return;
  }
  if (isa == IsaLevel::kAvx2) {  // cpu/q8_avx2.cc: the same bits
    cpu::avx2::quantize_act_q8(x, n_rows, w.n_in, qbuf.data(), dbuf.data(), cbuf.data());
    if (avx_vnni_usable())
      cpu::avx2_vnni::matmul_q8(a, n_rows, w, y, pool);
    else
      cpu::avx2::matmul_q8(a, n_rows, w, y, pool);
    return;
  }
  quantize_act_portable(x, n_rows, w.n_in, qbuf.data(), dbuf.data(), cbuf.data());
  // Same arithmetic as the AVX-512 kernel (exact int32 block dot, then acc + dot * (dx * dw)),
  // so both levels give the same bits.
  const uint8_t* wq = static_cast<const uint8_t*>(w.data);
  const int64_t n_tiles = (w.n_out + kQ8TileN - 1) / kQ8TileN;
  pool.parallel_for(
      n_tiles,
      [&](int64_t t0, int64_t t1, int) {
        for (int64_t t = t0; t < t1; ++t) {
          for (int64_t m = 0; m < n_rows; ++m) {
            for (int64_t j = 0; j < kQ8TileN && t * kQ8TileN + j < w.n_out; ++j) {
              float acc = 0.0f;
              for (int64_t b = 0; b < nb; ++b) {
                const uint8_t* wb = wq + (t * nb + b) * kQ8TileN * kQ8Block + j * 4;
                const int8_t* xr = a.q + m * nb * kQ8Block + b * kQ8Block;
                int32_t s = 0;
                for (int64_t k = 0; k < kQ8Block; ++k)
                  s += (int32_t(wb[(k / 4) * kQ8TileN * 4 + k % 4]) - 128) * xr[k];
                const float sc = a.d[m * nb + b] * w.scale[(t * nb + b) * kQ8TileN + j];
                acc = acc + static_cast<float>(s) * sc;
              }
              y[m * w.n_out + t * kQ8TileN + j] = acc;
            }
          }
        }
      },
      1);
}

}  // namespace ops
}  // namespace dfl
