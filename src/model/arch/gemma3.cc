// Gemma 3 text (Gemma3ForCausalLM; the text part of Gemma3ForConditionalGeneration):
// embedding × sqrt(H) → L × [RMSNorm → attention (per-head q/k RMSNorm before NeoX RoPE, GQA,
// scale query_pre_attn_scalar^-0.5) → RMSNorm → residual → RMSNorm → GeGLU (tanh GELU) → RMSNorm
// → residual] → RMSNorm → tied lm_head (→ final soft-cap when the config has one, Gemma 2 style).
// Every RMSNorm is zero-centred: stored w, applied as (1 + w) (folded at load).
// Layer i is global (full attention) iff (i + 1) % sliding_window_pattern == 0 (6), else a causal
// sliding window of W keys incl. the query (HF's mask) — or as `layer_types` lists; RoPE theta
// rope_local_base_freq (1e4) on sliding layers, rope_theta (1e6, linear ×8 on 4B+ when
// rope_scaling says so) on global ones; transformers-5 `rope_parameters` per layer type too.
// Only loading and config live here: the forward is the shared decoder skeleton.
#include <algorithm>
#include <cmath>
#include <memory>

#include "core/error.h"
#include "model/arch/gemma_common.h"
#include "model/config_json.h"
#include "model/decoder.h"
#include "model/family.h"
#include "model/gguf_dialect.h"
#include "model/weights.h"

