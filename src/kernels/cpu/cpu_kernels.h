// Internal: per-ISA kernel entry points behind ops.h. ops.cc picks one by cpu_isa().
//
// Rules for the ISA files (compiled with -mavx512* / -mavx2 via cmake/isa.cmake): everything
// they define lives in an anonymous namespace except the entry points below, and they use no
// inline functions or templates shared with baseline code (no std::vector, std::min, dtype.h
// helpers...). Otherwise the linker may keep an AVX-512 copy of a shared inline function and
// the binary would crash on an AVX2 machine (tests/kernels/test_isa_isolation.cc checks the
// shipped binary for such a function). Scratch memory comes from the caller.
#pragma once

#include <cstdint>

#include "core/cpu_features.h"
#include "core/threadpool.h"
#include "kernels/ops.h"

namespace dfl::cpu {

// The GGML block dtypes the AVX-512 and AVX2 int8 kernels run (avx512:: / avx2:: matmul_ggml,
// ggml_row_dot; the AVX-512 fp32-activation kernel too); the others take the portable kernel.
// Defined in kernels/ggml_matmul.cc, built without ISA flags (callable before any CPUID check).
bool ggml_supported(int dtype);

// Row stride (floats) of the fp32 activation copies the packed BF16 kernels' FMA form reads
// (avx512::matmul_bf16_packed with fma, avx2::matmul_bf16_packed): K rounded up to 32, plus one
// cache line, so that the rows of a row block (read together, a broadcast each per k pair) do not
// all map to one L1 set when Kp·4 bytes is a multiple of 4 KiB. (static: each file its own copy.)
static constexpr int64_t fma_x_stride(int64_t K) { return (K + 31) / 32 * 32 + 16; }

// Activations quantized for the Q8 kernels (see ops.h Q8 format): per row, per block of
// kQ8Block: int8 values, fp32 scale, and the offset correction c = -128 * sum(xq) (the weights
// are stored as u8 = q + 128; c is the start value of each output's int32 block dot product).
struct Q8Act {
  const int8_t* q = nullptr;  // [n_rows, n_blocks * kQ8Block]
  const float* d = nullptr;   // [n_rows, n_blocks]
  const int32_t* c = nullptr; // [n_rows, n_blocks]
  int64_t n_blocks = 0;
};

// Activations quantized for the GGML block kernels (kernels/ggml_matmul.cc): rows of K int8
// (row stride K + 256, the padding zeroed), scales per activation block (32 or 256 elements by
// weight type), sums of q per 16 and per 32 elements.
struct GgmlAct {
  const int8_t* q = nullptr;    // [M, K + 256]
  const float* d = nullptr;     // [M, K / ab]
  const int32_t* s16 = nullptr; // [M, K / 16]
  const int32_t* s32 = nullptr; // [M, K / 32]
  int64_t K = 0;
  // int8x2 (kernels/ggml_matmul.cc): rows [pair, 2·pair) are the residual halves of rows
  // [0, pair); their results are ADDED to y rows m − pair (y = y(q) + y(q2), one fp32 add)
  // instead of stored. Needs each output's rows written in increasing row order by one thread
  // (every kernel does: a tile's rows after one another), so y(q) is there before y(q2) adds.
  // 0: plain rows.
  int64_t pair = 0;
};

// y[m][n] = v, or under a.pair the residual row's y[m − pair][n] += v.
inline void put_y(float* y, int64_t ldy, int64_t m, int64_t n, float v, int64_t pair) {
  if (pair && m >= pair)
    y[(m - pair) * ldy + n] += v;
  else
    y[m * ldy + n] = v;
}
// The activation rows of one 32-element-block kernel call, block-major (built once per call,
// shared by the threads): for block b, row m: q [b][m][32] int8 (the block's values), nc [b][m]
// = corr_mul · (Σ of those 32 values), dx [b][m] = dx_mul · the block scale. A row group of the
// dot kernels then reads one linear stream through one pointer (GgmlAct's rows lie K + 256 apart, their
// sums and scales in three more strided arrays: that addressing had cost the 16-row kernel ~30 %
// on AMD Zen 5). q32_panel (ggml_matmul.cc) fills the calling thread's buffers.
struct Q32Panel {
  const int8_t* q;
  const int32_t* nc;
  const float* dx;
};
Q32Panel q32_panel(const GgmlAct& a, int64_t M, int32_t corr_mul, float dx_mul);

// Activation rows a GGML kernel call handles at once (each weight block is unpacked once per
// chunk). 32: a 16-token verify block under int8x2 (2 int8 rows per token) streams the weights
// once (16 had it stream them twice).
constexpr int64_t kGgmlRowChunk = 32;
// Bytes of one (16-output tile, 32-block) of a Q8_0 head's 6-bit screen plane
// (kernels/ggml_argmax.cc): nibbles 256, high bits 128, f16 d 32.
constexpr int64_t kQ8PlaneBlockBytes = 256 + 128 + 32;
// Bytes of one (16-output tile, 256-superblock) of the kPackedQ4K16 layout.
constexpr int64_t kQ4K16SuperBytes = 2048 + 128 + 128 + 64 + 64;
// ... of the kPackedQ6K16 layout (ql 2048, qh 1024, sc 256, d 64).
constexpr int64_t kQ6K16SuperBytes = 2048 + 1024 + 256 + 64;

namespace avx512 {
// ops::matmul_argmax's screen (kernels/ggml_argmax.cc): with the half-width h[n] = bound[n]·R +
// bound2[n]·R2 + |y1[n]|·rel (no bound2: that term is 0), max over n of y1[n] − h[n], *bad when
// some |y1[n]| > huge or is NaN; the indices n with y1[n] + h[n] ≥ L in increasing order into
// idx, their count, or −1 past cap of them.
float screen_lower_max(const float* y1, const float* bound, int64_t V, float R, float rel,
                       float huge, bool* bad, const float* bound2 = nullptr, float R2 = 0);
int64_t screen_candidates(const float* y1, const float* bound, int64_t V, float R, float rel,
                          float L, int32_t* idx, int64_t cap, const float* bound2 = nullptr,
                          float R2 = 0);
// Both in one pass over the row: the candidates screen_candidates gives for the L
// screen_lower_max gives (the same indices, in order) into idx, their count; −1 when *bad or past
// cap of them. hi: scratch of cap floats. Reads y1 once instead of twice: what it keeps against
// a running lower max (a superset) is filtered at the end; past cap of those it finishes as
// screen_candidates.
int64_t screen_row(const float* y1, const float* bound, int64_t V, float R, float rel, float huge,
                   bool* bad, int32_t* idx, float* hi, int64_t cap, const float* bound2 = nullptr,
                   float R2 = 0);
// One output of a Q8_0 row (nb 34-byte blocks) for an int8 activation row (q, per-block dx): the
// bits of ggml_portable_dot.
float q8_0_row_dot(const uint8_t* row, const int8_t* q, const float* dx, int64_t nb);
// The screen's ŷ1 on the 6-bit plane of a Q8_0 head (kernels/ggml_argmax.cc, the plane layout
// there): y [M, n_out] for the 16-output tiles [t0, t1), from M ≤ kGgmlRowChunk int8 rows
// given block-major: q [nb][M][32], nc [nb][M] = −32·(Σ of the block's 32 q), dx4 [nb][M] = the
// block scale · 4, c [nb][M] = fl(1.5 · the block scale · Σ q).
void q8_0_plane_tiles(const int8_t* q, const int32_t* nc, const float* dx4, const float* c, int64_t M,
                      const uint8_t* plane, int64_t nb, int64_t n_out, float* y, int64_t t0,
                      int64_t t1);
// Building a plane from exact fp32 values (kernels/ggml_argmax.cc, build_value_plane), one
// 32-block of one output w[32] (finite): its largest |w|, then for the plane scale d16 (fp16,
// d·127 ≥ that) u[k] = (q >> 2) + 32 with q = the rounding of w / d clamped to ±127, and
// Σ (w − ŵ)², Σ w², Σ ŵ² (ŵ = d·(4h + 1.5), in double) added to sums[0], [1], [2].
float plane_block_absmax(const float* w);
void plane_block_values(const float* w, uint16_t d16, uint8_t* u, double* sums);
// GGML block matmul for M <= kGgmlRowChunk rows, the dtypes cpu::ggml_supported names.
void matmul_ggml(const GgmlAct& a, int64_t M, const WeightMatrix& w, float* y, ThreadPool& pool);
// Output n of a supported GGML weight for the one activation row of `a` (its row 0, pair 0),
// on the calling thread: the bits of matmul_ggml (the screen's exact finish).
float ggml_row_dot(const GgmlAct& a, const WeightMatrix& w, int64_t n);
// The int8 activation quantization of the GGML kernels (cpu/ggml_quant_avx512.cc): the bits of
// the scalar quantize_act of kernels/ggml_matmul.cc. x: [M, K]; q: [M, K + 256] (the 256 pad
// bytes zeroed); d: [M, K / ab]; s16: [M, K / 16]; s32: [M, K / 32]; ab = 32 or 256.
void quantize_ggml_act(const float* x, int64_t M, int64_t K, int64_t ab, int8_t* q, float* d,
                       int32_t* s16, int32_t* s32);
// The int8x2 residual r = x − float(q)·d (one multiply, one subtract), r: [M, K].
void ggml_act_residual(const float* x, const int8_t* q, const float* d, int64_t M, int64_t K,
                       int64_t ab, float* r);
// fp32-activation GGML matmul (GgmlActivations::kFp32); rowbuf: n_threads × K floats.
void matmul_ggml_f32(const float* x, int64_t M, const WeightMatrix& w, float* y, ThreadPool& pool,
                     float* rowbuf);
// Q6_K repacked by prepack_weight (kPackedQ6K16; layout in cpu/ggml_avx512.cc).
void matmul_q6k16(const GgmlAct& a, int64_t M, const WeightMatrix& w, float* y, ThreadPool& pool);
// Q8_0 / Q5_0 / Q4_0 repacked by prepack_weight (kPackedQ32x16; layout in cpu/ggml_avx512.cc).
void matmul_q32x16(const GgmlAct& a, int64_t M, const WeightMatrix& w, float* y, ThreadPool& pool);
// Q4_K repacked by prepack_weight (kPackedQ4K16; layout in cpu/ggml_avx512.cc).
void matmul_q4k16(const GgmlAct& a, int64_t M, const WeightMatrix& w, float* y, ThreadPool& pool);
// ys[i] := the matmul of ws[i] (i < n ≤ kPackedManyMax) on the same activations a, as one pool job over all
// their tiles (the same bits as matmul_q32x16 / q4k16 / q6k16 on each): the weights of one input
// (q, k, v; gate, up) take one wait instead of n. False, and nothing computed, unless every
// weight is in one of those three packed layouts (all of one activation block size, a.K).
constexpr int kPackedManyMax = 8;
bool matmul_packed_many(const GgmlAct& a, int64_t M, const WeightMatrix* const* ws, float* const* ys,
                        int n, ThreadPool& pool);
// x: [M, K] fp32; xb: scratch for M * round_up(K, 32) bf16.
void matmul_bf16(const float* x, int64_t M, const WeightMatrix& w, float* y, ThreadPool& pool,
                 uint16_t* xb);
// BF16 weights prepacked in the kPackedAmxBf16 layout, on AVX-512 BF16 without AMX (lanes =
// outputs; batch invariant; cpu/matmul_avx512.cc). Same arguments as matmul_bf16, and fma: the
// products on fp32 FMA instead of vdpbf16ps (same per-output sequence as Intel's vdpbf16ps;
// xb then holds M * fma_x_stride(K) floats).
void matmul_bf16_packed(const float* x, int64_t M, const WeightMatrix& w, float* y, ThreadPool& pool,
                        uint16_t* xb, bool fma);
// The same for 1..4 such weights of one input (equal n_in): ys[i] gets exactly what
// matmul_bf16_packed gives for ws[i]; x is converted once and all their tiles run as one pool job.
void matmul_bf16_packed_many(const float* x, int64_t M, const WeightMatrix* const* ws, float* const* ys,
                             int n, ThreadPool& pool, uint16_t* xb, bool fma);
// 1..4 F16 weights of one input (equal n_in) in the kPackedF16x16 layout (ops.h): each output
// one fp32 FMA chain over k in order, x in fp32 (batch invariant), all their tiles one pool job.
// xf: scratch for M * fma_x_stride(K) floats.
void matmul_f16_packed_many(const float* x, int64_t M, const WeightMatrix* const* ws, float* const* ys, int n,
                            ThreadPool& pool, float* xf);
// Rows x [M, K] fp32 × a kPackedAmxBf16 or kPackedF16x16 weight on listed outputs, the same bits
// as matmul_bf16_packed (same fma) / matmul_f16_packed_many give there, read from the row-major
// weights (w.data, [n_out, n_in] 16-bit, which a packed weight keeps; fma: BF16 only): for each
// row r < M (≤ kGgmlRowChunk), y[r][n] (y is [M, n_out]) for the counts[r] outputs
// n = idx[r·cap + i] (increasing; counts[r] ≤ 0: none) —
// the greedy screen's exact finish (kernels/ggml_argmax.cc). Sixteen of one row's outputs at a
// time are gathered into one packed tile (16 weight rows transposed) and run through
// the packed kernels' micro-kernel, so a scattered candidate costs its own weight row (2·n_in
// bytes) instead of its 16-output tile (32·n_in). Other outputs of y are left as they are.
void packed16_rows_finish(const float* x, int64_t M, const WeightMatrix& w, const int32_t* idx,
                          const int64_t* counts, int64_t cap, bool fma, float* y, ThreadPool& pool);
// F32, F16 and F8_E4M3 (+ block scales) weights, dequantized to fp32 in registers.
void matmul_fp32w(const float* x, int64_t M, const WeightMatrix& w, float* y, ThreadPool& pool);
void matmul_q8(const Q8Act& xq, int64_t M, const WeightMatrix& w, float* y, ThreadPool& pool);
void quantize_act_q8(const float* x, int64_t M, int64_t K, int8_t* q, float* d, int32_t* c);
// work: attention_work_floats(p, n_q, kv.n_slots, pool.n_threads()) floats (per-thread tile
// scratch and, for long query runs, one kv head's K/V copied contiguous); pos_work: kv.n_slots
// int32 (the positions gathered contiguous when the K/V copy is made).
int64_t attention_work_floats(const AttnParams& p, int64_t n_q, int64_t n_kv, int n_threads,
                              KvDtype dtype);
void attention(const float* q, const int32_t* q_pos, int64_t n_q, const KvPages& kv,
               const AttnParams& p, float* out, ThreadPool& pool, float* work,
               int32_t* pos_work);
// The bf16 prefill attention (ops.h: n_q >= kPrefillAttentionMinQueries) on AVX-512 BF16 dot
// products, for machines without AMX (cpu/attention_bf16_avx512.cc). work:
// bf16_prefill_attention_work_floats(p, kv.n_slots, pool.n_threads()) floats, for this engine
// and amx::attention alike (one scratch layout: cpu/attention_bf16_prefill.h); pos_work:
// kv.n_slots int32 (positions gathered contiguous); fma: the pair products on fp32 FMA instead
// of vdpbf16ps (ops.h Bf16Dot; the same bits on Intel).
int64_t bf16_prefill_attention_work_floats(const AttnParams& p, int64_t n_kv, int n_threads);
void attention_bf16(const float* q, const int32_t* q_pos, int64_t n_q, const KvPages& kv,
                    const AttnParams& p, float* out, ThreadPool& pool, float* work,
                    int32_t* pos_work, bool fma);
void rms_norm(const float* x, const float* w, int64_t n_rows, int64_t dim, float eps, float* y);
void add_rms_norm(float* res, const float* x, const float* w, int64_t n_rows, int64_t dim,
                  float eps, float* y);
void silu_mul(const float* gate, const float* up, int64_t n, float* out);
// ops::argmax's rule (first maximum; NaN never wins; a NaN at 0 stays), vectorized.
int64_t argmax(const float* x, int64_t n);
void add_inplace(float* y, const float* x, int64_t n);
void gelu_tanh_mul(const float* gate, const float* up, int64_t n, float* out);
void softcap(float* x, int64_t n, float cap);
void scale_inplace(float* x, int64_t n, float s);
void to_bf16(const float* x, int64_t n, uint16_t* y, int64_t ys);
void rope_neox(float* x, int64_t n_rows, int64_t row_stride, int64_t n_heads, int64_t head_dim,
               int64_t n_rot, const float* cos, const float* sin);
// ops::delta_rule_step for dv % 16 == 0.
void delta_rule_step(const float* s_in, float* s_out, const float* k, const float* q, const float* v,
                     float decay, float beta, int32_t dk, int32_t dv, float* o);
}  // namespace avx512

namespace amx {
// Packs n-tiles [t_begin, t_end) of a BF16 weight into the kPackedAmxBf16 layout.
void pack_bf16(const WeightMatrix& w, uint16_t* dst, int64_t t_begin, int64_t t_end);
// w.packed in kPackedAmxBf16 layout; xb: scratch for round_up(M, 16) * round_up(K, 32) bf16;
// cb: for M >= kAmxBlockedMinRows, pool.n_threads() * matmul_bf16_block_floats(M) fp32, 64-byte
// aligned (else unused). Only call when amx_usable().
constexpr int64_t kAmxBlockedMinRows = 64;
int64_t matmul_bf16_block_floats(int64_t M);
void matmul_bf16(const float* x, int64_t M, const WeightMatrix& w, float* y, ThreadPool& pool,
                 uint16_t* xb, float* cb);
// Q8 (ops.h kPackedQ8) on AMX-INT8 tiles, bit-identical to avx512::matmul_q8. xq.q must have
// round_up(M, 16) readable rows (rows past M are read, never used). Only call when
// amx_usable() && cpu_features().amx_int8.
void matmul_q8(const Q8Act& xq, int64_t M, const WeightMatrix& w, float* y, ThreadPool& pool);
// GGML block weights repacked by prepack_weight on AMX-INT8 tiles, bit-identical to the
// avx512:: kernels of the same layout. M ≤ kGgmlAmxMaxRows activation rows; a.q must have
// round_up(M, 16) readable rows, those past M zeroed. Only call when amx_usable() &&
// cpu_features().amx_int8. kPackedQ32x16 (Q8_0 / Q5_0 / Q4_0): cpu/ggml_amx.cc.
constexpr int64_t kGgmlAmxMaxRows = 64;
void matmul_q32x16(const GgmlAct& a, int64_t M, const WeightMatrix& w, float* y, ThreadPool& pool);
// kPackedQ4K16 / kPackedQ6K16 (Q4_K / Q6_K): cpu/kquant_ggml_amx.cc (the pad rows are never
// used; a.d valid for rows < M; more than kGgmlAmxMaxRows rows run as chunks of that many).
void matmul_q4k16(const GgmlAct& a, int64_t M, const WeightMatrix& w, float* y, ThreadPool& pool);
void matmul_q6k16(const GgmlAct& a, int64_t M, const WeightMatrix& w, float* y, ThreadPool& pool);
// The bf16 prefill attention (ops.h: n_q >= kPrefillAttentionMinQueries) on AMX tiles
// (cpu/attention_amx.cc; the algorithm both engines share: cpu/attention_bf16_prefill.h).
// work / pos_work: as for avx512::attention_bf16. Only call when amx_usable().
void attention(const float* q, const int32_t* q_pos, int64_t n_q, const KvPages& kv,
               const AttnParams& p, float* out, ThreadPool& pool, float* work,
               int32_t* pos_work);
}  // namespace amx

namespace avx2 {
// x: [M, K] fp32; xp: scratch for M * round_up(K, 8) fp32 (zero-padded copy of x); wbuf:
// fp32w_widen_floats(M, w, pool.n_threads()) fp32 (the widened weight rows; 0: unused).
int64_t fp32w_widen_floats(int64_t M, const WeightMatrix& w, int n_threads);
void matmul_fp32w(const float* x, int64_t M, const WeightMatrix& w, float* y, ThreadPool& pool,
                  float* xp, float* wbuf);
// 1..4 BF16 weights of one input (equal n_in) prepacked in the kPackedAmxBf16 layout: ys[i] =
// x · ws[i]ᵀ with the bits of avx512::matmul_bf16_packed's FMA form (cpu/bf16_packed_avx2.cc),
// all their tiles one pool job. xf: scratch for M * fma_x_stride(K) floats.
void matmul_bf16_packed_many(const float* x, int64_t M, const WeightMatrix* const* ws, float* const* ys,
                             int n, ThreadPool& pool, float* xf);
// The same for F16 weights in the kPackedF16x16 layout (the bits of avx512::matmul_f16_packed_many).
void matmul_f16_packed_many(const float* x, int64_t M, const WeightMatrix* const* ws, float* const* ys,
                            int n, ThreadPool& pool, float* xf);
// The GGML int8 kernels and activation quantization on AVX2 (cpu/ggml_rows_avx2.cc: the original
// blocks; cpu/ggml_avx2.cc: the packed tiles; cpu/ggml_quant_avx2.cc): the contracts
// and bits of the avx512:: functions of the same names (matmul_ggml on the original blocks,
// matmul_q32x16 / q4k16 / q6k16 on the packed layouts).
void matmul_ggml(const GgmlAct& a, int64_t M, const WeightMatrix& w, float* y, ThreadPool& pool);
void matmul_q32x16(const GgmlAct& a, int64_t M, const WeightMatrix& w, float* y, ThreadPool& pool);
void matmul_q4k16(const GgmlAct& a, int64_t M, const WeightMatrix& w, float* y, ThreadPool& pool);
void matmul_q6k16(const GgmlAct& a, int64_t M, const WeightMatrix& w, float* y, ThreadPool& pool);
void quantize_ggml_act(const float* x, int64_t M, int64_t K, int64_t ab, int8_t* q, float* d,
                       int32_t* s16, int32_t* s32);
void ggml_act_residual(const float* x, const int8_t* q, const float* d, int64_t M, int64_t K,
                       int64_t ab, float* r);
// Q8 (ops.h kPackedQ8) and its activation quantization, the bits of the avx512:: ones
// (cpu/q8_avx2.cc).
void matmul_q8(const Q8Act& xq, int64_t M, const WeightMatrix& w, float* y, ThreadPool& pool);
void quantize_act_q8(const float* x, int64_t M, int64_t K, int8_t* q, float* d, int32_t* c);
// Attention over fp32 or bf16 KV pages (cpu/attention_avx2.cc: tiles of up to 16 (query, head)
// rows of one GQA group over blocks of 16 slots read in place, online softmax with exp8; batch,
// paging and thread invariant; bf16 widened exactly, so the bits of the fp32 pages holding the
// same values). work: attention_work_floats(p, pool.n_threads()) floats.
int64_t attention_work_floats(const AttnParams& p, int n_threads);
void attention(const float* q, const int32_t* q_pos, int64_t n_q, const KvPages& kv,
               const AttnParams& p, float* out, ThreadPool& pool, float* work);
// The prefill attention (ops.h: n_q >= kPrefillAttentionMinQueries) on AVX2: fp32, tiles of 16
// (query, head) rows over one kv head's packed slots at a time (K transposed to slot lanes;
// cpu/attention_prefill_avx2.cc).
// work: prefill_attention_work_floats(p, kv.n_slots, pool.n_threads()) floats; pos_work:
// kv.n_slots rounded up to 16 ints.
int64_t prefill_attention_work_floats(const AttnParams& p, int64_t n_kv, int n_threads);
void attention_prefill(const float* q, const int32_t* q_pos, int64_t n_q, const KvPages& kv,
                       const AttnParams& p, float* out, ThreadPool& pool, float* work, int32_t* pos_work);
// The element-wise ops of the avx512:: names above on 8 lanes (cpu/elementwise_avx2.cc).
void rms_norm(const float* x, const float* w, int64_t n_rows, int64_t dim, float eps, float* y);
void add_rms_norm(float* res, const float* x, const float* w, int64_t n_rows, int64_t dim,
                  float eps, float* y);
void silu_mul(const float* gate, const float* up, int64_t n, float* out);
void add_inplace(float* y, const float* x, int64_t n);
void gelu_tanh_mul(const float* gate, const float* up, int64_t n, float* out);
void softcap(float* x, int64_t n, float cap);
void scale_inplace(float* x, int64_t n, float s);
void rope_neox(float* x, int64_t n_rows, int64_t row_stride, int64_t n_heads, int64_t head_dim,
               int64_t n_rot, const float* cos, const float* sin);
// ops::matmul_argmax's screen on AVX2 (cpu/argmax_avx2.cc, cpu/argmax_plane_avx2.cc): the
// contracts of the avx512:: functions of the same names; q8_0_plane_tiles gives their bits.
float screen_lower_max(const float* y1, const float* bound, int64_t V, float R, float rel,
                       float huge, bool* bad, const float* bound2 = nullptr, float R2 = 0);
int64_t screen_candidates(const float* y1, const float* bound, int64_t V, float R, float rel,
                          float L, int32_t* idx, int64_t cap, const float* bound2 = nullptr,
                          float R2 = 0);
int64_t screen_row(const float* y1, const float* bound, int64_t V, float R, float rel, float huge,
                   bool* bad, int32_t* idx, float* hi, int64_t cap, const float* bound2 = nullptr,
                   float R2 = 0);
void q8_0_plane_tiles(const int8_t* q, const int32_t* nc, const float* dx4, const float* c, int64_t M,
                      const uint8_t* plane, int64_t nb, int64_t n_out, float* y, int64_t t0,
                      int64_t t1);
float plane_block_absmax(const float* w);
void plane_block_values(const float* w, uint16_t d16, uint8_t* u, double* sums);
// Output n of a supported GGML weight for the one activation row of `a` (its row 0, pair 0), on
// the calling thread: the bits of matmul_ggml (cpu/ggml_rows_avx2.cc).
float ggml_row_dot(const GgmlAct& a, const WeightMatrix& w, int64_t n);
// avx512::packed16_rows_finish on AVX2 (cpu/packed_fma_avx2.cc): the listed outputs of a
// kPackedAmxBf16 / kPackedF16x16 weight with the bits of matmul_bf16_packed_many /
// matmul_f16_packed_many (the FMA form), from 16 candidates' own rows gathered into one tile.
void packed16_rows_finish(const float* x, int64_t M, const WeightMatrix& w, const int32_t* idx,
                          const int64_t* counts, int64_t cap, float* y, ThreadPool& pool);
}  // namespace avx2

namespace avx2_vnni {
// avx2::q8_0_plane_tiles on vpdpbusd ymm (cpu/argmax_plane_avxvnni.cc): the same bits.
void q8_0_plane_tiles(const int8_t* q, const int32_t* nc, const float* dx4, const float* c, int64_t M,
                      const uint8_t* plane, int64_t nb, int64_t n_out, float* y, int64_t t0,
                      int64_t t1);
// The avx2:: packed-layout kernels with their integer dots on AVX-VNNI's vpdpbusd ymm
// (cpu/ggml_avxvnni.cc compiles cpu/ggml_avx2.cc again): the same bits. Only where
// avx_vnni_usable().
void matmul_q32x16(const GgmlAct& a, int64_t M, const WeightMatrix& w, float* y, ThreadPool& pool);
void matmul_q4k16(const GgmlAct& a, int64_t M, const WeightMatrix& w, float* y, ThreadPool& pool);
void matmul_q6k16(const GgmlAct& a, int64_t M, const WeightMatrix& w, float* y, ThreadPool& pool);
// avx2::matmul_q8 on vpdpbusd ymm (cpu/q8_avxvnni.cc compiles cpu/q8_avx2.cc again).
void matmul_q8(const Q8Act& xq, int64_t M, const WeightMatrix& w, float* y, ThreadPool& pool);
}  // namespace avx2_vnni

}  // namespace dfl::cpu

