// Internal helper shared by the AMX kernel files (*_amx.cc only: static inline in an anonymous
// namespace, so no AMX code can leak into a symbol baseline code links against).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace dfl::cpu::amx {
namespace {

// Palette 1 with tile t of rows[t] rows × colsb[t] bytes (t < 8). Call once per thread before
// its tile work; _tile_release() after.
static inline void configure_tiles(const uint8_t (&rows)[8], const uint16_t (&colsb)[8]) {
  struct alignas(64) TileConfig {
    uint8_t palette_id;
    uint8_t start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
  } c{};
  c.palette_id = 1;
  for (int t = 0; t < 8; ++t) {
    c.rows[t] = rows[t];
    c.colsb[t] = colsb[t];
  }
  _tile_loadconfig(&c);
}

// All eight tiles at their full 16 rows × 64 bytes (kernels that handle edges by zero padding).
static inline void configure_tiles() {
  configure_tiles({16, 16, 16, 16, 16, 16, 16, 16}, {64, 64, 64, 64, 64, 64, 64, 64});
}

}  // namespace
}  // namespace dfl::cpu::amx
