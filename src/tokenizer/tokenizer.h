// Tokenizer loaded from a Hugging Face tokenizer.json; encodes and decodes exactly like the
// `tokenizers` library (checked against it on a corpus of several thousand lines, see
// tests/tokenizer/ and tools/ref/make_tokenizer_goldens.py).
//
// Pipeline of encode(), as in HF: added tokens are extracted from the raw text (normalized=false
// ones) -> the rest is normalized -> normalized=true added tokens are extracted -> the rest is
// pre-tokenized -> each piece goes through the BPE model -> with add_special_tokens the
// post-processor adds its template (e.g. Gemma's <bos>).
// Supported components: model BPE (byte-level or byte_fallback); normalizers NFC/NFD/NFKC/NFKD,
// Replace, Prepend, Lowercase, Strip, Sequence; pre-tokenizers Split, ByteLevel, Sequence;
// decoders ByteLevel, Replace, ByteFallback, Fuse, Strip, Sequence; post-processors
// TemplateProcessing, Bert/RobertaProcessing, ByteLevel, Sequence. Any other type is rejected at
// load with a dfl::Error naming it.
//
// Input text that is not well-formed UTF-8 is first made so (ill-formed bytes -> U+FFFD, the
// Rust from_utf8_lossy rule); HF cannot receive such input at all.
// Thread safety: a loaded Tokenizer is immutable apart from an internal locked cache; all const
// methods may run concurrently. Copies share the loaded data.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace dfl {

struct TokenizerVocab;  // tokenizer/vocab_import.h

class Tokenizer {
 public:
  // Loads tokenizer.json; throws dfl::Error with a one-line message naming the problem when the
  // file is missing, is not JSON, or describes something unsupported or inconsistent.
  static Tokenizer from_file(const std::string& tokenizer_json_path);
  static Tokenizer from_json_string(std::string_view json);
  // From plain vocabulary data (GGUF tokenizer.ggml.*; see tokenizer/vocab_import.h).
  static Tokenizer from_vocab(const TokenizerVocab& vocab);

  // Token ids of `text`. add_special_tokens applies the post-processor (Gemma: <bos> first).
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = false) const;

  // Text of `ids` through the decoder. Ids without a token are skipped (as HF does); with
  // skip_special_tokens, added tokens flagged special are skipped too. Always valid UTF-8.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const;

  // Raw vocabulary string of `id` (e.g. "Ġhello", "<0x0A>"); "" when the id has none.
  std::string id_to_piece(int32_t id) const;
  // Id of a raw vocabulary string (added tokens first, then the model); -1 if absent.
  int32_t piece_to_id(std::string_view piece) const;
  // One past the largest id of the model vocab and the added tokens (Qwen3: 151669, Gemma 3:
  // 262145). Model embedding tables may be larger; ids beyond this have no text.
  int32_t vocab_size() const;
  // True for added tokens marked "special" in tokenizer.json (e.g. <|im_end|>, <bos>).
  bool is_special(int32_t id) const;

  struct Impl;

 private:
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

// Incremental detokenizer for streaming generation: push() one id at a time, get the new text.
//
// Contract: every returned chunk is well-formed UTF-8; text that may still change (an incomplete
// UTF-8 sequence split over byte tokens, shown by decode() as a trailing U+FFFD) is held back
// until a later id completes it or flush() is called. For the tokenizers supported here the
// concatenation of all chunks plus flush() equals decode(all ids). (HF ByteFallback re-groups
// adjacent byte tokens; if held-back bytes turn out invalid only together with later ones, the
// stream emits the later text on its own rather than rewriting what it already returned.)
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens = false);

  std::string push(int32_t id);
  // Emits whatever is held back (possibly with U+FFFD for bytes that never completed) and
  // resets the stream.
  std::string flush();

 private:
  std::string emit_pending();
  Tokenizer tok_;
  bool skip_special_;
  std::vector<int32_t> context_;  // ids of the last emitted chunk (decoding context)
  std::string context_text_;      // decode(context_)
  std::vector<int32_t> pending_;  // ids not yet emitted
};

}  // namespace dfl
