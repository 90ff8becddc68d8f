#include "attention/attn_spec.h"

#include "core/error.h"

namespace dfl {

const char* attn_kind_name(AttnKind k) { return k == AttnKind::kSliding ? "sliding" : "full"; }

Window causal_window(AttnKind kind, int32_t sliding_window, WindowEdge edge) {
  if (kind == AttnKind::kFull) return Window{-1, 0};
  const int32_t left = edge == WindowEdge::kInclusiveW ? sliding_window - 1 : sliding_window;
  return Window{left, 0};
}

Window symmetrize_window(Window w, bool causal) {
  if (causal) return w;
  if (w.right == 0) return Window{w.left, w.left};  // (w,0) → (w,w); (-1,0) → (-1,-1)
  return w;
}

ResolvedAttn resolve_draft_layer_attention(const DraftAttnConfig& c, int il, int n_layers) {
  ResolvedAttn r;
  bool any_sliding_type = false;
  if (c.layer_types) {
    DFL_CHECK(static_cast<int>(c.layer_types->size()) == n_layers, "config: layer_types has ",
              c.layer_types->size(), " entries but num_hidden_layers is ", n_layers);
    for (const auto& t : *c.layer_types) {
      DFL_CHECK(t == "full_attention" || t == "sliding_attention", "config: unknown layer type '",
                t, "' in layer_types (expected full_attention or sliding_attention)");
      any_sliding_type |= t == "sliding_attention";
    }
  }
  // Window kind: per-layer types win when they name at least one sliding layer; otherwise
  // use_swa makes every layer sliding.
  bool sliding;
  if (c.layer_types && any_sliding_type) {
    sliding = (*c.layer_types)[il] == "sliding_attention";
  } else {
    sliding = c.use_swa;
  }
  if (sliding) {
    std::optional<int32_t> w = c.swa_window_size ? c.swa_window_size : c.sliding_window;
    DFL_CHECK(w.has_value(), "config: layer ", il,
              " is sliding but neither dflash_config.swa_window_size nor sliding_window is set");
    DFL_CHECK(*w > 0 && *w <= (1 << 24), "config: sliding window size must be in [1, 2^24], got ", *w);
    r.kind = AttnKind::kSliding;
    r.sliding_window = *w;
  }
  // Causality: top-level is_causal, then dflash_config.causal, then sliding ⇒ causal.
  if (c.is_causal) {
    r.causal = *c.is_causal;
  } else if (c.dflash_causal) {
    r.causal = *c.dflash_causal;
  } else {
    r.causal = c.layer_types.has_value() && (*c.layer_types)[il] == "sliding_attention";
  }
  r.window = symmetrize_window(causal_window(r.kind, r.sliding_window), r.causal);
  return r;
}

}  // namespace dfl
