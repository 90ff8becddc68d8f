// Matmul on GGML block weights (ops.h: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K), the
// activation quantization, dequantize_rows and the portable kernel. The AVX-512 VNNI kernels
// (cpu/ggml_avx512.cc) and the AVX2 ones (cpu/ggml_rows_avx2.cc, cpu/ggml_avx2.cc) compute the same bits.
//
// GgmlActivations::kFp32: per (row, output) 16 fp32 lanes over the dequantized weight
// row w (ref::dequant_row's exact values): a[k % 16] = fma(w_k, x_k, a[k % 16]) in k order, then
// y = r2[0] + r2[1] with r8[i] = a[i] + a[i + 8], r4[i] = r8[i] + r8[i + 4], r2[i] = r4[i] + r4[i + 2].
//
// kInt8 — the math (llama.cpp's scheme, written so every ISA level can reproduce it exactly):
//  * Activations: each row is quantized per activation block — 32 elements for the 32-element
//    weight formats, 256 for the K formats — to int8: d = absmax / 127, id = d ? 1 / d : 0,
//    q = round-to-nearest-even(x · id) (|q| ≤ 127). Sums of q per 16 elements are kept.
//  * Integer part, exact in int32: per 32-block b of the Q*_0 / Q*_1 formats
//      dot_b = Σ u_k·q_k − off·Σ q_k  (u = stored unsigned quant; off = 128 Q8_0 (u = q + 128),
//      8 Q4_0, 16 Q5_0, 0 Q4_1 / Q5_1);
//    per 256-superblock s of the K formats: Q4_K / Q5_K  isum_s = Σ_j sc_j·Σ_{k∈j} u_k·q_k and
//      msum_s = Σ_j m_j·Σ_{k∈j} q_k over the 8 sub-blocks j of 32; Q6_K  isum_s = Σ_j sc_j·(Σ_{k∈j}
//      u_k·q_k − 32·Σ_{k∈j} q_k) over the 16 sub-blocks of 16 (u = 6-bit value, sc signed).
//  * Float part: 8 fp32 accumulators per (row, output); block / superblock i goes to lane i % 8:
//      Q*_0:  a = fma(float(dot_b), d_b · dx_b, a)
//      Q*_1:  a = fma(float(dot_b), d_b · dx_b, a);  a = fma(float(Σ q), m_b · dx_b, a)
//      Q4_K / Q5_K:  a = fma(float(isum), d · dx, a);  a = fma(−float(msum), dmin · dx, a)
//      Q6_K:  a = fma(float(isum), d · dx, a)
//    y = ((a0 + a4) + (a1 + a5)) + ((a2 + a6) + (a3 + a7)).
// kInt8x2 (the default): the residual r = x − d·q of each block (fp32, one multiply and one
// subtract, no fma) is quantized the same way (d2 = absmax(r) / 127, q2 = rne(r / d2)); the
// kernels see the 2M rows [q of rows m0.., q2 of rows m0..] in one call (so each weight block
// is unpacked once for both) and y = y(q) + y(q2), one fp32 add, made by the kernel as it writes
// the q2 row (GgmlAct::pair: no 2M-row buffer and no separate pass over it).
// Each row's result depends only on that row: batch- and thread-count invariant. Rows are
// processed in chunks of kGgmlRowChunk (AMX: kGgmlAmxMaxRows), each weight block unpacked
// once per chunk (so once per call for verify-sized batches).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/ggml_internal.h"
#include "kernels/ops.h"
#include "kernels/ref/ggml_ref.h"

