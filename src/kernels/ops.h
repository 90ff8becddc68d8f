// Backend-neutral op signatures. Activations are fp32, row-major, outermost dimension first.
// Each op has a scalar reference in kernels/ref/ (the oracle, never optimized) and may have an
// optimized CPU version in kernels/cpu/ chosen at runtime by CPU features. Tests compare the two
// over shape sweeps.
//
// Batch invariance (needed for bit-exact lossless speculative decoding): for every op here, the
// result for one row depends only on that row's inputs — never on how many rows are computed
// together, on the thread count, or on the block size.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/huge_buffer.h"
#include "core/threadpool.h"
#include "kernels/visibility.h"

namespace dfl {

// A weight matrix in torch Linear layout: W[n_out, n_in], y = x · Wᵀ.
// kF8E4M3: `scale` holds the block scale grid [ceil(n_out/bo), ceil(n_in/bi)] (weight_scale_inv,
// the factor that multiplies the stored value), with bo = scale_block_out, bi = scale_block_in.
// `packed` is an optional kernel-specific layout made once at load time (see prepack_weight).
struct WeightMatrix {
  DType dtype = DType::kF32;
  int64_t n_out = 0;
  int64_t n_in = 0;
  const void* data = nullptr;     // [n_out, n_in] elements of dtype, contiguous; for the GGML
                                  // block types (kQ8_0 ... kQ6_K) n_out rows of
                                  // dtype_row_bytes(dtype, n_in) bytes, as GGUF stores them
                                  // (n_in a multiple of the block size; see ggml_weight())
  const float* scale = nullptr;   // F8 block scales, row-major grid
  int64_t scale_block_out = 128;
  int64_t scale_block_in = 128;
  const void* packed = nullptr;   // optional repacked copy owned elsewhere
  int32_t packed_format = 0;      // 0 = none; see PackedFormat
};

// Layouts a WeightMatrix can carry besides its plain dtype.
//   kPackedQ8: int8 weights made at load time by quantize_q8(). dtype = kI8 (marker). Per
//     output row, per block of kQ8Block = 64 inputs: int8 q in [-127, 127] and an fp32 scale
//     (absmax / 127), weight ≈ q * scale; stored as u = q + 128. Rows are grouped in tiles of
//     kQ8TileN = 16 (the tile and VNNI layout of AMX-INT8 / vpdpbusd: one 1 KiB tile holds one
//     64-block of 16 rows, 4 consecutive k of one row per 32-bit lane), n_tiles = ceil(n_out/16),
//     n_blocks = ceil(n_in / 64); rows and columns past the matrix are padding (u = 128, scale 0):
//     data:  uint8 [n_tiles][n_blocks][16 (k / 4)][16 (n)][4 (k % 4)]
//            element (n, k) at ((n/16 * n_blocks + k/64) * 16 + k%64/4) * 64 + n%16 * 4 + k%4
//     scale: fp32 [n_tiles][n_blocks][16 (n)]:  scale of (n, block b) at (n/16 * n_blocks + b) * 16 + n%16
//     scale_block_in = kQ8Block, scale_block_out = 1. A thread streams one contiguous region.
//   The matmul quantizes each activation row per block of 64 to int8 (absmax / 127, RNE), computes
//   each (row, output, block) integer dot product exactly (int32) and accumulates in fp32, block
//   by block in k order:  acc = acc + float(dot) * (x_scale * w_scale)  (a product, then a sum;
//   no fma), so every ISA level (AVX-512 VNNI, portable) gives the same bits. About 1.06 bytes
//   per weight (bf16: 2).
//   kPackedAmxBf16: BF16 weights re-laid out for AMX tiles by prepack_weight(). dtype = kBF16,
//     `data` still points at the original [n_out, n_in] (used when AMX is off), `packed` at
//     bf16 [ceil(n_out/16)][ceil(n_in/32)][16 k-pairs][16 n][2], zero-padded.
//   kPackedQ4K16: Q4_K weights (GGUF) re-laid out by prepack_weight() on AVX-512 machines so
//     16 outputs share each vector (layout in kernels/cpu/ggml_avx512.cc; same bytes per weight
//     as Q4_K, 0.59 B); dtype = kQ4_K, `data` still points at the original blocks (used by the
//     reference and on other ISA levels, which give the same bits).
//   kPackedQ32x16: Q8_0 / Q5_0 / Q4_0 (GGUF) the same way (16 outputs per vector; Q8_0 1.125,
//     Q5_0 0.75, Q4_0 0.625 bytes per weight), dtype unchanged, `data` still the original.
//   kPackedF16x16: F16 weights re-laid out by prepack_weight() on AVX-512 and AVX2 machines,
//     k-major per 16-output tile: f16 [ceil(n_out/16)][ceil(n_in/32)][32 k][16 n], zero-padded
//     (the kPackedAmxBf16 grid without the pairing); dtype = kF16, `data` still the original.
//     Each output is one fp32 FMA chain over k in order (x in fp32): the same bits on both levels
//     and for any M.
enum PackedFormat : int32_t {
  kPackedNone = 0, kPackedQ8 = 1, kPackedAmxBf16 = 2, kPackedQ4K16 = 3, kPackedQ32x16 = 4,
  kPackedQ6K16 = 5,  // Q6_K likewise (0.83 bytes per weight)
  kPackedF16x16 = 6
};
constexpr int64_t kQ8Block = 64;
constexpr int64_t kQ8TileN = 16;

// Owning Q8 weight (the engine keeps it alive as long as the WeightMatrix from matrix() is used;
// moving it keeps the pointers valid).
struct QuantizedQ8 {
  int64_t n_out = 0, n_in = 0, n_blocks = 0;
  HugeArray<uint8_t> q;  // [n_tiles][n_blocks][16][16][4] (kPackedQ8 layout above)
  HugeArray<float> d;    // [n_tiles][n_blocks][16]   (2 MiB pages where the OS allows)
  WeightMatrix matrix() const;
  size_t bytes() const { return q.size() + d.size() * sizeof(float); }
};

// GGML block weights (GGUF): a view of n_out rows × n_in columns of `dtype` blocks at `data`
// (a GGUF 2-D tensor has ne = [n_in, n_out]). Checks n_in against the block size (DFL_ASSERT).
WeightMatrix ggml_weight(DType dtype, int64_t n_out, int64_t n_in, const void* data);

// Quantizes any supported weight (F32, BF16, F16, F8_E4M3 + scales) to Q8: per output row, per
// block of kQ8Block inputs, scale = absmax / 127, q = round-to-nearest-even(w / scale).
// Deterministic; `pool` (optional) only parallelizes.
QuantizedQ8 quantize_q8(const WeightMatrix& src, ThreadPool* pool = nullptr);

// Query runs at least this long take the prefill attention (see attention): bf16 products on
// AVX-512 machines (AMX tiles where AMX is usable, AVX-512 BF16 dot products elsewhere), fp32
// tiles of queries × keys on AVX2 machines.
constexpr int64_t kPrefillAttentionMinQueries = 64;
// Turns that prefill attention off (every call then takes the fp32, batch-invariant path of
// shorter runs) or back on. Default on, unless the environment has DFL_PREFILL_ATTN=fp32. Not
// thread-safe against running kernels (set it before a run, as tests do).
void set_prefill_attention(bool on);
bool prefill_attention();
// Whether an attention call of n_q queries takes the prefill path now (the rule above,
// with the current ISA cap and AMX switch): the one place that decides it.
bool uses_prefill_attention(int64_t n_q);

struct AttnParams {
  int32_t n_heads = 0;
  int32_t n_kv_heads = 0;  // GQA: query head h reads kv head h / (n_heads / n_kv_heads)
  int32_t d_qk = 0;
  int32_t d_v = 0;
  float scale = 1.0f;      // logit scale (usually d_qk^-0.5)
  Window window;           // the layer's resolved visibility window (kernels/visibility.h)
  const float* sinks = nullptr;  // [n_heads] learned sink logits (unscaled), or nullptr
};

// Element type and layout of the K/V a KvPages points at (the KV pool's --kv-dtype).
enum class KvDtype : int32_t {
  kF32 = 0,   // fp32, slot-major: [slot][kv head][d] (the bit-exact default)
  kBF16 = 1,  // bf16 (RNE from fp32), head-major within each page (see KvPages)
};
const char* kv_dtype_name(KvDtype t);            // "f32" / "bf16"
bool kv_dtype_from_name(const char* s, KvDtype* out);
inline int64_t kv_dtype_bytes(KvDtype t) { return t == KvDtype::kBF16 ? 2 : 4; }

// The cache slots one attention call reads, in pages (a paged KV pool's block table).
// Slot j (0 ≤ j < n_slots) is row j % page_slots of page j / page_slots, its absolute position
// at pos[page][row] (kEmptySlot = skip).
//   dtype kF32 (k, v):   K at k[page] + row * n_kv_heads * d_qk, V at v[page] + row * n_kv_heads * d_v.
//     page_slots is a multiple of 16, unless there is only one page (n_slots ≤ page_slots: a
//     contiguous run of any length).
//   dtype kBF16 (k16, v16): each page holds page_slots rows of every kv head, head-major, so one
//     head's keys are one contiguous run that attention (AVX-512 and AMX) reads in place:
//       K [n_kv_heads][page_slots][d_qk]:           (row r, head h, dim d) at k16[page][(h·ps + r)·d_qk + d]
//       V [n_kv_heads][page_slots / 2][d_v][2]:     (r, h, d) at v16[page][(h·ps + r − r%2)·d_v + 2d + r%2]
//     (ps = page_slots; V keeps the two slots of a pair side by side, the VNNI layout AMX-BF16
//     multiplies P·V with). page_slots is a multiple of 16 even for a single page, and every
//     row of every page is readable (rows ≥ n_slots and empty rows may hold anything finite).
//     Values widen exactly to fp32 (bf16 → fp32 is a shift): every kernel computes the same as
//     its fp32 path over the bf16-rounded K/V.
// Each of the ceil(n_slots / page_slots) pages must be readable for its rows below n_slots (the
// last page may be partly used; n_slots = 0 reads no pointer, they may be null). fp32 K/V of
// empty slots may hold anything, NaN included: it never reaches a result. Pages may sit anywhere
// in memory, in any order.
struct KvPages {
  const float* const* k = nullptr;
  const float* const* v = nullptr;
  const int32_t* const* pos = nullptr;
  int64_t n_slots = 0;
  int32_t page_slots = 0;
  KvDtype dtype = KvDtype::kF32;
  const uint16_t* const* k16 = nullptr;  // dtype kBF16: the pages (k / v unused)
  const uint16_t* const* v16 = nullptr;
};
// Index of (row r, dim d) of kv head h within a bf16 page (the layout above).
inline int64_t kv_bf16_k_index(int64_t ps, int64_t d_qk, int32_t h, int64_t r, int64_t d) {
  return (h * ps + r) * d_qk + d;
}
inline int64_t kv_bf16_v_index(int64_t ps, int64_t d_v, int32_t h, int64_t r, int64_t d) {
  return (h * ps + (r & ~int64_t(1))) * d_v + 2 * d + (r & 1);
}
// Where row `row` of page `page` starts for kv head h: k / v (kF32: the heads' rows
// interleaved) or k16 / v16 (kBF16: head-major; V dims 2 apart), the other pair null.
struct KvRow {
  const float* k = nullptr;
  const float* v = nullptr;
  const uint16_t* k16 = nullptr;
  const uint16_t* v16 = nullptr;
};
inline KvRow kv_row(const KvPages& kv, const AttnParams& p, int32_t h, int64_t page, int64_t row) {
  KvRow r;
  if (kv.dtype == KvDtype::kBF16) {
    r.k16 = kv.k16[page] + kv_bf16_k_index(kv.page_slots, p.d_qk, h, row, 0);
    r.v16 = kv.v16[page] + kv_bf16_v_index(kv.page_slots, p.d_v, h, row, 0);
  } else {
    r.k = kv.k[page] + (row * p.n_kv_heads + h) * p.d_qk;
    r.v = kv.v[page] + (row * p.n_kv_heads + h) * p.d_v;
  }
  return r;
}

// Owning result of prepack_weight(); matrix() is what to pass to ops::matmul. Moving keeps the
// pointers valid. The source weight's storage must outlive it (matrix().data points there).
struct PackedWeight {
  HugeArray<uint16_t> buf;  // 2 MiB pages where the OS allows (core/huge_buffer.h)
  WeightMatrix w;
  const WeightMatrix& matrix() const { return w; }
  bool repacked() const { return w.packed_format != kPackedNone; }
  size_t bytes() const { return buf.size() * sizeof(uint16_t); }
};

// Load-time repack into the layout this machine's fastest kernel streams. Today: BF16 weights
// when AMX is usable (core/cpu_features.h amx_usable()) or cpu_isa() is AVX-512 or AVX2 →
// kPackedAmxBf16; F16 weights on AVX-512 and AVX2 → kPackedF16x16; Q4_K (GGUF) weights
// when cpu_isa() is AVX-512 and ggml_activations() is kInt8 → kPackedQ4K16, Q6_K → kPackedQ6K16,
// Q8_0 / Q5_0 / Q4_0 → kPackedQ32x16 (set the activation mode before loading); anything else is
// returned as is (repacked() == false, no copy). Call once per weight, keep the result.
PackedWeight prepack_weight(const WeightMatrix& w, ThreadPool* pool = nullptr);

namespace ops {

// y[m, :] = x[m, :] · Wᵀ for m < n_rows.     x: [n_rows, n_in]   y: [n_rows, n_out]
// Weights: F32 / F16 / F8_E4M3 (+ block scales): fp32 math. GGML block types (Q8_0, Q4_0,
// Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K): the weight stays in its blocks, read once per call for
// all rows (up to 32; more rows in chunks of 32), unpacked in registers; fp32 activations by
// default, llama.cpp-style int8 activations optionally (GgmlActivations below). AVX-512 and
// portable code give the same bits. BF16: on AVX-512 the activations
// are rounded to bf16 (RNE) and multiplied with vdpbf16ps (fp32 accumulation); elsewhere fp32
// math. Q8 (packed_format kPackedQ8): see above. kPackedAmxBf16 (prepack_weight): AMX tiles,
// bf16-rounded activations, fp32 accumulation. Each weight is read once for all n_rows rows.
// Batch invariant: row m's result is bit-identical for any n_rows and thread count (on one ISA
// level; cpu_isa() picks the level once per process).
void matmul(const float* x, int64_t n_rows, const WeightMatrix& w, float* y, ThreadPool& pool);
// Several weights of one input (a layer's q, k, v; gate and up): y = x · Wᵀ for each (w, y) of
// outs[0..n), the same bits as matmul() on each. Where they share the AVX-512 packed bf16 layout
// (no AMX) and n_in, x is converted once and all their tiles run as one pool job (one wait
// instead of n); otherwise one matmul after another.
struct MatmulOut {
  const WeightMatrix* w;
  float* y;
};
void matmul_same_input(const float* x, int64_t n_rows, const MatmulOut* outs, int n, ThreadPool& pool);

// y[m, :] = x[m, :] / sqrt(mean(x[m, :]²) + eps) ⊙ w     x, y: [n_rows, dim]   w: [dim] fp32
// (in place allowed: y == x)
void rms_norm(const float* x, const float* w, int64_t n_rows, int64_t dim, float eps, float* y,
              ThreadPool* pool = nullptr);

// Fused residual add + RMSNorm (one pass saved):  res[m, :] += x[m, :];  y[m, :] = rms_norm(res)
// res, x, y: [n_rows, dim]  (y may alias x, not res)
void add_rms_norm(float* res, const float* x, const float* w, int64_t n_rows, int64_t dim,
                  float eps, float* y, ThreadPool* pool = nullptr);

// out[i] = silu(gate[i]) * up[i], i < n.    (out may alias gate)
void silu_mul(const float* gate, const float* up, int64_t n, float* out,
              ThreadPool* pool = nullptr);

// y[i] += x[i]
void add_inplace(float* y, const float* x, int64_t n, ThreadPool* pool = nullptr);

// out[i] = gelu_tanh(gate[i]) * up[i], i < n    (out may alias gate or up)
// gelu_tanh(x) = 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))  (PyTorch approximate='tanh'; Gemma's
// GeGLU), computed as the identical x·σ(2u) = x / (1 + e^(-2u)), u = √(2/π)·x·(1 + 0.044715·x²),
// which has no cancellation for negative x. Measured max relative error vs a double reference
// (AVX-512 and portable): 1.9e-7 for x ≥ -1, 1.3e-6 for |x| ≤ 4; further left gelu is tiny and
// ill-conditioned in u (error ≈ 1.7e-7·(1 + 2|u|); docs/KERNELS.md).
void gelu_tanh_mul(const float* gate, const float* up, int64_t n, float* out,
                   ThreadPool* pool = nullptr);

// x[i] = cap · tanh(x[i] / cap), in place (Gemma 2/3 logit and attention soft-capping; cap > 0).
// AVX-512: a vector tanh, max 1 ulp measured (tests/kernels/test_elementwise.cc); portable:
// std::tanh (glibc: 2 ulp). ±inf → ±cap, NaN stays NaN.
void softcap(float* x, int64_t n, float cap, ThreadPool* pool = nullptr);

// x[i] *= s (one rounding: bit-identical on every ISA level)
void scale_inplace(float* x, int64_t n, float s, ThreadPool* pool = nullptr);

// y[i·ys] = f32_to_bf16(x[i]), i < n (ys = 1 or 2; ys = 2 leaves the uint16s between untouched):
// RNE, NaN kept and quieted — core/dtype.h's rounding bit for bit on every ISA level.
void to_bf16(const float* x, int64_t n, uint16_t* y, int64_t ys = 1);

// NeoX (rotate-half) RoPE on the leading `n_rot` dims of each head, in place.
//   x: [n_rows, n_heads, head_dim] (row stride `row_stride` floats)
//   cos, sin: [n_rows, n_rot / 2] (already include any attention scaling, e.g. YaRN mscale)
// Pair (i, i + n_rot/2): x_i' = x_i·c − x_{i+h}·s ; x_{i+h}' = x_{i+h}·c + x_i·s
void rope_neox(float* x, int64_t n_rows, int64_t row_stride, int64_t n_heads, int64_t head_dim,
               int64_t n_rot, const float* cos, const float* sin, ThreadPool* pool = nullptr);

// One token of the gated delta rule for one value head (Gated DeltaNet, TARGETS-SPEC §5):
//   m = S_inᵀ k,  u = (v − decay·m)·β,  S_out = decay·S_in + k uᵀ,  o = S_outᵀ q
// S [dk, dv] row-major (s_out may alias s_in), k, q [dk], v, o [dv] (o may be null: state only).
// (Equal to HF's S ← decay·S; u = (v − Sᵀk)·β; S ← S + k uᵀ; o = Sᵀq up to rounding.) The result
// for one token does not depend on anything but its inputs, so decode, verify and replay agree.
void delta_rule_step(const float* s_in, float* s_out, const float* k, const float* q, const float* v,
                     float decay, float beta, int32_t dk, int32_t dv, float* o);

// Element-wise ops above take an optional pool: calls of ≥ kParallelElems elements are split over
// it by rows (silu_mul / add_inplace / gelu_tanh_mul / softcap / scale_inplace: runs of 64
// elements); so is the GGUF activation quantization. Results do not depend on the split, and
// element i's result depends only on element i (not on n or on where a call starts).
// 8K: a 16-row verify block of a 640- or 1024-wide model is 10K–16K; a decode row stays on the
// caller, where waking the worker would cost more than it saves.
constexpr int64_t kParallelElems = int64_t(1) << 13;

// Attention of n_q queries over n_kv cache slots with online softmax in fp32.
//   q:     [n_q, n_heads, d_qk]            q_pos: [n_q] absolute positions
//   k:     [n_kv, n_kv_heads, d_qk]        k_pos: [n_kv] absolute positions, kEmptySlot = skip
//   v:     [n_kv, n_kv_heads, d_v]
//   out:   [n_q, n_heads, d_v]
// Keys are visited in slot order; a query with no visible key and no sink gets zeros.
// Sinks add exp(s_h) to the softmax denominator with no value.
// Precision and batch invariance: calls with n_q < kPrefillAttentionMinQueries (decode, verify and
// drafter blocks) compute in fp32 and are batch invariant with each other (a row's result is
// bit-identical for any n_q below the threshold, any thread count). Longer query runs (prompt
// prefill) on AVX-512 machines take bf16 products (AMX tiles, or AVX-512 BF16 dot products
// without AMX): Q, K, V and the softmax probabilities are rounded to bf16, sums and the softmax
// stay fp32 (relative error ~1e-3, like bf16 inference engines); on AVX2 machines they take fp32
// tiles of queries × keys (cpu/attention_prefill_avx2.cc: another summation order and a
// polynomial e^x, ~1e-6 relative). Those rows are invariant among themselves (any n_q at or
// above the threshold, any thread count, any paging) but not bit-identical to the fp32 path of
// shorter runs (nor the AMX rows to the AVX-512 ones).
// Lossless speculative decoding is unaffected: target-only and speculative runs prefill the
// same prompt with the same call, and verify blocks are far below the threshold.
// bf16 KV (KvPages kBF16, the paged call below): every path widens bf16 exactly, so the result
// is that path's fp32 result over the bf16-rounded K/V bit for bit (AMX: the same tile bytes),
// with the same batch-invariance and paging guarantees.
void attention(const float* q, const int32_t* q_pos, int64_t n_q, const float* k, const float* v,
               const int32_t* k_pos, int64_t n_kv, const AttnParams& p, float* out,
               ThreadPool& pool);

// The same attention over a paged cache (KvPages above): slot j of `kv` plays the role of
// slot j of the contiguous call (k, v, k_pos). The contiguous call is this one with a single
// page. Paging contract: for the same logical slot sequence (same K/V/position per slot j),
// the result is BIT-IDENTICAL to the contiguous call — on every path (portable, AVX-512 fp32,
// AMX bf16 prefill), for any page_slots, any physical page order and placement, any thread
// count. Every kernel walks slots in the same fixed blocks from slot 0 (16 slots fp32, 32 on
// AMX, which takes its two 16-slot halves from their own pages) and only fetches the page
// pointers per block (or copies through them); the arithmetic never sees the paging.
void attention(const float* q, const int32_t* q_pos, int64_t n_q, const KvPages& kv,
               const AttnParams& p, float* out, ThreadPool& pool);

// Index of the largest element (first one on ties): best = 0, then i replaces best iff
// x[i] > x[best] — so a NaN never wins, and a NaN at 0 is never replaced. argmax_portable is
// that loop; argmax runs it vectorized where the machine allows (the same index, always).
int64_t argmax(const float* x, int64_t n);
int64_t argmax_portable(const float* x, int64_t n);
// out[r] = argmax of row r of x [rows, n].
void argmax_rows(const float* x, int64_t rows, int64_t n, int32_t* out);

// Greedy picks without the logits. out[m] := argmax(y row m) for y = matmul(x, w) — the index
// ops::argmax gives on ops::matmul's output, always (ties: the first; a row with a non-finite
// value: computed from its logits). Where it can, it does less work than the matmul:
// GGML Q8_0 / Q4_0 / Q5_0 / Q6_K weights under GgmlActivations::kInt8x2 run only the q1 half of
// the activations through the kernel for every output, bound the q2 half rigorously
// (Cauchy-Schwarz on the weight row and the q2 residual, plus the fp32 rounding of the kernel's
// sum), and finish exactly — the kernel's own bits, ggml_portable_dot — only the outputs whose
// bound still reaches the best lower bound (kernels/ggml_argmax.cc). A Q8_0 or Q6_K weight
// screened on AVX-512 (not AMX) or AVX2 reads a 6-bit plane of itself instead (argmax_screen
// builds it: 0.81 bytes per weight, held beside the weights), the plane's error bounded in the
// same way, and finishes both halves of the candidates from the blocks. A BF16 or F16 weight
// prepacked for the AVX-512 (no AMX) or AVX2 packed kernels is screened on a 6-bit plane made
// from it (0.81 bytes per weight), its candidates finished by that kernel on tiles gathered
// from their own rows. Everything else computes
// the logits and takes ops::argmax. `screen` must come from argmax_screen(w) (or be empty:
// logits path). Batch- and thread-count invariant like matmul.
struct ArgmaxScreen {
  // [n_out]: per output row, (||row||₂ of the dequantized weights)·(1 + the kernel's relative
  // fp32 error bound), rounded up; empty = no screening for this weight.
  std::vector<float> bound;
  DType dtype = DType::kF32;
  int64_t n_in = 0;
  // Q8_0 / Q6_K (and BF16 / F16) weights, built where the int8 kernels are AVX2 or AVX-512: the 6-bit
  // plane the screen streams instead of the weights (0.81 bytes per weight, against 1.06 for
  // Q8_0, 0.82 for Q6_K with a cheaper unpacking; layout and math: ggml_argmax.cc) and
  // per output P_n, its bound on |y1 − ŷ1| per unit of ||x̂1||₂, rounded up.
  std::shared_ptr<const HugeArray<uint8_t>> plane;
  std::vector<float> plane_bound;
  // BF16 weights: the absolute slack K·2⁻¹²⁵ / min_n ||w_n|| added to each row's R (underflow).
  float abs_slack = 0.0f;
  // How the screen has been doing on this weight (flat rows — random ids, high-entropy text —
  // have too many candidates and are computed twice): while most recent rows fell back, calls
  // take the logits path for a while. Speed only: both paths give the same index.
  struct Health {
    std::atomic<int32_t> misses{0};  // recent fallback rate, 1/256 units (moving average)
    std::atomic<int32_t> skip{0};    // calls left on the logits path
  };
  std::shared_ptr<Health> health = std::make_shared<Health>();
  bool empty() const { return bound.empty(); }
};
ArgmaxScreen argmax_screen(const WeightMatrix& w, ThreadPool* pool = nullptr);
void matmul_argmax(const float* x, int64_t n_rows, const WeightMatrix& w, const ArgmaxScreen& screen,
                   int32_t* out, ThreadPool& pool);
// matmul_argmax's screened path since the process started: rows it finished, outputs it
// finished exactly in them, rows it computed in full instead, rows screened on a 6-bit plane
// (of screened_rows or full_rows); and of every call: its rows, and the times a row streamed the
// whole weight — its logits computed (the full_rows, and the rows of calls that took the logits
// path: no screen, or a screen stepping aside) or its screen run on the weights themselves (no
// plane); a given-up row of such a screen counts twice (relaxed counters).
struct ArgmaxStats {
  uint64_t screened_rows = 0, candidates = 0, full_rows = 0, plane_rows = 0;
  uint64_t rows = 0, weight_rows = 0;
};
ArgmaxStats argmax_stats();

}  // namespace ops

// How AVX-512 without AMX multiplies kPackedAmxBf16 weights (bf16-rounded activations, fp32
// accumulation, lanes = outputs), and the bf16 prefill attention's Q·Kᵀ and P·V:
//   kDpbf16: vdpbf16ps, 32 products per instruction (Zen 4 / Zen 5 issue it at the fp32 FMA rate);
//   kFma: each weight pair widened to fp32 in registers (exact), then two fp32 FMAs, the odd
//     element first — the per-output sequence Intel's SDM defines for vdpbf16ps, whose zmm form
//     Intel cores issue at a quarter of their FMA rate (Emerald Rapids: 1.4 vs 5.9 G/s per core),
//     so at verify and prefill sizes this is 1.5–1.8× faster there, and the same bits as vdpbf16ps
//     on Intel (tested; x has no bf16 denormals, and the flushing of denormal weights / sums that
//     vdpbf16ps does, this does not).
// Default: kFma on Intel CPUs, kDpbf16 elsewhere; DFL_BF16_DOT=fma|dpbf16 overrides. bf16_dot()
// is kFma whatever was set where the BF16 instructions are not usable (core/cpu_features.h
// avx512_bf16_usable(): Cascade Lake, Ice Lake). One choice per process (batch invariance holds
// under either). Not thread-safe against running kernels.
enum class Bf16Dot { kDpbf16, kFma };
void set_bf16_dot(Bf16Dot d);
Bf16Dot bf16_dot();

// Activation precision of the GGML block matmul (ops::matmul on kQ8_0 ... kQ6_K weights):
//   kInt8x2 (default): each activation row x is quantized twice per block (ggml_matmul.cc):
//     x ≈ d1·q1 + d2·q2 with q1 = int8(x / d1) and q2 = int8 of the residual x − d1·q1
//     (|residual| ≤ d1 / 2, so d2 ≤ d1 / 254: ~15 bits per block). Both halves run through
//     the int8 kernels as 2M rows of one call (each weight block unpacked once for all of
//     them) and y = y1 + y2. Logits within ~1e-4 of fp32 on the real Gemma-3-270M, at a
//     fraction of kFp32's cost.
//   kFp32: each weight row is dequantized in registers to exactly ref::weight_at's values and
//     dotted with the fp32 activations (16 lanes, lane k % 16, fma in k order, then a fixed
//     pairwise tree) — the fp32-on-dequantized-weights reference (transformers loading the
//     GGUF) up to summation order.
//   kInt8: llama.cpp's scheme — activations quantized once to int8 per block (see
//     ggml_matmul.cc), exact integer dots; the fastest, but each matmul carries the int8 noise
//     of its activations (NMSE ~3e-5, 0.5 % relative — llama.cpp's own level; its Q8_0 / Q8_K
//     activations are no finer), which over the 126 matmuls of Gemma-3-270M moves logits by
//     up to ~0.65 and flips greedy picks (teacher-forced top-1 vs transformers 96 %).
// All are batch invariant and give the same bits on every ISA level. Default from the
// environment DFL_GGML_ACT=int8x2|int8|fp32; not thread-safe against running kernels.
// Under kInt8 the greedy screen (matmul_argmax) runs where a 6-bit plane stands in for the head:
// y is the q1 half itself, so it bounds the plane's error alone and finishes the candidates' y1.
// The command line's --ggml-act sets the mode (tools/cli/run_common.h).
enum class GgmlActivations { kFp32, kInt8, kInt8x2 };
void set_ggml_activations(GgmlActivations a);
GgmlActivations ggml_activations();
// "int8x2" | "int8" | "fp32" ↔ the mode; false for any other name.
bool ggml_activations_from_name(const std::string& name, GgmlActivations* out);
const char* ggml_activations_name(GgmlActivations a);

// Dequantizes rows [row0, row0 + n_rows) of `w` (any dtype weight_at supports, including the
// GGML block types and kPackedQ8) to fp32: out[r * n_in + k]. For embedding lookups; exact
// (the same values as ref::weight_at).
void dequantize_rows(const WeightMatrix& w, int64_t row0, int64_t n_rows, float* out);

// Scalar references with the same contracts (the oracle for tests).
namespace ref {
void matmul(const float* x, int64_t n_rows, const WeightMatrix& w, float* y);
void rms_norm(const float* x, const float* w, int64_t n_rows, int64_t dim, float eps, float* y);
void silu_mul(const float* gate, const float* up, int64_t n, float* out);
// gelu_tanh_mul and softcap in double (the literal formulas; gelu via the identity
// 0.5·(1 + tanh u) = 1 / (1 + e^(-2u)), exact in real numbers, cancellation-free), rounded once.
void gelu_tanh_mul(const float* gate, const float* up, int64_t n, float* out);
void softcap(float* x, int64_t n, float cap);
void rope_neox(float* x, int64_t n_rows, int64_t row_stride, int64_t n_heads, int64_t head_dim,
               int64_t n_rot, const float* cos, const float* sin);
void attention(const float* q, const int32_t* q_pos, int64_t n_q, const float* k, const float* v,
               const int32_t* k_pos, int64_t n_kv, const AttnParams& p, float* out);
void attention(const float* q, const int32_t* q_pos, int64_t n_q, const KvPages& kv,
               const AttnParams& p, float* out);
// Dequantizes one weight element (any supported dtype, including F8 with block scales).
float weight_at(const WeightMatrix& w, int64_t row, int64_t col);
}  // namespace ref

}  // namespace dfl
