// Tokenizers from plain vocabulary data (as GGUF files store it: tokenizer.ggml.*), turned into
// the same components a Hugging Face tokenizer.json describes, so Tokenizer::from_vocab() encodes
// exactly like HF `tokenizers` loading the checkpoint's own tokenizer.json.
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
// Control (3), unknown (2) and user-defined (4) tokens become added tokens (normalized=false);
// control and unknown ones are "special" (skipped by decode(…, true)); user-defined ones not.
// add_bos / add_eos become the post-processor template (encode(…, add_special_tokens=true)).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dfl {

struct TokenizerVocab {
  std::string model;  // tokenizer.ggml.model: "llama" | "gpt2"
  std::string pre;    // tokenizer.ggml.pre ("" when absent)
  std::vector<std::string> tokens;
  std::vector<float> scores;         // llama: required; gpt2: optional
  std::vector<int32_t> token_types;  // 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte
  std::vector<std::string> merges;   // gpt2: "left right"
  int32_t bos_id = -1, eos_id = -1, unk_id = -1, pad_id = -1;
  bool add_bos = false, add_eos = false;
  bool add_space_prefix = true;  // llama.cpp's default when the key is absent
  std::string origin;            // for messages (file path)
};

}  // namespace dfl
