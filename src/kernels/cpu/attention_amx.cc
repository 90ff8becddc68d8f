// The bf16 prefill attention's AMX engine (the algorithm, the packing and the engine contract:
// cpu/attention_bf16_prefill.h): S = Q·Kᵀ as two fp32 accumulator tiles (tdpbf16ps over the
// d_qk chunks), P·V as one tdpbf16ps per 16 value dims.
#include <immintrin.h>

#include "kernels/cpu/amx_tiles.h"
#include "kernels/cpu/attention_bf16_prefill.h"

namespace dfl::cpu::amx {

namespace {

using bf16_attention::kTile;
using bf16_attention::update_o;

struct AmxEngine {
  static void begin() { configure_tiles(); }
  static void end() { _tile_release(); }

  static void scores(const uint16_t* qb, int64_t Dp, const uint16_t* k0, const uint16_t* k1,
                     int64_t dcp, const uint32_t* /*vis*/, float* sb) {
    _tile_zero(4);
    _tile_zero(5);
    for (int64_t dc = 0; dc < dcp; ++dc) {
      _tile_loadd(0, qb + dc * 32, Dp * 2);
      _tile_loadd(1, k0 + dc * kTile, 64);
      _tile_loadd(2, k1 + dc * kTile, 64);
      _tile_dpbf16ps(4, 0, 1);
      _tile_dpbf16ps(5, 0, 2);
    }
    _tile_stored(4, sb, 128);
    _tile_stored(5, sb + 16, 128);
  }

  static void accumulate(const uint16_t* pb, const uint16_t* vt, int64_t nvc,
                         const uint32_t* /*vis*/, bool rescale, const float* corr, float* o,
                         float* tb) {
    _tile_loadd(7, pb, 64);
    for (int64_t vc = 0; vc < nvc; ++vc) {
      _tile_zero(6);
      _tile_loadd(3, vt + vc * kTile, 64);
      _tile_dpbf16ps(6, 7, 3);
      _tile_stored(6, tb, 64);
      for (int r = 0; r < bf16_attention::kQT; ++r)
        update_o(o + (r * nvc + vc) * 16, _mm512_load_ps(tb + r * 16), rescale, corr[r]);
    }
  }
};

}  // namespace

void attention(const float* q, const int32_t* q_pos, int64_t n_q, const KvPages& kv,
               const AttnParams& p, float* out, ThreadPool& pool, float* work,
               int32_t* pos_work) {
  bf16_attention::run<AmxEngine>(q, q_pos, n_q, kv, p, out, pool, work, pos_work);
}

}  // namespace dfl::cpu::amx
