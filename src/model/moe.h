// DeepSeek-V3 "noaux_tc" mixture of experts as used by MiMo-V2 (TARGETS-SPEC §3.4):
//   l = h · W_routerᵀ (fp32)          s = sigmoid(l)            sel = s + e_score_correction_bias
//   groups: keep the topk_group groups with the largest sum of their top-2 `sel` (n_group > 1)
//   idx = top-k(sel) (ties → lower expert id)        w = s[idx]  (UNBIASED scores)
//   w /= Σw + 1e-20 (norm_topk_prob)                  w *= routed_scaling_factor
//   y = Σ_k w_k · down_e(silu(gate_e(h)) ⊙ up_e(h)),  e = idx_k, summed in ascending e (as HF)
// scoring_func "softmax" (Qwen3.5-MoE, TARGETS-SPEC §5.3): s = softmax_f32(l), idx = top-k(s),
// w = s[idx] / Σ s[idx] (no bias, no groups). A gated shared expert, when present, is added by
// ffn_sublayer (model/blocks.h).
// Experts run only for the rows routed to them: a block of B rows touches the union of their
// experts, and each used expert does one batched matmul over its gathered rows.
// Gemma 4 (TARGETS-SPEC §4.3): softmax scoring, w = s[idx] / Σ s[idx] × per_expert_scale[idx]
// (MoEWeights::expert_scale), GeGLU experts (MoESpec::gelu_experts), and the router reads its
// own input (moe_forward's router_in).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/threadpool.h"
#include "io/checkpoint.h"
#include "kernels/ops.h"
#include "model/config.h"
#include "model/fp8_weights.h"

namespace dfl {

struct MoEWeights {
  WeightMatrix router;               // [E, H] fp32 copy (router_f32_)
  std::vector<float> router_f32;     // owns the fp32 router table
  std::vector<float> bias;           // [E] e_score_correction_bias (zeros if absent)
  std::vector<float> expert_scale;   // [E] routing weight × this (Gemma 4), or empty
  std::vector<WeightMatrix> gate, up, down;  // per expert: [I, H], [I, H], [H, I]
  int64_t expert_bytes() const;      // bytes of one expert's three matrices (expert 0)
};

// Loads "<prefix>mlp.gate.weight", "<prefix>mlp.gate.e_score_correction_bias",
// "<prefix>mlp.experts.{e}.{gate,up,down}_proj.weight" (+ FP8 scales).
MoEWeights load_moe(const Checkpoint& ck, const std::string& prefix, const MoESpec& spec,
                    int32_t hidden, Fp8ScaleStore& store, int64_t block_out, int64_t block_in);

// The router [E, H] as an fp32 copy from `name`.
void load_router_f32(const Checkpoint& ck, const std::string& name, int32_t E, int32_t H,
                     MoEWeights& m);
// Expert views into fused tensors gate_up [E, 2I, H] (gate rows first) and down [E, H, I].
void load_fused_experts(const Checkpoint& ck, const std::string& gate_up, const std::string& down,
                        int32_t E, int32_t I, int32_t H, MoEWeights& m);

// Loads the fused expert layout instead when "<prefix>mlp.experts.gate_up_proj" [E, 2I, H] (gate
// rows first) and "<prefix>mlp.experts.down_proj" [E, H, I] are present (transformers 5's
// Qwen3_5MoeExperts parameters): each expert's matrices point into those tensors.

// Routing of n rows from router logits [n, E] (fp32): idx [n, k] (ascending expert id per row)
// and weights [n, k] in the same order.
void moe_route(const MoESpec& spec, const float* logits, const float* bias, int32_t n,
               int32_t* idx, float* weights);

struct MoEScratch {
  std::vector<float> logits, w, xg, g, u, y;
  std::vector<int32_t> idx, rows;
  std::vector<float> row_w;
};

// out [n, H] = MoE(h [n, H]) (overwritten). `route_out` (optional) receives idx [n, k];
// `router_in` [n, H] (optional) is what the router reads instead of h.
void moe_forward(const MoEWeights& mw, const MoESpec& spec, const float* h, int32_t n, int32_t H,
                 float* out, MoEScratch& sc, ThreadPool& pool, int32_t* route_out = nullptr,
                 const float* router_in = nullptr);

}  // namespace dfl
