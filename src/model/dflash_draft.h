// The DFlash block-diffusion drafter (z-lab DFlashDraftModel and the MiMo layout).
//
// It has no embedding and no lm_head of its own: both are borrowed from the target. Target
// features condition it by KV injection:
//   c[p]  = hidden_norm(fc(concat_k taps_k[p]))                                 [S, H]
//   every layer ℓ: K_ctx = RoPE(k_norm(c W_k)), V_ctx = (c W_v) · value_scale   (no input norm;
//   RoPE base = backbone_rotary_base when the config sets it, else rope_theta)
// and those context K/V live in the drafter's own KV cache across steps (append_context).
// A draft pass runs the block [anchor, MASK × (B−1)] at positions s..s+B−1 through every layer,
// with queries only from the block and keys = cached context ++ block, masked by each layer's
// resolved window (non-causal layers see the whole block), then final norm and the target's
// lm_head; block row j predicts the token at position s+j (no shift). The block's K/V are
// dropped afterwards (the cache is truncated back to s), so the cache holds context only.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/threadpool.h"
#include "io/checkpoint.h"
#include "kv/kv_cache.h"
#include "model/blocks.h"
#include "model/config.h"
#include "model/model.h"
#include "model/rope.h"
#include "model/weights.h"

namespace dfl {

// The drafter's optional MASK-embedding sidecar: `dir`/mask_embedding.pt when that file exists,
// else "" (the one place its name and location are written).
std::string mask_embedding_file(const std::string& dir);

class DFlashDraftModel {
 public:
  // Loads `dir` (config.json, safetensors in z-lab or MiMo layout, optional mask_embedding.pt)
  // for use with `target`. Refuses a drafter whose fc input width ≠ taps × target hidden, whose
  // hidden size differs from the target's, or whose taps name layers the target lacks.
  DFlashDraftModel(const std::string& dir, const CausalLM& target, const LoadOptions& opts,
                   ThreadPool& pool);

  const ModelConfig& config() const { return cfg_; }
  const DFlashSpec& dflash() const { return *cfg_.dflash; }
  KvCache& kv() { return kv_; }
  // Target aux indices to capture, in fc input order (target_layer_id + 1 each).
  const std::vector<int32_t>& target_aux_indices() const { return aux_; }
  bool has_mask_embedding() const { return !mask_embedding_.empty(); }
  const std::string& mask_embedding_path() const { return mask_embedding_path_; }

  // Appends context features for positions [pos0, pos0 + n): taps [n, K·H_target].
  // pos0 must equal kv().length(seq).
  void append_context(int32_t seq, const float* taps, int32_t n, int32_t pos0);

  // Runs one block: tokens [B] at positions pos0.. (pos0 = kv().length(seq)); writes the
  // drafter's final-normed hidden rows [B, H] to `hidden` (if non-null) and logits for block rows
  // 1..B−1 to `logits` [B−1, vocab] via the target's lm_head. Leaves the cache unchanged.
  void draft_block(int32_t seq, const int32_t* tokens, int32_t n, int32_t pos0, CausalLM& target,
                   float* logits, float* hidden = nullptr);

  int64_t weight_bytes() const;

 private:
  ModelConfig cfg_;
  Checkpoint ck_;
  ThreadPool& pool_;
  std::string prefix_;                 // "" (z-lab) or "model." (MiMo)
  WeightMatrix fc_;                    // [H, K·H_t]
  OwnedWeights owned_;                 // load-time copy of fc (Q8 / prepacked), if any
  std::vector<float> hidden_norm_, final_norm_;
  std::vector<DenseLayer> layers_;
  std::vector<RopeTable> rope_block_, rope_ctx_;  // per layer
  std::vector<float> mask_embedding_;  // [H] or empty
  std::string mask_embedding_path_;
  std::vector<int32_t> aux_;
  KvCache kv_;
  Scratch sc_;
  std::vector<float> c_, x_, kbuf_, vbuf_;
};

}  // namespace dfl
