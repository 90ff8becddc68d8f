#include "model/arch/gemma_common.h"

#include <cmath>
#include <utility>

#include "core/dtype.h"
#include "core/error.h"
#include "model/config_json.h"
#include "model/gguf_dialect.h"

namespace dfl::gemma {

using namespace cfg;

const json& text_root(const json& root) {
  const json* t = find_key(root, "text_config");
  return t && t->is_object() ? *t : root;
}

std::vector<bool> global_layers(const json& tr, int32_t n_layers) {
  const int64_t pattern = opt_int(tr, "sliding_window_pattern")
                              .value_or(opt_int(tr, "_sliding_window_pattern").value_or(6));
  DFL_CHECK(pattern >= 1, "config: sliding_window_pattern must be positive");
  const json* lt = find_key(tr, "layer_types");
  DFL_CHECK(!lt || (lt->is_array() && int64_t(lt->size()) == n_layers),
            "config: layer_types must list num_hidden_layers entries");
  std::vector<bool> g(n_layers);
  for (int32_t il = 0; il < n_layers; ++il) {
    g[il] = (il + 1) % pattern == 0;
    if (!lt) continue;
    DFL_CHECK((*lt)[il].is_string(), "config: layer_types entries must be strings");
    const std::string t = (*lt)[il].get<std::string>();
    DFL_CHECK(t == "full_attention" || t == "sliding_attention", "config: unknown layer type '", t, "'");
    g[il] = t == "full_attention";
  }
  return g;
}

RopeSpec rope_of_kind(const json& tr, bool global, int32_t head_dim) {
  json r = json::object();
  if (const json* rp = find_key(tr, "rope_parameters"); rp && rp->is_object() &&
      (rp->contains("full_attention") || rp->contains("sliding_attention"))) {
    const char* kind = global ? "full_attention" : "sliding_attention";
    DFL_CHECK(rp->contains(kind) && (*rp)[kind].is_object(), "config: rope_parameters has no '",
              kind, "' entry");
    r["rope_parameters"] = (*rp)[kind];
  } else if (global) {
    if (const json* t = find_key(tr, "rope_theta")) r["rope_theta"] = *t;
    else r["rope_theta"] = 1000000.0;
    if (const json* s = find_key(tr, "rope_scaling"); s && !s->is_null()) r["rope_scaling"] = *s;
  } else {
    r["rope_theta"] = opt_num(tr, "rope_local_base_freq").value_or(10000.0);
  }
  if (const json* m = find_key(tr, "max_position_embeddings")) r["max_position_embeddings"] = *m;
  return parse_rope(r, head_dim);
}

void parse_gemma_head(const json& tr, ModelConfig& c) {
  c.tie_word_embeddings = opt_bool(tr, "tie_word_embeddings").value_or(true);
  const std::string act = opt_str(tr, "hidden_activation").value_or("gelu_pytorch_tanh");
  DFL_CHECK(act == "gelu_pytorch_tanh", "config: Gemma hidden_activation '", act,
            "' is not supported (only gelu_pytorch_tanh)");
  if (auto cap = opt_num(tr, "final_logit_softcapping")) {
    DFL_CHECK(*cap > 0, "config: final_logit_softcapping must be positive");
    c.final_logit_softcap = static_cast<float>(*cap);
  }
  c.embed_scale = std::sqrt(static_cast<float>(c.hidden_size));
}

float embed_scale_in(DType t, float s) { return t == DType::kBF16 ? bf16_to_f32(f32_to_bf16(s)) : s; }

std::string text_prefix(const Checkpoint& ck) {
  std::string p = "model.";
  for (const char* cand : {"model.", "model.language_model.", "language_model.model."})
    if (ck.contains(std::string(cand) + "embed_tokens.weight")) p = cand;
  return p;
}

std::string gguf_tensor_name(std::string_view n) {
  static const std::pair<const char*, const char*> kTop[] = {
      {"token_embd.weight", "model.embed_tokens.weight"},
      {"output_norm.weight", "model.norm.weight"},
      {"output.weight", "lm_head.weight"}};
  static const std::pair<const char*, const char*> kLayer[] = {
      {"attn_norm.weight", "input_layernorm.weight"},
      {"attn_q.weight", "self_attn.q_proj.weight"},
      {"attn_k.weight", "self_attn.k_proj.weight"},
      {"attn_v.weight", "self_attn.v_proj.weight"},
      {"attn_output.weight", "self_attn.o_proj.weight"},
      {"attn_q_norm.weight", "self_attn.q_norm.weight"},
      {"attn_k_norm.weight", "self_attn.k_norm.weight"},
      {"post_attention_norm.weight", "post_attention_layernorm.weight"},
      {"ffn_norm.weight", "pre_feedforward_layernorm.weight"},
      {"post_ffw_norm.weight", "post_feedforward_layernorm.weight"},
      {"ffn_gate.weight", "mlp.gate_proj.weight"},
      {"ffn_up.weight", "mlp.up_proj.weight"},
      {"ffn_down.weight", "mlp.down_proj.weight"},
      {"layer_output_scale.weight", "layer_scalar"},
      {"pre_ffw_norm_2.weight", "pre_feedforward_layernorm_2.weight"},
      {"post_ffw_norm_1.weight", "post_feedforward_layernorm_1.weight"},
      {"post_ffw_norm_2.weight", "post_feedforward_layernorm_2.weight"},
      {"ffn_gate_inp.weight", "router.proj.weight"},
      {"ffn_gate_inp.scale", "router.scale"},
      {"ffn_down_exps.scale", "router.per_expert_scale"},
      {"ffn_gate_up_exps.weight", "experts.gate_up_proj"},
      {"ffn_down_exps.weight", "experts.down_proj"}};
  return gguf_rename(n, kTop, kLayer, "model.layers.");  // unknown names: kept, refused later
}

const std::vector<std::string>& multimodal_prefixes() {
  static const std::vector<std::string> p = {
      "vision_tower.", "model.vision_tower.", "multi_modal_projector.", "model.multi_modal_projector.",
      "model.embed_vision.", "model.audio_tower.", "model.embed_audio."};
  return p;
}

}  // namespace dfl::gemma
