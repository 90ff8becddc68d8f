// BPE model of a Hugging Face tokenizer.json ("model": {"type": "BPE", ...}).
//
// Contract: `tokenize(word)` returns exactly the ids HF `tokenizers` BPE::tokenize gives for one
// pre-tokenized word (dropout must be null/0): per-character symbols (with
// continuing_subword_prefix / end_of_word_suffix), byte_fallback to <0xNN> tokens, unk handling
// with fuse_unk, then merges applied lowest rank first (ties: leftmost), and ignore_merges.
// One extension beyond HF (no tokenizer.json has it; vocab_import.cc sets it for llama.cpp's
// gemma4 vocabularies): model.ignore_merges_runs_of = "<chars>": a word made only of these
// characters that is itself a vocab token is that token, merges skipped (ignore_merges for
// those words only; llama.cpp PR 21343 does this for runs of "\n").
// Loading validates everything it later relies on: a malformed model throws dfl::Error.
// Thread safety: tokenize() is const and may be called concurrently (the cache is locked).
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "tokenizer/flat_map.h"
#include "tokenizer/json_load.h"

namespace dfl::tok {

// Hash that lets unordered_map<std::string, ...> be searched with a string_view.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using StringIdMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class Bpe {
 public:
  // Builds the model from the "model" object of tokenizer.json (options) and its vocab / merges
  // (streamed out by json_load.h); throws dfl::Error when it is not a well-formed BPE model
  // (missing vocab/merges, merge of unknown tokens, bad ids, ...).
  Bpe(const nlohmann::json& model, BpeSource src);

  // Appends the ids of `word` (one pre-tokenized piece, well-formed UTF-8) to `out`.
  void tokenize(std::string_view word, std::vector<int32_t>& out) const;

  int32_t token_to_id(std::string_view token) const;       // -1 if absent
  // Token string of `id`; false if absent.
  bool id_to_token(int32_t id, std::string_view& token) const;
  int32_t max_id() const { return max_id_; }               // -1 when the vocab is empty
  size_t vocab_count() const { return by_id_.size(); }

 private:
  using MergeInfo = PairMap::Value;
  void merge_word(std::string_view word, std::vector<int32_t>& out) const;
  void add_merge(size_t rank, const std::string& a, const std::string& b);

  StringIds vocab_;
  std::vector<std::pair<int32_t, int32_t>> by_id_;  // (id, vocab_ entry), sorted by id
  PairMap merges_;
  int32_t max_id_ = -1;
  std::optional<std::string> unk_token_;
  std::optional<std::string> continuing_subword_prefix_;
  std::optional<std::string> end_of_word_suffix_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::string ignore_merges_runs_of_;  // extension, see the header comment ("" = off)
  int32_t byte_ids_[256];  // id of "<0xNN>" or -1; only used with byte_fallback

  // Word -> ids cache, like HF's (bounded; words of 256+ bytes are not cached).
  static constexpr size_t kCacheCapacity = 10000;
  static constexpr size_t kCacheMaxWordLen = 256;
  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>>
      cache_;
};

}  // namespace dfl::tok
