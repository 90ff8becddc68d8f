// Added tokens ("added_tokens" of tokenizer.json) and how HF `tokenizers` finds them in text.
//
// Contract (HF AddedVocabulary, tokenizers 0.23): tokens with normalized=false are matched on the
// raw input; the text between them is normalized, then tokens with normalized=true are matched on
// that (their contents normalized the same way). Matching is leftmost-longest, non-overlapping; a
// match rejected by single_word still consumes its span. lstrip/rstrip widen a match over
// adjacent Unicode White_Space.
// Ids are assigned as HF does, ignoring the "id" written in the file: a content already in the
// model vocab takes the model id, anything else the next id after the largest one so far (or the
// model vocab size). For real files this agrees with the stored ids. A normalized token decodes
// to its normalized form (HF's `simple_id_to_token`).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "tokenizer/bpe.h"

namespace dfl::tok {

class Normalizer;

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
  bool special = false;
};

// A piece of text after added-token extraction: either an added token or plain text.
struct Segment {
  size_t begin;
  size_t end;
  int32_t id;  // added token id, or -1 for text
};

class AddedVocab {
 public:
  // `tokens` in file order (their `id` is ignored, see above); `normalizer` normalizes the
  // contents of normalized tokens (null normalizer: `has_normalizer` false).
  void build(const std::vector<AddedToken>& tokens, const Normalizer& normalizer,
             bool has_normalizer, const Bpe& model);

  // Splits `text` on the raw (normalized=false) or the normalized (normalized=true) tokens.
  std::vector<Segment> split(std::string_view text, bool normalized_set) const;
  bool has_normalized() const { return !tries_[1].nodes.empty() && tries_[1].n_tokens > 0; }

  int32_t token_to_id(std::string_view content) const;  // -1 if absent
  const AddedToken* find(int32_t id) const;              // nullptr if absent
  // String an added token decodes from: its normalized form for normalized tokens.
  const std::string* decode_piece(int32_t id) const;
  bool is_special_content(std::string_view content) const {
    return special_contents_.find(content) != special_contents_.end();
  }
  int32_t max_id() const { return max_id_; }

 private:
  struct Node {
    int32_t token = -1;  // id of the token ending here
    std::vector<std::pair<unsigned char, int32_t>> children;
  };
  struct Trie {
    std::vector<Node> nodes;
    int32_t root_table[256];
    size_t n_tokens = 0;
    void insert(std::string_view key, int32_t id);
    // Longest token starting at text[pos]: returns its length (0 if none) and id.
    size_t longest_at(std::string_view text, size_t pos, int32_t& id) const;
  };

  Trie tries_[2];  // [0] raw, [1] normalized
  StringIdMap by_content_;
  std::unordered_map<int32_t, AddedToken> by_id_;
  std::unordered_map<int32_t, std::string> normalized_form_;  // only where it differs
  std::unordered_set<std::string, StringHash, std::equal_to<>> special_contents_;
  int32_t max_id_ = -1;
};

}  // namespace dfl::tok
