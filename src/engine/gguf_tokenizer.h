// Glue between io/gguf.h and the tokenizer (io/ and tokenizer/ do not know each other): the
// vocabulary, special ids and chat template a GGUF file carries.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "io/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab_import.h"

namespace dfl {

// tokenizer.ggml.{model, pre, tokens, scores, token_type, merges, bos/eos/unknown/padding
// _token_id, add_bos_token, add_eos_token, add_space_prefix}. Throws dfl::Error naming the file
// and key when something required is missing or has the wrong type.
TokenizerVocab read_gguf_vocab(const GgufFile& f);

// Tokenizer::from_vocab(read_gguf_vocab(f)).
Tokenizer gguf_tokenizer(const GgufFile& f);

// tokenizer.chat_template, when present.
std::optional<std::string> gguf_chat_template(const GgufFile& f);

// Special ids from the metadata (-1 when absent): what generation stops on (eos, and eot when
// the file names one: tokenizer.ggml.eot_token_id).
struct GgufSpecialIds {
  int32_t bos = -1, eos = -1, eot = -1, unk = -1, pad = -1;
};
GgufSpecialIds gguf_special_ids(const GgufFile& f);

// Ids generation ends on beyond eos / eot, by token name, as llama.cpp decides them: for a
// gemma4 tokenizer (llamacpp::is_gemma4_tokenizer) llamacpp::gemma4_eog_ids (<eos>, <turn|>,
// <|tool_response>, <end_of_turn>, ...); empty for other models. `tok`: the file's tokenizer.
std::vector<int32_t> gguf_eog_ids(const GgufFile& f, const Tokenizer& tok);

}  // namespace dfl
