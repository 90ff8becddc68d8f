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
#include "model/config_json.h"
#include "model/decoder.h"
#include "model/family.h"
#include "model/fp8_weights.h"
#include "model/moe.h"
#include "model/weights.h"

namespace dfl {

namespace {

using namespace cfg;

// MiMo-V2-Flash (MiMoV2FlashForCausalLM) and MiMo-V2.5 (MiMoV2ForCausalLM): hub config keys
// (TARGETS-SPEC §3.1-3.2), with the transformers-5 spellings (layer_types, mlp_layer_types,
// per-kind rope_parameters, rms_norm_eps) accepted as fallbacks.
void parse_mimo(const nlohmann::json& root, ModelConfig& c, const ConfigOptions& opts) {
  c.family = Family::kMiMoV2;
  parse_common(root, c);
  if (auto e = opt_num(root, "layernorm_epsilon")) c.rms_norm_eps = static_cast<float>(*e);
  else if (!find_key(root, "rms_norm_eps")) c.rms_norm_eps = 1e-5f;
  DFL_CHECK(c.rms_norm_eps > 0, "config: layernorm_epsilon must be positive");
  const int32_t L = c.n_layers;
  MiMoSpec m;

  // Layer kinds: hybrid_layer_pattern (0 full, 1 sliding), else layer_types, else HF's default
  // (layer 0 and every 6th layer full).
  std::vector<int> sliding(L, 0);
  if (auto p = opt_flags(root, "hybrid_layer_pattern", L)) {
    sliding = *p;
  } else if (const json* lt = find_key(root, "layer_types")) {
    DFL_CHECK(lt->is_array() && static_cast<int64_t>(lt->size()) == L,
              "config: layer_types must list num_hidden_layers entries");
    for (int il = 0; il < L; ++il) {
      DFL_CHECK((*lt)[il].is_string(), "config: layer_types entries must be strings");
      const std::string t = (*lt)[il].get<std::string>();
      DFL_CHECK(t == "full_attention" || t == "sliding_attention", "config: unknown layer type '",
                t, "'");
      sliding[il] = t == "sliding_attention";
    }
  } else {
    for (int il = 0; il < L; ++il) sliding[il] = !(il == 0 || (il + 1) % 6 == 0);
  }
  // MLP kinds: moe_layer_freq (0 dense, 1 MoE), else mlp_layer_types, else layer 0 dense.
  std::vector<int> moe(L, 1);
  moe[0] = 0;
  if (const json* f = find_key(root, "moe_layer_freq")) {
    DFL_CHECK(f->is_array(), "config: moe_layer_freq must be a per-layer list (an integer "
              "frequency is not supported for MiMo)");
    moe = *opt_flags(root, "moe_layer_freq", L);
  } else if (const json* mt = find_key(root, "mlp_layer_types")) {
    DFL_CHECK(mt->is_array() && static_cast<int64_t>(mt->size()) == L,
              "config: mlp_layer_types must list num_hidden_layers entries");
    for (int il = 0; il < L; ++il) {
      DFL_CHECK((*mt)[il].is_string(), "config: mlp_layer_types entries must be strings");
      const std::string t = (*mt)[il].get<std::string>();
      DFL_CHECK(t == "dense" || t == "sparse", "config: unknown mlp layer type '", t, "'");
      moe[il] = t == "sparse";
    }
  }

  // Window W and its edge.
  auto sw = opt_int(root, "sliding_window");
  if (!sw) sw = opt_int(root, "sliding_window_size");
  const bool any_sliding = std::count(sliding.begin(), sliding.end(), 1) > 0;
  DFL_CHECK(!any_sliding || sw, "config: sliding layers but no sliding_window");
  if (sw) {
    DFL_CHECK(*sw >= 1 && *sw <= (1 << 24), "config: sliding_window ", *sw, " is out of range");
    m.sliding_window = static_cast<int32_t>(*sw);
  }
  if (auto e = opt_str(root, "dfl_window_edge")) m.window_edge = parse_window_edge(*e, "config: dfl_window_edge");
  if (opts.window_edge) m.window_edge = *opts.window_edge;

  // Per-kind attention geometry.
  LayerSpec full;
  full.n_heads = req_int(root, "num_attention_heads", 1, 4096);
  full.n_kv_heads = req_int(root, "num_key_value_heads", 1, 4096);
  full.head_dim = static_cast<int32_t>(opt_int(root, "head_dim").value_or(c.hidden_size / full.n_heads));
  full.v_head_dim = static_cast<int32_t>(opt_int(root, "v_head_dim").value_or(full.head_dim));
  LayerSpec swa;
  swa.n_heads = static_cast<int32_t>(opt_int(root, "swa_num_attention_heads").value_or(full.n_heads));
  // transformers' in-library MiMo hard-codes twice the full layers' kv heads.
  swa.n_kv_heads = static_cast<int32_t>(opt_int(root, "swa_num_key_value_heads").value_or(2 * full.n_kv_heads));
  swa.head_dim = static_cast<int32_t>(opt_int(root, "swa_head_dim").value_or(full.head_dim));
  swa.v_head_dim = static_cast<int32_t>(opt_int(root, "swa_v_head_dim").value_or(full.v_head_dim));
  for (LayerSpec* l : {&full, &swa}) {
    DFL_CHECK(l->n_heads > 0 && l->n_kv_heads > 0 && l->n_heads % l->n_kv_heads == 0,
              "config: attention heads (", l->n_heads, ") must be a multiple of kv heads (",
              l->n_kv_heads, ")");
    DFL_CHECK(l->head_dim > 0 && l->head_dim <= 4096 && l->v_head_dim > 0 && l->v_head_dim <= 4096,
              "config: head dims out of range");
  }
  // RoPE: theta per kind, partial rotary on the leading int(head_dim × factor) dims (even).
  double prf = opt_num(root, "partial_rotary_factor").value_or(0.334);  // HF's MiMo default
  double theta_full = opt_num(root, "rope_theta").value_or(5e6);
  double theta_swa = opt_num(root, "swa_rope_theta").value_or(1e4);
  if (const json* rp = find_key(root, "rope_parameters")) {
    DFL_CHECK(rp->is_object(), "config: rope_parameters must be an object");
    if (const json* f = find_key(*rp, "full_attention")) {
      if (auto t = opt_num(*f, "rope_theta")) theta_full = *t;
      if (auto p = opt_num(*f, "partial_rotary_factor")) prf = *p;
      if (auto t = opt_str(*f, "rope_type")) DFL_CHECK(*t == "default", "config: MiMo rope_type '", *t, "' is not supported");
    }
    if (const json* s = find_key(*rp, "sliding_attention")) {
      if (auto t = opt_num(*s, "rope_theta")) theta_swa = *t;
      if (auto t = opt_str(*s, "rope_type")) DFL_CHECK(*t == "default", "config: MiMo rope_type '", *t, "' is not supported");
    }
  }
  DFL_CHECK(prf > 0 && prf <= 1.0, "config: partial_rotary_factor must be in (0, 1]");
  DFL_CHECK(theta_full > 0 && theta_swa > 0, "config: rope thetas must be positive");
  for (auto [l, theta] : {std::pair{&full, theta_full}, std::pair{&swa, theta_swa}}) {
    l->rope.theta = static_cast<float>(theta);
    l->rope.n_rot = static_cast<int32_t>(l->head_dim * prf);
    l->rope.n_rot -= l->rope.n_rot % 2;
  }
  full.sinks = opt_bool(root, "add_full_attention_sink_bias").value_or(false);
  swa.sinks = opt_bool(root, "add_swa_attention_sink_bias").value_or(true);
  full.attn = AttnKind::kFull;
  full.window = causal_window(AttnKind::kFull, 0);
  swa.attn = AttnKind::kSliding;
  swa.window = causal_window(AttnKind::kSliding, m.sliding_window, m.window_edge);

  c.layers.resize(L);
  for (int il = 0; il < L; ++il) {
    c.layers[il] = sliding[il] ? swa : full;
    c.layers[il].moe = moe[il] != 0;
  }

  m.attention_value_scale = static_cast<float>(opt_num(root, "attention_value_scale").value_or(1.0));
  m.ckpt_tp = full.n_kv_heads;
  if (auto layout = opt_str(root, "attention_projection_layout")) {
    DFL_CHECK(*layout == "fused_qkv" || *layout == "split", "config: attention_projection_layout '",
              *layout, "' is not supported (fused_qkv or split)");
    m.fused_qkv = *layout == "fused_qkv";
  }
  for (const LayerSpec* l : {&full, &swa}) {
    DFL_CHECK(l->n_heads % m.ckpt_tp == 0, "config: ", l->n_heads, " attention heads do not split into ",
              m.ckpt_tp, " checkpoint shards");
    DFL_CHECK(l->n_kv_heads % m.ckpt_tp == 0, "config: ", l->n_kv_heads,
              " kv heads do not split into ", m.ckpt_tp, " checkpoint shards");
  }
  if (const json* q = find_key(root, "quantization_config")) {
    DFL_CHECK(q->is_object(), "config: quantization_config must be an object");
    const std::string method = opt_str(*q, "quant_method").value_or("");
    DFL_CHECK(method == "fp8", "config: quantization method '", method, "' is not supported (fp8)");
    m.fp8 = true;
    if (auto fmt = opt_str(*q, "fmt")) DFL_CHECK(*fmt == "e4m3", "config: fp8 fmt '", *fmt, "' is not supported (e4m3)");
    if (const json* b = find_key(*q, "weight_block_size")) {
      DFL_CHECK(b->is_array() && b->size() == 2, "config: weight_block_size must be [rows, cols]");
      m.fp8_block_out = static_cast<int32_t>(as_int((*b)[0], "weight_block_size"));
      m.fp8_block_in = static_cast<int32_t>(as_int((*b)[1], "weight_block_size"));
      DFL_CHECK(m.fp8_block_out > 0 && m.fp8_block_in > 0 && m.fp8_block_out <= 4096 &&
                    m.fp8_block_in <= 4096,
                "config: weight_block_size out of range");
    }
  }

  if (std::count(moe.begin(), moe.end(), 1) > 0) {
    MoESpec e;
    e.n_routed_experts = req_int(root, "n_routed_experts", 1, 1 << 16);
    e.n_experts_per_tok = req_int(root, "num_experts_per_tok", 1, 1 << 16);
    e.moe_intermediate_size = req_int(root, "moe_intermediate_size", 1, 1 << 22);
    e.n_group = static_cast<int32_t>(opt_int(root, "n_group").value_or(1));
    e.topk_group = static_cast<int32_t>(opt_int(root, "topk_group").value_or(1));
    e.norm_topk_prob = opt_bool(root, "norm_topk_prob").value_or(true);
    e.routed_scaling_factor = static_cast<float>(opt_num(root, "routed_scaling_factor").value_or(1.0));
    e.scoring_func = opt_str(root, "scoring_func").value_or("sigmoid");
    e.topk_method = opt_str(root, "topk_method").value_or("noaux_tc");
    e.router_dtype = opt_str(root, "moe_router_dtype").value_or("float32");
    DFL_CHECK(e.scoring_func == "sigmoid", "config: scoring_func '", e.scoring_func,
              "' is not supported (sigmoid)");
    DFL_CHECK(e.topk_method == "noaux_tc", "config: topk_method '", e.topk_method,
              "' is not supported (noaux_tc)");
    DFL_CHECK(e.n_experts_per_tok <= e.n_routed_experts, "config: num_experts_per_tok > n_routed_experts");
    DFL_CHECK(e.n_group >= 1 && e.n_routed_experts % e.n_group == 0 && e.topk_group >= 1 &&
                  e.topk_group <= e.n_group,
              "config: n_group / topk_group do not divide the experts");
    DFL_CHECK(e.n_routed_experts / e.n_group >= 2 || e.n_group == 1,
              "config: each expert group needs at least 2 experts");
    DFL_CHECK(e.n_experts_per_tok <= e.topk_group * (e.n_routed_experts / e.n_group),
              "config: num_experts_per_tok exceeds the experts in topk_group groups");
    if (auto sh = opt_int(root, "n_shared_experts"))
      DFL_CHECK(*sh == 0, "config: shared experts are not supported for MiMo");
    c.moe = e;
  }
  c.mimo = m;
}

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
    load_layers(opts, [&](int32_t il) {
      DecoderLayer l = load_layer(il);
      convert_layer(l, opts, &pool);
      return l;
    });
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

std::unique_ptr<CausalLM> make_mimo_v2(ModelConfig cfg, const LoadOptions& opts, ThreadPool& pool) {
  return std::make_unique<MiMoModel>(std::move(cfg), opts, pool);
}

}  // namespace

const FamilyEntry kMiMoV2Family = {Family::kMiMoV2,
                                   {"MiMoV2FlashForCausalLM", "MiMoV2ForCausalLM"},
                                   {"mimo_v2_flash", "mimo_v2"}, nullptr, parse_mimo, make_mimo_v2};

}  // namespace dfl
