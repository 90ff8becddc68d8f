// Portable CPU implementations of ops.h (the baseline before SIMD dispatch). Work is split over
// output rows / (query, head) pairs; every output element is computed by one fixed sequence of
// operations, which is what makes the results batch-invariant and thread-count-invariant.
#include "kernels/ops.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "core/error.h"
#include "kernels/cpu/cpu_kernels.h"

namespace dfl::ops {

namespace {
Bf16Dot g_bf16_dot = [] {
  const char* e = std::getenv("DFL_BF16_DOT");
  const std::string v = e ? e : "";
  DFL_CHECK(v.empty() || v == "fma" || v == "dpbf16", "DFL_BF16_DOT='", v, "': expected fma or dpbf16");
  if (!v.empty()) return v == "fma" ? Bf16Dot::kFma : Bf16Dot::kDpbf16;
  return cpu_features().intel ? Bf16Dot::kFma : Bf16Dot::kDpbf16;
}();

// Per-thread scratch that only grows (the engine calls ops from one thread; no allocation once
// the largest shape has been seen).
template <typename T>
T* scratch(std::vector<T>& buf, size_t n) {
  if (buf.size() < n) buf.resize(n);
  return buf.data();
}

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

// Work below this many multiply-adds runs on the calling thread alone: waking the workers
// costs more than it saves (and far more when the machine is oversubscribed). Chunking never
// changes per-element math, so this does not affect results.
constexpr int64_t kInlineWork = int64_t(1) << 16;

ThreadPool& pool_for(ThreadPool& pool, int64_t work) {
  static thread_local ThreadPool solo(1);
  return work < kInlineWork ? solo : pool;
}

// The packed 16-bit kernels without AMX on 1..4 weights of one input (equal n_in, one format),
// x's converted copy in this thread's scratch. BF16 (kPackedAmxBf16): AVX-512 vdpbf16ps or its
// FMA form, AVX2 the FMA form (the same bits); F16 (kPackedF16x16): fp32 FMA on AVX-512 and AVX2
// (the same bits).
void packed16(const float* x, int64_t n_rows, const WeightMatrix* const* ws, float* const* ys, int n,
              ThreadPool& pool) {
  const int64_t K = ws[0]->n_in;
  const bool avx2 = cpu_isa() == IsaLevel::kAvx2;
  const bool fma = avx2 || ws[0]->packed_format == kPackedF16x16 || bf16_dot() == Bf16Dot::kFma;
  thread_local std::vector<float> xf;
  float* buf = scratch(xf, static_cast<size_t>(fma ? n_rows * cpu::fma_x_stride(K) : (n_rows * ((K + 31) / 32 * 32) + 1) / 2));
  if (ws[0]->packed_format == kPackedF16x16)
    return avx2 ? cpu::avx2::matmul_f16_packed_many(x, n_rows, ws, ys, n, pool, buf)
                : cpu::avx512::matmul_f16_packed_many(x, n_rows, ws, ys, n, pool, buf);
  if (avx2) return cpu::avx2::matmul_bf16_packed_many(x, n_rows, ws, ys, n, pool, buf);
  cpu::avx512::matmul_bf16_packed_many(x, n_rows, ws, ys, n, pool, reinterpret_cast<uint16_t*>(buf), fma);
}

// The F16 weight in the kPackedF16x16 layout (ops.h).
PackedWeight prepack_f16x16(const WeightMatrix& w, ThreadPool* pool) {
  const int64_t N = w.n_out, K = w.n_in, n_tiles = (N + 15) / 16, n_kc = (K + 31) / 32;
  PackedWeight p;
  p.w = w;
  p.buf.reset(static_cast<size_t>(n_tiles * n_kc * 32 * 16));
  const uint16_t* src = static_cast<const uint16_t*>(w.data);
  uint16_t* dst = p.buf.data();
  auto run = [&](int64_t t0, int64_t t1, int) {
    for (int64_t t = t0; t < t1; ++t)
      for (int64_t k = 0; k < n_kc * 32; ++k)
        for (int64_t j = 0; j < 16; ++j) {
          const int64_t n = t * 16 + j;
          dst[(t * n_kc * 32 + k) * 16 + j] = (n < N && k < K) ? src[n * K + k] : 0;
        }
  };
  if (pool)
    pool->parallel_for(n_tiles, run, 16);
  else
    run(0, n_tiles, 0);
  p.w.packed = p.buf.data();
  p.w.packed_format = kPackedF16x16;
  return p;
}

}  // namespace

static void matmul_portable(const float* x, int64_t n_rows, const WeightMatrix& w, float* y,
                     ThreadPool& pool) {
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

void matmul(const float* x, int64_t n_rows, const WeightMatrix& w, float* y, ThreadPool& pool_in) {
  if (n_rows <= 0 || w.n_out <= 0) return;
  ThreadPool& pool = pool_for(pool_in, n_rows * w.n_out * w.n_in);
  if (w.n_in <= 0) {
    for (int64_t i = 0; i < n_rows * w.n_out; ++i) y[i] = 0.0f;
    return;
  }
  const IsaLevel isa = cpu_isa();
  if (w.packed_format == kPackedQ8) {
    matmul_q8(x, n_rows, w, y, pool, int8_isa());
    return;
  }
  if ((w.packed_format == kPackedNone || w.packed_format == kPackedQ4K16 ||
       w.packed_format == kPackedQ32x16 || w.packed_format == kPackedQ6K16) &&
      dtype_is_block(w.dtype)) {
    matmul_ggml(x, n_rows, w, y, pool, int8_isa());
    return;
  }
  if (w.packed_format == kPackedAmxBf16 && amx_usable()) {
    thread_local std::vector<uint16_t> xb;
    thread_local std::vector<float> cb;
    const int64_t Kp = (w.n_in + 31) / 32 * 32, Mp = (n_rows + 15) / 16 * 16;
    const int64_t nc = n_rows >= cpu::amx::kAmxBlockedMinRows
                           ? cpu::amx::matmul_bf16_block_floats(n_rows) * pool.n_threads()
                           : 0;
    float* c = scratch(cb, static_cast<size_t>(nc + 16));  // + 16: room to align to 64 bytes
    c = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(c) + 63) & ~uintptr_t(63));
    cpu::amx::matmul_bf16(x, n_rows, w, y, pool, scratch(xb, Mp * Kp), c);
    return;
  }
  DFL_ASSERT(w.packed_format == kPackedNone || w.packed_format == kPackedAmxBf16 ||
             w.packed_format == kPackedF16x16);  // (packed below AVX2: `data`, the original)
  if ((w.packed_format == kPackedAmxBf16 || w.packed_format == kPackedF16x16) && isa >= IsaLevel::kAvx2) {
    const WeightMatrix* ws[1] = {&w};  // (BF16: AMX off)
    float* ys[1] = {y};
    return packed16(x, n_rows, ws, ys, 1, pool);
  }
  const bool fp32w = w.dtype == DType::kF32 || w.dtype == DType::kF16 ||
                     w.dtype == DType::kF8E4M3;
  if (isa == IsaLevel::kAvx512 && w.dtype == DType::kBF16 && avx512_bf16_usable()) {  // vdpbf16ps
    thread_local std::vector<uint16_t> xb;
    const int64_t Kp = (w.n_in + 31) / 32 * 32;
    cpu::avx512::matmul_bf16(x, n_rows, w, y, pool, scratch(xb, n_rows * Kp));
  } else if (isa == IsaLevel::kAvx512 && fp32w) {
    cpu::avx512::matmul_fp32w(x, n_rows, w, y, pool);
  } else if (isa >= IsaLevel::kAvx2 && (fp32w || w.dtype == DType::kBF16)) {
    // AVX2; also BF16 weights left unpacked (--weights stored) on AVX-512 without the BF16
    // instructions: the AVX2 kernel's fp32 products, on x rounded to bf16 as every AVX-512 BF16
    // path rounds it.
    thread_local std::vector<float> xp, wbuf, xr;
    if (isa == IsaLevel::kAvx512) {
      float* r = scratch(xr, static_cast<size_t>(n_rows * w.n_in));
      for (int64_t i = 0; i < n_rows * w.n_in; ++i) r[i] = bf16_to_f32(f32_to_bf16(x[i]));
      x = r;
    }
    const int64_t Kp = (w.n_in + 7) / 8 * 8;
    // +8: with F8 scale blocks not a multiple of 8 wide, the last 8-wide step may start past
    // Kp - 8 (its extra lanes are masked to zero, but they are loaded).
    cpu::avx2::matmul_fp32w(x, n_rows, w, y, pool, scratch(xp, n_rows * Kp + 8),
                            scratch(wbuf, static_cast<size_t>(cpu::avx2::fp32w_widen_floats(
                                              n_rows, w, pool.n_threads()) + 8)));
  } else {
    matmul_portable(x, n_rows, w, y, pool);
  }
}

