// The AMX-INT8 tile-op rates of this machine (bench_amx_tiles.cc times them). Compiled with the
// AMX flags on its own, so no AMX or AVX-512 code reaches the benchmark's main.
#include "amx_tile_probe.h"

#include <immintrin.h>

#include "kernels/cpu/amx_tiles.h"

namespace dfl::bench {
namespace {

alignas(64) int8_t g_a[2][16 * 64];
alignas(64) int8_t g_b[2][16 * 64];
alignas(64) int32_t g_c[2][16 * 16];
alignas(64) float g_scale[2][16], g_dx[2][16];  // two sets: no product is loop-invariant
volatile float g_sink;

// The fp step of one block for 16 rows (cpu/ggml_amx.cc finish()): acc[r] += float(c row r) ·
// (d_w · d_x[r]).
inline void block_epilogue(int s, const int32_t* c, __m512 acc[16]) {
  const __m512 dw = _mm512_load_ps(g_scale[s]);
  for (int r = 0; r < 16; ++r) {
    const __m512 sc = _mm512_mul_ps(dw, _mm512_set1_ps(g_dx[s][r]));
    acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c + 16 * r)), sc, acc[r]);
  }
}

}  // namespace

void amx_tile_probe(AmxProbe kind, int k_bytes, int64_t iters) {
  // A tiles (tmm0/1): 16 rows × k_bytes; B (tmm2/3): k_bytes / 4 rows × 64 bytes; C: 16 × 16 int32.
  const uint8_t kr = static_cast<uint8_t>(k_bytes / 4);
  const uint16_t kb = static_cast<uint16_t>(k_bytes);
  for (int i = 0; i < 16 * 64; ++i) {  // non-zero operands (a probe must not time a shortcut)
    g_a[0][i] = g_a[1][i] = static_cast<int8_t>(i * 37 + 11);
    g_b[0][i] = g_b[1][i] = static_cast<int8_t>(i * 53 - 7);
  }
  for (int i = 0; i < 16; ++i) {
    g_scale[0][i] = g_scale[1][i] = 1e-3f * float(i + 1);
    g_dx[0][i] = g_dx[1][i] = 1e-4f * float(17 - i);
  }
  __m512 acc[16];
  for (auto& a : acc) a = _mm512_setzero_ps();
  cpu::amx::configure_tiles({16, 16, kr, kr, 16, 16, 16, 16}, {kb, kb, 64, 64, 64, 64, 64, 64});
  _tile_loadd(0, g_a[0], 64);
  _tile_loadd(1, g_a[1], 64);
  _tile_loadd(2, g_b[0], 64);
  _tile_loadd(3, g_b[1], 64);
  _tile_zero(4);
  _tile_zero(5);
  _tile_zero(6);
  _tile_zero(7);
  switch (kind) {
    case AmxProbe::kIndependentProducts:  // 4 products into 4 C tiles per iteration
      for (int64_t i = 0; i < iters; i += 4) {
        _tile_dpbssd(4, 0, 2);
        _tile_dpbssd(5, 1, 3);
        _tile_dpbssd(6, 0, 3);
        _tile_dpbssd(7, 1, 2);
      }
      break;
    case AmxProbe::kSharedB:  // two A tiles × the same B into 2 C tiles
      for (int64_t i = 0; i < iters; i += 2) {
        _tile_dpbssd(4, 0, 2);
        _tile_dpbssd(5, 1, 2);
      }
      break;
    case AmxProbe::kSharedA:  // the same A × two B tiles into 2 C tiles
      for (int64_t i = 0; i < iters; i += 2) {
        _tile_dpbssd(4, 0, 2);
        _tile_dpbssd(5, 0, 3);
      }
      break;
    case AmxProbe::kDependentProducts:  // one C tile: each product waits for the last
      for (int64_t i = 0; i < iters; ++i) _tile_dpbssd(4, 0, 2);
      break;
    case AmxProbe::kKernelStep:  // what the GGML kernels do per 32-block: load A, B, zero, product, store C
      for (int64_t i = 0; i < iters; ++i) {
        _tile_loadd(0, g_a[i & 1], 64);
        _tile_loadd(2, g_b[i & 1], 64);
        _tile_zero(4);
        _tile_dpbssd(4, 0, 2);
        _tile_stored(4, g_c[0], 64);
      }
      break;
    case AmxProbe::kEpilogue:
      for (int64_t i = 0; i < iters; ++i) block_epilogue(int(i & 1), g_c[i & 1], acc);
      break;
    case AmxProbe::kStepAndEpilogue:  // two C tiles in turn, as the kernels' step ring
      // Parity P (tiles A = P, B = 2 + P, C = 4 + P; literal tile numbers): the product of this
      // step, the store of the other C tile, the fp step on the C stored the step before.
#define DFL_RING_STEP(P, A, B, C, OTHER_C)         \
  _tile_loadd(A, g_a[P], 64);                      \
  _tile_loadd(B, g_b[P], 64);                      \
  _tile_zero(C);                                   \
  _tile_dpbssd(C, A, B);                           \
  _tile_stored(OTHER_C, g_c[1 - P], 64);           \
  block_epilogue(P, g_c[P], acc);
      for (int64_t i = 0; i < iters; i += 2) {
        DFL_RING_STEP(0, 0, 2, 4, 5)
        DFL_RING_STEP(1, 1, 3, 5, 4)
      }
#undef DFL_RING_STEP
      break;
  }
  float s = 0;
  for (auto& a : acc) s += _mm512_reduce_add_ps(a);
  g_sink = s;
  _tile_release();
}

}  // namespace dfl::bench