namespace dfl {

namespace {

using namespace cfg;

using namespace gemma;

void parse_gemma3(const json& root, ModelConfig& c, const ConfigOptions&) {
  const json& tr = text_root(root);
  parse_common(tr, c);
  if (!find_key(tr, "max_position_embeddings")) c.max_position_embeddings = 131072;
  parse_gemma_head(tr, c);
  DFL_CHECK(!opt_num(tr, "attn_logit_softcapping").has_value(),
            "config: attn_logit_softcapping (Gemma 2 attention soft-capping) is not supported yet");
  DFL_CHECK(!opt_bool(tr, "use_bidirectional_attention").value_or(false),
            "config: use_bidirectional_attention=true (EmbeddingGemma) is not a causal LM");
  c.norm_plus_one = opt_bool(root, "dfl_norm_plus_one").value_or(true);  // false: GGUF (folded)
  const LayerSpec proto = base_layer(tr, c);
  const double qpas = opt_num(tr, "query_pre_attn_scalar").value_or(proto.head_dim);
  DFL_CHECK(qpas > 0, "config: query_pre_attn_scalar must be positive");
  const auto sw = opt_int(tr, "sliding_window");
  const std::vector<bool> glob = global_layers(tr, c.n_layers);
  c.layers.assign(c.n_layers, proto);
  for (int32_t il = 0; il < c.n_layers; ++il) {
    LayerSpec& l = c.layers[il];
    const bool global = glob[il];
    l.attn = global ? AttnKind::kFull : AttnKind::kSliding;
    if (!global) DFL_CHECK(sw && *sw >= 1 && *sw <= (1 << 24), "config: sliding layers need a sliding_window");
    l.window = causal_window(l.attn, global ? 0 : int32_t(*sw));
    l.rope = rope_of_kind(tr, global, l.head_dim);
    l.attn_scale = static_cast<float>(1.0 / std::sqrt(qpas));
  }
}

// GGUF (llama.cpp's converter, `general.architecture` = gemma3): the metadata as the HF config
// it came from. llama.cpp hard-codes what the file does not store: sliding_window_pattern 6, the
// local RoPE base 1e4, query_pre_attn_scalar = head_dim (hidden / heads on the 62-layer 27B), and
// the converter folded the +1 of every norm into the stored weights (so norms are applied as w).
json gemma3_gguf_config(const GgufFile& f) {
  const std::string a = "gemma3.";
  json c = gguf_decoder_geometry(f, "gemma3", 131072);
  c["architectures"] = {"Gemma3ForCausalLM"};
  c["model_type"] = "gemma3_text";
  const uint32_t H = c["hidden_size"], L = c["num_hidden_layers"], nh = c["num_attention_heads"],
                 hd = c["head_dim"];
  c["v_head_dim"] = f.get_u32_or(a + "attention.value_length", hd);
  c["sliding_window"] = f.get_u32(a + "attention.sliding_window");
  c["sliding_window_pattern"] = f.get_u32_or(a + "attention.sliding_window_pattern", 6);
  c["rope_theta"] = f.get_f32_or(a + "rope.freq_base", 1e6f);
  c["rope_local_base_freq"] = f.get_f32_or(a + "rope.freq_base_swa", 1e4f);
  if (f.has(a + "rope.scaling.type") && f.get_string(a + "rope.scaling.type") != "none")
    c["rope_scaling"] = {{"rope_type", f.get_string(a + "rope.scaling.type")},
                         {"factor", f.get_f32(a + "rope.scaling.factor")}};
  c["query_pre_attn_scalar"] = L == 62 ? H / nh : hd;
  if (f.has(a + "final_logit_softcapping"))
    c["final_logit_softcapping"] = f.get_f32(a + "final_logit_softcapping");
  const GgufTensor& emb = f.tensor("token_embd.weight");
  c["vocab_size"] = emb.rows();
  c["tie_word_embeddings"] = f.find_tensor("output.weight") == nullptr;
  c["dfl_norm_plus_one"] = false;
  return c;
}

class Gemma3Model final : public DecoderLM {
 public:
  Gemma3Model(ModelConfig cfg, const LoadOptions& opts, ThreadPool& pool)
      : DecoderLM(std::move(cfg), pool) {
    const int32_t H = cfg_.hidden_size, V = cfg_.vocab_size, I = cfg_.intermediate_size;
    // Text weights: "model." (Gemma3ForCausalLM), "model.language_model." (transformers 5
    // multimodal) or "language_model.model." (transformers 4 multimodal).
    const std::string p = text_prefix(ck_);
    // Zero-centred norms, unless a GGUF converter already folded the 1 in (config.norm_plus_one).
    const NormStyle plus1 = cfg_.norm_plus_one ? NormStyle::kZeroCentred : NormStyle::kPlain;
    head_.vocab = V;
    head_.hidden = H;
    head_.eps = cfg_.rms_norm_eps;
    head_.embed = load_linear(ck_, p + "embed_tokens.weight", V, H);
    cfg_.embed_scale = embed_scale_in(head_.embed.dtype, cfg_.embed_scale);
    head_.final_norm = load_norm(ck_, p + "norm.weight", H, plus1);
    head_.lm_head = cfg_.tie_word_embeddings ? head_.embed : load_linear(ck_, "lm_head.weight", V, H);
    if (cfg_.tie_word_embeddings) (void)ck_.find("lm_head.weight");
    load_layers(opts, [&](int32_t il) {
      const LayerSpec& s = cfg_.layers[il];
      const std::string q = str(p, "layers.", il, ".");
      DecoderLayer l;
      AttnWeights& a = l.attn;
      a.norm = load_norm(ck_, q + "input_layernorm.weight", H, plus1);
      a.q = load_linear(ck_, q + "self_attn.q_proj.weight", int64_t(s.n_heads) * s.head_dim, H);
      a.k = load_linear(ck_, q + "self_attn.k_proj.weight", int64_t(s.n_kv_heads) * s.head_dim, H);
      a.v = load_linear(ck_, q + "self_attn.v_proj.weight", int64_t(s.n_kv_heads) * s.v_head_dim, H);
      a.o = load_linear(ck_, q + "self_attn.o_proj.weight", H, int64_t(s.n_heads) * s.v_head_dim);
      a.q_norm = load_norm(ck_, q + "self_attn.q_norm.weight", s.head_dim, plus1);
      a.k_norm = load_norm(ck_, q + "self_attn.k_norm.weight", s.head_dim, plus1);
      a.post_norm = load_norm(ck_, q + "post_attention_layernorm.weight", H, plus1);
      FfnWeights& f = l.ffn;
      f.kind = FfnKind::kGeGLU;
      f.norm = load_norm(ck_, q + "pre_feedforward_layernorm.weight", H, plus1);
      f.post_norm = load_norm(ck_, q + "post_feedforward_layernorm.weight", H, plus1);
      f.gate = load_linear(ck_, q + "mlp.gate_proj.weight", I, H);
      f.up = load_linear(ck_, q + "mlp.up_proj.weight", I, H);
      f.down = load_linear(ck_, q + "mlp.down_proj.weight", H, I);
      convert_layer(l, opts, &pool);
      return l;
    });
    // Multimodal checkpoints: the vision tower and projector are not used (text input only).
    finish_load(opts, multimodal_prefixes());
  }
};

std::unique_ptr<CausalLM> make_gemma3(ModelConfig cfg, const LoadOptions& opts, ThreadPool& pool) {
  return std::make_unique<Gemma3Model>(std::move(cfg), opts, pool);
}

}  // namespace

const FamilyEntry kGemma3Family = {Family::kGemma3,
                                   {"Gemma3ForCausalLM", "Gemma3ForConditionalGeneration"},
                                   {"gemma3_text", "gemma3"},
                                   nullptr,
                                   parse_gemma3,
                                   make_gemma3,
                                   {"gemma3"},
                                   gemma3_gguf_config,
                                   gemma::gguf_tensor_name};

}  // namespace dfl
