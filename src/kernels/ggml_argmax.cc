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
//
// The 6-bit plane (Q8_0 on AVX-512 and AVX2, where the head's weight stream is most of a decode
// step). A weight q (int8) = 4·h + l with h = q >> 2 (−32..31) and l ∈ {0..3}; the plane keeps h
// only, read as ŵ = d·(4h + 1.5), so w − ŵ = d·(l − 1.5) =: e with |e| ≤ 1.5·d (measured on
// Gemma-3-270M's head: ||e_n|| ≈ 2.5 % of ||w_n||, at most 5.5 %). The plane kernel
// (cpu/argmax_plane_avx512.cc; cpu/argmax_plane_avx2.cc gives its bits) computes
// ŷ1 = fl(Σ ŵ·x̂1) (x̂1 = d1·q1) with |ŷ1 − Σ ŵ·x̂1| ≤ γ_p·||ŵ||·||x̂1|| (plane_gamma: per
// block t = fl(4dx·Σh·q1 + c), c = fl(1.5·dx·Σq1), then one fma of d·t into one accumulator — c's rounding is at most 3·2⁻²⁴·||ŵ_b||·||x̂1_b|| since every
// |ŵ| ≥ d/2 — so γ_p = (nb + 5)·2⁻²³), so against
// the kernel's y1 (|y1 − Σ w·x̂1| ≤ γ·||w||·||x̂1||, γ as above)
//   |y1_n − ŷ1_n| ≤ P_n·X1,   P_n = (||e_n|| + γ·||w_n|| + γ_p·||ŵ_n||)·(1 + 2⁻¹⁶) (plane_bound),
//   X1 ≥ ||x̂1||₂,
// and the screen runs on ŷ1 with the half-width B_n + P_n·X1 (|y1| ≤ |ŷ1| + P_n·X1: its 2⁻²¹ share
// is inside P's margin). A candidate is finished as fl(y1 + y2) with both halves from the raw
// blocks (q8_0_row_dot: the kernels' bits). Per 16 outputs × 32 k the plane holds (416 bytes)
//   nibbles [4 g][16 o][4]: low = (h + 32) & 15 of element 4g + i, high = of element 16 + 4g + i
//   high bits [2 j][16 o][4]: bits 2·(v % 4) of vector j = v / 4 = ((h + 32) >> 4) of element
//                 16·(v % 2) + 4·(v / 2) + i, v = 0..7
//   d [16 o] f16 (the block's own).
//
// BF16 heads (kPackedAmxBf16 on AVX-512 without AMX: the packed kernel, vdpbf16ps or its FMA
// form; on AVX2 the FMA form). The kernel's output is y = fl(Σ w·x̃), x̃ = bf16(x), one fp32
// accumulator per output walking the k pairs in order, every step one or two roundings of exact
// bf16 products, so |y − Σ w·x̃| ≤ γ_b·||w||·||x̃|| with γ_b = (2K + 4)·2⁻²³ (also under
// round-toward-zero). The plane is built from w itself: per 32-block d = fp16(max|w| / 127) (rounded up), q = clamp(
// rne(w / d), ±127), h = q >> 2, ŵ = d·(4h + 1.5) — the Q8_0 plane's layout and kernel — with
// e = w − ŵ measured in double. x̂1 = d1·q1 is x̃'s int8 part (32-blocks), r = x̃ − x̂1, and
//   y − ŷ1 = (y − Σ w·x̃) + ⟨w, r⟩ + ⟨e, x̂1⟩ + (Σ ŵ·x̂1 − ŷ1)
//   |y − ŷ1| ≤ ||w||·(||r|| + γ_b·||x̃||) + (||e|| + γ_p·||ŵ||)·||x̂1|| + A,
// A = K·2⁻¹²⁵ (underflow and denormal flushing in the kernel and in x̃'s conversion), carried as
// A / min_n ||w_n|| in R. So the same screen runs with bound_n = ||w_n||·(1 + 2⁻¹⁶), R = ||r|| +
// γ_b·||x̃|| + A / min ||w_n||, P_n = (||e_n|| + γ_p·||ŵ_n||)·(1 + 2⁻¹⁶) and X1 = ||x̂1||; the
// candidates are finished by the packed kernel itself (its bits) on tiles gathered from their
// own weight rows, 16 candidates of a row to a tile (packed16_rows_finish: a candidate costs its
// row, 2K bytes, not its neighbours'). A row's candidates are capped at candidate_cap (V/16 +
// 64: a finish then costs at most about an eighth of the logits); a row past it is computed in
// full and counts as a miss, so flat heads step aside to the logits. A weight with a bf16
// denormal, inf or NaN gets no screen.
//
// F16 heads (kPackedF16x16 on AVX-512 and AVX2: one fp32 FMA per k on x itself) take the same
// screen with x̃ = x (no rounding; K roundings, inside γ_b's 2K + 4) and every finite f16 weight (an f16
// subnormal is a normal fp32, so nothing is flushed); an inf or NaN weight gets no screen.
//
// Q6_K heads (AVX-512 and AVX2; the head of most Q4_K_M / Q5_K_M files): the 6-bit plane of the
// Q8_0 heads, built from the dequantized values as for BF16 (d·sc·(u − 32), exact in fp32), read
// instead of the Q6_K blocks, whose unpacking and per-16 integer scales make their kernel
// compute-bound on verify-sized batches (the plane is no smaller: 0.81 against 0.82 bytes per
// weight). Everything else is the Q8_0 plane's: y1 is the Q6_K kernel's q1 half, so
// P_n = (||e_n|| + γ·||w_n|| + γ_p·||ŵ_n||)·(1 + 2⁻¹⁶) with γ of the Q6_K kernel and
// X1 ≥ ||x̂1|| of the 256-block q1 rows, which the plane kernel reads as 32-blocks (each takes its
// superblock's scale: the same values); candidates are finished as fl(y1 + y2), both halves from
// the raw blocks (the row kernels of the int8 ISA: the kernels' bits).
//
// On either plane the finish runs in two stages (finish_row): the candidates' exact y1 first,
// then the screen without the plane over them alone (B_n = bound_n·R + 2⁻²¹·|y1_n| around the
// exact y1: every maximum is among the candidates, so the largest lower end among them is still
// below the best y), and only those left get their q2 half. Cauchy–Schwarz on e is loose (~150–
// 200 candidates per row on real text); the q2 bound is tight (a few).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <vector>

