// MiMo-V2-Flash (MiMoV2FlashForCausalLM) and MiMo-V2.5 (MiMoV2ForCausalLM, text part):
// embedding → L × [RMSNorm → attention → residual → RMSNorm → dense SwiGLU (layer 0) or
// sigmoid/noaux_tc MoE → residual] → RMSNorm → untied lm_head   (TARGETS-SPEC §3.4, docs/MIMO.md).
//
// Attention per layer kind (full / sliding): its own kv-head count, q/k head dim ≠ v head dim,
// RoPE on the leading n_rot dims with the kind's theta, V × attention_value_scale BEFORE it is
// cached, no q/k norm, scale = head_dim^-0.5, sinks on sliding layers (an unscaled logit in the fp32
// softmax denominator), the window from the config's resolved Window (the one visibility rule).
// Projections are F8_E4M3 + 128×128 block scales (dequantized inside the matmul), split q/k/v
// (V2-Flash) or one fused qkv_proj stored as ckpt_tp shards of [Q_s; K_s; V_s] (V2.5).
// KV: sliding layers live in rings of window + slack slots, so a long prompt runs in chunks of at
// most kv().slack() tokens (kernels are batch-invariant: chunking changes no row's result).
#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>

#include "core/error.h"
#include "model/arch/families.h"
#include "model/blocks.h"
#include "model/fp8_weights.h"
#include "model/moe.h"
#include "model/rope.h"
#include "model/weights.h"

namespace dfl {

namespace {

struct MiMoLayer {
  std::vector<float> in_norm, post_norm;  // [H]
  bool fused = false;
  WeightMatrix q, k, v;   // split: [nh*hd, H], [nkv*hd, H], [nkv*vd, H]
  WeightMatrix qkv;       // fused: [T * (q_s + k_s + v_s), H]
  int64_t q_s = 0, k_s = 0, v_s = 0;  // rows per shard of the fused layout
  WeightMatrix o;         // [H, nh*vd]
  std::vector<float> sinks;  // [nh] or empty
  bool moe = false;
  WeightMatrix gate, up, down;  // dense MLP
  MoEWeights experts;
};

class MiMoModel final : public CausalLM {
 public:
  MiMoModel(ModelConfig cfg, const LoadOptions& opts, ThreadPool& pool)
      : cfg_(std::move(cfg)), ck_(cfg_.dir), pool_(pool) {
    DFL_CHECK(cfg_.mimo.has_value(), "MiMo model without MiMo config");
    const MiMoSpec& m = *cfg_.mimo;
    const int32_t H = cfg_.hidden_size, V = cfg_.vocab_size;
    head_.vocab = V;
    head_.hidden = H;
    head_.eps = cfg_.rms_norm_eps;
    const int64_t bo = m.fp8_block_out, bi = m.fp8_block_in;
    head_.embed = load_linear_fp8(ck_, "model.embed_tokens.weight", V, H, 1, scales_, bo, bi);
    DFL_CHECK(head_.embed.dtype != DType::kF8E4M3, "model.embed_tokens.weight must be a float table");
    head_.final_norm = load_vector(ck_, "model.norm.weight", H);
    DFL_CHECK(!cfg_.tie_word_embeddings, "MiMo with tie_word_embeddings=true is not supported");
    head_.lm_head = load_linear_fp8(ck_, "lm_head.weight", V, H, 1, scales_, bo, bi);
    for (int32_t il = 0; il < cfg_.n_layers; ++il) layers_.push_back(load_layer(il));
    require_all_used(ck_, cfg_,
        {"model.mtp.", "mtp.", "visual.", "model.visual.", "audio_encoder.", "model.audio_encoder.",
         "speech_embeddings.", "model.speech_embeddings."});
    for (const LayerSpec& s : cfg_.layers) ropes_.emplace_back(s.rope);
    const int32_t max_ctx = std::min(opts.max_context, cfg_.max_position_embeddings);
    kv_ = KvCache(kv_layout(cfg_), opts.n_seqs, max_ctx, opts.max_block);
  }

  const ModelConfig& config() const override { return cfg_; }
  KvCache& kv() override { return kv_; }

  void embed(const int32_t* tokens, int64_t n, float* out) const override {
    head_.embed_rows(tokens, n, out);
  }

  void lm_head(const float* x_normed, int64_t n, float* logits) override {
    head_.logits(x_normed, n, logits, pool_);
  }

  void norm_and_lm_head(const float* x, int64_t n, float* logits) override {
    head_.norm_logits(x, n, logits, head_tmp_, pool_);
  }

