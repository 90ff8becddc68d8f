// config.json parsing. Every key is read with an explicit type check so a malformed file gives a
// one-line error naming the key, never a crash (this parser is fuzzed: fuzz/fuzz_config.cc).
#include "model/config.h"

#include <algorithm>
#include <algorithm>
#include <cmath>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/mmap.h"

namespace dfl {

using json = nlohmann::json;

const char* family_name(Family f) {
  switch (f) {
    case Family::kQwen3: return "qwen3";
    case Family::kDFlashDraft: return "dflash_draft";
    case Family::kMiMoV2: return "mimo_v2";
  }
  return "?";
}

namespace {

const json* find_key(const json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return nullptr;
  return &*it;
}

int64_t as_int(const json& v, const char* key) {
  if (v.is_number_integer() || v.is_number_unsigned()) return v.get<int64_t>();
  if (v.is_number_float()) {
    const double d = v.get<double>();
    DFL_CHECK(std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e15, "config: key '", key,
              "' must be an integer");
    return static_cast<int64_t>(d);
  }
  throw Error(str("config: key '", key, "' must be an integer"));
}

std::optional<int64_t> opt_int(const json& j, const char* key) {
  const json* v = find_key(j, key);
  if (!v) return std::nullopt;
  return as_int(*v, key);
}

int32_t req_int(const json& j, const char* key, int64_t lo = 1, int64_t hi = (1ll << 31) - 1) {
  auto v = opt_int(j, key);
  DFL_CHECK(v.has_value(), "config: missing required key '", key, "'");
  DFL_CHECK(*v >= lo && *v <= hi, "config: key '", key, "' = ", *v, " is out of range [", lo, ", ",
            hi, "]");
  return static_cast<int32_t>(*v);
}

std::optional<double> opt_num(const json& j, const char* key) {
  const json* v = find_key(j, key);
  if (!v) return std::nullopt;
  DFL_CHECK(v->is_number(), "config: key '", key, "' must be a number");
  const double d = v->get<double>();
  DFL_CHECK(std::isfinite(d), "config: key '", key, "' must be finite");
  return d;
}

std::optional<bool> opt_bool(const json& j, const char* key) {
  const json* v = find_key(j, key);
  if (!v) return std::nullopt;
  DFL_CHECK(v->is_boolean(), "config: key '", key, "' must be true or false");
  return v->get<bool>();
}

std::optional<std::string> opt_str(const json& j, const char* key) {
  const json* v = find_key(j, key);
  if (!v) return std::nullopt;
  DFL_CHECK(v->is_string(), "config: key '", key, "' must be a string");
  return v->get<std::string>();
}

// Looks a DFlash key up in dflash_config first, then at the top level.
const json* dflash_key(const json& root, const char* key) {
  if (const json* dc = find_key(root, "dflash_config")) {
    if (const json* v = find_key(*dc, key)) return v;
  }
  return find_key(root, key);
}

RopeSpec parse_rope(const json& root, int32_t head_dim) {
  RopeSpec r;
  double partial = opt_num(root, "partial_rotary_factor").value_or(1.0);
  const json* params = find_key(root, "rope_parameters");
  const json* scaling = find_key(root, "rope_scaling");
  if (params && !params->is_object()) params = nullptr;
  if (scaling) DFL_CHECK(scaling->is_object(), "config: rope_scaling must be an object or null");
  r.theta = static_cast<float>(opt_num(root, "rope_theta").value_or(10000.0));
  if (params) {
    if (auto t = opt_num(*params, "rope_theta")) r.theta = static_cast<float>(*t);
    if (auto p = opt_num(*params, "partial_rotary_factor")) partial = *p;
  }
  DFL_CHECK(r.theta > 0, "config: rope_theta must be positive");
  DFL_CHECK(partial > 0 && partial <= 1.0, "config: partial_rotary_factor must be in (0, 1]");
  r.n_rot = static_cast<int32_t>(head_dim * partial);
  r.n_rot -= r.n_rot % 2;
  const json* s = scaling ? scaling : params;
  if (s) {
    std::string type = opt_str(*s, "rope_type").value_or(opt_str(*s, "type").value_or("default"));
    if (type == "yarn" || type == "linear") {
      r.type = type;
      r.factor = static_cast<float>(opt_num(*s, "factor").value_or(1.0));
      DFL_CHECK(r.factor >= 1.0f, "config: rope scaling factor must be >= 1");
      r.original_max_position = static_cast<int32_t>(
          opt_int(*s, "original_max_position_embeddings")
              .value_or(opt_int(root, "max_position_embeddings").value_or(0)));
      if (auto v = opt_num(*s, "beta_fast")) r.beta_fast = static_cast<float>(*v);
      if (auto v = opt_num(*s, "beta_slow")) r.beta_slow = static_cast<float>(*v);
      if (auto v = opt_num(*s, "attention_factor")) r.attention_factor = static_cast<float>(*v);
      if (auto v = opt_num(*s, "mscale")) r.mscale = static_cast<float>(*v);
      if (auto v = opt_num(*s, "mscale_all_dim")) r.mscale_all_dim = static_cast<float>(*v);
      if (auto v = opt_bool(*s, "truncate")) r.truncate = *v;
      if (type == "yarn")
        DFL_CHECK(r.original_max_position > 0,
                  "config: yarn rope scaling needs original_max_position_embeddings");
    } else {
      DFL_CHECK(type == "default", "config: unsupported rope type '", type,
                "' (supported: default, linear, yarn)");
    }
  }
  return r;
}

void parse_common(const json& root, ModelConfig& c) {
  c.hidden_size = req_int(root, "hidden_size", 1, 1 << 20);
  c.n_layers = req_int(root, "num_hidden_layers", 1, 4096);
  c.vocab_size = req_int(root, "vocab_size", 1, 1 << 24);
  c.intermediate_size = req_int(root, "intermediate_size", 1, 1 << 22);
  c.max_position_embeddings =
      static_cast<int32_t>(opt_int(root, "max_position_embeddings").value_or(32768));
  DFL_CHECK(c.max_position_embeddings > 0, "config: max_position_embeddings must be positive");
  c.rms_norm_eps = static_cast<float>(opt_num(root, "rms_norm_eps").value_or(1e-6));
  c.tie_word_embeddings = opt_bool(root, "tie_word_embeddings").value_or(false);
  c.attention_bias = opt_bool(root, "attention_bias").value_or(false);
  DFL_CHECK(!c.attention_bias, "config: attention_bias=true is not supported yet");
  c.torch_dtype = opt_str(root, "torch_dtype").value_or(opt_str(root, "dtype").value_or(""));
  if (auto act = opt_str(root, "hidden_act"))
    DFL_CHECK(*act == "silu", "config: hidden_act '", *act, "' is not supported (only silu)");
}

LayerSpec base_layer(const json& root, const ModelConfig& c) {
  LayerSpec l;
  l.n_heads = req_int(root, "num_attention_heads", 1, 4096);
  l.n_kv_heads = static_cast<int32_t>(opt_int(root, "num_key_value_heads").value_or(l.n_heads));
  DFL_CHECK(l.n_kv_heads > 0 && l.n_heads % l.n_kv_heads == 0, "config: num_attention_heads (",
            l.n_heads, ") must be a multiple of num_key_value_heads (", l.n_kv_heads, ")");
  auto hd = opt_int(root, "head_dim");
  l.head_dim = static_cast<int32_t>(hd.value_or(c.hidden_size / l.n_heads));
  DFL_CHECK(l.head_dim > 0 && l.head_dim <= 4096 && l.head_dim % 2 == 0,
            "config: head_dim must be a positive even number, got ", l.head_dim);
  l.v_head_dim = static_cast<int32_t>(opt_int(root, "v_head_dim").value_or(l.head_dim));
  DFL_CHECK(l.v_head_dim > 0 && l.v_head_dim <= 4096, "config: v_head_dim out of range");
  l.rope = parse_rope(root, l.head_dim);
  return l;
}

void parse_qwen3(const json& root, ModelConfig& c) {
  c.family = Family::kQwen3;
  parse_common(root, c);
  const LayerSpec proto = base_layer(root, c);
  const bool use_sw = opt_bool(root, "use_sliding_window").value_or(false);
  DFL_CHECK(!use_sw, "config: Qwen3 use_sliding_window=true is not supported");
  c.layers.assign(c.n_layers, proto);
  for (auto& l : c.layers) {
    l.attn = AttnKind::kFull;
    l.causal = true;
    l.window = causal_window(AttnKind::kFull, 0);
  }
}

void parse_dflash(const json& root, ModelConfig& c) {
  c.family = Family::kDFlashDraft;
  parse_common(root, c);
  const LayerSpec proto = base_layer(root, c);
  DFlashSpec d;
  if (const json* v = dflash_key(root, "block_size")) d.block_size = static_cast<int32_t>(as_int(*v, "block_size"));
  DFL_CHECK(d.block_size >= 2 && d.block_size <= 256, "config: block_size must be in [2, 256], got ",
            d.block_size);
  const json* mid = dflash_key(root, "mask_token_id");
  DFL_CHECK(mid, "config: drafter has no dflash_config.mask_token_id");
  const int64_t mask = as_int(*mid, "mask_token_id");
  DFL_CHECK(mask >= 0 && mask < c.vocab_size, "config: mask_token_id ", mask,
            " is out of range for vocab_size ", c.vocab_size);
  d.mask_token_id = static_cast<int32_t>(mask);
  d.num_target_layers = static_cast<int32_t>(opt_int(root, "num_target_layers").value_or(0));
  if (const json* ids = dflash_key(root, "target_layer_ids")) {
    DFL_CHECK(ids->is_array() && !ids->empty(), "config: target_layer_ids must be a non-empty list");
    for (const auto& e : *ids) {
      const int64_t t = as_int(e, "target_layer_ids");
      DFL_CHECK(t >= 0 && t < 100000, "config: target_layer_ids entry ", t, " is out of range");
      d.target_layer_ids.push_back(static_cast<int32_t>(t));
    }
    d.has_explicit_target_layer_ids = true;
  } else {
    DFL_CHECK(d.num_target_layers > 0,
              "config: drafter has neither target_layer_ids nor num_target_layers");
    d.target_layer_ids = default_target_layer_ids(d.num_target_layers, c.n_layers);
  }
  if (const json* v = dflash_key(root, "attention_value_scale")) {
    DFL_CHECK(v->is_number(), "config: attention_value_scale must be a number");
    d.attention_value_scale = v->get<float>();
  }
  if (const json* v = dflash_key(root, "backbone_rotary_base")) {
    DFL_CHECK(v->is_number() && v->get<double>() > 0, "config: backbone_rotary_base must be > 0");
    d.backbone_rotary_base = v->get<float>();
  }

  DraftAttnConfig a;
  if (const json* lt = find_key(root, "layer_types")) {
    DFL_CHECK(lt->is_array(), "config: layer_types must be a list");
    std::vector<std::string> types;
    for (const auto& e : *lt) {
      DFL_CHECK(e.is_string(), "config: layer_types entries must be strings");
      types.push_back(e.get<std::string>());
    }
    a.layer_types = std::move(types);
  }
  const json* dc = find_key(root, "dflash_config");
  if (dc) DFL_CHECK(dc->is_object(), "config: dflash_config must be an object");
  static const json kEmpty = json::object();
  const json& dcfg = dc ? *dc : kEmpty;
  a.use_swa = opt_bool(dcfg, "use_swa").value_or(false);
  // Clamp before narrowing so an absurd value is reported, not wrapped.
  auto window_key = [](std::optional<int64_t> w) -> std::optional<int32_t> {
    if (!w) return std::nullopt;
    return static_cast<int32_t>(std::clamp<int64_t>(*w, -1, int64_t(1) << 30));
  };
  a.swa_window_size = window_key(opt_int(dcfg, "swa_window_size"));
  a.sliding_window = window_key(opt_int(root, "sliding_window"));
  a.is_causal = opt_bool(root, "is_causal");
  a.dflash_causal = opt_bool(dcfg, "causal");
  bool sinks = false;
  if (auto s = opt_bool(dcfg, "attention_sink_bias")) sinks = *s;
  else if (auto s2 = opt_bool(root, "add_swa_attention_sink_bias")) sinks = *s2;

  c.layers.assign(c.n_layers, proto);
  for (int il = 0; il < c.n_layers; ++il) {
    const ResolvedAttn r = resolve_draft_layer_attention(a, il, c.n_layers);
    LayerSpec& l = c.layers[il];
    l.attn = r.kind;
    l.sliding_window = r.sliding_window;
    l.causal = r.causal;
    l.window = r.window;
    l.sinks = sinks;
  }
  c.dflash = std::move(d);
}


// A list of 0/1 (or booleans) of length n, e.g. hybrid_layer_pattern / moe_layer_freq.
std::optional<std::vector<int>> opt_flags(const json& root, const char* key, int32_t n) {
  const json* v = find_key(root, key);
  if (!v) return std::nullopt;
  DFL_CHECK(v->is_array(), "config: ", key, " must be a list");
  DFL_CHECK(static_cast<int64_t>(v->size()) == n, "config: ", key, " has ", v->size(),
            " entries but num_hidden_layers is ", n);
  std::vector<int> out;
  for (const auto& e : *v) {
    int64_t f = e.is_boolean() ? int64_t(e.get<bool>()) : as_int(e, key);
    DFL_CHECK(f == 0 || f == 1, "config: ", key, " entries must be 0 or 1");
    out.push_back(static_cast<int>(f));
  }
  return out;
}

WindowEdge parse_window_edge(const std::string& s, const char* where) {
  if (s == "w" || s == "hf" || s == "vllm") return WindowEdge::kInclusiveW;
  if (s == "w+1" || s == "sglang") return WindowEdge::kInclusiveWPlus1;
  throw Error(str(where, ": window edge '", s, "' is not one of w, hf, vllm, w+1, sglang"));
}

// MiMo-V2-Flash (MiMoV2FlashForCausalLM) and MiMo-V2.5 (MiMoV2ForCausalLM): hub config keys
// (TARGETS-SPEC §3.1-3.2), with the transformers-5 spellings (layer_types, mlp_layer_types,
// per-kind rope_parameters, rms_norm_eps) accepted as fallbacks.
void parse_mimo(const json& root, ModelConfig& c) {
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
  if (const char* env = std::getenv("DFL_WINDOW_EDGE"); env && *env)
    m.window_edge = parse_window_edge(env, "DFL_WINDOW_EDGE");

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
  swa.sliding_window = m.sliding_window;
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

}  // namespace

std::vector<int32_t> default_target_layer_ids(int32_t n_target_layers, int32_t n_draft_layers) {
  if (n_draft_layers == 1) return {n_target_layers / 2};
  std::vector<int32_t> ids;
  for (int32_t i = 0; i < n_draft_layers; ++i) {
    const double v = 1.0 + i * static_cast<double>(n_target_layers - 4) / (n_draft_layers - 1);
    ids.push_back(static_cast<int32_t>(std::nearbyint(v)));  // FE_TONEAREST: half to even
  }
  return ids;
}

ModelConfig parse_model_config(const std::string& json_text, const std::string& dir) {
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::exception& e) {
    throw Error(str("config.json in '", dir, "' is not valid JSON: ", e.what()));
  }
  DFL_CHECK(root.is_object(), "config.json must hold a JSON object");
  ModelConfig c;
  c.dir = dir;
  c.model_type = opt_str(root, "model_type").value_or("");
  if (const json* arch = find_key(root, "architectures")) {
    DFL_CHECK(arch->is_array() && !arch->empty() && (*arch)[0].is_string(),
              "config: architectures must be a list of strings");
    c.architecture = (*arch)[0].get<std::string>();
  }
  const bool is_draft = c.architecture == "DFlashDraftModel" || find_key(root, "dflash_config");
  if (is_draft) {
    if (c.architecture.empty()) c.architecture = "DFlashDraftModel";
    parse_dflash(root, c);
  } else if (c.architecture == "Qwen3ForCausalLM" || (c.architecture.empty() && c.model_type == "qwen3")) {
    c.architecture = "Qwen3ForCausalLM";
    parse_qwen3(root, c);
  } else if (c.architecture == "MiMoV2FlashForCausalLM" || c.architecture == "MiMoV2ForCausalLM" ||
             (c.architecture.empty() && (c.model_type == "mimo_v2_flash" || c.model_type == "mimo_v2"))) {
    if (c.architecture.empty())
      c.architecture = c.model_type == "mimo_v2" ? "MiMoV2ForCausalLM" : "MiMoV2FlashForCausalLM";
    parse_mimo(root, c);
  } else {
    throw Error(str("unknown architecture '", c.architecture, "' (model_type '", c.model_type,
                    "'); supported: Qwen3ForCausalLM, MiMoV2FlashForCausalLM, MiMoV2ForCausalLM, "
                    "DFlashDraftModel"));
  }
  return c;
}

ModelConfig load_model_config(const std::string& dir) {
  DFL_CHECK(dir_exists(dir), "model folder '", dir, "' does not exist");
  const std::string path = dir + "/config.json";
  DFL_CHECK(file_exists(path), "no config.json in '", dir, "'");
  return parse_model_config(read_text_file(path), dir);
}

}  // namespace dfl