namespace {
int64_t work_of(int64_t n_rows, const MatmulOut* outs, int n) {
  int64_t work = 0;
  for (int i = 0; i < n; ++i) work += n_rows * outs[i].w->n_out * outs[i].w->n_in;
  return work;
}
}  // namespace

void matmul_same_input(const float* x, int64_t n_rows, const MatmulOut* outs, int n, ThreadPool& pool_in) {
  constexpr int kMaxJoint = 4;
  const IsaLevel isa = cpu_isa();
  const int32_t form = n >= 1 ? outs[0].w->packed_format : kPackedNone;
  bool packed = n >= 2 && n <= kMaxJoint && n_rows > 0 && isa >= IsaLevel::kAvx2 &&
                ((form == kPackedAmxBf16 && !amx_usable()) || form == kPackedF16x16);
  for (int i = 0; i < n && packed; ++i) {
    const WeightMatrix& w = *outs[i].w;
    packed = w.packed_format == form && w.n_in == outs[0].w->n_in && w.n_in > 0 && w.n_out > 0;
  }
  ThreadPool& pool = pool_for(pool_in, work_of(n_rows, outs, n));
  if (packed) {
    const WeightMatrix* ws[kMaxJoint];
    float* ys[kMaxJoint];
    for (int i = 0; i < n; ++i) {
      ws[i] = outs[i].w;
      ys[i] = outs[i].y;
    }
    return packed16(x, n_rows, ws, ys, n, pool);
  }
  if (matmul_ggml_same_input(x, n_rows, outs, n, pool, int8_isa())) return;
  for (int i = 0; i < n; ++i) matmul(x, n_rows, *outs[i].w, outs[i].y, pool_in);
}

