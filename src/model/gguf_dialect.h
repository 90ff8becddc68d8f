// What llama.cpp's converter (convert_hf_to_gguf.py) does to a dense decoder, undone: the
// `<arch>.*` metadata as the HF config.json it came from, the GGUF tensor names as HF names, and
// the `llama` converter's q/k row permutation. Shared by the families whose GGUF dialect is the
// plain llama.cpp decoder layout (qwen3, llama); Gemma 3 keeps its own table (sandwich norms).
#pragma once

#include <cstdint>
#include <string>
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
