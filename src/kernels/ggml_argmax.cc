// ops::matmul_argmax (contract: ops.h): the greedy pick of each row of x·Wᵀ, the same index as
// ops::argmax(ops::matmul(x, w) row), with half the integer work on GGML weights under kInt8x2.
//
// The math. Under kInt8x2 (ggml_matmul.cc, top comment) an output is y = fl(y1 + y2): y1 the
// kernel's result on the q1 rows (x ≈ d1·q1), y2 the result on the q2 rows of the residual
// (r ≈ d2·q2 =: r̂), each computed with the same per-row steps whatever the call (batch
// invariant), so y1 from a call on the q1 rows alone is bit-identical to the y1 inside the
// full call. For Q8_0 / Q4_0 / Q5_0 / Q6_K every block (superblock) contributes ONE term,
// float(dot_b)·fl(d_w·dx_b), whose exact value is ⟨w_b, r̂_b⟩ (w the dequantized row), so by
// Cauchy-Schwarz twice  Σ_b |term_b| ≤ ||w||₂·||r̂||₂, and the kernel's fp32 evaluation of y2
// (the product d_w·dx, the int → float conversion, ⌈nb/8⌉ fma per lane, 3 tree adds: at most
// (⌈nb/8⌉ + 8)·2⁻²³ relative to Σ|term|) keeps  |y2| ≤ ||w||·(1 + γ)·||r̂||.  The final add
// costs one more rounding: |y − y1| ≤ |y2|·(1 + 2⁻²³) + 2⁻²⁴·|y1|. With
//   B_n = bound_n·R + 2⁻²¹·|y1_n|,   bound_n = ||w_n||·(1 + γ)·(1 + 2⁻¹⁶) (argmax_screen),
//   R ≥ ||r̂||₂ (this row's q2 residual, in double)
// — the 2⁻¹⁶ and 2⁻²¹ margins also cover the roundings of y1 ± B itself — every output lies in
// [y1_n − B_n, y1_n + B_n]. L = max_n (y1_n − B_n) is below the best y, so the outputs with
// y1_n + B_n ≥ L hold every maximum; they are finished exactly (y1_n + ggml_portable_dot on the
// q2 row: the kernels' own bits) and the first largest wins, as in ops::argmax. A row with a
// non-finite or huge y1, or more candidates than a screen is worth, is computed in full.
// The formats with two terms per block (Q4_1, Q5_1, Q4_K, Q5_K: scale and min) would need a
// second norm for the rounding bound; they and every other weight take the logits path.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"
#include "kernels/ggml_internal.h"
#include "kernels/ops.h"
#include "kernels/ref/ggml_ref.h"

