// THE visibility rule of attention — the one place it is written.
//
// A key at absolute position k is visible to a query at absolute position q iff
//     (left  < 0 || q - k <= left)   and   (right < 0 || k - q <= right)
// with (left, right) the FlashAttention-style window pair, -1 = unbounded:
//   full causal            (-1,  0)      full non-causal (DFlash block)   (-1, -1)
//   causal sliding W       (W-1, 0)      non-causal sliding W             (W-1, W-1)
// The per-layer pair is resolved once from the config (src/attention/attn_spec.h) and every
// kernel, plan and test reads that stored pair. Empty cache slots carry k = kEmptySlot.
#pragma once

#include <cstdint>

namespace dfl {

constexpr int32_t kEmptySlot = -1;

struct Window {
  int32_t left = -1;
  int32_t right = 0;
  bool operator==(const Window&) const = default;
};

inline bool kv_visible(int32_t q, int32_t k, Window w) {
  if (k < 0) return false;  // empty slot
  if (w.left >= 0 && q - k > w.left) return false;
  if (w.right >= 0 && k - q > w.right) return false;
  return true;
}

}  // namespace dfl