static void rms_norm_portable(const float* x, const float* w, int64_t n_rows, int64_t dim, float eps, float* y) {
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    float ss = 0.0f;
    for (int64_t i = 0; i < dim; ++i) ss += xr[i] * xr[i];
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(dim) + eps);
    for (int64_t i = 0; i < dim; ++i) yr[i] = (xr[i] * inv) * w[i];
  }
}

static void add_rms_norm_portable(float* res, const float* x, const float* w, int64_t n_rows, int64_t dim,
                  float eps, float* y) {
  for (int64_t r = 0; r < n_rows; ++r) {
    float* rr = res + r * dim;
    const float* xr = x + r * dim;
    for (int64_t i = 0; i < dim; ++i) rr[i] += xr[i];
  }
  rms_norm_portable(res, w, n_rows, dim, eps, y);
}

static void silu_mul_portable(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

static void add_inplace_portable(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

// gelu_tanh(g) = g·σ(2u), u = √(2/π)·g·(1 + 0.044715·g²)  (ops.h)
static void gelu_tanh_mul_portable(const float* gate, const float* up, int64_t n, float* out) {
  constexpr float k0 = 0.7978845608028654f, k1 = 0.7978845608028654f * 0.044715f;
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    const float u = g * (g * g * k1 + k0);
    out[i] = g / (1.0f + std::exp(-2.0f * u)) * up[i];
  }
}

static void softcap_portable(float* x, int64_t n, float cap) {
  for (int64_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] / cap);
}