namespace dfl::ops {
namespace {

std::atomic<uint64_t> g_screened{0}, g_candidates{0}, g_full{0};

bool screenable(DType t) {
  return t == DType::kQ8_0 || t == DType::kQ4_0 || t == DType::kQ5_0 || t == DType::kQ6_K;
}

float round_up(double v) {
  const float f = static_cast<float>(v);
  return static_cast<double>(f) >= v ? f : std::nextafter(f, std::numeric_limits<float>::infinity());
}

// ||r̂||₂ of activation row m, rounded up: r̂_k = d_b·q_k over the row's blocks b.
float residual_norm(const cpu::GgmlAct& a, int64_t m, int64_t ab) {
  const int64_t K = a.K;
  const int8_t* q = a.q + m * (K + 256);
  const float* d = a.d + m * (K / ab);
  double s = 0;
  for (int64_t b = 0; b < K / ab; ++b) {
    int64_t qq = 0;
    for (int64_t k = 0; k < ab; ++k) qq += int64_t(q[b * ab + k]) * q[b * ab + k];
    s += double(d[b]) * double(d[b]) * double(qq);
  }
  return round_up(std::sqrt(s) * (1.0 + 0x1p-40));
}

// Outputs finished exactly beyond which a row is cheaper to compute in full.
int64_t candidate_cap(int64_t n_out) { return n_out / 16 + 64; }

constexpr float kRel = 0x1p-21f, kHuge = 1e30f;

// Output n, exactly: y1[n] plus the q2 half (the kernels' bits).
inline float finish_output(float y1, const cpu::GgmlAct& q2, int64_t m, const WeightMatrix& w,
                           int64_t n, bool simd_q8) {
  if (simd_q8) {
    const int64_t nb = w.n_in / 32;
    return y1 + cpu::avx512::q8_0_row_dot(static_cast<const uint8_t*>(w.data) + n * nb * 34,
                                          q2.q + m * (w.n_in + 256), q2.d + m * nb, nb);
  }
  return y1 + ggml_portable_dot(q2, m, w, n);
}

// The greedy pick of one row from its y1 row, or -1: compute this row in full. idx: scratch
// of candidate_cap(V) entries.
int32_t finish_row(const float* y1, const float* bound, int64_t V, float R, const cpu::GgmlAct& q2,
                   int64_t m, const WeightMatrix& w, IsaLevel isa, int32_t* idx) {
  const int64_t cap = candidate_cap(V);
  int64_t count = 0;
  if (isa == IsaLevel::kAvx512) {
    bool bad = false;
    const float L = cpu::avx512::screen_lower_max(y1, bound, V, R, kRel, kHuge, &bad);
    if (bad) return -1;
    count = cpu::avx512::screen_candidates(y1, bound, V, R, kRel, L, idx, cap);
    if (count < 0) return -1;
  } else {
    float L = -std::numeric_limits<float>::infinity();
    bool bad = false;
    for (int64_t n = 0; n < V; ++n) {
      const float a = std::fabs(y1[n]);
      bad |= !(a <= kHuge);
      const float lo = y1[n] - (bound[n] * R + a * kRel);
      L = lo > L ? lo : L;
    }
    if (bad) return -1;
    for (int64_t n = 0; n < V; ++n) {
      const float hi = y1[n] + (bound[n] * R + std::fabs(y1[n]) * kRel);
      if (!(hi >= L)) continue;
      if (count == cap) return -1;
      idx[count++] = static_cast<int32_t>(n);
    }
  }
  const bool simd_q8 = isa == IsaLevel::kAvx512 && w.dtype == DType::kQ8_0;
  int64_t best_n = -1;
  float best = 0.0f;
  for (int64_t i = 0; i < count; ++i) {  // increasing n: the first of equal maxima wins
    const int64_t n = idx[i];
    const float y = finish_output(y1[n], q2, m, w, n, simd_q8);
    if (best_n < 0 || y > best) {
      best = y;
      best_n = n;
    }
  }
  g_screened.fetch_add(1, std::memory_order_relaxed);
  g_candidates.fetch_add(uint64_t(count), std::memory_order_relaxed);
  return static_cast<int32_t>(best_n);
}

// The moving average of the fallback rate (weight 1/8 per chunk); above 1/2 the next
// kSkipCalls calls skip the screen, then it is tried again from a rate of 1/4.
constexpr int32_t kSkipCalls = 64;
void note_misses(ArgmaxScreen::Health& h, int64_t missed, int64_t rows) {
  const int32_t rate = int32_t(256 * missed / rows);
  const int32_t m = h.misses.load(std::memory_order_relaxed);
  int32_t next = m - m / 8 + rate / 8;
  if (next > 128) {
    h.skip.store(kSkipCalls, std::memory_order_relaxed);
    next = 64;
  }
  h.misses.store(next, std::memory_order_relaxed);
}

void logits_argmax(const float* x, int64_t n_rows, const WeightMatrix& w, int32_t* out,
                   ThreadPool& pool) {
  thread_local std::vector<float> y;
  const int64_t V = w.n_out;
  constexpr int64_t kRows = 64;  // bounds the logits buffer
  for (int64_t m0 = 0; m0 < n_rows; m0 += kRows) {
    const int64_t M = std::min(kRows, n_rows - m0);
    if (y.size() < static_cast<size_t>(M * V)) y.resize(static_cast<size_t>(M * V));
    matmul(x + m0 * w.n_in, M, w, y.data(), pool);
    argmax_rows(y.data(), M, V, out + m0);
  }
}

}  // namespace

ArgmaxStats argmax_stats() {
  ArgmaxStats s;
  s.screened_rows = g_screened.load(std::memory_order_relaxed);
  s.candidates = g_candidates.load(std::memory_order_relaxed);
  s.full_rows = g_full.load(std::memory_order_relaxed);
  return s;
}

ArgmaxScreen argmax_screen(const WeightMatrix& w, ThreadPool* pool) {
  ArgmaxScreen s;
  if (!screenable(w.dtype) || !w.data || w.packed_format == kPackedQ8 || w.n_out <= 0) return s;
  const int64_t K = w.n_in, nb = K / act_block(w.dtype), rb = dtype_row_bytes(w.dtype, K);
  const double gamma = double((nb + 7) / 8 + 8) * 0x1p-23;
  s.bound.resize(static_cast<size_t>(w.n_out));
  s.dtype = w.dtype;
  s.n_in = K;
  auto rows = [&](int64_t n0, int64_t n1, int) {
    std::vector<float> row(static_cast<size_t>(K));
    for (int64_t n = n0; n < n1; ++n) {
      ref::dequant_row(w.dtype, static_cast<const uint8_t*>(w.data) + n * rb, K, row.data());
      double ss = 0;
      for (float v : row) ss += double(v) * v;
      s.bound[size_t(n)] = round_up(std::sqrt(ss) * (1.0 + gamma) * (1.0 + 0x1p-16));
    }
  };
  if (pool)
    pool->parallel_for(w.n_out, rows, 256);
  else
    rows(0, w.n_out, 0);
  return s;
}

void matmul_argmax(const float* x, int64_t n_rows, const WeightMatrix& w,
                   const ArgmaxScreen& screen, int32_t* out, ThreadPool& pool) {
  if (n_rows <= 0) return;
  const int64_t K = w.n_in, V = w.n_out;
  bool screened = !screen.empty() && screen.dtype == w.dtype && screen.n_in == K &&
                        static_cast<int64_t>(screen.bound.size()) == V &&
                        ggml_activations() == GgmlActivations::kInt8x2 &&
                        (w.packed_format == kPackedNone || w.packed_format == kPackedQ32x16 ||
                         w.packed_format == kPackedQ6K16);
  ArgmaxScreen::Health& health = *screen.health;
  if (screened && health.skip.load(std::memory_order_relaxed) > 0) {
    health.skip.fetch_sub(1, std::memory_order_relaxed);
    screened = false;
  }
  if (!screened) {
    logits_argmax(x, n_rows, w, out, pool);
    return;
  }
  const IsaLevel isa = cpu_isa();
  const int64_t ab = act_block(w.dtype);
  const bool amx = ggml_amx_for(w, std::min<int64_t>(n_rows, cpu::amx::kGgmlAmxMaxRows), isa);
  const int64_t chunk = amx ? cpu::amx::kGgmlAmxMaxRows : cpu::kGgmlRowChunk;
  thread_local GgmlActRows q1, q2;
  thread_local std::vector<float> resid, y1, xr;
  thread_local std::vector<int64_t> redo;
  thread_local std::vector<int32_t> picks, idx;
  for (int64_t m0 = 0; m0 < n_rows; m0 += chunk) {
    const int64_t M = std::min(chunk, n_rows - m0);
    const int64_t padded = amx ? (M + 15) / 16 * 16 : M;  // AMX tiles load 16 rows
    q1.reserve(padded, K, ab);
    q2.reserve(M, K, ab);
    if (resid.size() < static_cast<size_t>(M * K)) resid.resize(static_cast<size_t>(M * K));
    if (y1.size() < static_cast<size_t>(M * V)) y1.resize(static_cast<size_t>(M * V));
    q1.quantize(x + m0 * K, M, 0, resid.data(), isa, pool);
    if (amx) q1.zero(M, padded - M);
    q2.quantize(resid.data(), M, 0, nullptr, isa, pool);
    ggml_kernel(q1.view(0), M, w, y1.data(), pool, isa, amx);
    // (thread_local buffers are named through pointers: in a worker, y1 is the worker's own)
    const cpu::GgmlAct a2 = q2.view(0);
    const float* y1p = y1.data();
    const int64_t cap = candidate_cap(V);
    if (idx.size() < static_cast<size_t>(M * cap)) idx.resize(static_cast<size_t>(M * cap));
    int32_t* idxp = idx.data();
    pool.parallel_for(
        M,
        [&, y1p, idxp](int64_t r0, int64_t r1, int) {
          for (int64_t r = r0; r < r1; ++r)
            out[m0 + r] = finish_row(y1p + r * V, screen.bound.data(), V, residual_norm(a2, r, ab),
                                     a2, r, w, isa, idxp + r * cap);
        },
        1);
    // The rows the screen gave up on, in one logits call (one weight stream for all of them).
    redo.clear();
    for (int64_t r = 0; r < M; ++r)
      if (out[m0 + r] < 0) redo.push_back(r);
    note_misses(health, int64_t(redo.size()), M);
    if (redo.empty()) continue;
    g_full.fetch_add(redo.size(), std::memory_order_relaxed);
    if (xr.size() < redo.size() * size_t(K)) xr.resize(redo.size() * size_t(K));
    for (size_t i = 0; i < redo.size(); ++i)
      std::copy_n(x + (m0 + redo[i]) * K, K, xr.data() + i * size_t(K));
    picks.resize(redo.size());
    logits_argmax(xr.data(), int64_t(redo.size()), w, picks.data(), pool);
    for (size_t i = 0; i < redo.size(); ++i) out[m0 + redo[i]] = picks[i];
  }
}

}  // namespace dfl::ops
