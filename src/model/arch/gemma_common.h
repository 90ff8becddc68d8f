// What Gemma 3 and Gemma 4 text configs and checkpoints share (transformers models/gemma3,
// models/gemma4): the text config's place, the sliding/global layer kinds, the per-kind RoPE,
// the GeGLU activation and final soft-cap keys, and where the text weights sit.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/checkpoint.h"
#include "model/config.h"

namespace dfl::gemma {

// The text config: top level (Gemma*ForCausalLM) or text_config (multimodal checkpoints).
const nlohmann::json& text_root(const nlohmann::json& root);

// Per layer: true for a global (full attention) layer. From `layer_types` when present, else
// (i + 1) % sliding_window_pattern == 0 (pattern 6 when absent).
std::vector<bool> global_layers(const nlohmann::json& tr, int32_t n_layers);

// The RoPE of a layer kind: transformers-5 `rope_parameters` {full_attention, sliding_attention},
// else (hub 4.x layout) rope_theta + rope_scaling globally and rope_local_base_freq locally.
RopeSpec rope_of_kind(const nlohmann::json& tr, bool global, int32_t head_dim);

// hidden_activation (only gelu_pytorch_tanh), final_logit_softcapping, embed_scale = sqrt(H),
// tie_word_embeddings (default true).
void parse_gemma_head(const nlohmann::json& tr, ModelConfig& c);

// The embedding scale as transformers applies it: embed_scale.to(weight.dtype), i.e. sqrt(H)
// rounded to bf16 for a bf16 table (sqrt(3072) = 55.4256 becomes 55.5); as is otherwise (fp32
// tables, and GGUF tables, which transformers dequantizes to fp32).
float embed_scale_in(DType table_dtype, float scale);

// The text weights' prefix: "model." (ForCausalLM), "model.language_model." (transformers 5
// multimodal) or "language_model.model." (transformers 4 multimodal).
std::string text_prefix(const Checkpoint& ck);

// The HF name of a tensor in llama.cpp's gemma3 / gemma4 GGUF layout (token_embd, output_norm,
// output, blk.<i>.<piece>); any other name is returned unchanged (then refused as unused).
std::string gguf_tensor_name(std::string_view gguf_name);

// Tensor prefixes of the multimodal towers, which a text-only run does not load.
const std::vector<std::string>& multimodal_prefixes();

}  // namespace dfl::gemma
