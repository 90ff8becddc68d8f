// Qwen3.5 / 3.6 / 3.8 hybrid text targets (Qwen3_5ForCausalLM, Qwen3_5ForConditionalGeneration,
// and the MoE ones: Qwen3_5Moe*, FFN = softmax top-k routed experts + gated shared expert;
// docs: ../shared/docs/TARGETS-SPEC.md §5): embedding → L × [RMSNorm_1p → token mixer →
// residual → RMSNorm_1p → SwiGLU → residual] → RMSNorm_1p → lm_head, where the token mixer is
// Gated DeltaNet (`linear_attention`, model/gdn.h) or gated full attention (`full_attention`:
// per-head [query | gate] q rows, zero-centred q/k norm, partial NeoX RoPE, σ(gate) on the
// output). All (1+w) norms are folded at load time. The config may be flat or nested in
// `text_config` (tensors then under `model.language_model.`); `mtp.*` (the MTP head) and
// `model.visual.*` (the vision tower) are skipped: text input only.
#include <cstdio>
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

void parse_qwen35(const nlohmann::json& root, ModelConfig& c, const ConfigOptions&) {
  c.family = Family::kQwen35;
  const json* tc = find_key(root, "text_config");
  DFL_CHECK(!tc || tc->is_object(), "config: text_config must be an object");
  json t = tc ? *tc : root;
  const bool moe = find_key(t, "num_experts") != nullptr;
  if (moe && !find_key(t, "intermediate_size"))  // MoE text configs have no dense MLP width
    t["intermediate_size"] = req_int(t, "moe_intermediate_size", 1, 1 << 22);
  parse_common(t, c);
  if (moe) {
    MoESpec m;
    m.n_routed_experts = req_int(t, "num_experts", 1, 1 << 16);
    m.n_experts_per_tok = req_int(t, "num_experts_per_tok", 1, m.n_routed_experts);
    m.moe_intermediate_size = req_int(t, "moe_intermediate_size", 1, 1 << 22);
    m.shared_intermediate_size =
        static_cast<int32_t>(opt_int(t, "shared_expert_intermediate_size").value_or(0));
    m.scoring_func = "softmax";
    m.topk_method = "greedy";
    m.norm_topk_prob = true;  // unconditional in Qwen3_5Moe
    c.moe = m;
  }
  if (tc)  // the top-level flag is what the ConditionalGeneration model ties by
    if (auto tie = opt_bool(root, "tie_word_embeddings")) c.tie_word_embeddings = *tie;
  LayerSpec proto = base_layer(t, c);
  proto.attn = AttnKind::kFull;
  proto.window = causal_window(AttnKind::kFull, 0);
  proto.out_gate = opt_bool(t, "attn_output_gate").value_or(true);
  DFL_CHECK(proto.v_head_dim == proto.head_dim, "config: Qwen3.5 needs v_head_dim == head_dim");
  GdnSpec g;
  g.n_k_heads = req_int(t, "linear_num_key_heads", 1, 4096);
  g.n_v_heads = req_int(t, "linear_num_value_heads", 1, 4096);
  g.d_k = req_int(t, "linear_key_head_dim", 1, 4096);
  g.d_v = req_int(t, "linear_value_head_dim", 1, 4096);
  g.conv_kernel = static_cast<int32_t>(opt_int(t, "linear_conv_kernel_dim").value_or(4));
  DFL_CHECK(g.conv_kernel >= 1 && g.conv_kernel <= 16, "config: linear_conv_kernel_dim out of range");
  DFL_CHECK(g.n_v_heads % g.n_k_heads == 0, "config: linear_num_value_heads (", g.n_v_heads,
            ") must be a multiple of linear_num_key_heads (", g.n_k_heads, ")");
  c.gdn = g;
  c.layers.assign(c.n_layers, proto);
  if (const json* lt = find_key(t, "layer_types")) {
    DFL_CHECK(lt->is_array() && int64_t(lt->size()) == c.n_layers, "config: layer_types must be a "
              "list of num_hidden_layers entries");
    for (int32_t il = 0; il < c.n_layers; ++il) {
      const json& e = (*lt)[il];
      DFL_CHECK(e.is_string(), "config: layer_types entries must be strings");
      const std::string k = e.get<std::string>();
      DFL_CHECK(k == "linear_attention" || k == "full_attention", "config: layer type '", k,
                "' is not linear_attention or full_attention");
      c.layers[il].mixer = k == "linear_attention" ? MixerKind::kGatedDeltaNet : MixerKind::kAttention;
    }
  } else {
    const int32_t every = static_cast<int32_t>(opt_int(t, "full_attention_interval").value_or(4));
    DFL_CHECK(every >= 1, "config: full_attention_interval must be positive");
    for (int32_t il = 0; il < c.n_layers; ++il)
      c.layers[il].mixer = (il + 1) % every == 0 ? MixerKind::kAttention : MixerKind::kGatedDeltaNet;
  }
  for (auto& l : c.layers) l.moe = moe;
  c.skipped_prefixes = {"mtp.", "model.visual."};
}

