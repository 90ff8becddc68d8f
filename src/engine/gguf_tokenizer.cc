#include "engine/gguf_tokenizer.h"

#include "core/error.h"

namespace dfl {

namespace {
int32_t id_or(const GgufFile& f, const char* key) {
  if (!f.has(key)) return -1;
  const uint32_t v = f.get_u32(key);
  return v > static_cast<uint32_t>(INT32_MAX) ? -1 : static_cast<int32_t>(v);
}
}  // namespace

TokenizerVocab read_gguf_vocab(const GgufFile& f) {
  TokenizerVocab v;
  v.origin = f.path();
  v.model = f.get_string("tokenizer.ggml.model");
  v.pre = f.get_string_or("tokenizer.ggml.pre", "");
  v.tokens = f.get_string_array("tokenizer.ggml.tokens");
  if (f.has("tokenizer.ggml.scores")) v.scores = f.get_f32_array("tokenizer.ggml.scores");
  if (f.has("tokenizer.ggml.token_type")) v.token_types = f.get_i32_array("tokenizer.ggml.token_type");
  if (f.has("tokenizer.ggml.merges")) v.merges = f.get_string_array("tokenizer.ggml.merges");
  v.bos_id = id_or(f, "tokenizer.ggml.bos_token_id");
  v.eos_id = id_or(f, "tokenizer.ggml.eos_token_id");
  v.unk_id = id_or(f, "tokenizer.ggml.unknown_token_id");
  v.pad_id = id_or(f, "tokenizer.ggml.padding_token_id");
  // llama.cpp defaults: add_bos true for SentencePiece vocabularies, false for byte-level BPE.
  v.add_bos = f.get_bool_or("tokenizer.ggml.add_bos_token", v.model == "llama");
  v.add_eos = f.get_bool_or("tokenizer.ggml.add_eos_token", false);
  v.add_space_prefix = f.get_bool_or("tokenizer.ggml.add_space_prefix", v.model == "llama");
  return v;
}

Tokenizer gguf_tokenizer(const GgufFile& f) { return Tokenizer::from_vocab(read_gguf_vocab(f)); }

std::optional<std::string> gguf_chat_template(const GgufFile& f) {
  if (!f.has("tokenizer.chat_template")) return std::nullopt;
  return f.get_string("tokenizer.chat_template");
}

GgufSpecialIds gguf_special_ids(const GgufFile& f) {
  GgufSpecialIds s;
  s.bos = id_or(f, "tokenizer.ggml.bos_token_id");
  s.eos = id_or(f, "tokenizer.ggml.eos_token_id");
  s.eot = id_or(f, "tokenizer.ggml.eot_token_id");
  s.unk = id_or(f, "tokenizer.ggml.unknown_token_id");
  s.pad = id_or(f, "tokenizer.ggml.padding_token_id");
  return s;
}

std::vector<int32_t> gguf_eog_ids(const GgufFile& f, const Tokenizer& tok) {
  if (!llamacpp::is_gemma4_tokenizer(f.get_string_or("tokenizer.ggml.model", ""),
                                     f.get_string_or("tokenizer.ggml.pre", "")))
    return {};
  return llamacpp::gemma4_eog_ids([&](std::string_view name) { return tok.piece_to_id(name); });
}

}  // namespace dfl