namespace dfl {

WeightMatrix ggml_weight(DType dtype, int64_t n_out, int64_t n_in, const void* data) {
  DFL_ASSERT(n_in % dtype_block_elems(dtype) == 0);  // also works for F32 / F16 / BF16
  WeightMatrix w;
  w.dtype = dtype;
  w.n_out = n_out;
  w.n_in = n_in;
  w.data = data;
  return w;
}

void dequantize_rows(const WeightMatrix& w, int64_t row0, int64_t n_rows, float* out) {
  // Block dtypes keep the original blocks in `data` whatever their repacked copy.
  if (w.packed_format != kPackedQ8 && dtype_is_block(w.dtype)) {
    const int64_t rb = dtype_row_bytes(w.dtype, w.n_in);
    for (int64_t r = 0; r < n_rows; ++r)
      ref::dequant_row(w.dtype, static_cast<const uint8_t*>(w.data) + (row0 + r) * rb, w.n_in,
                       out + r * w.n_in);
    return;
  }
  if (w.packed_format == kPackedNone && w.dtype == DType::kF32) {
    std::memcpy(out, static_cast<const float*>(w.data) + row0 * w.n_in,
                static_cast<size_t>(n_rows * w.n_in) * sizeof(float));
    return;
  }
  for (int64_t r = 0; r < n_rows; ++r)
    for (int64_t k = 0; k < w.n_in; ++k) out[r * w.n_in + k] = ref::weight_at(w, row0 + r, k);
}

namespace ops {

bool is_k_type(DType t) { return t == DType::kQ4_K || t == DType::kQ5_K || t == DType::kQ6_K; }

namespace {

// Kernel calls of at least this many int8 activation rows take AMX-INT8 where it has a kernel
// for the layout; smaller calls take VNNI (the same bits). Measured on a 2-core AMX Xeon guest,
// 2 threads, bench/bench_matmul 'Gemma/' and 'GemmaHead/' (docs/BENCHMARKS.md, 2026-12-04): the
// VNNI row-group kernels beat AMX below 16 rows (q32x16 layers at 4 / 8 rows in 0.55-0.8x its
// time; the Q8_0 head's greedy picks at 4 / 8 rows, on the 6-bit plane, in 0.65 / 0.8-0.87x);
// at 16 rows they are even for the 32-element layers and behind for the K formats (AMX in
// 0.72-0.95x VNNI's time; 0.55-0.73x at 32 rows) and for the head's 16 q1 rows (0.9x); from 32
// rows AMX is ahead for every layout (0.9-0.97x for the 32-element formats).
constexpr int64_t kGgmlAmxMinRows = 16;

// Activation quantization (see the top of the file). q: [M, K + 256] (padding zeroed so kernels
// may read a whole 256-group past a row's last block), d: [M, K / ab], s16: [M, K / 16];
// resid (optional): [M, K] the residual rows x − float(q) · d.
void quantize_act(const float* x, int64_t M, int64_t K, int64_t ab, int8_t* q, float* d,
                  int32_t* s16, int32_t* s32, float* resid = nullptr) {
  const int64_t ldq = K + 256;
  for (int64_t m = 0; m < M; ++m) {
    const float* xr = x + m * K;
    int8_t* qr = q + m * ldq;
    for (int64_t b = 0; b < K / ab; ++b) {
      float amax = 0.0f;
      for (int64_t k = 0; k < ab; ++k) amax = std::max(amax, std::fabs(xr[b * ab + k]));
      const float dd = amax / 127.0f;
      const float id = dd != 0.0f ? 1.0f / dd : 0.0f;
      for (int64_t k = 0; k < ab; ++k) {
        float v = std::nearbyint(xr[b * ab + k] * id);
        v = std::min(127.0f, std::max(-127.0f, v));
        qr[b * ab + k] = static_cast<int8_t>(v);
      }
      d[m * (K / ab) + b] = dd;
    }
    std::memset(qr + K, 0, 256);
    for (int64_t g = 0; g < K / 16; ++g) {
      int32_t s = 0;
      for (int k = 0; k < 16; ++k) s += qr[g * 16 + k];
      s16[m * (K / 16) + g] = s;
    }
    for (int64_t b = 0; b < K / 32; ++b)
      s32[m * (K / 32) + b] = s16[m * (K / 16) + 2 * b] + s16[m * (K / 16) + 2 * b + 1];
    if (resid)
      for (int64_t k = 0; k < K; ++k) {
        const float dq = static_cast<float>(qr[k]) * d[m * (K / ab) + k / ab];
        resid[m * K + k] = xr[k] - dq;
      }
  }
}

// quantize_act on the ISA level's code, rows split over the pool from kParallelElems elements
// (ops.h: the element-wise ops' rule).
void quantize_rows(const float* x, int64_t M, int64_t K, int64_t ab, int8_t* q, float* d,
                   int32_t* s16, int32_t* s32, float* resid, IsaLevel isa, ThreadPool& pool) {
  auto rows = [&](int64_t m0, int64_t m1, int) {
    const int64_t n = m1 - m0;
    int8_t* qm = q + m0 * (K + 256);
    float* dm = d + m0 * (K / ab);
    int32_t *sm = s16 + m0 * (K / 16), *s32m = s32 + m0 * (K / 32);
    float* rm = resid ? resid + m0 * K : nullptr;
    if (isa == IsaLevel::kAvx512) {  // cpu/ggml_quant_avx512.cc: the same bits
      cpu::avx512::quantize_ggml_act(x + m0 * K, n, K, ab, qm, dm, sm, s32m);
      if (rm) cpu::avx512::ggml_act_residual(x + m0 * K, qm, dm, n, K, ab, rm);
    } else if (isa == IsaLevel::kAvx2) {  // cpu/ggml_quant_avx2.cc: the same bits
      cpu::avx2::quantize_ggml_act(x + m0 * K, n, K, ab, qm, dm, sm, s32m);
      if (rm) cpu::avx2::ggml_act_residual(x + m0 * K, qm, dm, n, K, ab, rm);
    } else {
      quantize_act(x + m0 * K, n, K, ab, qm, dm, sm, s32m, rm);
    }
  };
  if (M * K >= kParallelElems && pool.n_threads() > 1)
    pool.parallel_for_redoable(M, rows, 1);  // x → the int8 rows, scales, residual: out of place
  else
    rows(0, M, 0);
}

inline float reduce8(const float* a) {
  return ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
}

// Unsigned quant of element i of a 32-block and its per-format offset.
inline int u_elem(DType t, const uint8_t* b, int i) {
  auto nib = [&](const uint8_t* qs) { return i < 16 ? (qs[i] & 0xF) : (qs[i - 16] >> 4); };
  switch (t) {
    case DType::kQ8_0: return static_cast<int8_t>(b[2 + i]) + 128;
    case DType::kQ4_0: return nib(b + 2);
    case DType::kQ4_1: return nib(b + 4);
    case DType::kQ5_0: {
      uint32_t qh;
      std::memcpy(&qh, b + 2, 4);
      return nib(b + 6) | (((qh >> i) & 1) << 4);
    }
    case DType::kQ5_1: {
      uint32_t qh;
      std::memcpy(&qh, b + 4, 4);
      return nib(b + 8) | (((qh >> i) & 1) << 4);
    }
    default: return 0;
  }
}

int off_of(DType t) {
  switch (t) {
    case DType::kQ8_0: return 128;
    case DType::kQ4_0: return 8;
    case DType::kQ5_0: return 16;
    default: return 0;
  }
}

}  // namespace

float ggml_portable_dot(const cpu::GgmlAct& a, int64_t m, const WeightMatrix& w, int64_t n) {
  const DType t = w.dtype;
  const int64_t K = w.n_in, rb = dtype_row_bytes(t, K), bb = dtype_block_bytes(t);
  const uint8_t* row = static_cast<const uint8_t*>(w.data) + n * rb;
  const int8_t* xq = a.q + m * (K + 256);
  const int32_t* s16 = a.s16 + m * (K / 16);
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  if (!is_k_type(t)) {
    const float* dx = a.d + m * (K / 32);
    const int off = off_of(t);
    for (int64_t b = 0; b < K / 32; ++b) {
      const uint8_t* blk = row + b * bb;
      int32_t dot = 0;
      const int32_t bs = s16[2 * b] + s16[2 * b + 1];
      if (t == DType::kQ8_0) {  // Σ (u − 128)·q = Σ u·q − 128·Σ q: the same integer
        const auto* qw = reinterpret_cast<const int8_t*>(blk + 2);
        for (int i = 0; i < 32; ++i) dot += qw[i] * xq[b * 32 + i];
      } else {
        for (int i = 0; i < 32; ++i) dot += u_elem(t, blk, i) * xq[b * 32 + i];
        dot -= off * bs;
      }
      float& l = acc[b % 8];
      l = std::fma(static_cast<float>(dot), ref::f16_at(blk) * dx[b], l);
      if (t == DType::kQ4_1 || t == DType::kQ5_1)
        l = std::fma(static_cast<float>(bs), ref::f16_at(blk + 2) * dx[b], l);
    }
  } else {
    const float* dx = a.d + m * (K / 256);
    for (int64_t s = 0; s < K / 256; ++s) {
      const uint8_t* blk = row + s * bb;
      const int8_t* xs = xq + s * 256;
      const int32_t* ss = s16 + s * 16;
      float& l = acc[s % 8];
      if (t == DType::kQ6_K) {
        const auto* sc = reinterpret_cast<const int8_t*>(blk + 192);
        int32_t isum = 0;
        for (int j = 0; j < 16; ++j) {
          int32_t dot = 0;
          for (int i = 0; i < 16; ++i) {
            const int e = 16 * j + i, h = e / 128, r = e % 128, g = r / 32, li = r % 32;
            const int lo = (blk[64 * h + (g % 2) * 32 + li] >> (4 * (g / 2))) & 0xF;
            const int hi = (blk[128 + 32 * h + li] >> (2 * g)) & 3;
            dot += (lo | (hi << 4)) * xs[e];
          }
          isum += sc[j] * (dot - 32 * ss[j]);
        }
        l = std::fma(static_cast<float>(isum), ref::f16_at(blk + 208) * dx[s], l);
      } else {
        const uint8_t* qs = blk + (t == DType::kQ4_K ? 16 : 48);
        int32_t isum = 0, msum = 0;
        for (int j = 0; j < 8; ++j) {
          uint8_t sc, mn;
          ref::k4_scale_min(blk + 4, j, &sc, &mn);
          int32_t dot = 0;
          for (int i = 0; i < 32; ++i) {
            int u = (qs[(j / 2) * 32 + i] >> (4 * (j % 2))) & 0xF;
            if (t == DType::kQ5_K) u |= ((blk[16 + i] >> j) & 1) << 4;
            dot += u * xs[32 * j + i];
          }
          isum += sc * dot;
          msum += mn * (ss[2 * j] + ss[2 * j + 1]);
        }
        l = std::fma(static_cast<float>(isum), ref::f16_at(blk) * dx[s], l);
        l = std::fma(-static_cast<float>(msum), ref::f16_at(blk + 2) * dx[s], l);
      }
    }
  }
  return reduce8(acc);
}

namespace {

// Portable kernel: output rows [n0, n1), activation rows [0, M).
void portable_range(const cpu::GgmlAct& a, int64_t M, const WeightMatrix& w, float* y,
                    int64_t n0, int64_t n1) {
  for (int64_t n = n0; n < n1; ++n)
    for (int64_t m = 0; m < M; ++m) cpu::put_y(y, w.n_out, m, n, ggml_portable_dot(a, m, w, n), a.pair);
}

}  // namespace

namespace {
GgmlActivations g_act = [] {
  const char* e = std::getenv("DFL_GGML_ACT");
  GgmlActivations a = GgmlActivations::kInt8x2;
  DFL_CHECK(!e || !*e || ggml_activations_from_name(e, &a), "DFL_GGML_ACT='", e ? e : "",
            "': expected int8x2, int8 or fp32");
  return a;
}();

inline float reduce16(const float* a) {
  float r8[8], r4[4], r2[2];
  for (int i = 0; i < 8; ++i) r8[i] = a[i] + a[i + 8];
  for (int i = 0; i < 4; ++i) r4[i] = r8[i] + r8[i + 4];
  for (int i = 0; i < 2; ++i) r2[i] = r4[i] + r4[i + 2];
  return r2[0] + r2[1];
}

void matmul_f32_portable(const float* x, int64_t M, const WeightMatrix& w, float* y,
                         ThreadPool& pool) {
  const int64_t K = w.n_in, rb = dtype_row_bytes(w.dtype, K);
  pool.parallel_for(
      w.n_out,
      [&](int64_t n0, int64_t n1, int) {
        std::vector<float> buf(static_cast<size_t>(K));
        for (int64_t n = n0; n < n1; ++n) {
          ref::dequant_row(w.dtype, static_cast<const uint8_t*>(w.data) + n * rb, K, buf.data());
          for (int64_t m = 0; m < M; ++m) {
            const float* xr = x + m * K;
            float a[16] = {};
            for (int64_t k = 0; k < K; ++k) a[k % 16] = std::fma(buf[k], xr[k], a[k % 16]);
            y[m * w.n_out + n] = reduce16(a);
          }
        }
      },
      16);
}
}  // namespace

void set_act_mode(GgmlActivations a) { g_act = a; }
GgmlActivations act_mode() { return g_act; }

namespace {

// The int8 / int8x2 kernel calls of the weights outs[0..n) of one input (equal n_in and
// activation block; amx: whether their calls take AMX-INT8): per chunk of rows the activations
// are quantized once, then each weight's kernel runs on them (matmul_ggml: n = 1).
void int8_calls(const float* x, int64_t n_rows, const MatmulOut* outs, int n, bool amx,
                ThreadPool& pool, IsaLevel isa) {
  const int64_t K = outs[0].w->n_in, ab = act_block(outs[0].w->dtype);
  const bool split = g_act == GgmlActivations::kInt8x2;
  // Rows per kernel call: kGgmlRowChunk (AMX: kGgmlAmxMaxRows) activation rows (split: half as
  // many x rows, each as its q and q2 rows).
  const int64_t call_rows = amx ? cpu::amx::kGgmlAmxMaxRows : cpu::kGgmlRowChunk;
  const int64_t chunk = split ? call_rows / 2 : call_rows;
  // AMX tiles load 16 rows: the q rows are padded to a multiple of 16 with zeroed rows.
  const int64_t qrows_used = split ? 2 * std::min(n_rows, chunk) : n_rows;
  const int64_t qrows = amx ? (qrows_used + 15) / 16 * 16 : qrows_used;
  thread_local GgmlActRows act;
  thread_local std::vector<float> rbuf;
  act.reserve(qrows, K, ab);
  if (split) {
    if (rbuf.size() < static_cast<size_t>(chunk * K)) rbuf.resize(static_cast<size_t>(chunk * K));
  } else {
    act.quantize(x, n_rows, 0, nullptr, isa, pool);
  }
  if (amx) act.zero(qrows_used, qrows - qrows_used);  // never used, but loaded by the tiles
  for (int64_t m0 = 0; m0 < n_rows; m0 += chunk) {
    const int64_t Mx = std::min<int64_t>(chunk, n_rows - m0);
    int64_t M = Mx, q0 = m0;
    if (split) {
      // q rows [0, Mx), then the residual's q2 rows [Mx, 2Mx).
      act.quantize(x + m0 * K, Mx, 0, rbuf.data(), isa, pool);
      act.quantize(rbuf.data(), Mx, Mx, nullptr, isa, pool);
      M = 2 * Mx;
      q0 = 0;
    }
    cpu::GgmlAct a = act.view(q0);
    a.pair = split ? Mx : 0;  // the kernels add y(q2) into y(q) as they write
    if (n > 1 && n <= cpu::avx512::kPackedManyMax && !amx && isa == IsaLevel::kAvx512) {
      const WeightMatrix* ws[cpu::avx512::kPackedManyMax];  // one pool job for all, where packed
      float* ys[cpu::avx512::kPackedManyMax];
      for (int i = 0; i < n; ++i) ws[i] = outs[i].w, ys[i] = outs[i].y + m0 * outs[i].w->n_out;
      if (cpu::avx512::matmul_packed_many(a, M, ws, ys, n, pool)) continue;
    }
    for (int i = 0; i < n; ++i)
      ggml_kernel(a, M, *outs[i].w, outs[i].y + m0 * outs[i].w->n_out, pool, isa, amx);
  }
}

}  // namespace

void matmul_ggml(const float* x, int64_t n_rows, const WeightMatrix& w, float* y,
                 ThreadPool& pool, IsaLevel isa) {
  const int64_t K = w.n_in;
  DFL_ASSERT(K % dtype_block_elems(w.dtype) == 0);
  if (g_act == GgmlActivations::kFp32) {
    for (int64_t m0 = 0; m0 < n_rows; m0 += cpu::kGgmlRowChunk) {
      const int64_t M = std::min<int64_t>(cpu::kGgmlRowChunk, n_rows - m0);
      if (isa == IsaLevel::kAvx512 && cpu::ggml_supported(static_cast<int>(w.dtype))) {
        thread_local std::vector<float> rowbuf;
        const size_t need = static_cast<size_t>(pool.n_threads() * K);
        if (rowbuf.size() < need) rowbuf.resize(need);
        cpu::avx512::matmul_ggml_f32(x + m0 * K, M, w, y + m0 * w.n_out, pool, rowbuf.data());
      } else {
        matmul_f32_portable(x + m0 * K, M, w, y + m0 * w.n_out, pool);
      }
    }
    return;
  }
  const bool split = g_act == GgmlActivations::kInt8x2;
  const MatmulOut out{&w, y};
  int8_calls(x, n_rows, &out, 1, ggml_amx_for(w, (split ? 2 : 1) * n_rows, isa), pool, isa);
}

bool matmul_ggml_same_input(const float* x, int64_t n_rows, const MatmulOut* outs, int n,
                            ThreadPool& pool, IsaLevel isa) {
  if (g_act == GgmlActivations::kFp32 || n < 2 || n_rows < 1) return false;
  const int64_t q_rows = (g_act == GgmlActivations::kInt8x2 ? 2 : 1) * n_rows;
  const WeightMatrix& w0 = *outs[0].w;
  const bool amx = ggml_amx_for(w0, q_rows, isa);
  for (int i = 0; i < n; ++i) {
    const WeightMatrix& w = *outs[i].w;
    const bool ggml = dtype_is_block(w.dtype) &&
                      (w.packed_format == kPackedNone || w.packed_format == kPackedQ4K16 ||
                       w.packed_format == kPackedQ32x16 || w.packed_format == kPackedQ6K16);
    if (!ggml || w.n_in <= 0 || w.n_in != w0.n_in || w.n_out <= 0 ||
        act_block(w.dtype) != act_block(w0.dtype) || ggml_amx_for(w, q_rows, isa) != amx)
      return false;
  }
  int8_calls(x, n_rows, outs, n, amx, pool, isa);
  return true;
}

void GgmlActRows::reserve(int64_t rows, int64_t k, int64_t block) {
  K = k;
  ab = block;
  auto grow = [](auto& v, int64_t n) {
    if (v.size() < static_cast<size_t>(n)) v.resize(static_cast<size_t>(n));
  };
  grow(q, rows * (K + 256));
  grow(d, rows * (K / ab));
  grow(s16, rows * (K / 16));
  grow(s32, rows * (K / 32));
}

void GgmlActRows::quantize(const float* x, int64_t M, int64_t row0, float* resid, IsaLevel isa,
                           ThreadPool& pool) {
  quantize_rows(x, M, K, ab, q.data() + row0 * (K + 256), d.data() + row0 * (K / ab),
                s16.data() + row0 * (K / 16), s32.data() + row0 * (K / 32), resid, isa, pool);
}

void GgmlActRows::zero(int64_t row0, int64_t n) {
  std::memset(q.data() + row0 * (K + 256), 0, static_cast<size_t>(n * (K + 256)));
}

cpu::GgmlAct GgmlActRows::view(int64_t row0) const {
  cpu::GgmlAct a;
  a.q = q.data() + row0 * (K + 256);
  a.d = d.data() + row0 * (K / ab);
  a.s16 = s16.data() + row0 * (K / 16);
  a.s32 = s32.data() + row0 * (K / 32);
  a.K = K;
  return a;
}

bool ggml_amx_for(const WeightMatrix& w, int64_t q_rows, IsaLevel isa) {
  // AMX-INT8 for calls of at least kGgmlAmxMinRows activation rows on a layout it has a kernel
  // for; the same bits as VNNI, so the choice may depend on M.
  return isa == IsaLevel::kAvx512 &&
         (w.packed_format == kPackedQ32x16 || w.packed_format == kPackedQ4K16 ||
          w.packed_format == kPackedQ6K16) &&
         q_rows >= kGgmlAmxMinRows && amx_usable() &&
         cpu_features().amx_int8;
}

void ggml_kernel(const cpu::GgmlAct& a, int64_t M, const WeightMatrix& w, float* ym,
                 ThreadPool& pool, IsaLevel isa, bool amx) {
  if (amx && w.packed_format == kPackedQ32x16) {
    cpu::amx::matmul_q32x16(a, M, w, ym, pool);
  } else if (amx && w.packed_format == kPackedQ4K16) {
    cpu::amx::matmul_q4k16(a, M, w, ym, pool);
  } else if (amx && w.packed_format == kPackedQ6K16) {
    cpu::amx::matmul_q6k16(a, M, w, ym, pool);
  } else if (isa == IsaLevel::kAvx512 && w.packed_format == kPackedQ4K16) {
    cpu::avx512::matmul_q4k16(a, M, w, ym, pool);
  } else if (isa == IsaLevel::kAvx512 && w.packed_format == kPackedQ6K16) {
    cpu::avx512::matmul_q6k16(a, M, w, ym, pool);
  } else if (isa == IsaLevel::kAvx512 && w.packed_format == kPackedQ32x16) {
    cpu::avx512::matmul_q32x16(a, M, w, ym, pool);
  } else if (isa == IsaLevel::kAvx512 && cpu::ggml_supported(static_cast<int>(w.dtype))) {
    cpu::avx512::matmul_ggml(a, M, w, ym, pool);
  } else if (isa == IsaLevel::kAvx2 && w.packed_format == kPackedQ32x16 && avx_vnni_usable()) {
    cpu::avx2_vnni::matmul_q32x16(a, M, w, ym, pool);
  } else if (isa == IsaLevel::kAvx2 && w.packed_format == kPackedQ4K16 && avx_vnni_usable()) {
    cpu::avx2_vnni::matmul_q4k16(a, M, w, ym, pool);
  } else if (isa == IsaLevel::kAvx2 && w.packed_format == kPackedQ6K16 && avx_vnni_usable()) {
    cpu::avx2_vnni::matmul_q6k16(a, M, w, ym, pool);
  } else if (isa == IsaLevel::kAvx2 && w.packed_format == kPackedQ32x16) {
    cpu::avx2::matmul_q32x16(a, M, w, ym, pool);
  } else if (isa == IsaLevel::kAvx2 && w.packed_format == kPackedQ4K16) {
    cpu::avx2::matmul_q4k16(a, M, w, ym, pool);
  } else if (isa == IsaLevel::kAvx2 && w.packed_format == kPackedQ6K16) {
    cpu::avx2::matmul_q6k16(a, M, w, ym, pool);
  } else if (isa == IsaLevel::kAvx2 && cpu::ggml_supported(static_cast<int>(w.dtype))) {
    cpu::avx2::matmul_ggml(a, M, w, ym, pool);
  } else {
    pool.parallel_for(
        w.n_out, [&](int64_t n0, int64_t n1, int) { portable_range(a, M, w, ym, n0, n1); }, 16);
  }
}

PackedWeight prepack_q4k16(const WeightMatrix& w, ThreadPool* pool) {
  DFL_ASSERT(w.dtype == DType::kQ4_K && w.packed_format == kPackedNone && w.n_in % 256 == 0);
  const int64_t ns = w.n_in / 256, n_tiles = (w.n_out + 15) / 16, SB = cpu::kQ4K16SuperBytes;
  PackedWeight p;
  p.w = w;
  p.buf.reset(static_cast<size_t>((n_tiles * ns * SB + 1) / 2));
  uint8_t* base = reinterpret_cast<uint8_t*>(p.buf.data());
  auto run = [&](int64_t t0, int64_t t1, int) {
    for (int64_t t = t0; t < t1; ++t) {
      for (int64_t s = 0; s < ns; ++s) {
        uint8_t* dst = base + (t * ns + s) * SB;
        std::memset(dst, 0, static_cast<size_t>(SB));
        for (int64_t o = 0; o < 16 && t * 16 + o < w.n_out; ++o) {
          const uint8_t* blk = static_cast<const uint8_t*>(w.data) + (t * 16 + o) * ns * 144 + s * 144;
          for (int c = 0; c < 4; ++c)
            for (int g = 0; g < 8; ++g) std::memcpy(dst + (c * 8 + g) * 64 + o * 4, blk + 16 + 32 * c + 4 * g, 4);
          for (int j = 0; j < 8; ++j) ref::k4_scale_min(blk + 4, j, dst + 2048 + 16 * j + o, dst + 2176 + 16 * j + o);
          const float d = ref::f16_at(blk), dmin = ref::f16_at(blk + 2);
          std::memcpy(dst + 2304 + 4 * o, &d, 4);
          std::memcpy(dst + 2368 + 4 * o, &dmin, 4);
        }
      }
    }
  };
  if (pool)
    pool->parallel_for(n_tiles, run, 16);
  else
    run(0, n_tiles, 0);
  p.w.packed = p.buf.data();
  p.w.packed_format = kPackedQ4K16;
  return p;
}

PackedWeight prepack_q6k16(const WeightMatrix& w, ThreadPool* pool) {
  DFL_ASSERT(w.dtype == DType::kQ6_K && w.packed_format == kPackedNone && w.n_in % 256 == 0);
  const int64_t ns = w.n_in / 256, n_tiles = (w.n_out + 15) / 16, SB = cpu::kQ6K16SuperBytes;
  PackedWeight p;
  p.w = w;
  p.buf.reset(static_cast<size_t>((n_tiles * ns * SB + 1) / 2));
  uint8_t* base = reinterpret_cast<uint8_t*>(p.buf.data());
  auto run = [&](int64_t t0, int64_t t1, int) {
    for (int64_t t = t0; t < t1; ++t) {
      for (int64_t s = 0; s < ns; ++s) {
        uint8_t* dst = base + (t * ns + s) * SB;
        std::memset(dst, 0, static_cast<size_t>(SB));
        for (int64_t o = 0; o < 16 && t * 16 + o < w.n_out; ++o) {
          const uint8_t* blk = static_cast<const uint8_t*>(w.data) + ((t * 16 + o) * ns + s) * 210;
          for (int h = 0; h < 2; ++h)
            for (int pp = 0; pp < 2; ++pp)
              for (int lg = 0; lg < 8; ++lg)
                std::memcpy(dst + ((h * 2 + pp) * 8 + lg) * 64 + o * 4, blk + 64 * h + 32 * pp + 4 * lg, 4);
          for (int h = 0; h < 2; ++h)
            for (int lg = 0; lg < 8; ++lg)
              std::memcpy(dst + 2048 + (h * 8 + lg) * 64 + o * 4, blk + 128 + 32 * h + 4 * lg, 4);
          for (int j = 0; j < 16; ++j) dst[3072 + 16 * j + o] = blk[192 + j];
          const float d = ref::f16_at(blk + 208);
          std::memcpy(dst + 3072 + 256 + 4 * o, &d, 4);
        }
      }
    }
  };
  if (pool)
    pool->parallel_for(n_tiles, run, 16);
  else
    run(0, n_tiles, 0);
  p.w.packed = p.buf.data();
  p.w.packed_format = kPackedQ6K16;
  return p;
}

PackedWeight prepack_q32x16(const WeightMatrix& w, ThreadPool* pool) {
  const DType t = w.dtype;
  DFL_ASSERT((t == DType::kQ8_0 || t == DType::kQ5_0 || t == DType::kQ4_0) &&
             w.packed_format == kPackedNone && w.n_in % 32 == 0);
  const int64_t nb = w.n_in / 32, n_tiles = (w.n_out + 15) / 16, bbsrc = dtype_block_bytes(t);
  const int64_t qs = t == DType::kQ8_0 ? 512 : 256, qh = t == DType::kQ5_0 ? 64 : 0, BB = qs + qh + 64;
  PackedWeight p;
  p.w = w;
  p.buf.reset(static_cast<size_t>((n_tiles * nb * BB + 1) / 2));
  uint8_t* base = reinterpret_cast<uint8_t*>(p.buf.data());
  auto run = [&](int64_t t0, int64_t t1, int) {
    for (int64_t ti = t0; ti < t1; ++ti) {
      for (int64_t b = 0; b < nb; ++b) {
        uint8_t* dst = base + (ti * nb + b) * BB;
        std::memset(dst, 0, static_cast<size_t>(BB));
        for (int64_t o = 0; o < 16 && ti * 16 + o < w.n_out; ++o) {
          const uint8_t* blk = static_cast<const uint8_t*>(w.data) + ((ti * 16 + o) * nb + b) * bbsrc;
          if (t == DType::kQ8_0) {  // u = q + 128: the sign bit of each byte flipped, 4 at a time
            for (int g = 0; g < 8; ++g) {
              uint32_t v;
              std::memcpy(&v, blk + 2 + 4 * g, 4);
              v ^= 0x80808080u;
              std::memcpy(dst + g * 64 + o * 4, &v, 4);
            }
          } else {
            const uint8_t* q = blk + (t == DType::kQ5_0 ? 6 : 2);
            for (int g = 0; g < 4; ++g) std::memcpy(dst + g * 64 + o * 4, q + 4 * g, 4);
            if (t == DType::kQ5_0) {  // 5th bits as u64 masks: one per 64-byte qs group
              uint32_t h;
              std::memcpy(&h, blk + 2, 4);
              for (int g = 0; g < 8; ++g) {  // g < 4: elements 4g + i, else 16 + 4(g − 4) + i
                const int e0 = g < 4 ? 4 * g : 16 + 4 * (g - 4);  // → bits 4o + i of mask g
                uint64_t m;
                std::memcpy(&m, dst + 256 + 8 * g, 8);
                m |= uint64_t((h >> e0) & 0xFu) << (4 * o);
                std::memcpy(dst + 256 + 8 * g, &m, 8);
              }
            }
          }
          const float d = ref::f16_at(blk);
          std::memcpy(dst + qs + qh + 4 * o, &d, 4);
        }
      }
    }
  };
  if (pool)
    pool->parallel_for(n_tiles, run, 16);
  else
    run(0, n_tiles, 0);
  p.w.packed = p.buf.data();
  p.w.packed_format = kPackedQ32x16;
  return p;
}

}  // namespace ops

void set_ggml_activations(GgmlActivations a) { ops::set_act_mode(a); }
bool ggml_activations_from_name(const std::string& name, GgmlActivations* out) {
  for (GgmlActivations a : {GgmlActivations::kInt8x2, GgmlActivations::kInt8, GgmlActivations::kFp32})
    if (name == ggml_activations_name(a)) {
      *out = a;
      return true;
    }
  return false;
}
const char* ggml_activations_name(GgmlActivations a) {
  return a == GgmlActivations::kInt8x2 ? "int8x2" : a == GgmlActivations::kInt8 ? "int8" : "fp32";
}
GgmlActivations ggml_activations() { return ops::act_mode(); }

}  // namespace dfl

