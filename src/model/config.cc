// config.json parsing. Every key is read with an explicit type check so a malformed file gives a
// one-line error naming the key, never a crash (this parser is fuzzed: fuzz/fuzz_config.cc).
#include "model/config.h"
#include "model/config_json.h"
#include "model/family.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/mmap.h"
#include "io/checkpoint.h"
#include "io/gguf.h"

namespace dfl {

using json = nlohmann::json;

const char* family_name(Family f) {
  switch (f) {
    case Family::kQwen3: return "qwen3";
    case Family::kDFlashDraft: return "dflash_draft";
    case Family::kMiMoV2: return "mimo_v2";
    case Family::kGemma3: return "gemma3";
    case Family::kQwen35: return "qwen3_5";
    case Family::kLlama: return "llama";
    case Family::kGemma4: return "gemma4";
  }
  return "?";
}

namespace cfg {

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

int32_t req_int(const json& j, const char* key, int64_t lo, int64_t hi) {
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
    if (type == "yarn" || type == "linear" || type == "llama3") {
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
      if (auto v = opt_num(*s, "low_freq_factor")) r.low_freq_factor = static_cast<float>(*v);
      if (auto v = opt_num(*s, "high_freq_factor")) r.high_freq_factor = static_cast<float>(*v);
      if (type == "llama3")
        DFL_CHECK(r.original_max_position > 0 && r.high_freq_factor > r.low_freq_factor,
                  "config: llama3 rope scaling needs original_max_position_embeddings and "
                  "high_freq_factor > low_freq_factor");
      if (type == "yarn")
        DFL_CHECK(r.original_max_position > 0,
                  "config: yarn rope scaling needs original_max_position_embeddings");
    } else if (type == "proportional") {
      // Rotates a partial_rotary_factor share of the frequencies, over the whole head.
      r.type = type;
      r.factor = static_cast<float>(opt_num(*s, "factor").value_or(1.0));
      DFL_CHECK(r.factor > 0.0f, "config: proportional rope factor must be positive");
      r.n_angles = static_cast<int32_t>(partial * head_dim / 2);
      r.n_rot = head_dim - head_dim % 2;
    } else {
      DFL_CHECK(type == "default", "config: unsupported rope type '", type,
                "' (supported: default, linear, yarn, llama3, proportional)");
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


}  // namespace cfg

using namespace cfg;

std::vector<int32_t> default_target_layer_ids(int32_t n_target_layers, int32_t n_draft_layers) {
  if (n_draft_layers == 1) return {n_target_layers / 2};
  std::vector<int32_t> ids;
  for (int32_t i = 0; i < n_draft_layers; ++i) {
    const double v = 1.0 + i * static_cast<double>(n_target_layers - 4) / (n_draft_layers - 1);
    ids.push_back(static_cast<int32_t>(std::nearbyint(v)));  // FE_TONEAREST: half to even
  }
  return ids;
}

ModelConfig parse_model_config(const std::string& json_text, const std::string& dir,
                               const ConfigOptions& opts) {
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
  const FamilyEntry* f = find_family(root, c.architecture, c.model_type);
  if (!f) {
    std::string names;
    for (const FamilyEntry* e : all_families())
      for (const auto& a : e->architectures) names += (names.empty() ? "" : ", ") + a;
    throw Error(str("unknown architecture '", c.architecture, "' (model_type '", c.model_type,
                    "'); supported: ", names));
  }
  if (c.architecture.empty()) c.architecture = f->default_architecture(c.model_type);
  c.family = f->family;
  f->parse(root, c, opts);
  return c;
}

ModelConfig load_model_config(const std::string& dir, const ConfigOptions& opts) {
  if (const std::string g = gguf_file(dir); !g.empty()) {
    DFL_CHECK(file_exists(g), "GGUF file '", g, "' does not exist");
    const GgufFile f(g);
    const std::string arch = f.get_string("general.architecture");
    const FamilyEntry* fam = find_gguf_family(arch);
    DFL_CHECK(fam && fam->gguf_config, "GGUF '", g, "': architecture '", arch,
              "' is not supported (supported: gemma3, qwen3, llama)");
    ModelConfig c = parse_model_config(fam->gguf_config(f).dump(), g, opts);
    c.gguf = true;
    return c;
  }
  DFL_CHECK(dir_exists(dir), "model folder '", dir, "' does not exist");
  const std::string path = dir + "/config.json";
  DFL_CHECK(file_exists(path), "no config.json in '", dir, "'");
  return parse_model_config(read_text_file(path), dir, opts);
}

}  // namespace dfl
