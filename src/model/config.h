// config.json → ModelConfig: one struct for every family, with a per-layer spec vector.
// Families differ only where the math differs (gemma.cpp style): no class hierarchy.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "attention/attn_spec.h"
#include "attention/rope.h"

namespace dfl {

enum class Family : uint8_t { kQwen3, kDFlashDraft, kMiMoV2, kGemma3, kQwen35, kLlama };
const char* family_name(Family f);

// The token mixer of a layer: attention over the KV pool, or Gated DeltaNet over a recurrent
// state (kv/recurrent_state.h). Only attention layers have a KV pool layer (kv_layout).
enum class MixerKind : uint8_t { kAttention, kGatedDeltaNet };

struct LayerSpec {
  MixerKind mixer = MixerKind::kAttention;
  bool out_gate = false;       // attn_output_gate: q_proj rows per head are [query | gate]
  AttnKind attn = AttnKind::kFull;
  Window window;               // resolved visibility window (attention/attn_spec.h); read by all
                               // (causal ⇔ window.right == 0; a sliding layer sees window.left + 1 keys)
  bool sinks = false;          // learned per-head sink logits
  int32_t n_heads = 0;
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;        // q/k head dim
  int32_t v_head_dim = 0;
  RopeSpec rope;
  float attn_scale = 0.0f;     // logit scale; 0 = head_dim^-0.5 (Gemma: query_pre_attn_scalar^-0.5)
  bool moe = false;
};

// DFlash drafter keys (dflash_config first, then top level).
struct DFlashSpec {
  int32_t block_size = 16;
  std::vector<int32_t> target_layer_ids;  // tap t = residual stream after target layer t
  int32_t mask_token_id = -1;
  int32_t num_target_layers = 0;
  float attention_value_scale = 1.0f;     // multiplies V (context and block)
  std::optional<float> backbone_rotary_base;  // RoPE base for context keys only
  bool has_explicit_target_layer_ids = false;
  // Where the config came from (ECOSYSTEM §1.3): "z-lab" (dflash_config.target_layer_ids =
  // layer outputs), "speculators" (DFlashSpeculator / DFlash2Speculator: top-level
  // aux_hidden_state_layer_ids = z-lab ids + 1, transformer_layer_config, top-level
  // mask_token_id / block_size), "eagle-aux" (eagle_aux_hidden_state_layer_ids, aux semantics).
  std::string dialect = "z-lab";
  std::string speculators_type;       // speculators_model_type ("dflash", "dflash2")
  std::string verifier;               // speculators_config.verifier.name_or_path
  // The drafter's own vocabulary (speculators `draft_vocab_size`, also read from a z-lab config):
  // 0 or = vocab_size → the target's lm_head; else its own lm_head [draft_vocab_size, H] and the
  // d2t map back to target ids (docs/DFLASH.md "Reduced-vocabulary drafters").
  int32_t draft_vocab_size = 0;
  bool reduced_vocab(int64_t vocab_size) const {
    return draft_vocab_size > 0 && draft_vocab_size != vocab_size;
  }
  bool sample_from_anchor = false;    // DSpark-style: the anchor slot predicts the first draft
  std::optional<bool> causal;         // dflash_config.causal / !sliding_window_non_causal
};

struct MoESpec {
  int32_t n_routed_experts = 0;
  int32_t n_experts_per_tok = 0;
  int32_t moe_intermediate_size = 0;
  int32_t n_group = 1, topk_group = 1;
  bool norm_topk_prob = true;
  float routed_scaling_factor = 1.0f;
  std::string scoring_func = "sigmoid";   // "softmax" (Qwen3.5-MoE): top-k of softmax probs
  int32_t shared_intermediate_size = 0;   // > 0: a shared expert gated by σ(h·w_sg) (Qwen3.5)
  std::string topk_method = "noaux_tc";   // noaux_tc: e_score_correction_bias for selection only
  std::string router_dtype = "float32";   // moe_router_dtype (the engine computes in fp32)
};

// MiMo-V2-Flash / MiMo-V2.5 specifics (docs/MIMO.md). Per-layer geometry lives in LayerSpec.
struct MiMoSpec {
  bool fused_qkv = false;          // attention_projection_layout "fused_qkv" (V2.5)
  // Tensor-parallel shards the checkpoint's q/k/v (or fused qkv) were exported with: the row
  // shards of the fused [Q;K;V] layout and of the per-shard FP8 scale grids.
  // = num_key_value_heads of the full-attention layers (SGLang get_mimo_v2_fused_qkv_expected_tp_size).
  int32_t ckpt_tp = 1;
  float attention_value_scale = 1.0f;  // V multiplied before it is cached (every layer)
  int32_t sliding_window = 0;          // W as read (sliding_window, else sliding_window_size)
  WindowEdge window_edge = WindowEdge::kInclusiveW;
  int32_t fp8_block_out = 128, fp8_block_in = 128;  // quantization_config.weight_block_size
  bool fp8 = false;                    // quantization_config.quant_method == "fp8"
};

// Gated DeltaNet geometry (Qwen3.5 linear_attention layers).
struct GdnSpec {
  int32_t n_k_heads = 0, n_v_heads = 0;  // linear_num_key_heads / linear_num_value_heads
  int32_t d_k = 0, d_v = 0;              // linear_key_head_dim / linear_value_head_dim
  int32_t conv_kernel = 4;               // linear_conv_kernel_dim
  int32_t key_dim() const { return n_k_heads * d_k; }
  int32_t value_dim() const { return n_v_heads * d_v; }
  int32_t conv_dim() const { return 2 * key_dim() + value_dim(); }  // [q | k | v] channels
};

struct ModelConfig {
  std::string dir;             // folder it was read from (or the .gguf file)
  bool gguf = false;           // read from GGUF metadata (tensors in the same file)
  std::string architecture;    // architectures[0]
  std::string model_type;
  Family family = Family::kQwen3;
  int32_t hidden_size = 0;
  int32_t intermediate_size = 0;
  int32_t n_layers = 0;
  int32_t vocab_size = 0;
  int32_t max_position_embeddings = 0;
  float rms_norm_eps = 1e-6f;
  bool tie_word_embeddings = false;
  bool attention_bias = false;
  std::string torch_dtype;
  std::vector<LayerSpec> layers;
  std::optional<DFlashSpec> dflash;   // set for drafters
  std::optional<MoESpec> moe;         // set for MoE families
  std::optional<MiMoSpec> mimo;       // set for MiMo-V2 targets
  float final_logit_softcap = 0.0f;   // logits = cap·tanh(logits / cap) when > 0 (Gemma 2 style)
  float embed_scale = 1.0f;           // embedding rows × this (Gemma: sqrt(hidden_size))
  bool norm_plus_one = false;         // RMSNorm weights are stored as w and applied as (1 + w)
  std::optional<GdnSpec> gdn;         // set for hybrids with Gated DeltaNet layers
  std::vector<std::string> skipped_prefixes;  // tensor prefixes the family does not load (mtp.*)
};

// Parse-time choices that are the user's, not the checkpoint's (never the environment's).
struct ConfigOptions {
  // MiMo sliding layers keep W keys including the query (HF `sliding_window`, vLLM: the default)
  // or W+1 (SGLang's reading, `--window-edge w+1`); a config key "dfl_window_edge" does the same
  // per checkpoint, and this option wins over it.
  std::optional<WindowEdge> window_edge;
};

// Parses `dir`/config.json (throws dfl::Error with a one-line reason on any problem). The
// architecture picks the family (model/family.h); the family's parser fills the rest.
ModelConfig load_model_config(const std::string& dir, const ConfigOptions& opts = {});
// Parses config JSON text; `dir` is only recorded. Used by the fuzz target and tests.
ModelConfig parse_model_config(const std::string& json_text, const std::string& dir = "",
                               const ConfigOptions& opts = {});

// The z-lab default when target_layer_ids is absent: [L_t/2] for one layer, else
// round(1 + i·(L_t−4)/(L_d−1)) with Python's round-half-to-even.
std::vector<int32_t> default_target_layer_ids(int32_t n_target_layers, int32_t n_draft_layers);

}  // namespace dfl
