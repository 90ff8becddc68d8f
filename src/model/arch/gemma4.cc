// Gemma 4 text (Gemma4ForCausalLM; the text part of Gemma4ForConditionalGeneration), dense
// (31B-style) and MoE (26B-A4B-style), TARGETS-SPEC §4 checked against transformers 5.24
// models/gemma4/modeling_gemma4.py:
//   x = E[tok] × sqrt(H) (the scale rounded to the embedding's dtype first)
//   per layer: sandwich norms (input / post_attention / pre_feedforward / post_feedforward);
//     attention with per-head q/k RMSNorm before RoPE, a no-scale per-head RMSNorm on V, logit
//     scale 1.0; sliding layers (layer_types) see the last sliding_window keys incl. the query,
//     head_dim, RoPE θ 1e4 over the whole head; global layers use their own head_dim
//     (global_head_dim, or per_layer_config as transformers 5.24 saves it) and KV heads
//     (num_global_key_value_heads), proportional RoPE θ 1e6 (a partial_rotary_factor share of the
//     frequencies over the whole head) and, with attention_k_eq_v, no v_proj: V = raw k_proj
//     output (then only the no-scale norm; K and V differ in the cache);
//     FFN: GeGLU; MoE layers add a routed branch beside it (blocks.h kGeGLUPlusMoE): router on
//     the residual stream (no-scale norm × router.scale × H^-0.5, softmax, top-k, renormalized,
//     × per_expert_scale), GeGLU experts from the fused gate_up_proj / down_proj;
//     then the residual stream × layer_scalar (taps are taken after it).
//   final norm → tied lm_head → final soft-cap (30 on the released models).
// Unlike Gemma 3, every RMSNorm weight is applied as stored (y = n(x)·w, no 1 + w).
// Per-layer input embeddings (hidden_size_per_layer_input > 0) and cross-layer KV sharing
// (num_kv_shared_layers > 0) — the E2B/E4B variants — are refused with a clear error.
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>

#include "core/error.h"
#include "model/arch/gemma_common.h"
#include "model/config_json.h"
#include "model/decoder.h"
#include "model/family.h"
#include "model/weights.h"

