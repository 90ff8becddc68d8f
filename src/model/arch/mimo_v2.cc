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
// This file only loads: the forward is the shared decoder skeleton (model/decoder.h), so the
// load-time weights formats (--weights q8, prepacking) apply to MiMo like to every family.
#include <memory>

#include "core/error.h"
#include "model/arch/families.h"
#include "model/decoder.h"
#include "model/fp8_weights.h"
#include "model/moe.h"
#include "model/weights.h"

namespace dfl {

namespace {

class MiMoModel final : public DecoderLM {
 public:
  MiMoModel(ModelConfig cfg, const LoadOptions& opts, ThreadPool& pool)
      : DecoderLM(std::move(cfg), pool) {
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
    for (int32_t il = 0; il < cfg_.n_layers; ++il) {
      layers_.push_back(load_layer(il));
      convert_layer(layers_.back(), opts, &pool);
    }
    finish_load(opts, {"model.mtp.", "mtp.", "visual.", "model.visual.", "audio_encoder.",
                       "model.audio_encoder.", "speech_embeddings.", "model.speech_embeddings."});
  }

 private:
  DecoderLayer load_layer(int32_t il) {
    const LayerSpec& s = cfg_.layers[il];
    const MiMoSpec& m = *cfg_.mimo;
    const int32_t H = cfg_.hidden_size, T = m.ckpt_tp;
    const int64_t bo = m.fp8_block_out, bi = m.fp8_block_in;
    const std::string p = str("model.layers.", il, ".");
    DecoderLayer l;
    AttnWeights& a = l.attn;
    a.norm = load_vector(ck_, p + "input_layernorm.weight", H);
    const int64_t nq = int64_t(s.n_heads) * s.head_dim, nk = int64_t(s.n_kv_heads) * s.head_dim,
                  nv = int64_t(s.n_kv_heads) * s.v_head_dim;
    a.fused = m.fused_qkv;
    if (a.fused) {
      a.shards = T;
      a.q_s = nq / T;
      a.k_s = nk / T;
      a.v_s = nv / T;
      a.qkv = load_linear_fp8(ck_, p + "self_attn.qkv_proj.weight", nq + nk + nv, H, T, scales_, bo, bi);
    } else {
      a.q = load_linear_fp8(ck_, p + "self_attn.q_proj.weight", nq, H, T, scales_, bo, bi);
      a.k = load_linear_fp8(ck_, p + "self_attn.k_proj.weight", nk, H, T, scales_, bo, bi);
      a.v = load_linear_fp8(ck_, p + "self_attn.v_proj.weight", nv, H, T, scales_, bo, bi);
    }
    a.o = load_linear_fp8(ck_, p + "self_attn.o_proj.weight", H, int64_t(s.n_heads) * s.v_head_dim,
                          1, scales_, bo, bi);
    if (s.sinks) a.sinks = load_vector(ck_, p + "self_attn.attention_sink_bias", s.n_heads);
    a.value_scale = m.attention_value_scale;
    FfnWeights& f = l.ffn;
    f.norm = load_vector(ck_, p + "post_attention_layernorm.weight", H);
    if (s.moe) {
      f.kind = FfnKind::kMoE;
      f.moe = load_moe(ck_, p, *cfg_.moe, H, scales_, bo, bi);
    } else {
      const int32_t I = cfg_.intermediate_size;
      f.gate = load_linear_fp8(ck_, p + "mlp.gate_proj.weight", I, H, 1, scales_, bo, bi);
      f.up = load_linear_fp8(ck_, p + "mlp.up_proj.weight", I, H, 1, scales_, bo, bi);
      f.down = load_linear_fp8(ck_, p + "mlp.down_proj.weight", H, I, 1, scales_, bo, bi);
    }
    return l;
  }

  Fp8ScaleStore scales_;
};

}  // namespace

std::unique_ptr<CausalLM> make_mimo_v2(ModelConfig cfg, const LoadOptions& opts, ThreadPool& pool) {
  return std::make_unique<MiMoModel>(std::move(cfg), opts, pool);
}

}  // namespace dfl
