// What llama.cpp's converter (convert_hf_to_gguf.py) does to a dense decoder, undone: the
// `<arch>.*` metadata as the HF config.json it came from, the GGUF tensor names as HF names, and
// the `llama` converter's q/k row permutation. Shared by the families whose GGUF dialect is the
// plain llama.cpp decoder layout (qwen3, llama, the DFlash drafters); Gemma 3/4 keep their own
// layer table (sandwich norms, MoE) through the same gguf_rename.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/gguf.h"

namespace dfl {

// The HF config keys every llama.cpp decoder GGUF stores under `<arch>.`: hidden_size,
// num_hidden_layers, intermediate_size, heads / kv heads, head_dim (attention.key_length, else
// hidden / heads), max_position_embeddings (context_length), rms_norm_eps, rope_theta, rope
// scaling (linear, yarn) as rope_scaling, vocab_size (token_embd rows) and tie_word_embeddings
// (no output.weight). Throws dfl::Error naming the key when a required one is missing, and for
// what the converter stores in a form we do not read back (llama3 RoPE as a rope_freqs tensor).
nlohmann::json gguf_decoder_config(const GgufFile& f, const std::string& arch);

// The decoder geometry every llama.cpp GGUF stores the same way under `<arch>.` (the one reader
// for it, shared by gguf_decoder_config, Gemma 3 and the DFlash drafters): hidden_size,
// num_hidden_layers, intermediate_size, num_attention_heads (> 0, checked), num_key_value_heads,
// head_dim (attention.key_length, else hidden / heads), max_position_embeddings (context_length,
// else `default_context`), rms_norm_eps.
nlohmann::json gguf_decoder_geometry(const GgufFile& f, const std::string& arch, uint32_t default_context);

// A GGUF → HF name table: {gguf name, HF name} pairs.
using GgufNameTable = std::span<const std::pair<const char*, const char*>>;

// The one GGUF renaming rule (every family's and drafter's dialect goes through it): a name in
// `top` maps whole; "blk.N.<rest>" with <rest> in `layer` maps to "<layer_prefix>N.<HF rest>"; any
// other name is returned unchanged (and refused later as unused).
std::string gguf_rename(std::string_view gguf_name, GgufNameTable top, GgufNameTable layer,
                        std::string_view layer_prefix);

// llama.cpp's plain decoder layer (attention with q/k norms + SwiGLU, pre-norms): attn_norm,
// attn_q/k/v/output, attn_q_norm / attn_k_norm, ffn_norm, ffn_gate/up/down in HF form.
GgufNameTable gguf_decoder_layer_names();

// "blk.N.attn_q.weight" → "model.layers.N.self_attn.q_proj.weight" etc. (token_embd, output_norm,
// output, attn_norm, attn_q/k/v/output, attn_q_norm / attn_k_norm, ffn_norm, ffn_gate/up/down);
// any other name is returned unchanged (and refused later as unused).
std::string gguf_decoder_tensor_name(std::string_view gguf_name);

// The `llama` converter stores q_proj / k_proj rows of each head interleaved (HF row
// s·D/2 + j at GGUF row 2j + s, D = head_dim, s ∈ {0,1}: its permute() for the GGML rope).
// For a tensor with `rows` rows named `gguf_name`: the GGUF row holding each HF row, or {} when
// the tensor is not permuted. n_heads / n_kv_heads from the file's metadata.
std::vector<int64_t> llama_qk_row_order(const GgufFile& f, std::string_view gguf_name, int64_t rows);

}  // namespace dfl
