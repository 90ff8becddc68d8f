// Internal helper shared by the AMX kernel files (*_amx.cc only: static inline in an anonymous
// namespace, so no AMX code can leak into a symbol baseline code links against).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace dfl::cpu::amx {
namespace {

// Palette 1 with all eight tiles at their full 16 rows × 64 bytes: every AMX kernel here uses
// only whole tiles (zero padding handles edges). Call once per thread before its tile work;
// _tile_release() after.
static inline void configure_tiles() {
  struct alignas(64) TileConfig {
    uint8_t palette_id;
    uint8_t start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
  } c{};
  c.palette_id = 1;
  for (int t = 0; t < 8; ++t) {
    c.rows[t] = 16;
    c.colsb[t] = 64;
  }
  _tile_loadconfig(&c);
}

}  // namespace
}  // namespace dfl::cpu::amx