#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/error.h"
#include "kernels/ggml_internal.h"
#include "kernels/ops.h"
#include "kernels/ref/ggml_ref.h"

namespace dfl::ops {
namespace {

std::atomic<uint64_t> g_screened{0}, g_candidates{0}, g_full{0}, g_plane{0}, g_rows{0}, g_weight_rows{0};

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

// bound_n (top comment) from ||w_n||² and the kernel's γ.
float weight_bound(double sumsq, double gamma) {
  return round_up(std::sqrt(sumsq) * (1.0 + gamma) * (1.0 + 0x1p-16));
}

// Outputs finished exactly beyond which a row is cheaper to compute in full.
int64_t candidate_cap(int64_t n_out) { return n_out / 16 + 64; }

constexpr float kRel = 0x1p-21f, kHuge = 1e30f;

// Row m of a (K-element rows of ab-element blocks) as a one-row view.
cpu::GgmlAct act_row(const cpu::GgmlAct& a, int64_t m, int64_t ab) {
  cpu::GgmlAct r = a;
  r.q += m * (a.K + 256);
  r.d += m * (a.K / ab);
  r.s16 += m * (a.K / 16);
  r.s32 += m * (a.K / 32);
  r.pair = 0;
  return r;
}

// Output n of one half (activation rows a: q1 or q2), row m, exactly: the kernels' bits (the
// row kernels of the int8 ISA `isa`, else ggml_portable_dot).
inline float half_output(const cpu::GgmlAct& a, int64_t m, const WeightMatrix& w, int64_t n, IsaLevel isa) {
  if (isa == IsaLevel::kAvx512 && w.dtype == DType::kQ8_0) {
    const int64_t nb = w.n_in / 32;
    const uint8_t* row = static_cast<const uint8_t*>(w.data) + n * nb * 34;
    return cpu::avx512::q8_0_row_dot(row, a.q + m * (w.n_in + 256), a.d + m * nb, nb);
  }
  if (isa == IsaLevel::kAvx512 && cpu::ggml_supported(int(w.dtype)))
    return cpu::avx512::ggml_row_dot(act_row(a, m, act_block(w.dtype)), w, n);
  if (isa == IsaLevel::kAvx2 && cpu::ggml_supported(int(w.dtype)))
    return cpu::avx2::ggml_row_dot(act_row(a, m, act_block(w.dtype)), w, n);
  return ggml_portable_dot(a, m, w, n);
}

// The screen's pass over one row (cpu_kernels.h screen_row) on the widest fp32 ISA.
int64_t screen_row(const float* y1, const float* bound, int64_t V, float R, bool* bad, int32_t* idx,
                   float* hi, int64_t cap, const float* plane_bound, float X1) {
  if (cpu_isa() == IsaLevel::kAvx512)
    return cpu::avx512::screen_row(y1, bound, V, R, kRel, kHuge, bad, idx, hi, cap, plane_bound, X1);
  return cpu::avx2::screen_row(y1, bound, V, R, kRel, kHuge, bad, idx, hi, cap, plane_bound, X1);
}

// The first largest of the candidates idx[0..count) (increasing n) by their exact outputs
// exact(n) — ops::argmax's tie rule — counted in the screen's statistics.
template <class Exact>
int32_t first_max(const int32_t* idx, int64_t count, Exact&& exact) {
  int64_t best_n = -1;
  float best = 0.0f;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t n = idx[i];
    const float y = exact(n);
    if (best_n < 0 || y > best) {
      best = y;
      best_n = n;
    }
  }
  g_screened.fetch_add(1, std::memory_order_relaxed);
  g_candidates.fetch_add(uint64_t(count), std::memory_order_relaxed);
  return static_cast<int32_t>(best_n);
}

// The greedy pick of one row from its y1 row, or -1: compute this row in full. idx / hi: scratch
// of candidate_cap(V) entries. Plane (q1 non-null, Q8_0 / Q6_K): y1 is ŷ1, and the
// half-width adds plane_bound·X1; the candidates' exact y1 (the q1 half, written over ŷ1) then
// take the screen without the plane — every maximum is among them, so the largest lower end
// of their intervals still bounds it — and only those left are finished with their q2 half.
// q2 null (kInt8: y is the q1 half itself, R = 0): the plane's candidates' exact y1 decide.
int32_t finish_row(float* y1, const float* bound, int64_t V, float R, const cpu::GgmlAct* q2,
                   int64_t m, const WeightMatrix& w, IsaLevel isa, int32_t* idx, float* hi,
                   const cpu::GgmlAct* q1 = nullptr, const float* plane_bound = nullptr,
                   float X1 = 0) {
  const int64_t cap = candidate_cap(V);
  int64_t count = 0;
  if (cpu_isa() >= IsaLevel::kAvx2) {
    bool bad = false;
    count = screen_row(y1, bound, V, R, &bad, idx, hi, cap, plane_bound, X1);
    if (count < 0) return -1;
  } else {  // (no plane below AVX2)
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
  if (q1) {
    float L = -std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < count; ++i) {
      const float v = y1[idx[i]] = half_output(*q1, m, w, idx[i], isa);
      if (!(std::fabs(v) <= kHuge)) return -1;
      const float lo = v - (bound[idx[i]] * R + std::fabs(v) * kRel);
      L = lo > L ? lo : L;
    }
    int64_t kept = 0;
    for (int64_t i = 0; i < count; ++i) {
      const float v = y1[idx[i]];
      if (v + (bound[idx[i]] * R + std::fabs(v) * kRel) >= L) idx[kept++] = idx[i];
    }
    count = kept;
  }
  if (!q2) return first_max(idx, count, [&](int64_t n) { return y1[n]; });  // kInt8: y = y1
  return first_max(idx, count, [&](int64_t n) { return y1[n] + half_output(*q2, m, w, n, isa); });
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
  g_weight_rows.fetch_add(uint64_t(n_rows), std::memory_order_relaxed);
  for (int64_t m0 = 0; m0 < n_rows; m0 += kRows) {
    const int64_t M = std::min(kRows, n_rows - m0);
    if (y.size() < static_cast<size_t>(M * V)) y.resize(static_cast<size_t>(M * V));
    matmul(x + m0 * w.n_in, M, w, y.data(), pool);
    argmax_rows(y.data(), M, V, out + m0);
  }
}

// The rows of x [M, K] whose out[r] is -1 (the screen gave up), in one logits call (one weight
// stream for all of them); the screen's health notes the rate.
void redo_given_up_rows(const float* x, int64_t M, const WeightMatrix& w, ArgmaxScreen::Health& health,
                        int32_t* out, ThreadPool& pool) {
  thread_local std::vector<int64_t> redo;
  thread_local std::vector<float> xr;
  thread_local std::vector<int32_t> picks;
  const int64_t K = w.n_in;
  redo.clear();
  for (int64_t r = 0; r < M; ++r)
    if (out[r] < 0) redo.push_back(r);
  note_misses(health, int64_t(redo.size()), M);
  if (redo.empty()) return;
  g_full.fetch_add(redo.size(), std::memory_order_relaxed);
  if (xr.size() < redo.size() * size_t(K)) xr.resize(redo.size() * size_t(K));
  for (size_t i = 0; i < redo.size(); ++i) std::copy_n(x + redo[i] * K, K, xr.data() + i * size_t(K));
  picks.resize(redo.size());
  logits_argmax(xr.data(), int64_t(redo.size()), w, picks.data(), pool);
  for (size_t i = 0; i < redo.size(); ++i) out[redo[i]] = picks[i];
}

}  // namespace