namespace dfl {

namespace {

using namespace cfg;
using namespace gemma;

// transformers' defaults when a config has no rope_parameters (Gemma4TextConfig.__post_init__).
json with_default_ropes(const json& tr) {
  if (const json* rp = find_key(tr, "rope_parameters"); rp && rp->is_object()) return tr;
  json t = tr;
  t["rope_parameters"] = {
      {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}},
      {"full_attention",
       {{"rope_type", "proportional"}, {"partial_rotary_factor", 0.25}, {"rope_theta", 1000000.0}}}};
  return t;
}

void parse_gemma4(const json& root, ModelConfig& c, const ConfigOptions&) {
  const json tr = with_default_ropes(text_root(root));
  parse_common(tr, c);
  if (!find_key(tr, "max_position_embeddings")) c.max_position_embeddings = 131072;
  parse_gemma_head(tr, c);
  DFL_CHECK(!opt_num(tr, "attn_logit_softcapping").has_value(),
            "config: attn_logit_softcapping is not part of Gemma 4");
  if (const json* b = find_key(tr, "use_bidirectional_attention"); b && !b->is_null()) {
    DFL_CHECK(b->is_string(), "config: use_bidirectional_attention must be a string or null");
    DFL_CHECK(b->get<std::string>() == "vision", "config: use_bidirectional_attention='",
              b->get<std::string>(), "' is not a causal LM (only null or \"vision\": text stays causal)");
  }
  // transformers' default is 256 (the E2B/E4B per-layer embeddings); 31B / 26B-A4B state 0 (or
  // null, which transformers reads as "none" too).
  const bool ple_null = tr.contains("hidden_size_per_layer_input") && tr["hidden_size_per_layer_input"].is_null();
  const int64_t ple = ple_null ? 0 : opt_int(tr, "hidden_size_per_layer_input").value_or(256);
  DFL_CHECK(ple == 0, "config: Gemma 4 per-layer input embeddings (hidden_size_per_layer_input=", ple,
            ", the E2B/E4B variants) are not supported yet");
  const int64_t shared = opt_int(tr, "num_kv_shared_layers").value_or(0);
  DFL_CHECK(shared == 0, "config: Gemma 4 cross-layer KV sharing (num_kv_shared_layers=", shared,
            ") is not supported yet");
  const bool k_eq_v = opt_bool(tr, "attention_k_eq_v").value_or(false);
  const LayerSpec proto = base_layer(tr, c);
  const auto sw = opt_int(tr, "sliding_window");
  std::vector<bool> glob = global_layers(tr, c.n_layers);
  glob.back() = true;  // Gemma4TextConfig forces the last layer to full_attention (with a warning)
  // Global-layer geometry: per_layer_config (what transformers 5.24 writes) wins over the hub
  // keys global_head_dim / num_global_key_value_heads, as in Gemma4TextConfig.__post_init__.
  const json* plc = find_key(tr, "per_layer_config");  // null reads as absent
  DFL_CHECK(!plc || plc->is_object(), "config: per_layer_config must be an object");
  const int64_t global_hd = opt_int(tr, "global_head_dim").value_or(512);
  const auto global_kv = opt_int(tr, "num_global_key_value_heads");
  c.layers.assign(c.n_layers, proto);
  if (plc)  // keys are layer indices, zero-padded when saved ("05", "11"): transformers int()s them
    for (const auto& [key, o] : plc->items()) {
      DFL_CHECK(!key.empty() && key.size() <= 6 &&
                    std::all_of(key.begin(), key.end(), [](char ch) { return ch >= '0' && ch <= '9'; }),
                "config: per_layer_config key '", key, "' is not a layer index");
      const int32_t il = std::stoi(key);
      DFL_CHECK(il < c.n_layers, "config: per_layer_config names layer ", il, " of ", c.n_layers);
      DFL_CHECK(o.is_object(), "config: per_layer_config entries must be objects");
      for (const auto& [k, v] : o.items())
        DFL_CHECK(k == "head_dim" || k == "num_key_value_heads", "config: per_layer_config key '", k,
                  "' is not supported (only head_dim, num_key_value_heads)");
      LayerSpec& l = c.layers[il];
      if (o.contains("head_dim")) l.head_dim = req_int(o, "head_dim", 2, 4096);
      if (o.contains("num_key_value_heads")) l.n_kv_heads = req_int(o, "num_key_value_heads", 1, 4096);
    }
  for (int32_t il = 0; il < c.n_layers; ++il) {
    LayerSpec& l = c.layers[il];
    const bool global = glob[il];
    if (!plc && global) {
      DFL_CHECK(global_hd >= 2 && global_hd <= 4096, "config: global_head_dim out of range");
      l.head_dim = int32_t(global_hd);
      if (k_eq_v && global_kv) {
        DFL_CHECK(*global_kv >= 1 && *global_kv <= 4096, "config: num_global_key_value_heads out of range");
        l.n_kv_heads = int32_t(*global_kv);
      }
    }
    DFL_CHECK(l.n_heads % l.n_kv_heads == 0, "config: layer ", il, ": num_attention_heads (",
              l.n_heads, ") must be a multiple of its KV heads (", l.n_kv_heads, ")");
    l.v_head_dim = l.head_dim;
    l.attn = global ? AttnKind::kFull : AttnKind::kSliding;
    if (!global) DFL_CHECK(sw && *sw >= 1 && *sw <= (1 << 24), "config: sliding layers need a sliding_window");
    l.window = causal_window(l.attn, global ? 0 : int32_t(*sw));
    l.rope = rope_of_kind(tr, global, l.head_dim);
    l.attn_scale = 1.0f;  // q/k norms replace 1/sqrt(d)
    l.v_from_k = k_eq_v && global;
  }
  if (opt_bool(tr, "enable_moe_block").value_or(false)) {
    MoESpec m;
    m.n_routed_experts = req_int(tr, "num_experts", 1, 1 << 16);
    m.n_experts_per_tok = req_int(tr, "top_k_experts", 1, m.n_routed_experts);
    m.moe_intermediate_size = req_int(tr, "moe_intermediate_size", 1, 1 << 22);
    m.scoring_func = "softmax";
    m.topk_method = "greedy";
    m.norm_topk_prob = true;
    m.gelu_experts = true;
    c.moe = m;
    for (auto& l : c.layers) l.moe = true;
  }
}

// GGUF (llama.cpp's converter, `general.architecture` = gemma4): the metadata as the hub config
// it came from. The converter writes key_length / value_length = global_head_dim and
// *_swa = head_dim, head_count_kv per layer, sliding_window_pattern as one bool per layer
// (true = sliding), rope.freq_base = the global θ, and the proportional RoPE of global layers as
// a rope_freqs tensor [global_head_dim / 2] of 1 (rotated) and 1e30 (unrotated) factors. Norms
// are stored as in the checkpoint (Gemma 4 applies them as stored: no +1 to undo). k_eq_v is
// a global layer without attn_v.
// One flag per element of a bool (or integer) array.
std::vector<bool> gguf_flags(const GgufFile& f, const std::string& key) {
  const GgufValue& v = f.get_array(key);
  std::vector<bool> out;
  if (v.elem == GgufType::kBool) {
    for (uint64_t i = 0; i < v.count; ++i) out.push_back(v.raw[i] != 0);
  } else {
    for (int32_t x : f.get_i32_array(key)) out.push_back(x != 0);
  }
  return out;
}

json gemma4_gguf_config(const GgufFile& f) {
  const std::string a = "gemma4.";
  json c;
  c["architectures"] = {"Gemma4ForCausalLM"};
  c["model_type"] = "gemma4_text";
  const uint32_t H = f.get_u32(a + "embedding_length"), L = f.get_u32(a + "block_count");
  const uint32_t nh = f.get_u32(a + "attention.head_count");
  const uint32_t hd_full = f.get_u32(a + "attention.key_length");
  const uint32_t hd_swa = f.get_u32_or(a + "attention.key_length_swa", hd_full);
  DFL_CHECK(f.get_u32_or(a + "attention.value_length", hd_full) == hd_full &&
                f.get_u32_or(a + "attention.value_length_swa", hd_swa) == hd_swa,
            "GGUF '", f.path(), "': Gemma 4 value lengths must equal the key lengths");
  c["hidden_size"] = H;
  c["num_hidden_layers"] = L;
  c["intermediate_size"] = f.get_u32(a + "feed_forward_length");
  c["num_attention_heads"] = nh;
  c["head_dim"] = hd_swa;
  c["global_head_dim"] = hd_full;
  std::vector<bool> swa(L, false);
  if (f.has(a + "attention.sliding_window_pattern")) {
    swa = gguf_flags(f, a + "attention.sliding_window_pattern");
    DFL_CHECK(swa.size() == L, "GGUF '", f.path(), "': sliding_window_pattern has ", swa.size(),
              " entries for ", L, " layers");
  }
  json types = json::array();
  for (uint32_t i = 0; i < L; ++i) types.push_back(swa[i] ? "sliding_attention" : "full_attention");
  c["layer_types"] = types;
  // head_count_kv: one value, or one per layer (sliding layers one count, global ones another).
  std::vector<int32_t> kv;
  if (const GgufValue* v = f.find(a + "attention.head_count_kv"); v && v->type == GgufType::kArray)
    kv = f.get_i32_array(a + "attention.head_count_kv");
  else
    kv.assign(L, int32_t(f.get_u32_or(a + "attention.head_count_kv", nh)));
  DFL_CHECK(kv.size() == L, "GGUF '", f.path(), "': head_count_kv has ", kv.size(), " entries for ", L, " layers");
  int32_t kv_swa = -1, kv_full = -1;
  bool k_eq_v = false;
  for (uint32_t i = 0; i < L; ++i) {
    int32_t& k = swa[i] ? kv_swa : kv_full;
    DFL_CHECK(k < 0 || k == kv[i], "GGUF '", f.path(), "': head_count_kv differs within one layer kind");
    k = kv[i];
    if (!swa[i] && !f.find_tensor(str("blk.", i, ".attn_v.weight"))) k_eq_v = true;
  }
  c["num_key_value_heads"] = kv_swa > 0 ? kv_swa : kv_full;
  c["attention_k_eq_v"] = k_eq_v;
  if (kv_full > 0) c["num_global_key_value_heads"] = kv_full;
  DFL_CHECK(k_eq_v || kv_full <= 0 || kv_full == c["num_key_value_heads"].get<int32_t>(),
            "GGUF '", f.path(), "': separate global KV heads without attention_k_eq_v are not a Gemma 4 layout");
  c["max_position_embeddings"] = f.get_u32_or(a + "context_length", 131072);
  c["rms_norm_eps"] = f.get_f32_or(a + "attention.layer_norm_rms_epsilon", 1e-6f);
  if (f.has(a + "attention.sliding_window")) c["sliding_window"] = f.get_u32(a + "attention.sliding_window");
  c["hidden_size_per_layer_input"] = f.get_u32_or(a + "embedding_length_per_layer_input", 0);
  c["num_kv_shared_layers"] = f.get_u32_or(a + "attention.shared_kv_layers", 0);
  // Proportional RoPE from the rope_freqs factors: the share of 1s is partial_rotary_factor.
  json full = {{"rope_type", "default"}, {"rope_theta", f.get_f32_or(a + "rope.freq_base", 1e6f)}};
  if (const GgufTensor* rf = f.find_tensor("rope_freqs.weight")) {
    DFL_CHECK(rf->ggml_type == 0 && rf->numel() == int64_t(hd_full / 2), "GGUF '", f.path(),
              "': rope_freqs must be F32 [global head_dim / 2]");
    const float* v = reinterpret_cast<const float*>(rf->data);
    int64_t n_rot = 0;
    while (n_rot < rf->numel() && v[n_rot] == 1.0f) ++n_rot;
    for (int64_t i = n_rot; i < rf->numel(); ++i)
      DFL_CHECK(v[i] >= 1e29f, "GGUF '", f.path(), "': rope_freqs is not a proportional-RoPE mask");
    full["rope_type"] = "proportional";
    full["partial_rotary_factor"] = double(2 * n_rot) / double(hd_full);
  }
  c["rope_parameters"] = {{"full_attention", full},
                          {"sliding_attention",
                           {{"rope_type", "default"}, {"rope_theta", f.get_f32_or(a + "rope.freq_base_swa", 1e4f)}}}};
  if (f.has(a + "final_logit_softcapping"))
    c["final_logit_softcapping"] = f.get_f32(a + "final_logit_softcapping");
  if (f.get_u32_or(a + "expert_count", 0) > 0) {
    c["enable_moe_block"] = true;
    c["num_experts"] = f.get_u32(a + "expert_count");
    c["top_k_experts"] = f.get_u32(a + "expert_used_count");
    c["moe_intermediate_size"] = f.get_u32(a + "expert_feed_forward_length");
  }
  const GgufTensor& emb = f.tensor("token_embd.weight");
  c["vocab_size"] = emb.rows();
  c["tie_word_embeddings"] = f.find_tensor("output.weight") == nullptr;
  return c;
}

std::string gemma4_gguf_name(std::string_view n) {
  if (n == "rope_freqs.weight") return "";  // read by gemma4_gguf_config
  return gguf_tensor_name(n);
}

class Gemma4Model final : public DecoderLM {
 public:
  Gemma4Model(ModelConfig cfg, const LoadOptions& opts, ThreadPool& pool)
      : DecoderLM(std::move(cfg), pool) {
    const int32_t H = cfg_.hidden_size, V = cfg_.vocab_size, I = cfg_.intermediate_size;
    const std::string p = text_prefix(ck_);
    const NormStyle plain = NormStyle::kPlain;
    head_.vocab = V;
    head_.hidden = H;
    head_.eps = cfg_.rms_norm_eps;
    head_.embed = load_linear(ck_, p + "embed_tokens.weight", V, H);
    cfg_.embed_scale = embed_scale_in(head_.embed.dtype, cfg_.embed_scale);  // gemma_common
    head_.final_norm = load_norm(ck_, p + "norm.weight", H, plain);
    head_.lm_head = cfg_.tie_word_embeddings ? head_.embed : load_linear(ck_, "lm_head.weight", V, H);
    if (cfg_.tie_word_embeddings) (void)ck_.find("lm_head.weight");
    for (int32_t il = 0; il < cfg_.n_layers; ++il) {
      const LayerSpec& s = cfg_.layers[il];
      const std::string q = str(p, "layers.", il, ".");
      const int64_t nq = int64_t(s.n_heads) * s.head_dim, nk = int64_t(s.n_kv_heads) * s.head_dim;
      DecoderLayer l;
      AttnWeights& a = l.attn;
      a.norm = load_norm(ck_, q + "input_layernorm.weight", H, plain);
      a.q = load_linear(ck_, q + "self_attn.q_proj.weight", nq, H);
      a.k = load_linear(ck_, q + "self_attn.k_proj.weight", nk, H);
      a.v_from_k = s.v_from_k;
      if (!a.v_from_k) a.v = load_linear(ck_, q + "self_attn.v_proj.weight", nk, H);
      a.o = load_linear(ck_, q + "self_attn.o_proj.weight", H, nq);
      a.q_norm = load_norm(ck_, q + "self_attn.q_norm.weight", s.head_dim, plain);
      a.k_norm = load_norm(ck_, q + "self_attn.k_norm.weight", s.head_dim, plain);
      a.v_norm.assign(size_t(s.head_dim), 1.0f);  // Gemma4RMSNorm(with_scale=False)
      a.post_norm = load_norm(ck_, q + "post_attention_layernorm.weight", H, plain);
      FfnWeights& f = l.ffn;
      f.kind = s.moe ? FfnKind::kGeGLUPlusMoE : FfnKind::kGeGLU;
      f.norm = load_norm(ck_, q + "pre_feedforward_layernorm.weight", H, plain);
      f.post_norm = load_norm(ck_, q + "post_feedforward_layernorm.weight", H, plain);
      f.gate = load_linear(ck_, q + "mlp.gate_proj.weight", I, H);
      f.up = load_linear(ck_, q + "mlp.up_proj.weight", I, H);
      f.down = load_linear(ck_, q + "mlp.down_proj.weight", H, I);
      if (s.moe) load_moe_branch(q, f);
      const std::vector<float> ls = load_vector(ck_, q + "layer_scalar", 1);
      l.out_scale = ls[0];
      convert_layer(l, opts, &pool);
      layers_.push_back(std::move(l));
    }
    finish_load(opts, multimodal_prefixes());
  }