  void forward(const ForwardArgs& a, ForwardOut& out) override {
    const int32_t H = cfg_.hidden_size, n = a.n;
    begin_forward(a, kv_, cfg_.n_layers, H, out);
    x_.resize(size_t(n) * H);
    embed(a.tokens, n, x_.data());
    const int32_t chunk = kv_.slack();
    for (int32_t c0 = 0; c0 < n; c0 += chunk) {
      const int32_t m = std::min(chunk, n - c0);
      float* x = x_.data() + size_t(c0) * H;
      capture_aux(a, 0, x, c0, m, H, out);
      for (int32_t il = 0; il < cfg_.n_layers; ++il) {
        attention(il, x, m, a.pos0 + c0, a.seq);
        mlp(il, x, m);
        capture_aux(a, il + 1, x, c0, m, H, out);
      }
      kv_.commit_length(a.seq, a.pos0 + c0 + m);
    }
    const int64_t V = cfg_.vocab_size;
    if (a.logits == LogitsMode::kAll) {
      out.logits.resize(size_t(n) * V);
      norm_and_lm_head(x_.data(), n, out.logits.data());
    } else if (a.logits == LogitsMode::kLast) {
      out.logits.resize(V);
      norm_and_lm_head(x_.data() + size_t(n - 1) * H, 1, out.logits.data());
    } else {
      out.logits.clear();
    }
  }

  int64_t weight_bytes_per_token() const override {
    auto mb = [](const WeightMatrix& w) { return w.n_out * w.n_in * int64_t(dtype_size(w.dtype)); };
    int64_t b = 0;
    for (const auto& l : layers_) {
      b += l.fused ? mb(l.qkv) : mb(l.q) + mb(l.k) + mb(l.v);
      b += mb(l.o);
      if (l.moe)
        b += mb(l.experts.router) + cfg_.moe->n_experts_per_tok * l.experts.expert_bytes();
      else
        b += mb(l.gate) + mb(l.up) + mb(l.down);
    }
    return b + mb(head_.lm_head) + cfg_.hidden_size * int64_t(dtype_size(head_.embed.dtype));
  }

 private:
  MiMoLayer load_layer(int32_t il) {
    const LayerSpec& s = cfg_.layers[il];
    const MiMoSpec& m = *cfg_.mimo;
    const int32_t H = cfg_.hidden_size, T = m.ckpt_tp;
    const int64_t bo = m.fp8_block_out, bi = m.fp8_block_in;
    const std::string p = str("model.layers.", il, ".");
    MiMoLayer w;
    w.in_norm = load_vector(ck_, p + "input_layernorm.weight", H);
    w.post_norm = load_vector(ck_, p + "post_attention_layernorm.weight", H);
    const int64_t nq = int64_t(s.n_heads) * s.head_dim, nk = int64_t(s.n_kv_heads) * s.head_dim,
                  nv = int64_t(s.n_kv_heads) * s.v_head_dim;
    w.fused = m.fused_qkv;
    if (w.fused) {
      // T shards, each [Q_s; K_s; V_s]: shard j holds query heads [j·nh/T, (j+1)·nh/T) and kv heads
      // [j·nkv/T, (j+1)·nkv/T) — consistent with GQA (query head h reads kv head h / (nh/nkv)).
      w.q_s = nq / T;
      w.k_s = nk / T;
      w.v_s = nv / T;
      w.qkv = load_linear_fp8(ck_, p + "self_attn.qkv_proj.weight", nq + nk + nv, H, T, scales_, bo, bi);
    } else {
      w.q = load_linear_fp8(ck_, p + "self_attn.q_proj.weight", nq, H, T, scales_, bo, bi);
      w.k = load_linear_fp8(ck_, p + "self_attn.k_proj.weight", nk, H, T, scales_, bo, bi);
      w.v = load_linear_fp8(ck_, p + "self_attn.v_proj.weight", nv, H, T, scales_, bo, bi);
    }
    w.o = load_linear_fp8(ck_, p + "self_attn.o_proj.weight", H, int64_t(s.n_heads) * s.v_head_dim, 1,
                          scales_, bo, bi);
    if (s.sinks) w.sinks = load_vector(ck_, p + "self_attn.attention_sink_bias", s.n_heads);
    w.moe = s.moe;
    if (w.moe) {
      w.experts = load_moe(ck_, p, *cfg_.moe, H, scales_, bo, bi);
    } else {
      const int32_t I = cfg_.intermediate_size;
      w.gate = load_linear_fp8(ck_, p + "mlp.gate_proj.weight", I, H, 1, scales_, bo, bi);
      w.up = load_linear_fp8(ck_, p + "mlp.up_proj.weight", I, H, 1, scales_, bo, bi);
      w.down = load_linear_fp8(ck_, p + "mlp.down_proj.weight", H, I, 1, scales_, bo, bi);
    }
    return w;
  }

