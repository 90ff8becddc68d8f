// The decoder's building blocks, shared by every family (Qwen3, MiMo-V2, the DFlash drafter;
// Gemma and the hybrids next): an attention sublayer and an FFN sublayer over the rows of a
// batched forward, each a sequence of small steps whose presence the weights decide:
//   attention:  norm → QKV projection (split, or fused in T shards of [Q_s; K_s; V_s]; with an
//               output gate the q rows of each head are [query | gate]) → optional per-head
//               q/k RMSNorm → RoPE on the leading n_rot dims (tables from the step plan) →
//               optional per-head v RMSNorm (V may be the raw k projection: Gemma 4 k_eq_v) →
//               value scale → per segment: K/V into the pool + attention over the segment's KV
//               view → optional output gate o ⊙ σ(gate) → output projection → optional post
//               norm → residual add
//   (norm weights are effective weights: zero-centred (1+w) norms are folded at load time,
//   model/weights.h load_norm; the other token mixer, Gated DeltaNet, is model/gdn.h)
//   ffn:        norm → SwiGLU | GeGLU | MoE (+ optional gated shared expert) → optional post norm →
//               residual add; Gemma 4's MoE layers (kGeGLUPlusMoE) add, before the post norm,
//               post_norm_1(GeGLU(norm(x))) + post_norm_2(MoE(routed by router_norm(x), on
//               norm_2(x))) — both branches read the residual stream x
//   layer:      optional out_scale multiply of the residual stream (Gemma 4 layer_scalar)
//   (an optional SublayerWrap rewrites the normed input and the output before the residual add:
//   DFlash2's dynamic convolutions, model/dflash2_draft.h)
#pragma once

#include <string>
#include <vector>

#include "attention/step_plan.h"
#include "core/threadpool.h"
#include "io/checkpoint.h"
#include "kernels/ops.h"
#include "kv/kv_pool.h"
#include "model/config.h"
#include "model/model.h"
#include "model/gdn.h"
#include "model/moe.h"
#include "model/weights.h"

namespace dfl {

struct AttnWeights {
  std::vector<float> norm;            // [H] input norm
  bool fused = false;
  WeightMatrix q, k, v;               // split: [nh·hd, H], [nkv·hd, H], [nkv·vd, H]
  WeightMatrix qkv;                   // fused: [T·(q_s + k_s + v_s), H]
  int64_t shards = 1, q_s = 0, k_s = 0, v_s = 0;
  std::vector<float> q_norm, k_norm;  // [head_dim] each, or empty (no q/k norm)
  std::vector<float> v_norm;          // [v_head_dim] or empty (Gemma 4: ones, a no-scale norm)
  bool v_from_k = false;              // no v matrix: V = the raw (pre-norm) k projection
  WeightMatrix o;                     // [H, nh·vd]
  std::vector<float> post_norm;       // [H] or empty (Gemma's post-attention norm)
  std::vector<float> sinks;           // [nh] or empty
  AttnParams params;                  // from attn_params(): the layer's resolved window
  int32_t rope = 0;                   // the model's RoPE table index (StepPlan::cos/sin)
  float value_scale = 1.0f;           // V multiplied before it is cached
  bool out_gate = false;              // q projection [nh·2·hd, H]: per head [query | gate]
};

// GeGLU: gelu_tanh(gate) ⊙ up; kGeGLUPlusMoE: Gemma 4's dense GeGLU and MoE side by side.
enum class FfnKind : uint8_t { kSwiGLU, kGeGLU, kMoE, kGeGLUPlusMoE };

struct FfnWeights {
  FfnKind kind = FfnKind::kSwiGLU;
  std::vector<float> norm;       // [H] pre-FFN norm
  std::vector<float> post_norm;  // [H] or empty
  WeightMatrix gate, up, down;   // SwiGLU: [I, H], [I, H], [H, I]
  MoEWeights moe;                // kMoE
  // kMoE with a shared expert (Qwen3.5-MoE): y += σ(h·w_sg) · SwiGLU_shared(h)
  WeightMatrix sh_gate, sh_up, sh_down;  // [Is, H], [Is, H], [H, Is]
  std::vector<float> sh_gate_w;          // [H] shared_expert_gate
  // kGeGLUPlusMoE: the norms of the second branch (effective weights, [H] each); router_norm
  // already holds router.scale · H^-0.5 (a no-scale norm times those).
  std::vector<float> post_norm_1, norm_2, post_norm_2, router_norm;
};

struct DecoderLayer {
  MixerKind mixer = MixerKind::kAttention;  // which of attn / gdn runs (decoder.cc dispatches)
  AttnWeights attn;
  GdnWeights gdn;
  FfnWeights ffn;
  float out_scale = 1.0f;        // the residual stream × this after the layer (Gemma 4)
  OwnedWeights owned;            // load-time copies (LoadOptions.weights_format)
  int64_t matrix_bytes(const ModelConfig& cfg) const;  // bytes one decode step reads
};

// The kernel parameters of one layer's attention: the ONE place a LayerSpec (with its resolved
// window) becomes AttnParams. Scale = head_dim^-0.5 (q/k head dim, also when V is narrower).
AttnParams attn_params(const LayerSpec& s, const std::vector<float>& sinks);

// Qwen3-style layer from "<prefix>input_layernorm.weight", "<prefix>self_attn.{q,k,v,o}_proj",
// q_norm/k_norm, optional attention_sink_bias, "<prefix>post_attention_layernorm.weight" and a
// SwiGLU "<prefix>mlp.{gate,up,down}_proj". Matrices get the load-time format of `opts`.
// qk_norm = false: no q_norm/k_norm tensors (Llama).
DecoderLayer load_dense_layer(const Checkpoint& ck, const std::string& prefix, const LayerSpec& spec,
                              int32_t hidden, int32_t intermediate, const LoadOptions& opts,
                              ThreadPool* pool, bool qk_norm = true);

// Applies the load-time format of `opts` to every matrix of the layer (experts included).
void convert_layer(DecoderLayer& l, const LoadOptions& opts, ThreadPool* pool);

// Token embedding, final norm and lm_head of a target (shared by every family).
struct OutputHead {
  WeightMatrix embed;            // [V, H] as stored (rows are read, never multiplied)
  WeightMatrix lm_head;          // [V, H]
  std::vector<float> final_norm; // [H]
  int32_t vocab = 0, hidden = 0;
  float eps = 1e-6f;
  float final_softcap = 0.0f;    // > 0: logits = cap·tanh(logits / cap) (also for lm_head())
  ops::ArgmaxScreen screen;      // of lm_head (prepare_argmax): greedy picks without the logits