 private:
  void load_moe_branch(const std::string& q, FfnWeights& f) {
    const MoESpec& m = *cfg_.moe;
    const int32_t H = cfg_.hidden_size, E = m.n_routed_experts;
    const NormStyle plain = NormStyle::kPlain;
    f.post_norm_1 = load_norm(ck_, q + "post_feedforward_layernorm_1.weight", H, plain);
    f.norm_2 = load_norm(ck_, q + "pre_feedforward_layernorm_2.weight", H, plain);
    f.post_norm_2 = load_norm(ck_, q + "post_feedforward_layernorm_2.weight", H, plain);
    f.router_norm = load_vector(ck_, q + "router.scale", H);
    const float root = static_cast<float>(1.0 / std::sqrt(double(H)));
    for (float& w : f.router_norm) w *= root;
    load_router_f32(ck_, q + "router.proj.weight", E, H, f.moe);
    f.moe.bias.assign(size_t(E), 0.0f);
    f.moe.expert_scale = load_vector(ck_, q + "router.per_expert_scale", E);
    load_fused_experts(ck_, q + "experts.gate_up_proj", q + "experts.down_proj", E,
                       m.moe_intermediate_size, H, f.moe);
  }
};

std::unique_ptr<CausalLM> make_gemma4(ModelConfig cfg, const LoadOptions& opts, ThreadPool& pool) {
  return std::make_unique<Gemma4Model>(std::move(cfg), opts, pool);
}

}  // namespace

const FamilyEntry kGemma4Family = {Family::kGemma4,
                                   {"Gemma4ForCausalLM", "Gemma4ForConditionalGeneration"},
                                   {"gemma4_text", "gemma4"},
                                   nullptr,
                                   parse_gemma4,
                                   make_gemma4,
                                   {"gemma4"},
                                   gemma4_gguf_config,
                                   gemma4_gguf_name};

}  // namespace dfl