ArgmaxStats argmax_stats() {
  ArgmaxStats s;
  s.screened_rows = g_screened.load(std::memory_order_relaxed);
  s.candidates = g_candidates.load(std::memory_order_relaxed);
  s.full_rows = g_full.load(std::memory_order_relaxed);
  s.plane_rows = g_plane.load(std::memory_order_relaxed);
  s.rows = g_rows.load(std::memory_order_relaxed);
  s.weight_rows = g_weight_rows.load(std::memory_order_relaxed);
  return s;
}

namespace {

// γ_p of the plane kernel's fp32 evaluation over nb blocks (top comment).
double plane_gamma(int64_t nb) { return double(nb + 5) * 0x1p-23; }

// Output o's 32 values u = h + 32 (6 bits) and fp16 scale of one plane block bp (layout: top
// comment); bp starts zeroed (the high-bit bytes are or-ed in).
void pack_plane_output(uint8_t* bp, int o, const uint8_t u[32], uint16_t d16) {
  for (int g = 0; g < 4; ++g)
    for (int i = 0; i < 4; ++i)
      bp[64 * g + 4 * o + i] = uint8_t((u[4 * g + i] & 15) | ((u[16 + 4 * g + i] & 15) << 4));
  for (int v = 0; v < 8; ++v)
    for (int i = 0; i < 4; ++i)
      bp[256 + 64 * (v / 4) + 4 * o + i] |=
          uint8_t(((u[16 * (v % 2) + 4 * (v / 2) + i] >> 4) & 3) << (2 * (v % 4)));
  bp[384 + 2 * o] = uint8_t(d16 & 0xff);
  bp[385 + 2 * o] = uint8_t(d16 >> 8);
}

// The plane of a Q8_0 weight and its P_n (top comment).
void build_plane(const WeightMatrix& w, double gamma, ArgmaxScreen& s, ThreadPool* pool) {
  const int64_t K = w.n_in, nb = K / 32, V = w.n_out, tiles = (V + 15) / 16;
  auto plane = std::make_shared<HugeArray<uint8_t>>(size_t(tiles * nb * cpu::kQ8PlaneBlockBytes));
  s.plane_bound.assign(size_t(V), 0.0f);
  const double gamma_p = plane_gamma(nb);
  uint8_t* out = plane->data();
  auto run = [&](int64_t t0, int64_t t1, int) {
    for (int64_t t = t0; t < t1; ++t) {
      double ee[16] = {}, ww[16] = {}, hh[16] = {};
      for (int64_t b = 0; b < nb; ++b) {
        uint8_t* bp = out + (t * nb + b) * cpu::kQ8PlaneBlockBytes;
        for (int o = 0; o < 16; ++o) {
          const int64_t n = 16 * t + o;
          if (n >= V) continue;  // padding outputs: all-zero bytes (u = 0, d = +0)
          const uint8_t* blk = static_cast<const uint8_t*>(w.data) + (n * nb + b) * 34;
          const double d = double(f16_to_f32(uint16_t(blk[0] | (blk[1] << 8))));
          uint8_t u[32];
          int64_t sq = 0, sh = 0, se = 0;  // Σ q², Σ (8h + 3)², Σ (2l − 3)²: exact integers
          for (int k = 0; k < 32; ++k) {
            const int q = int8_t(blk[2 + k]), h = q >> 2, l = q - 4 * h;
            u[k] = uint8_t(h + 32);
            sq += q * q;
            sh += (8 * h + 3) * (8 * h + 3);
            se += (2 * l - 3) * (2 * l - 3);
          }
          ww[o] += d * d * double(sq);
          hh[o] += d * d * double(sh) * 0.25;    // (d·(4h + 1.5))² = d²·(8h + 3)² / 4
          ee[o] += d * d * double(se) * 0.25;    // (d·(l − 1.5))² = d²·(2l − 3)² / 4
          pack_plane_output(bp, o, u, uint16_t(blk[0] | (blk[1] << 8)));
        }
      }
      for (int o = 0; o < 16 && 16 * t + o < V; ++o)
        s.plane_bound[size_t(16 * t + o)] = round_up(
            (std::sqrt(ee[o]) + gamma * std::sqrt(ww[o]) + gamma_p * std::sqrt(hh[o])) * (1.0 + 0x1p-16));
    }
  };
  if (pool)
    pool->parallel_for(tiles, run, 16);
  else
    run(0, tiles, 0);
  s.plane = std::move(plane);
}

// Element k of a row of a BF16 or F16 weight as fp32 (exact).
inline float w16_at(const uint16_t* row, int64_t k, bool f16) {
  return f16 ? f16_to_f32(row[k]) : bf16_to_f32(row[k]);
}
// An element the 16-bit screen cannot bound: inf or NaN (F16 and BF16), a denormal (BF16: the
// vdpbf16ps form flushes it).
inline bool w16_unscreenable(uint16_t v, bool f16) {
  if (f16) return (v & 0x7c00) == 0x7c00;
  const uint16_t e = v & 0x7f80;
  return e == 0x7f80 || (e == 0 && (v & 0x7f));
}

// The plane of a weight given by its exact values, row by row (values(n, out[K]) → false where
// the row holds one the screen cannot bound, every non-finite one among them), and its
// P_n = (||e_n|| + gamma·||w_n|| + γ_p·||ŵ_n||)·(1 + 2⁻¹⁶) (top comment: "BF16 heads" with
// gamma = 0, "Q6_K heads"); false (nothing built) on such a row or a non-finite bound. Built
// where the plane is read: on AVX2 or AVX-512 (its block steps are SIMD code of either).
// bound (optional, [V]): bound_n from the same pass (weight_bound).
template <class RowValues>
bool build_value_plane(const WeightMatrix& w, double gamma, RowValues&& values, ArgmaxScreen& s,
                       ThreadPool* pool, float* bound = nullptr) {
  const int64_t K = w.n_in, nb = K / 32, V = w.n_out, tiles = (V + 15) / 16;
  auto plane = std::make_shared<HugeArray<uint8_t>>(size_t(tiles * nb * cpu::kQ8PlaneBlockBytes));
  s.plane_bound.assign(size_t(V), 0.0f);
  const double gamma_p = plane_gamma(nb);
  uint8_t* out = plane->data();
  std::atomic<bool> ok{true};
  const bool avx512 = int8_isa() == IsaLevel::kAvx512;  // (its files hold the VNNI flag)
  auto run = [&](int64_t t0, int64_t t1, int) {
    std::vector<float> rows(size_t(16 * K));
    for (int64_t t = t0; t < t1; ++t) {
      const int on = int(std::min<int64_t>(16, V - 16 * t));  // padding outputs: all-zero bytes
      for (int o = 0; o < on; ++o)
        if (!values(16 * t + o, rows.data() + o * K)) ok = false;
      if (!ok) return;
      double sums[16][3] = {};  // per output Σ e², Σ w², Σ ŵ²
      for (int64_t b = 0; b < nb; ++b) {
        uint8_t* bp = out + (t * nb + b) * cpu::kQ8PlaneBlockBytes;
        for (int o = 0; o < on; ++o) {
          const float* wr = rows.data() + o * K + b * 32;
          const double amax = double(avx512 ? cpu::avx512::plane_block_absmax(wr) : cpu::avx2::plane_block_absmax(wr));
          if (!(amax <= 65504.0 * 127)) {  // a scale past fp16 (every value is finite: values())
            ok = false;
            return;
          }
          uint16_t d16 = f32_to_f16(float(amax / 127));
          if (double(f16_to_f32(d16)) * 127 < amax) ++d16;  // round up: |w / d| ≤ 127
          uint8_t u[32];
          if (avx512)
            cpu::avx512::plane_block_values(wr, d16, u, sums[o]);
          else
            cpu::avx2::plane_block_values(wr, d16, u, sums[o]);
          pack_plane_output(bp, o, u, d16);
        }
      }
      for (int o = 0; o < on; ++o) {
        const double p =
            (std::sqrt(sums[o][0]) + gamma * std::sqrt(sums[o][1]) + gamma_p * std::sqrt(sums[o][2])) * (1.0 + 0x1p-16);
        if (!(p <= 1e30)) ok = false;
        s.plane_bound[size_t(16 * t + o)] = round_up(p);
        if (bound) bound[16 * t + o] = weight_bound(sums[o][1], gamma);
      }
    }
  };
  if (pool)
    pool->parallel_for(tiles, run, 16);
  else
    run(0, tiles, 0);
  if (!ok) {
    s.plane_bound.clear();
    return false;
  }
  s.plane = std::move(plane);
  return true;
}

// The plane of a BF16 or F16 weight [V, K] (K % 32 == 0): its values exact in fp32; false
// (nothing built) when a weight is one the screen cannot bound.
bool build_plane16(const WeightMatrix& w, ArgmaxScreen& s, ThreadPool* pool) {
  const bool f16 = w.dtype == DType::kF16;
  const int64_t K = w.n_in;
  const uint16_t* wb = static_cast<const uint16_t*>(w.data);
  return build_value_plane(w, 0.0, [&](int64_t n, float* row) {
    bool ok = true;
    for (int64_t k = 0; k < K; ++k) {
      ok &= !w16_unscreenable(wb[n * K + k], f16);  // (and so finite)
      row[k] = w16_at(wb + n * K, k, f16);
    }
    return ok;
  }, s, pool);
}

// The plane of a Q6_K weight (top comment, "Q6_K heads") and its bound_n (s.bound
// sized): its dequantized values are exact in fp32 (d·sc·(u − 32): 11 + 7 + 6 significant bits).
bool build_plane_q6k(const WeightMatrix& w, double gamma, ArgmaxScreen& s, ThreadPool* pool) {
  const int64_t K = w.n_in, rb = dtype_row_bytes(w.dtype, K);
  return build_value_plane(w, gamma, [&](int64_t n, float* row) {
    ref::dequant_row(w.dtype, static_cast<const uint8_t*>(w.data) + n * rb, K, row);
    float z = 0.0f;  // NaN iff a value is inf or NaN (a file's fp16 scale)
    for (int64_t k = 0; k < K; ++k) z += row[k] * 0.0f;
    return z == 0.0f;
  }, s, pool, s.bound.data());
}

// ŷ1 [M, V] on the plane from the q1 rows (a: plain rows of ab-element blocks, ab a multiple of
// 32: each 32-block of a larger one takes its scale).
void plane_matmul(const cpu::GgmlAct& a_in, int64_t ab, int64_t M, const ArgmaxScreen& s, int64_t V,
                  float* y, ThreadPool& pool) {
  const int64_t nb = a_in.K / 32;
  cpu::GgmlAct a = a_in;
  thread_local std::vector<float> d32;
  if (ab != 32) {
    if (d32.size() < size_t(M * nb)) d32.resize(size_t(M * nb));
    const int64_t per = ab / 32, nab = a_in.K / ab;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t b = 0; b < nb; ++b) d32[size_t(m * nb + b)] = a_in.d[m * nab + b / per];
    a.d = d32.data();
  }
  // u = h + 32: Σ ŵ·x̂ = d·dx·(4·Σh·q + 1.5·Σq), Σh·q = Σu·q − 32·Σq (the chains' start)
  const cpu::Q32Panel p = cpu::q32_panel(a, M, -32, 4.0f);
  thread_local std::vector<float> cs;
  if (cs.size() < size_t(M * nb)) cs.resize(size_t(M * nb));
  for (int64_t b = 0; b < nb; ++b)  // c = fl(1.5·dx·Σq): the product is exact in double
    for (int64_t m = 0; m < M; ++m)
      cs[size_t(b * M + m)] = float(1.5 * double(a.d[m * nb + b]) * double(a.s32[m * nb + b]));
  const int8_t* q = p.q;
  const int32_t* nc = p.nc;
  const float* dx4 = p.dx;
  const float* c = cs.data();
  const uint8_t* plane = s.plane->data();
  // The plane kernel of the int8 ISA (all three give the same bits).
  const auto tiles = int8_isa() == IsaLevel::kAvx512 ? cpu::avx512::q8_0_plane_tiles
                     : avx_vnni_usable()             ? cpu::avx2_vnni::q8_0_plane_tiles
                                                     : cpu::avx2::q8_0_plane_tiles;
  pool.parallel_for_redoable((V + 15) / 16, [&, q, nc, dx4, c, plane, tiles](int64_t t0, int64_t t1, int) {
    tiles(q, nc, dx4, c, M, plane, nb, V, y, t0, t1);
  });
}

