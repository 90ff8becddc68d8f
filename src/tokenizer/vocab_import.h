// Tokenizers from plain vocabulary data (as GGUF files store it: tokenizer.ggml.*), turned into
// the same components a Hugging Face tokenizer.json describes, so Tokenizer::from_vocab() encodes
// exactly like HF `tokenizers` loading the checkpoint's own tokenizer.json (llama, gpt2) or, for
// gemma4, exactly like llama.cpp loading the GGUF (the file is what defines that model).
//
//   model "llama" (SentencePiece BPE with scores, byte fallback <0xXX>): BPE with
//     byte_fallback and fuse_unk, merges rebuilt from the scores exactly as HF's converter
//     (transformers SentencePieceExtractor) does: every split of a piece into two vocabulary
//     pieces is a merge; merges sorted by (score, len(left), len(right)) descending (stable;
//     within a piece by (id(left), id(right))), user-defined pieces scoring 0. llama.cpp's
//     converter stores user-defined pieces with real spaces and score -1000: both are undone.
//     add_space_prefix=false (Gemma): normalizer Replace(" ", "▁"), pre-tokenizer Split(" ",
//     MergedWithPrevious), decoder Replace("▁", " ") + ByteFallback + Fuse. add_space_prefix=true
//     (Llama 2 style): normalizer Prepend("▁") + Replace, decoder + Strip(1 left).
//   model "gpt2" (byte-level BPE with tokenizer.ggml.merges): NFC (qwen2) normalizer, Split by
//     the pre-tokenizer regex named by tokenizer.ggml.pre (qwen2, llama-bpe / llama3, gpt-2 /
//     default) then ByteLevel; ByteLevel decoder and post-processor.
//   model "gemma4" (llama.cpp's Gemma 4 vocabulary: BPE with tokenizer.ggml.merges over raw UTF-8,
//     SentencePiece-style): normalizer Replace(" ", "▁") (no space prefix), pre-tokenizer
//     Split(/[^\n]+|[\n]+/, Isolated) — merges run over whole lines, newline runs apart — and a
//     run of newlines that is itself a token is taken whole (llama.cpp PR 21343; bpe.h
//     ignore_merges_runs_of); byte fallback <0xXX> (no unk); decoder Replace("▁", " ") +
//     ByteFallback + Fuse. add_bos is forced true (llama.cpp PR 21500); tokenizer.ggml.pre,
//     add_space_prefix and the scores are not read (llama.cpp ignores them for this model).
//     Token types get llama.cpp's text overrides (llamacpp::is_control_name → CONTROL; "</s>" →
//     NORMAL when "<|tool_response>" exists), so specials split the text as in llama.cpp.
//     Model "gpt2" with tokenizer.ggml.pre "gemma4" is the same tokenizer (is_gemma4_tokenizer).
// Control (3), unknown (2) and user-defined (4) tokens become added tokens (normalized=false);
// control and unknown ones are "special" (skipped by decode(…, true)); user-defined ones not.
// add_bos / add_eos become the post-processor template (encode(…, add_special_tokens=true)).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace dfl {

struct TokenizerVocab {
  std::string model;  // tokenizer.ggml.model: "llama" | "gpt2" | "gemma4"
  std::string pre;    // tokenizer.ggml.pre ("" when absent)
  std::vector<std::string> tokens;
  std::vector<float> scores;         // llama: required; gpt2: optional
  std::vector<int32_t> token_types;  // 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte
  std::vector<std::string> merges;   // gpt2, gemma4: "left right"
  int32_t bos_id = -1, eos_id = -1, unk_id = -1, pad_id = -1;
  bool add_bos = false, add_eos = false;
  bool add_space_prefix = true;  // llama.cpp's default when the key is absent
  std::string origin;            // for messages (file path)
};

// llama.cpp's rules by token text (llama-vocab.cpp, mainline Aug 2026), in one place.
namespace llamacpp {
// llama.cpp's LLAMA_VOCAB_PRE_TYPE_GEMMA4 tokenizer: model "gemma4" (any pre), or model "gpt2"
// with pre "gemma4" / "granite-embed-multi-311m" (the same code path in llama.cpp).
bool is_gemma4_tokenizer(std::string_view model, std::string_view pre);
// A name llama.cpp ends generation on (its special_eog_ids text list: <eos>, <end_of_turn>,
// <turn|>, <|tool_response>, </s>, <|im_end|>, ..., and the FIM pad / repo / file-sep names).
bool is_eog_name(std::string_view text);
// A name llama.cpp forces to CONTROL: the eog names and the FIM prefix / suffix / middle names.
bool is_control_name(std::string_view text);
// The ids a gemma4 vocabulary ends generation on by name (id_of: the token's id or -1): every
// is_eog_name token present, except "</s>" when "<|tool_response>" is present (Gemma 4's
// workaround in llama.cpp). The file's eos / eot ids come on top (gguf_tokenizer.h).
std::vector<int32_t> gemma4_eog_ids(const std::function<int32_t(std::string_view)>& id_of);
}  // namespace llamacpp

}  // namespace dfl
