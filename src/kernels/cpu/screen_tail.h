// The scalar steps of ops::matmul_argmax's screen pass (cpu_kernels.h screen_lower_max /
// screen_candidates / screen_row) that every ISA form shares: one output's half-width, the
// outputs past the last whole vector, and screen_row's final filter. `static inline`: each
// ISA file gets its own copy, compiled with its own flags (no cross-ISA symbol merging).
#pragma once

#include <cstdint>

namespace dfl::cpu::screen_tail {

// The bound half-width of one output: bound·R + bound2·R2 + |y1|·rel (the vector forms do the
// same operations in the same order).
static inline float half_width(float y, float b, float R, float b2, float R2, float rel) {
  return __builtin_fmaf(b2, R2, b * R) + __builtin_fabsf(y) * rel;
}

// Outputs [n0, V): their lower ends raised into *l, and *bad when one is huge or NaN.
static inline void lower_max(const float* y1, const float* bound, const float* bound2, int64_t n0, int64_t V,
                             float R, float R2, float rel, float huge, float* l, bool* bad) {
  for (int64_t n = n0; n < V; ++n) {
    *bad |= !(__builtin_fabsf(y1[n]) <= huge);
    const float lo = y1[n] - half_width(y1[n], bound[n], R, bound2[n], R2, rel);
    *l = lo > *l ? lo : *l;
  }
}

// Outputs [n0, V) whose upper end reaches L appended to idx[count..]; the new count, or −1 past cap.
static inline int64_t candidates(const float* y1, const float* bound, const float* bound2, int64_t n0, int64_t V,
                                 float R, float R2, float rel, float L, int32_t* idx, int64_t count, int64_t cap) {
  for (int64_t n = n0; n < V; ++n) {
    const float up = y1[n] + half_width(y1[n], bound[n], R, bound2[n], R2, rel);
    if (!(up >= L)) continue;
    if (count + 1 > cap) return -1;
    idx[count++] = static_cast<int32_t>(n);
  }
  return count;
}

// screen_row's end: of the count outputs kept against the running threshold (idx, their upper
// ends hi), those whose upper end reaches the final L, then the tail [nv, V): the count, or −1.
static inline int64_t keep(const float* y1, const float* bound, const float* bound2, int64_t nv, int64_t V,
                           float R, float R2, float rel, float L, int32_t* idx, const float* hi, int64_t count,
                           int64_t cap) {
  int64_t kept = 0;
  for (int64_t i = 0; i < count; ++i)
    if (hi[i] >= L) idx[kept++] = idx[i];
  return candidates(y1, bound, bound2, nv, V, R, R2, rel, L, idx, kept, cap);
}

}  // namespace dfl::cpu::screen_tail
