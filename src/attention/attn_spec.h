// Per-layer attention resolution: the seed's `_resolve_layer_attention`, `_dflash_layer_causal`
// and `_maybe_symmetrize_window`, written once. Config parsing calls these; everything
// downstream (KV sizing, the per-step plan, the kernels) reads the stored result.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kernels/visibility.h"

namespace dfl {

enum class AttnKind : uint8_t { kFull, kSliding };

const char* attn_kind_name(AttnKind k);  // "full" | "sliding"

// How many keys a sliding layer keeps: W keys including the query (HF/vLLM), or W+1 (SGLang's
// MiMo reading). A config-level choice so the two can be A/B tested.
enum class WindowEdge : uint8_t { kInclusiveW, kInclusiveWPlus1 };

// The causal form of a layer's window, FlashAttention convention (-1 = unbounded):
//   full → (-1, 0);  sliding of W keys → (W-1, 0)  (or (W, 0) with kInclusiveWPlus1).
Window causal_window(AttnKind kind, int32_t sliding_window, WindowEdge edge = WindowEdge::kInclusiveW);

// `_maybe_symmetrize_window`: a non-causal query set turns (w, 0) into (w, w); (-1, 0) becomes
// (-1, -1); causal windows and already-symmetric windows are returned unchanged.
Window symmetrize_window(Window w, bool causal);

// Inputs of the DFlash drafter resolution, as read from config.json (top level and
// dflash_config, dflash_config first for the DFlash keys).
struct DraftAttnConfig {
  std::optional<std::vector<std::string>> layer_types;  // "full_attention" | "sliding_attention"
  bool use_swa = false;                                  // dflash_config.use_swa
  std::optional<int32_t> swa_window_size;                // dflash_config.swa_window_size
  std::optional<int32_t> sliding_window;                 // top-level sliding_window
  std::optional<bool> is_causal;                         // top-level is_causal
  std::optional<bool> dflash_causal;                     // dflash_config.causal
};

struct ResolvedAttn {
  AttnKind kind = AttnKind::kFull;
  int32_t sliding_window = 0;  // W (keys including the query) when sliding, else 0
  bool causal = false;
  Window window;               // symmetrize_window(causal_window(kind, W), causal)
};

// `_resolve_layer_attention` + `_dflash_layer_causal` for drafter layer `il` of `n_layers`.
// Throws dfl::Error for an unknown layer type, a layer_types list of the wrong length, or a
// sliding layer without any window size.
ResolvedAttn resolve_draft_layer_attention(const DraftAttnConfig& c, int il, int n_layers);

}  // namespace dfl