// A BF16 or F16 weight in its packed layout, screened where its matmul takes the packed kernels
// (AVX-512 or AVX2; BF16: without AMX).
bool head16_screenable(const WeightMatrix& w) {
  const bool layout = (w.dtype == DType::kBF16 && w.packed_format == kPackedAmxBf16 && !amx_usable()) ||
                      (w.dtype == DType::kF16 && w.packed_format == kPackedF16x16);
  return layout && w.data && w.n_in % 32 == 0 && cpu_isa() >= IsaLevel::kAvx2 &&
         int8_isa() >= IsaLevel::kAvx2;
}

ArgmaxScreen head16_argmax_screen(const WeightMatrix& w, ThreadPool* pool) {
  const bool f16 = w.dtype == DType::kF16;
  ArgmaxScreen s;
  const int64_t K = w.n_in;
  s.bound.resize(static_cast<size_t>(w.n_out));
  s.dtype = w.dtype;
  s.n_in = K;
  std::vector<double> norms(static_cast<size_t>(w.n_out));
  auto rows = [&](int64_t n0, int64_t n1, int) {
    for (int64_t n = n0; n < n1; ++n) {
      const uint16_t* wr = static_cast<const uint16_t*>(w.data) + n * K;
      double ss = 0;
      for (int64_t k = 0; k < K; ++k) ss += double(w16_at(wr, k, f16)) * w16_at(wr, k, f16);
      norms[size_t(n)] = std::sqrt(ss);
      s.bound[size_t(n)] = round_up(norms[size_t(n)] * (1.0 + 0x1p-16));
    }
  };
  if (pool)
    pool->parallel_for(w.n_out, rows, 256);
  else
    rows(0, w.n_out, 0);
  double min_norm = std::numeric_limits<double>::infinity();
  for (double v : norms)
    if (v > 0) min_norm = std::min(min_norm, v);
  s.abs_slack = std::isfinite(min_norm) ? round_up(double(K) * 0x1p-125 / min_norm) : 0.0f;
  if (!build_plane16(w, s, pool)) return ArgmaxScreen{};
  return s;
}

}  // namespace

