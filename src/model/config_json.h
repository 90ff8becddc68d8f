// The shared config.json readers every family parser uses: each key read with an explicit type
// check, so a malformed file gives a one-line error naming the key, never a crash (fuzzed through
// fuzz/fuzz_config.cc). Families put their own keys in their own arch file.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/config.h"

namespace dfl::cfg {

using json = nlohmann::json;

const json* find_key(const json& j, const char* key);
int64_t as_int(const json& v, const char* key);
std::optional<int64_t> opt_int(const json& j, const char* key);
int32_t req_int(const json& j, const char* key, int64_t lo = 1, int64_t hi = (1ll << 31) - 1);
std::optional<double> opt_num(const json& j, const char* key);
std::optional<bool> opt_bool(const json& j, const char* key);
std::optional<std::string> opt_str(const json& j, const char* key);
// A DFlash key: dflash_config first, then the top level.
const json* dflash_key(const json& root, const char* key);
// rope_theta / rope_scaling / rope_parameters / partial_rotary_factor for a head of head_dim.
RopeSpec parse_rope(const json& root, int32_t head_dim);
// hidden_size, num_hidden_layers, vocab_size, intermediate_size, max_position_embeddings,
// rms_norm_eps, tie_word_embeddings, attention_bias, torch_dtype, hidden_act.
void parse_common(const json& root, ModelConfig& c);
// The per-layer attention geometry shared by all layers of a dense family.
LayerSpec base_layer(const json& root, const ModelConfig& c);
// A list of 0/1 (or booleans) of length n, e.g. hybrid_layer_pattern / moe_layer_freq.
std::optional<std::vector<int>> opt_flags(const json& root, const char* key, int32_t n);
WindowEdge parse_window_edge(const std::string& s, const char* where);

}  // namespace dfl::cfg
