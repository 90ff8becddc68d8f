#include "model/gguf_dialect.h"

#include <algorithm>
#include <utility>

#include "core/error.h"

namespace dfl {

nlohmann::json gguf_decoder_geometry(const GgufFile& f, const std::string& arch, uint32_t default_context) {
  const std::string a = arch + ".";
  nlohmann::json c;
  const uint32_t H = f.get_u32(a + "embedding_length"), nh = f.get_u32(a + "attention.head_count");
  DFL_CHECK(nh > 0, "GGUF: ", a, "attention.head_count must be positive");
  c["hidden_size"] = H;
  c["num_hidden_layers"] = f.get_u32(a + "block_count");
  c["intermediate_size"] = f.get_u32(a + "feed_forward_length");
  c["num_attention_heads"] = nh;
  c["num_key_value_heads"] = f.get_u32_or(a + "attention.head_count_kv", nh);
  c["head_dim"] = f.get_u32_or(a + "attention.key_length", H / nh);
  c["max_position_embeddings"] = f.get_u32_or(a + "context_length", default_context);
  c["rms_norm_eps"] = f.get_f32_or(a + "attention.layer_norm_rms_epsilon", 1e-6f);
  return c;
}

nlohmann::json gguf_decoder_config(const GgufFile& f, const std::string& arch) {
  const std::string a = arch + ".";
  nlohmann::json c = gguf_decoder_geometry(f, arch, 4096);
  const uint32_t hd = c["head_dim"];
  DFL_CHECK(f.get_u32_or(a + "attention.value_length", hd) == hd, "GGUF: ", a,
            "attention.value_length != key_length is not supported for ", arch);
  DFL_CHECK(f.get_u32_or(a + "rope.dimension_count", hd) == hd, "GGUF: partial RoPE (", a,
            "rope.dimension_count < head_dim) is not supported for ", arch);
  c["rope_theta"] = f.get_f32_or(a + "rope.freq_base", 10000.0f);
  const std::string scaling = f.get_string_or(a + "rope.scaling.type", "none");
  if (scaling == "linear") {
    c["rope_scaling"] = {{"rope_type", "linear"}, {"factor", f.get_f32(a + "rope.scaling.factor")}};
  } else if (scaling == "yarn") {
    nlohmann::json y = {{"rope_type", "yarn"},
                        {"factor", f.get_f32(a + "rope.scaling.factor")},
                        {"original_max_position_embeddings",
                         f.get_u32(a + "rope.scaling.original_context_length")}};
    for (const auto& [k, hf] : {std::pair{"rope.scaling.yarn_beta_fast", "beta_fast"},
                                std::pair{"rope.scaling.yarn_beta_slow", "beta_slow"},
                                std::pair{"rope.scaling.yarn_ext_factor", "extrapolation_factor"},
                                std::pair{"rope.scaling.yarn_attn_factor", "attention_factor"}})
      if (f.has(a + k)) y[hf] = f.get_f32(a + k);
    c["rope_scaling"] = y;
  } else {
    DFL_CHECK(scaling == "none", "GGUF: ", a, "rope.scaling.type '", scaling, "' is not supported");
  }
  DFL_CHECK(!f.find_tensor("rope_freqs.weight"), "GGUF: rope_freqs.weight (llama3 RoPE scaling "
            "stored as per-dimension factors) is not supported yet; use the HF folder");
  const GgufTensor& emb = f.tensor("token_embd.weight");
  c["vocab_size"] = emb.rows();
  c["tie_word_embeddings"] = f.find_tensor("output.weight") == nullptr;
  return c;
}

std::string gguf_rename(std::string_view n, GgufNameTable top, GgufNameTable layer,
                        std::string_view layer_prefix) {
  for (const auto& [g, h] : top)
    if (n == g) return h;
  if (!n.starts_with("blk.")) return std::string(n);
  const size_t dot = n.find('.', 4);
  if (dot == std::string_view::npos) return std::string(n);
  const std::string_view il = n.substr(4, dot - 4), rest = n.substr(dot + 1);
  for (const auto& [g, h] : layer)
    if (rest == g) return str(layer_prefix, il, ".", h);
  return std::string(n);
}

GgufNameTable gguf_decoder_layer_names() {
  static const std::pair<const char*, const char*> kLayer[] = {
      {"attn_norm.weight", "input_layernorm.weight"},
      {"attn_q.weight", "self_attn.q_proj.weight"},
      {"attn_k.weight", "self_attn.k_proj.weight"},
      {"attn_v.weight", "self_attn.v_proj.weight"},
      {"attn_output.weight", "self_attn.o_proj.weight"},
      {"attn_q_norm.weight", "self_attn.q_norm.weight"},
      {"attn_k_norm.weight", "self_attn.k_norm.weight"},
      {"ffn_norm.weight", "post_attention_layernorm.weight"},
      {"ffn_gate.weight", "mlp.gate_proj.weight"},
      {"ffn_up.weight", "mlp.up_proj.weight"},
      {"ffn_down.weight", "mlp.down_proj.weight"}};
  return kLayer;
}

std::string gguf_decoder_tensor_name(std::string_view n) {
  static const std::pair<const char*, const char*> kTop[] = {
      {"token_embd.weight", "model.embed_tokens.weight"},
      {"output_norm.weight", "model.norm.weight"},
      {"output.weight", "lm_head.weight"}};
  return gguf_rename(n, kTop, gguf_decoder_layer_names(), "model.layers.");
}

std::vector<int64_t> llama_qk_row_order(const GgufFile& f, std::string_view n, int64_t rows) {
  const bool q = n.ends_with(".attn_q.weight"), k = n.ends_with(".attn_k.weight");
  if (!n.starts_with("blk.") || (!q && !k)) return {};
  const uint32_t nh = f.get_u32("llama.attention.head_count");
  const uint32_t heads = q ? nh : f.get_u32_or("llama.attention.head_count_kv", nh);
  DFL_CHECK(heads > 0 && rows % (2 * int64_t(heads)) == 0, "GGUF tensor '", n, "': ", rows,
            " rows do not split into ", heads, " heads of an even size");
  const int64_t half = rows / heads / 2;
  std::vector<int64_t> order(rows);
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t s = 0; s < 2; ++s)
      for (int64_t j = 0; j < half; ++j) order[h * 2 * half + s * half + j] = h * 2 * half + 2 * j + s;
  return order;
}

}  // namespace dfl