ArgmaxScreen argmax_screen(const WeightMatrix& w, ThreadPool* pool) {
  ArgmaxScreen s;
  if (w.n_out > 0 && head16_screenable(w)) return head16_argmax_screen(w, pool);
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
      s.bound[size_t(n)] = weight_bound(ss, gamma);
    }
  };
  // A Q6_K plane's pass over the values gives the bounds too.
  if (int8_isa() >= IsaLevel::kAvx2 && w.dtype == DType::kQ6_K && build_plane_q6k(w, gamma, s, pool)) return s;
  if (pool)
    pool->parallel_for(w.n_out, rows, 256);
  else
    rows(0, w.n_out, 0);
  if (int8_isa() >= IsaLevel::kAvx2 && w.dtype == DType::kQ8_0) build_plane(w, gamma, s, pool);
  return s;
}

namespace {

// The candidates of one row of a BF16 / F16 head from its plane row ŷ1, in increasing order into
// idx (their count), or -1 (compute the row in full). xt: x̃ (BF16: the row's bf16 rounding, F16:
// the row itself); a1: x̃'s int8 part (row r); hi: scratch. idx / hi: candidate_cap(V) entries.
int64_t head16_candidates(const float* y1, const float* xt, const cpu::GgmlAct& a1, int64_t r,
                          const WeightMatrix& w, const ArgmaxScreen& s, int32_t* idx, float* hi) {
  const int64_t K = w.n_in, V = w.n_out;
  // ||x̃ − x̂1|| and ||x̃|| in double (x̂1 = d1·q1: exact products).
  const int8_t* q = a1.q + r * (K + 256);
  const float* d = a1.d + r * (K / 32);
  double rr = 0, xx = 0;
  for (int64_t k = 0; k < K; ++k) {
    const double e = double(xt[k]) - double(d[k / 32]) * double(q[k]);
    rr += e * e;
    xx += double(xt[k]) * xt[k];
  }
  const double gamma_b = double(2 * K + 4) * 0x1p-23;
  const float R = round_up((std::sqrt(rr) + gamma_b * std::sqrt(xx) + double(K) * 0x1p-126) *
                               (1.0 + 0x1p-40) + double(s.abs_slack));
  bool bad = false;
  return screen_row(y1, s.bound.data(), V, R, &bad, idx, hi, candidate_cap(V), s.plane_bound.data(),
                    residual_norm(a1, r, 32));
}

// matmul_argmax on a screened BF16 or F16 head (top comment, "BF16 heads", "F16 heads").
void head16_screened_argmax(const float* x, int64_t n_rows, const WeightMatrix& w,
                            const ArgmaxScreen& screen, int32_t* out, ThreadPool& pool) {
  const int64_t K = w.n_in, V = w.n_out, cap = candidate_cap(V);
  const IsaLevel isa = int8_isa();
  thread_local GgmlActRows q1;
  thread_local std::vector<float> xt, y1, his;
  thread_local std::vector<int32_t> idx;
  thread_local std::vector<int64_t> counts;
  for (int64_t m0 = 0; m0 < n_rows; m0 += cpu::kGgmlRowChunk) {
    const int64_t M = std::min(cpu::kGgmlRowChunk, n_rows - m0);
    counts.resize(static_cast<size_t>(M));
    if (xt.size() < static_cast<size_t>(M * K)) xt.resize(static_cast<size_t>(M * K));
    if (y1.size() < static_cast<size_t>(M * V)) y1.resize(static_cast<size_t>(M * V));
    if (idx.size() < static_cast<size_t>(M * cap)) idx.resize(static_cast<size_t>(M * cap));
    if (his.size() < static_cast<size_t>(M * cap)) his.resize(static_cast<size_t>(M * cap));
    const bool f16 = w.dtype == DType::kF16;  // (F16: x̃ = x)
    for (int64_t i = 0; i < M * K; ++i) xt[size_t(i)] = f16 ? x[m0 * K + i] : bf16_to_f32(f32_to_bf16(x[m0 * K + i]));
    q1.reserve(M, K, 32);
    q1.quantize(xt.data(), M, 0, nullptr, isa, pool);
    const cpu::GgmlAct a1 = q1.view(0);
    plane_matmul(a1, 32, M, screen, V, y1.data(), pool);
    g_plane.fetch_add(uint64_t(M), std::memory_order_relaxed);
    // (thread_local buffers are named through pointers: in a worker, they are the worker's own)
    const float* y1p = y1.data();
    const float* xtp = xt.data();
    int32_t* idxp = idx.data();
    float* hip = his.data();
    int64_t* countp = counts.data();
    pool.parallel_for(
        M,
        [&, y1p, xtp, idxp, hip, countp](int64_t r0, int64_t r1, int) {
          for (int64_t r = r0; r < r1; ++r)
            countp[r] = head16_candidates(y1p + r * V, xtp + r * K, a1, r, w, screen, idxp + r * cap, hip + r * cap);
        },
        1);
    // The exact outputs of each row's candidates, over ŷ1 in y1 (no longer needed), from the
    // candidates' own weight rows (16 at a time, gathered into one packed tile).
    if (cpu_isa() == IsaLevel::kAvx512)
      cpu::avx512::packed16_rows_finish(x + m0 * K, M, w, idx.data(), counts.data(), cap,
                                        bf16_dot() == Bf16Dot::kFma, y1.data(), pool);
    else
      cpu::avx2::packed16_rows_finish(x + m0 * K, M, w, idx.data(), counts.data(), cap, y1.data(), pool);
    for (int64_t r = 0; r < M; ++r) {
      const float* yr = y1.data() + r * V;
      out[m0 + r] = counts[r] < 0 ? -1 : first_max(idx.data() + r * cap, counts[r], [&](int64_t n) { return yr[n]; });
    }
    redo_given_up_rows(x + m0 * K, M, w, *screen.health, out + m0, pool);
  }
}

}  // namespace