namespace dfl::ops {
// Q8 matmul (kernels/q8.cc): quantizes the activations, then runs the kernel of `isa`.
void matmul_q8(const float* x, int64_t n_rows, const WeightMatrix& w, float* y, ThreadPool& pool,
               IsaLevel isa);
// Q4_K → kPackedQ4K16 (kernels/ggml_matmul.cc).
PackedWeight prepack_q4k16(const WeightMatrix& w, ThreadPool* pool);
// Q6_K → kPackedQ6K16 (kernels/ggml_matmul.cc).
PackedWeight prepack_q6k16(const WeightMatrix& w, ThreadPool* pool);
// Q8_0 / Q5_0 / Q4_0 → kPackedQ32x16 (kernels/ggml_matmul.cc).
PackedWeight prepack_q32x16(const WeightMatrix& w, ThreadPool* pool);
// GGML block matmul (kernels/ggml_matmul.cc).
void matmul_ggml(const float* x, int64_t n_rows, const WeightMatrix& w, float* y, ThreadPool& pool,
                 IsaLevel isa);
// Several GGML block weights of one input (ops::matmul_same_input): when they take int8
// activations of one block size and n_in and agree on AMX, x is quantized once per chunk of
// rows for all of them and true is returned (each y the bits matmul_ggml gives); otherwise
// false and nothing is computed.
bool matmul_ggml_same_input(const float* x, int64_t n_rows, const MatmulOut* outs, int n,
                            ThreadPool& pool, IsaLevel isa);
}  // namespace dfl::ops
