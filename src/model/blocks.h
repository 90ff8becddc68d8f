// Shared transformer blocks (Qwen3-style dense decoder layer pieces) used by every family.
#pragma once

#include <string>
#include <vector>

#include "core/threadpool.h"
#include "io/checkpoint.h"
#include "kernels/ops.h"
#include "kv/kv_cache.h"
#include "model/config.h"
#include "model/model.h"
#include "model/model.h"
#include "model/rope.h"
#include "model/weights.h"

namespace dfl {

// One Qwen3-style layer: attention with per-head q_norm/k_norm, SwiGLU MLP.
struct DenseLayer {
  std::vector<float> in_norm, post_norm;  // [H]
  std::vector<float> q_norm, k_norm;      // [head_dim]
  std::vector<float> sinks;               // [n_heads] or empty
  WeightMatrix q, k, v, o;                // [nh*hd, H], [nkv*hd, H], [nkv*vd, H], [H, nh*vd]
  WeightMatrix gate, up, down;            // [I, H], [I, H], [H, I]
  OwnedWeights owned;                     // load-time copies (LoadOptions.weights_format)
  int64_t matrix_bytes() const;           // bytes of q..down as held
};

// Loads "<prefix>input_layernorm.weight", "<prefix>self_attn.q_proj.weight", ... with shapes from
// the config; sinks from "<prefix>self_attn.attention_sink_bias" when spec.sinks.
// The seven matrices get the load-time format of `opts` (convert_weight; Q8 quantization or
// prepacking, parallelized on `pool` if given). Default options: as stored, prepacked.
DenseLayer load_dense_layer(const Checkpoint& ck, const std::string& prefix, const LayerSpec& spec,
                            int32_t hidden, int32_t intermediate, const LoadOptions& opts = {},
                            ThreadPool* pool = nullptr);

// The kernel parameters of one layer's attention: the ONE place a LayerSpec (with its resolved
// window) becomes AttnParams. Scale = head_dim^-0.5 (q/k head dim, also when V is narrower).
AttnParams attn_params(const LayerSpec& s, const std::vector<float>& sinks);

// Token embedding, final norm and lm_head of a target (shared by every family).
struct OutputHead {
  WeightMatrix embed;            // [V, H] as stored (rows are read, never multiplied)
  WeightMatrix lm_head;          // [V, H]
  std::vector<float> final_norm; // [H]
  int32_t vocab = 0, hidden = 0;
  float eps = 1e-6f;

  // out [n, H]; throws dfl::Error for an id outside the vocabulary.
  void embed_rows(const int32_t* tokens, int64_t n, float* out) const;
  // logits [n, V] = x_normed [n, H] · lm_headᵀ
  void logits(const float* x_normed, int64_t n, float* out, ThreadPool& pool) const;
  // logits of final_norm(x); `tmp` is scratch.
  void norm_logits(const float* x, int64_t n, float* out, std::vector<float>& tmp,
                   ThreadPool& pool) const;
};

// Checks a forward request against the cache (pos0 = cached length, no context overflow, aux
// indices in [0, n_layers]) and sizes out.aux to [n, aux.size() × hidden] zeros.
void begin_forward(const ForwardArgs& a, const KvCache& kv, int32_t n_layers, int32_t hidden,
                   ForwardOut& out);

// Copies residual-stream rows x [n, hidden] (block rows row0..row0+n) into every aux column of
// `out` whose requested index equals `index` (model/model.h tap protocol).
void capture_aux(const ForwardArgs& a, int32_t index, const float* x, int32_t row0, int32_t n,
                 int32_t hidden, ForwardOut& out);

// Refuses a checkpoint holding tensors the model did not request (prefixes in `ignore` excepted).
void require_all_used(const Checkpoint& ck, const ModelConfig& cfg,
                      const std::vector<std::string>& ignore = {});

// Reusable scratch buffers (grown on demand, never shrunk).
struct Scratch {
  std::vector<float> a, q, k, v, o, g, u, cos, sin;
  std::vector<int32_t> pos;  // absolute positions of the rows being processed
  template <typename T>
  void ensure(std::vector<T>& b, size_t n) {
    if (b.size() < n) b.resize(n);
  }
  // pos[0..n) = pos0, pos0 + 1, ...
  const int32_t* positions(int32_t pos0, int32_t n) {
    ensure(pos, size_t(n));
    for (int32_t i = 0; i < n; ++i) pos[i] = pos0 + i;
    return pos.data();
  }
};

// q/k projections → per-head RMSNorm → RoPE. a: [n, H] normed input.
// Writes q [n, nh*hd] (if q_out) and k [n, nkv*hd], v [n, nkv*vd] (v scaled by value_scale).
void project_qkv(const DenseLayer& w, const LayerSpec& s, const RopeTable& rope, const float* a,
                 int32_t n, const int32_t* pos, float eps, float value_scale, float* q_out,
                 float* k_out, float* v_out, Scratch& sc, ThreadPool& pool);

// x [n, H] += o_proj(attention(input_norm(x))) with K/V written to the cache at positions pos0..
// and queries at positions pos0..pos0+n-1 attending over every cache slot of the layer.
void attention_block(const DenseLayer& w, const LayerSpec& s, const RopeTable& rope, float* x,
                     int32_t n, int32_t pos0, int32_t hidden, float eps, float value_scale,
                     KvCache& kv, int32_t seq, int32_t il, Scratch& sc, ThreadPool& pool);

// x [n, H] += down(silu(gate(post_norm(x))) ⊙ up(post_norm(x)))
void mlp_block(const DenseLayer& w, float* x, int32_t n, int32_t hidden, int32_t intermediate,
               float eps, Scratch& sc, ThreadPool& pool);

}  // namespace dfl