// The plane reads 0.81 bytes per weight against Q8_0's 1.06, but past 4 rows both kernels are
// compute-bound and Q8_0's own is the cheaper; Q6_K's unpacking costs more at every size.
// `bench_matmul GemmaHead` under DFL_GGML_ACT=int8, 2 threads, AVX-512 (Emerald Rapids,
// 2026-12-06): Q8_0 M = 1 / 4 / 8 / 16: plane 3.0 / 3.4 / 5.3 / 8.1 ms, logits 4.1 / 4.4 /
// 4.6 / 7.7; Q6_K: plane 4.2 / 5.0 / 6.9 / 10.5, logits 3.9 / 5.9 / 9.8 / 17.5 (M = 1: within
// the noise).
bool int8_plane_pays(DType t, int64_t n_rows) { return t == DType::kQ6_K || n_rows <= 4; }

void matmul_argmax(const float* x, int64_t n_rows, const WeightMatrix& w,
                   const ArgmaxScreen& screen, int32_t* out, ThreadPool& pool) {
  if (n_rows <= 0) return;
  g_rows.fetch_add(uint64_t(n_rows), std::memory_order_relaxed);
  const int64_t K = w.n_in, V = w.n_out;
  const bool head16 = w.dtype == DType::kBF16 || w.dtype == DType::kF16;
  const bool matches = !screen.empty() && screen.dtype == w.dtype && screen.n_in == K &&
                       static_cast<int64_t>(screen.bound.size()) == V;
  // kInt8 (y = the q1 half) gains only where a plane stands in for the weights.
  const bool has_plane = screen.plane && static_cast<int64_t>(screen.plane_bound.size()) == V;
  const GgmlActivations act = ggml_activations();
  bool screened = matches && (head16 ? has_plane && head16_screenable(w)
                                     : (act == GgmlActivations::kInt8x2 || (act == GgmlActivations::kInt8 && has_plane)) &&
                                           (w.packed_format == kPackedNone || w.packed_format == kPackedQ32x16 ||
                                            w.packed_format == kPackedQ6K16));
  ArgmaxScreen::Health& health = *screen.health;
  if (screened && health.skip.load(std::memory_order_relaxed) > 0) {
    health.skip.fetch_sub(1, std::memory_order_relaxed);
    screened = false;
  }
  if (!screened) {
    logits_argmax(x, n_rows, w, out, pool);
    return;
  }
  if (head16) return head16_screened_argmax(x, n_rows, w, screen, out, pool);
  const IsaLevel isa = int8_isa();
  const int64_t ab = act_block(w.dtype);
  const bool amx = ggml_amx_for(w, std::min<int64_t>(n_rows, cpu::amx::kGgmlAmxMaxRows), isa);
  const int64_t chunk = amx ? cpu::amx::kGgmlAmxMaxRows : cpu::kGgmlRowChunk;
  // The plane where the call would take the VNNI kernel (AMX multiplies faster than it streams).
  const bool on_plane = has_plane && !amx && isa >= IsaLevel::kAvx2;
  if (act == GgmlActivations::kInt8 && !(on_plane && int8_plane_pays(w.dtype, n_rows))) {
    logits_argmax(x, n_rows, w, out, pool);
    return;
  }
  const bool split = act == GgmlActivations::kInt8x2;
  thread_local GgmlActRows q1, q2;
  thread_local std::vector<float> resid, y1;
  thread_local std::vector<int32_t> idx;
  thread_local std::vector<float> his;
  for (int64_t m0 = 0; m0 < n_rows; m0 += chunk) {
    const int64_t M = std::min(chunk, n_rows - m0);
    const int64_t padded = amx ? (M + 15) / 16 * 16 : M;  // AMX tiles load 16 rows
    q1.reserve(padded, K, ab);
    if (y1.size() < static_cast<size_t>(M * V)) y1.resize(static_cast<size_t>(M * V));
    if (split) {
      q2.reserve(M, K, ab);
      if (resid.size() < static_cast<size_t>(M * K)) resid.resize(static_cast<size_t>(M * K));
    }
    q1.quantize(x + m0 * K, M, 0, split ? resid.data() : nullptr, isa, pool);
    if (amx) q1.zero(M, padded - M);
    if (split) q2.quantize(resid.data(), M, 0, nullptr, isa, pool);
    const cpu::GgmlAct a1 = q1.view(0);
    if (on_plane) {
      plane_matmul(a1, ab, M, screen, V, y1.data(), pool);
      g_plane.fetch_add(uint64_t(M), std::memory_order_relaxed);
    } else {
      ggml_kernel(a1, M, w, y1.data(), pool, isa, amx);
      g_weight_rows.fetch_add(uint64_t(M), std::memory_order_relaxed);
    }
    // (thread_local buffers are named through pointers: in a worker, y1 is the worker's own)
    const cpu::GgmlAct a2 = split ? q2.view(0) : cpu::GgmlAct{};
    float* y1p = y1.data();
    const int64_t cap = candidate_cap(V);
    if (idx.size() < static_cast<size_t>(M * cap)) idx.resize(static_cast<size_t>(M * cap));
    if (his.size() < static_cast<size_t>(M * cap)) his.resize(static_cast<size_t>(M * cap));
    int32_t* idxp = idx.data();
    float* hip = his.data();
    pool.parallel_for(
        M,
        [&, y1p, idxp, hip](int64_t r0, int64_t r1, int) {
          for (int64_t r = r0; r < r1; ++r)
            out[m0 + r] = finish_row(y1p + r * V, screen.bound.data(), V, split ? residual_norm(a2, r, ab) : 0.0f,
                                     split ? &a2 : nullptr,
                                     r, w, isa, idxp + r * cap, hip + r * cap, on_plane ? &a1 : nullptr,
                                     on_plane ? screen.plane_bound.data() : nullptr,
                                     on_plane ? residual_norm(a1, r, ab) : 0.0f);
        },
        1);
    redo_given_up_rows(x + m0 * K, M, w, health, out + m0, pool);
  }
}

}  // namespace dfl::ops