static void scale_inplace_portable(float* x, int64_t n, float s) {
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

static void rope_neox_portable(float* x, int64_t n_rows, int64_t row_stride, int64_t n_heads, int64_t head_dim,
               int64_t n_rot, const float* cos, const float* sin) {
  ref::rope_neox(x, n_rows, row_stride, n_heads, head_dim, n_rot, cos, sin);
}

// Slots in order, page by page (one fixed sequence of operations per row whatever the paging).
// bf16 pages (KvPages kBF16) are widened row by row: the same arithmetic on the exact fp32 values.
static void attention_portable(const float* q, const int32_t* q_pos, int64_t n_q, const KvPages& kv,
               const AttnParams& p, float* out, ThreadPool& pool) {
  const int32_t group = p.n_heads / p.n_kv_heads;
  const bool bf16 = kv.dtype == KvDtype::kBF16;
  pool.parallel_for(n_q * p.n_heads, [&](int64_t b, int64_t e, int) {
    thread_local std::vector<float> acc, krow, vrow;  // per worker, grown once (no per-call allocation)
    acc.resize(size_t(p.d_v));
    krow.resize(size_t(p.d_qk));
    vrow.resize(size_t(p.d_v));
    for (int64_t qh = b; qh < e; ++qh) {
      const int64_t i = qh / p.n_heads;
      const int32_t h = static_cast<int32_t>(qh % p.n_heads);
      const int32_t kvh = h / group;
      const float* qv = q + qh * p.d_qk;
      // Online softmax: running max m, running denominator l, running weighted sum acc.
      float m = p.sinks ? p.sinks[h] : -INFINITY;
      float l = p.sinks ? 1.0f : 0.0f;
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t j0 = 0, page = 0; j0 < kv.n_slots; j0 += kv.page_slots, ++page) {
        const int64_t rows = std::min<int64_t>(kv.page_slots, kv.n_slots - j0);
        const int32_t* k_pos = kv.pos[page];
        for (int64_t r = 0; r < rows; ++r) {
          if (!kv_visible(q_pos[i], k_pos[r], p.window)) continue;
          const float* kr;
          const float* vv;
          const KvRow kvr = kv_row(kv, p, kvh, page, r);
          if (bf16) {
            for (int32_t d = 0; d < p.d_qk; ++d) krow[size_t(d)] = bf16_to_f32(kvr.k16[d]);
            for (int32_t d = 0; d < p.d_v; ++d) vrow[size_t(d)] = bf16_to_f32(kvr.v16[2 * d]);
            kr = krow.data();
            vv = vrow.data();
          } else {
            kr = kvr.k;
            vv = kvr.v;
          }
          float dot = 0.0f;
          for (int32_t d = 0; d < p.d_qk; ++d) dot += qv[d] * kr[d];
          const float s = dot * p.scale;
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
      }
      float* o = out + qh * p.d_v;
      const float inv = l > 0.0f ? 1.0f / l : 0.0f;
      for (int32_t d = 0; d < p.d_v; ++d) o[d] = acc[d] * inv;
    }
  });
}

// ---- dispatch ---------------------------------------------------------------------------------

// Element-wise ops: rows (or 64-element runs) are independent, so calls of kParallelElems (ops.h)
// and up are split over the pool; each element is computed by the same code wherever the split
// falls.
namespace {

// out_of_place: fn writes no element it reads, so a chunk can be abandoned midway and run
// again (ThreadPool::parallel_for_redoable); an in-place op (x += y, an aliased output) cannot.
template <typename Fn>
void over_rows(ThreadPool* pool, int64_t n_rows, int64_t row_elems, Fn&& fn, bool out_of_place = false) {
  if (!pool || pool->n_threads() < 2 || n_rows < 2 || n_rows * row_elems < kParallelElems) {
    fn(int64_t(0), n_rows);
    return;
  }
  const ThreadPool::RangeFn rows = [&](int64_t b, int64_t e, int) { fn(b, e); };
  if (out_of_place)
    pool->parallel_for_redoable(n_rows, rows);
  else
    pool->parallel_for(n_rows, rows);
}
}  // namespace

void rms_norm(const float* x, const float* w, int64_t n_rows, int64_t dim, float eps, float* y,
              ThreadPool* pool) {
  const IsaLevel isa = cpu_isa();
  over_rows(pool, n_rows, dim, [&](int64_t b, int64_t e) {
    if (isa == IsaLevel::kAvx512) return cpu::avx512::rms_norm(x + b * dim, w, e - b, dim, eps, y + b * dim);
    if (isa == IsaLevel::kAvx2) return cpu::avx2::rms_norm(x + b * dim, w, e - b, dim, eps, y + b * dim);
    rms_norm_portable(x + b * dim, w, e - b, dim, eps, y + b * dim);
  }, y != x);
}

void add_rms_norm(float* res, const float* x, const float* w, int64_t n_rows, int64_t dim,
                  float eps, float* y, ThreadPool* pool) {
  const IsaLevel isa = cpu_isa();
  over_rows(pool, n_rows, dim, [&](int64_t b, int64_t e) {
    const int64_t o = b * dim;
    if (isa == IsaLevel::kAvx512) return cpu::avx512::add_rms_norm(res + o, x + o, w, e - b, dim, eps, y + o);
    if (isa == IsaLevel::kAvx2) return cpu::avx2::add_rms_norm(res + o, x + o, w, e - b, dim, eps, y + o);
    add_rms_norm_portable(res + o, x + o, w, e - b, dim, eps, y + o);
  });
}

void silu_mul(const float* gate, const float* up, int64_t n, float* out, ThreadPool* pool) {
  const IsaLevel isa = cpu_isa();
  const int64_t runs = (n + 63) / 64;
  over_rows(pool, runs, 64, [&](int64_t b, int64_t e) {
    const int64_t o = b * 64, len = std::min(n, e * 64) - o;
    if (isa == IsaLevel::kAvx512) return cpu::avx512::silu_mul(gate + o, up + o, len, out + o);
    if (isa == IsaLevel::kAvx2) return cpu::avx2::silu_mul(gate + o, up + o, len, out + o);
    silu_mul_portable(gate + o, up + o, len, out + o);
  }, out != gate && out != up);
}

void delta_rule_step(const float* s_in, float* s_out, const float* k, const float* q, const float* v,
                     float decay, float beta, int32_t dk, int32_t dv, float* o) {
  if (cpu_isa() == IsaLevel::kAvx512 && dv % 16 == 0)
    return cpu::avx512::delta_rule_step(s_in, s_out, k, q, v, decay, beta, dk, dv, o);
  // Portable: the same two passes, column by column.
  for (int32_t c = 0; c < dv; ++c) {
    float m = 0.0f;
    for (int32_t i = 0; i < dk; ++i) m += s_in[int64_t(i) * dv + c] * k[i];
    const float u = (v[c] - decay * m) * beta;
    float acc = 0.0f;
    for (int32_t i = 0; i < dk; ++i) {
      const float x = s_in[int64_t(i) * dv + c] * decay + k[i] * u;
      s_out[int64_t(i) * dv + c] = x;
      acc += x * q[i];
    }
    if (o) o[c] = acc;
  }
}

void add_inplace(float* y, const float* x, int64_t n, ThreadPool* pool) {
  const IsaLevel isa = cpu_isa();
  const int64_t runs = (n + 63) / 64;
  over_rows(pool, runs, 64, [&](int64_t b, int64_t e) {
    const int64_t o = b * 64, len = std::min(n, e * 64) - o;
    if (isa == IsaLevel::kAvx512) return cpu::avx512::add_inplace(y + o, x + o, len);
    if (isa == IsaLevel::kAvx2) return cpu::avx2::add_inplace(y + o, x + o, len);
    add_inplace_portable(y + o, x + o, len);
  });
}

void gelu_tanh_mul(const float* gate, const float* up, int64_t n, float* out, ThreadPool* pool) {
  const IsaLevel isa = cpu_isa();
  const int64_t runs = (n + 63) / 64;
  over_rows(pool, runs, 64, [&](int64_t b, int64_t e) {
    const int64_t o = b * 64, len = std::min(n, e * 64) - o;
    if (isa == IsaLevel::kAvx512) return cpu::avx512::gelu_tanh_mul(gate + o, up + o, len, out + o);
    if (isa == IsaLevel::kAvx2) return cpu::avx2::gelu_tanh_mul(gate + o, up + o, len, out + o);
    gelu_tanh_mul_portable(gate + o, up + o, len, out + o);
  }, out != gate && out != up);
}

void softcap(float* x, int64_t n, float cap, ThreadPool* pool) {
  const IsaLevel isa = cpu_isa();
  const int64_t runs = (n + 63) / 64;
  over_rows(pool, runs, 64, [&](int64_t b, int64_t e) {
    const int64_t o = b * 64, len = std::min(n, e * 64) - o;
    if (isa == IsaLevel::kAvx512) return cpu::avx512::softcap(x + o, len, cap);
    if (isa == IsaLevel::kAvx2) return cpu::avx2::softcap(x + o, len, cap);
    softcap_portable(x + o, len, cap);
  });
}

void to_bf16(const float* x, int64_t n, uint16_t* y, int64_t ys) {
  DFL_ASSERT(ys == 1 || ys == 2);
  if (cpu_isa() == IsaLevel::kAvx512) return cpu::avx512::to_bf16(x, n, y, ys);
  for (int64_t i = 0; i < n; ++i) y[i * ys] = f32_to_bf16(x[i]);
}

void scale_inplace(float* x, int64_t n, float s, ThreadPool* pool) {
  const IsaLevel isa = cpu_isa();
  const int64_t runs = (n + 63) / 64;
  over_rows(pool, runs, 64, [&](int64_t b, int64_t e) {
    const int64_t o = b * 64, len = std::min(n, e * 64) - o;
    if (isa == IsaLevel::kAvx512) return cpu::avx512::scale_inplace(x + o, len, s);
    if (isa == IsaLevel::kAvx2) return cpu::avx2::scale_inplace(x + o, len, s);
    scale_inplace_portable(x + o, len, s);
  });
}

void rope_neox(float* x, int64_t n_rows, int64_t row_stride, int64_t n_heads, int64_t head_dim,
               int64_t n_rot, const float* cos, const float* sin, ThreadPool* pool) {
  const IsaLevel isa = cpu_isa();
  const int64_t half = n_rot / 2;
  over_rows(pool, n_rows, n_heads * head_dim, [&](int64_t b, int64_t e) {
    float* xb = x + b * row_stride;
    const float* cb = cos + b * half;
    const float* sb = sin + b * half;
    if (isa == IsaLevel::kAvx512) return cpu::avx512::rope_neox(xb, e - b, row_stride, n_heads, head_dim, n_rot, cb, sb);
    if (isa == IsaLevel::kAvx2) return cpu::avx2::rope_neox(xb, e - b, row_stride, n_heads, head_dim, n_rot, cb, sb);
    rope_neox_portable(xb, e - b, row_stride, n_heads, head_dim, n_rot, cb, sb);
  });
}

namespace {
bool g_prefill_attention = [] {
  const char* s = std::getenv("DFL_PREFILL_ATTN");
  return !(s && std::string(s) == "fp32");
}();
}  // namespace

void attention(const float* q, const int32_t* q_pos, int64_t n_q, const KvPages& kv,
               const AttnParams& p, float* out, ThreadPool& pool_in) {
  DFL_ASSERT(p.n_kv_heads > 0 && p.n_heads % p.n_kv_heads == 0);
  DFL_ASSERT(kv.n_slots >= 0 && (kv.n_slots == 0 || kv.page_slots > 0));
  DFL_ASSERT(kv.n_slots <= kv.page_slots || kv.page_slots % 16 == 0);  // see KvPages
  DFL_ASSERT(kv.dtype == KvDtype::kF32 || (kv.dtype == KvDtype::kBF16 && kv.page_slots % 16 == 0));
  if (n_q <= 0) return;
  const int64_t n_kv = kv.n_slots;
  ThreadPool& pool = pool_for(pool_in, n_q * p.n_heads * n_kv * (p.d_qk + p.d_v));
  if (uses_prefill_attention(n_q)) {
    thread_local std::vector<float> buf;
    thread_local std::vector<int32_t> pos;
    if (cpu_isa() == IsaLevel::kAvx2) {
      const int64_t n = cpu::avx2::prefill_attention_work_floats(p, n_kv, pool.n_threads());
      cpu::avx2::attention_prefill(q, q_pos, n_q, kv, p, out, pool, scratch(buf, static_cast<size_t>(n)),
                                   scratch(pos, static_cast<size_t>((n_kv + 15) / 16 * 16)));
      return;
    }
    const int64_t n = cpu::avx512::bf16_prefill_attention_work_floats(p, n_kv, pool.n_threads());
    float* work = scratch(buf, static_cast<size_t>(n));
    int32_t* pos_work = scratch(pos, static_cast<size_t>(n_kv));
    if (amx_usable())
      cpu::amx::attention(q, q_pos, n_q, kv, p, out, pool, work, pos_work);
    else
      cpu::avx512::attention_bf16(q, q_pos, n_q, kv, p, out, pool, work, pos_work,
                                  bf16_dot() == Bf16Dot::kFma);
    return;
  }
  if (cpu_isa() == IsaLevel::kAvx512) {
    thread_local std::vector<float> buf;
    thread_local std::vector<int32_t> pos;
    const int64_t n = cpu::avx512::attention_work_floats(p, n_q, n_kv, pool.n_threads(), kv.dtype);
    cpu::avx512::attention(q, q_pos, n_q, kv, p, out, pool, scratch(buf, static_cast<size_t>(n)),
                           scratch(pos, static_cast<size_t>(n_kv)));
    return;
  }
  if (cpu_isa() == IsaLevel::kAvx2) {
    thread_local std::vector<float> buf;
    const int64_t n = cpu::avx2::attention_work_floats(p, pool.n_threads());
    cpu::avx2::attention(q, q_pos, n_q, kv, p, out, pool, scratch(buf, static_cast<size_t>(n)));
    return;
  }
  attention_portable(q, q_pos, n_q, kv, p, out, pool);
}

void attention(const float* q, const int32_t* q_pos, int64_t n_q, const float* k, const float* v,
               const int32_t* k_pos, int64_t n_kv, const AttnParams& p, float* out,
               ThreadPool& pool) {
  // One page holding the whole run.
  const float* kp[1] = {k};
  const float* vp[1] = {v};
  const int32_t* pp[1] = {k_pos};
  DFL_ASSERT(n_kv <= INT32_MAX);
  const KvPages kv{kp, vp, pp, n_kv, static_cast<int32_t>(n_kv > 0 ? n_kv : 1)};
  attention(q, q_pos, n_q, kv, p, out, pool);
}

int64_t argmax(const float* x, int64_t n) {
  if (cpu_isa() == IsaLevel::kAvx512) return cpu::avx512::argmax(x, n);
  return argmax_portable(x, n);
}

int64_t argmax_portable(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  return best;
}

void argmax_rows(const float* x, int64_t rows, int64_t n, int32_t* out) {
  for (int64_t r = 0; r < rows; ++r) out[r] = static_cast<int32_t>(argmax(x + r * n, n));
}

}  // namespace dfl::ops