namespace dfl::cpu {

bool ggml_supported(int dtype) {
  switch (static_cast<DType>(dtype)) {
    case DType::kQ8_0: case DType::kQ4_0: case DType::kQ5_0:
    case DType::kQ4_K: case DType::kQ5_K: case DType::kQ6_K:
      return true;
    default:
      return false;
  }
}

Q32Panel q32_panel(const GgmlAct& a, int64_t M, int32_t corr_mul, float dx_mul) {
  const int64_t nb = a.K / 32, ldq = a.K + 256;
  thread_local std::vector<int8_t> q;
  thread_local std::vector<int32_t> nc;
  thread_local std::vector<float> dx;
  if (q.size() < size_t(M * nb * 32)) q.resize(size_t(M * nb * 32));
  if (nc.size() < size_t(M * nb)) nc.resize(size_t(M * nb));
  if (dx.size() < size_t(M * nb)) dx.resize(size_t(M * nb));
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t m = 0; m < M; ++m) {
      std::copy_n(a.q + m * ldq + 32 * b, 32, q.data() + (b * M + m) * 32);
      nc[size_t(b * M + m)] = corr_mul * a.s32[m * nb + b];
      dx[size_t(b * M + m)] = a.d[m * nb + b] * dx_mul;
    }
  return Q32Panel{q.data(), nc.data(), dx.data()};
}

}  // namespace dfl::cpu
