// The Gated DeltaNet token mixer (Qwen3.5 `linear_attention` layers), a sublayer of the shared
// decoder skeleton beside attention_sublayer (model/blocks.h), over the recurrent state kind of
// kv/recurrent_state.h. Per row of a batched forward (all math fp32):
//   h      = RMSNorm_1p(x)                                  (input norm, (1+w) folded at load)
//   qkv    = h·W_qkvᵀ [conv_dim]   z = h·W_zᵀ [Hv·dv]   a = h·W_aᵀ, b = h·W_bᵀ [Hv]
//   qkv    = silu(causal depthwise conv1d(qkv, K))        (conv state: last K-1 inputs)
//   q, k   = l2norm per head (eps 1e-6), q /= √dk;   v per value head
//   β = σ(b);   g = -exp(A_log)·softplus(a + dt_bias)
//   per value head j (q/k head j / (Hv/Hk)):  S ← S·e^g;  u = (v − Sᵀk)·β;  S ← S + k⊗u;  o = Sᵀq
//   o      = (w ⊙ RMSNorm(o_j)) · silu(z_j) per head;   x += o·W_outᵀ
// One recurrence, token by token, for prefill, decode and verify alike (no chunked form): a
// token's numbers never depend on how many tokens share its forward, and the rollback replay
// (gdn_replay) runs the same per-token code, so rolled-back states are bit-identical to
// one-at-a-time decoding.
#pragma once

#include <vector>

#include "attention/step_plan.h"
#include "core/threadpool.h"
#include "io/checkpoint.h"
#include "kernels/ops.h"
#include "kv/recurrent_state.h"
#include "model/config.h"
#include "model/model.h"

namespace dfl {

struct GdnWeights {
  std::vector<float> norm;          // [H] input norm (effective weight, 1+w folded)
  WeightMatrix in_qkv;              // [conv_dim, H]
  WeightMatrix in_z;                // [Hv·dv, H]
  WeightMatrix in_a, in_b;          // [Hv, H] each
  std::vector<float> conv;          // [conv_dim, K] depthwise taps (oldest input first)
  std::vector<float> neg_a;         // [Hv] −exp(A_log)
  std::vector<float> dt_bias;       // [Hv]
  std::vector<float> out_norm;      // [dv] gated RMSNorm weight (plain)
  WeightMatrix out;                 // [H, Hv·dv]
  int32_t layer = -1;               // index among the linear layers (RecurrentState layer)
};

// Loads "<prefix>input_layernorm.weight" (zero-centred) and "<prefix>linear_attn.*".
GdnWeights load_gdn(const Checkpoint& ck, const std::string& prefix, const GdnSpec& g, int32_t H);

// Linear-attention layers of a config.
int32_t n_recurrent_layers(const ModelConfig& cfg);
// The recurrent-state geometry of a config (n_layers = its linear-attention layers).
RecurrentSpec recurrent_spec(const ModelConfig& cfg);

struct GdnScratch {
  std::vector<float> a, qkv, z, ga, gb, o, conv;
};

// x [R, H] += Gated DeltaNet sublayer for the plan's rows (segments are sequences of `state`,
// whose begin_forward was called). Saves each segment's replay rows when it fits max_block.
void gdn_sublayer(const GdnWeights& w, const GdnSpec& g, float* x, const StepPlan& plan,
                  int32_t hidden, float eps, RecurrentState& state, GdnScratch& sc,
                  ThreadPool& pool);

// Re-runs the recurrence over the first k saved rows of `seq`'s last forward, from its
// pre-forward state, in place (the rollback of RecurrentState::start_rollback).
void gdn_replay(const GdnWeights& w, const GdnSpec& g, RecurrentState& state, int32_t seq,
                int32_t k, GdnScratch& sc, ThreadPool& pool);

}  // namespace dfl