namespace dfl {

const char* kv_dtype_name(KvDtype t) { return t == KvDtype::kBF16 ? "bf16" : "f32"; }

bool kv_dtype_from_name(const char* s, KvDtype* out) {
  const std::string n = s ? s : "";
  if (n == "f32" || n == "fp32" || n == "float32") *out = KvDtype::kF32;
  else if (n == "bf16" || n == "bfloat16") *out = KvDtype::kBF16;
  else return false;
  return true;
}

void set_bf16_dot(Bf16Dot d) { ops::g_bf16_dot = d; }
Bf16Dot bf16_dot() { return avx512_bf16_usable() ? ops::g_bf16_dot : Bf16Dot::kFma; }
void set_prefill_attention(bool on) { ops::g_prefill_attention = on; }
bool prefill_attention() { return ops::g_prefill_attention; }
bool uses_prefill_attention(int64_t n_q) {
  return n_q >= kPrefillAttentionMinQueries && prefill_attention() && cpu_isa() >= IsaLevel::kAvx2;
}

PackedWeight prepack_weight(const WeightMatrix& w, ThreadPool* pool) {
  // The packed GGML layouts serve AVX-512 and AVX2 alike (cpu/ggml_avx512.cc, cpu/ggml_avx2.cc).
  if (w.packed_format == kPackedNone && w.dtype == DType::kQ4_K && cpu_isa() >= IsaLevel::kAvx2 &&
      ggml_activations() != GgmlActivations::kFp32)
    return ops::prepack_q4k16(w, pool);
  if (w.packed_format == kPackedNone && cpu_isa() >= IsaLevel::kAvx2 &&
      ggml_activations() != GgmlActivations::kFp32 &&
      (w.dtype == DType::kQ8_0 || w.dtype == DType::kQ5_0 || w.dtype == DType::kQ4_0))
    return ops::prepack_q32x16(w, pool);
  if (w.packed_format == kPackedNone && w.dtype == DType::kQ6_K && cpu_isa() >= IsaLevel::kAvx2 &&
      ggml_activations() != GgmlActivations::kFp32)
    return ops::prepack_q6k16(w, pool);
  if (w.packed_format == kPackedNone && w.dtype == DType::kF16 && cpu_isa() >= IsaLevel::kAvx2 && w.n_in > 0 &&
      w.n_out > 0)
    return ops::prepack_f16x16(w, pool);
  PackedWeight p;
  p.w = w;
  // BF16: the tile layout for AMX, and for AVX-512 or AVX2 without it (their lanes-are-outputs
  // kernels stream that layout at M = 1 and reuse each weight vector for every row).
  if (w.packed_format != kPackedNone || w.dtype != DType::kBF16 ||
      !(amx_usable() || cpu_isa() >= IsaLevel::kAvx2))
    return p;
  const int64_t n_tiles = (w.n_out + 15) / 16, n_kc = (w.n_in + 31) / 32;
  p.buf.reset(static_cast<size_t>(n_tiles * n_kc * 16 * 32));
  auto run = [&](int64_t b, int64_t e, int) { cpu::amx::pack_bf16(w, p.buf.data(), b, e); };
  if (pool)
    pool->parallel_for(n_tiles, run, 16);
  else
    run(0, n_tiles, 0);
  p.w.packed = p.buf.data();
  p.w.packed_format = kPackedAmxBf16;
  return p;
}

}  // namespace dfl