  // out [n, H]; throws dfl::Error for an id outside the vocabulary.
  void embed_rows(const int32_t* tokens, int64_t n, float* out) const;
  // logits [n, V] = x_normed [n, H] · lm_headᵀ
  void logits(const float* x_normed, int64_t n, float* out, ThreadPool& pool) const;
  // logits of final_norm(x); `tmp` is scratch.
  void norm_logits(const float* x, int64_t n, float* out, std::vector<float>& tmp,
                   ThreadPool& pool) const;
  // After lm_head is final (converted / prepacked): the screen for argmax().
  void prepare_argmax(ThreadPool* pool);
  // out [n] = ops::argmax of each row of logits(x_normed): the same index, bit for bit
  // (ops::matmul_argmax; with a final soft-cap through the logits).
  void argmax(const float* x_normed, int64_t n, int32_t* out, ThreadPool& pool) const;
  void norm_argmax(const float* x, int64_t n, int32_t* out, std::vector<float>& tmp,
                   ThreadPool& pool) const;
};

// Refuses a checkpoint holding tensors the model did not request (prefixes in `ignore` excepted).
void require_all_used(const Checkpoint& ck, const ModelConfig& cfg,
                      const std::vector<std::string>& ignore = {});

// Reusable activations of one forward (grown on demand, never shrunk: no allocation once warm).
//   a [R, H] normed input / sublayer output   q [R, nh·hd]   k [R, nkv·hd]   v [R, nkv·vd]
//   o [R, nh·vd] attention output   t [R, fused qkv width]   g, u [R, I] FFN   y [R, H] FFN out
struct Scratch {
  std::vector<float> a, q, k, v, o, t, g, u, y, gate, e, r;  // e, r [R, H]: kGeGLUPlusMoE
  KvViewScratch view;
  MoEScratch moe;
  GdnScratch gdn;
  template <typename T>
  static T* ensure(std::vector<T>& b, size_t n) {
    if (b.size() < n) b.resize(n);
    return b.data();
  }
};

// K and V of rows `a` [R, H] (already normed) for layer spec `s`: k [R, nkv·hd] (k-normed,
// RoPE'd with cos/sin [R, n_rot/2]), v [R, nkv·vd] × value_scale; q [R, nh·hd] too when q_out
// (with w.out_gate, the gate [R, nh·hd] goes to sc.gate).
void project_qkv(const AttnWeights& w, const LayerSpec& s, const float* a, int32_t rows,
                 const float* cos, const float* sin, float eps, float* q_out, float* k_out,
                 float* v_out, Scratch& sc, ThreadPool& pool);

// An optional transform around a sublayer's inner computation (DFlash2's dynamic convolutions,
// model/dflash2_draft.h): input() rewrites the normed input a [R, H] in place before the
// projections; output() rewrites the sublayer's output [R, H] (after any post norm) in place
// before the residual add.
class SublayerWrap {
 public:
  virtual ~SublayerWrap() = default;
  virtual void input(float* a, int32_t rows) = 0;
  virtual void output(float* y, int32_t rows) = 0;
};

// x [R, H] += attention sublayer (file comment) for the plan's rows, K/V written to `kv` layer il.
void attention_sublayer(const AttnWeights& w, const LayerSpec& s, float* x, const StepPlan& plan,
                        int32_t hidden, float eps, KvPool& kv, int32_t il, Scratch& sc,
                        ThreadPool& pool, SublayerWrap* wrap = nullptr);

// x [R, H] += ffn sublayer (file comment).
void ffn_sublayer(const FfnWeights& w, const ModelConfig& cfg, float* x, int32_t rows, Scratch& sc,
                  ThreadPool& pool, SublayerWrap* wrap = nullptr);

}  // namespace dfl