class Qwen35Model final : public DecoderLM {
 public:
  Qwen35Model(ModelConfig cfg, const LoadOptions& opts, ThreadPool& pool)
      : DecoderLM(std::move(cfg), pool) {
    const int32_t H = cfg_.hidden_size, V = cfg_.vocab_size;
    const std::string m = ck_.contains("model.language_model.embed_tokens.weight")
                              ? "model.language_model."
                              : "model.";
    head_.vocab = V;
    head_.hidden = H;
    head_.eps = cfg_.rms_norm_eps;
    head_.embed = load_linear(ck_, m + "embed_tokens.weight", V, H);
    head_.final_norm = load_norm(ck_, m + "norm.weight", H, NormStyle::kZeroCentred);
    if (cfg_.tie_word_embeddings) {
      head_.lm_head = head_.embed;
      (void)ck_.find("lm_head.weight");
    } else {
      head_.lm_head = load_linear(ck_, "lm_head.weight", V, H);
    }
    load_layers(opts, [&](int32_t il) { return load_layer(str(m, "layers.", il, "."), cfg_.layers[il], opts); });
    size_t skipped = 0;
    for (const auto& n : ck_.names())
      for (const auto& p : cfg_.skipped_prefixes) skipped += n.rfind(p, 0) == 0;
    if (skipped)
      std::fprintf(stderr, "note: %s: %zu mtp.* / model.visual.* tensors not loaded (text-only "
                   "target; the MTP head is not used)\n", cfg_.dir.c_str(), skipped);
    finish_load(opts, cfg_.skipped_prefixes);
  }

 private:
  DecoderLayer load_layer(const std::string& p, const LayerSpec& s, const LoadOptions& opts) {
    const int32_t H = cfg_.hidden_size, I = cfg_.intermediate_size;
    DecoderLayer l;
    l.mixer = s.mixer;
    if (s.mixer == MixerKind::kGatedDeltaNet) {
      l.gdn = load_gdn(ck_, p, *cfg_.gdn, H);
    } else {
      AttnWeights& a = l.attn;
      const int64_t nq = int64_t(s.n_heads) * s.head_dim, nk = int64_t(s.n_kv_heads) * s.head_dim;
      a.out_gate = s.out_gate;
      a.norm = load_norm(ck_, p + "input_layernorm.weight", H, NormStyle::kZeroCentred);
      a.q = load_linear(ck_, p + "self_attn.q_proj.weight", s.out_gate ? 2 * nq : nq, H);
      a.k = load_linear(ck_, p + "self_attn.k_proj.weight", nk, H);
      a.v = load_linear(ck_, p + "self_attn.v_proj.weight", nk, H);
      a.o = load_linear(ck_, p + "self_attn.o_proj.weight", H, nq);
      a.q_norm = load_norm(ck_, p + "self_attn.q_norm.weight", s.head_dim, NormStyle::kZeroCentred);
      a.k_norm = load_norm(ck_, p + "self_attn.k_norm.weight", s.head_dim, NormStyle::kZeroCentred);
    }
    FfnWeights& f = l.ffn;
    f.norm = load_norm(ck_, p + "post_attention_layernorm.weight", H, NormStyle::kZeroCentred);
    if (cfg_.moe) {
      const MoESpec& ms = *cfg_.moe;
      f.kind = FfnKind::kMoE;
      f.moe = load_moe(ck_, p, ms, H, scales_, 128, 128);
      if (const int32_t Is = ms.shared_intermediate_size; Is > 0) {
        const std::string sp = p + "mlp.shared_expert.";
        f.sh_gate = load_linear(ck_, sp + "gate_proj.weight", Is, H);
        f.sh_up = load_linear(ck_, sp + "up_proj.weight", Is, H);
        f.sh_down = load_linear(ck_, sp + "down_proj.weight", H, Is);
        f.sh_gate_w = load_f32(ck_, p + "mlp.shared_expert_gate.weight", {1, H});
      }
    } else {
      f.gate = load_linear(ck_, p + "mlp.gate_proj.weight", I, H);
      f.up = load_linear(ck_, p + "mlp.up_proj.weight", I, H);
      f.down = load_linear(ck_, p + "mlp.down_proj.weight", H, I);
    }
    convert_layer(l, opts, &pool_);
    return l;
  }

  Fp8ScaleStore scales_;
};

std::unique_ptr<CausalLM> make_qwen35(ModelConfig cfg, const LoadOptions& opts, ThreadPool& pool) {
  return std::make_unique<Qwen35Model>(std::move(cfg), opts, pool);
}

}  // namespace

const FamilyEntry kQwen35Family = {Family::kQwen35,
                                   {"Qwen3_5ForConditionalGeneration", "Qwen3_5ForCausalLM",
                                    "Qwen3_5MoeForConditionalGeneration", "Qwen3_5MoeForCausalLM"},
                                   {"qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text"},
                                   nullptr,
                                   parse_qwen35,
                                   make_qwen35};

}  // namespace dfl