  // x [n, H] += o_proj(attention(input_norm(x))), K/V of positions pos0.. written to the cache.
  void attention(int32_t il, float* x, int32_t n, int32_t pos0, int32_t seq) {
    const LayerSpec& s = cfg_.layers[il];
    const MiMoLayer& w = layers_[il];
    const int32_t H = cfg_.hidden_size;
    const int64_t nq = int64_t(s.n_heads) * s.head_dim, nk = int64_t(s.n_kv_heads) * s.head_dim,
                  nv = int64_t(s.n_kv_heads) * s.v_head_dim;
    a_.resize(size_t(n) * H);
    q_.resize(size_t(n) * nq);
    k_.resize(size_t(n) * nk);
    v_.resize(size_t(n) * nv);
    o_.resize(size_t(n) * s.n_heads * s.v_head_dim);
    pos_.resize(n);
    std::iota(pos_.begin(), pos_.end(), pos0);
    ops::rms_norm(x, w.in_norm.data(), n, H, cfg_.rms_norm_eps, a_.data(), &pool_);
    if (w.fused) {
      const int64_t rows = nq + nk + nv, T = cfg_.mimo->ckpt_tp;
      t_.resize(size_t(n) * rows);
      ops::matmul(a_.data(), n, w.qkv, t_.data(), pool_);  // [n, T·(q_s + k_s + v_s)]
      for (int32_t r = 0; r < n; ++r) {
        const float* src = t_.data() + size_t(r) * rows;
        for (int64_t j = 0; j < T; ++j) {
          const float* sh = src + j * (w.q_s + w.k_s + w.v_s);
          std::copy_n(sh, w.q_s, q_.data() + size_t(r) * nq + j * w.q_s);
          std::copy_n(sh + w.q_s, w.k_s, k_.data() + size_t(r) * nk + j * w.k_s);
          std::copy_n(sh + w.q_s + w.k_s, w.v_s, v_.data() + size_t(r) * nv + j * w.v_s);
        }
      }
    } else {
      ops::matmul(a_.data(), n, w.q, q_.data(), pool_);  // [n, nh*hd]
      ops::matmul(a_.data(), n, w.k, k_.data(), pool_);  // [n, nkv*hd]
      ops::matmul(a_.data(), n, w.v, v_.data(), pool_);  // [n, nkv*vd]
    }
    const float vs = cfg_.mimo->attention_value_scale;
    if (vs != 1.0f)
      for (float& f : v_) f *= vs;  // before the cache write (HF scales V before cache.update)
    const RopeTable& rope = ropes_[il];
    const int32_t half = rope.n_rot() / 2;
    cos_.resize(size_t(n) * half);
    sin_.resize(size_t(n) * half);
    rope.fill(pos_.data(), n, cos_.data(), sin_.data());
    ops::rope_neox(q_.data(), n, nq, s.n_heads, s.head_dim, rope.n_rot(), cos_.data(), sin_.data(), &pool_);
    ops::rope_neox(k_.data(), n, nk, s.n_kv_heads, s.head_dim, rope.n_rot(), cos_.data(), sin_.data(), &pool_);
    kv_.write(seq, il, pos0, n, k_.data(), v_.data());
    const AttnParams p = attn_params(s, w.sinks);
    ops::attention(q_.data(), pos_.data(), n, kv_.k(seq, il), kv_.v(seq, il), kv_.pos(seq, il),
                   kv_.n_slots(seq, il), p, o_.data(), pool_);
    ops::matmul(o_.data(), n, w.o, a_.data(), pool_);  // [n, H]
    ops::add_inplace(x, a_.data(), int64_t(n) * H, &pool_);
  }

  void mlp(int32_t il, float* x, int32_t n) {
    const MiMoLayer& w = layers_[il];
    const int32_t H = cfg_.hidden_size;
    a_.resize(size_t(n) * H);
    ops::rms_norm(x, w.post_norm.data(), n, H, cfg_.rms_norm_eps, a_.data(), &pool_);
    y_.resize(size_t(n) * H);
    if (w.moe) {
      moe_forward(w.experts, *cfg_.moe, a_.data(), n, H, y_.data(), moe_sc_, pool_);
    } else {
      const int32_t I = cfg_.intermediate_size;
      g_.resize(size_t(n) * I);
      u_.resize(size_t(n) * I);
      ops::matmul(a_.data(), n, w.gate, g_.data(), pool_);  // [n, I]
      ops::matmul(a_.data(), n, w.up, u_.data(), pool_);    // [n, I]
      ops::silu_mul(g_.data(), u_.data(), int64_t(n) * I, g_.data(), &pool_);
      ops::matmul(g_.data(), n, w.down, y_.data(), pool_);  // [n, H]
    }
    ops::add_inplace(x, y_.data(), int64_t(n) * H, &pool_);
  }

  // Copies the residual stream of rows [row0, row0 + n) into every aux column equal to `index`
  // (aux 0 = embedding output; aux i = after layer i-1, pre final norm — also for the last layer).

  ModelConfig cfg_;
  Checkpoint ck_;
  ThreadPool& pool_;
  Fp8ScaleStore scales_;
  OutputHead head_;
  std::vector<float> head_tmp_;
  std::vector<MiMoLayer> layers_;
  std::vector<RopeTable> ropes_;  // per layer (theta and rotated dims of its kind)
  KvCache kv_;
  MoEScratch moe_sc_;
  std::vector<float> x_, a_, q_, k_, v_, o_, t_, y_, g_, u_, cos_, sin_;
  std::vector<int32_t> pos_;
};

}  // namespace

std::unique_ptr<CausalLM> make_mimo_v2(ModelConfig cfg, const LoadOptions& opts, ThreadPool& pool) {
  return std::make_unique<MiMoModel>(std::move(cfg), opts, pool);
}

}  // namespace dfl
