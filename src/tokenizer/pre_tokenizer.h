// Pre-tokenizers of tokenizer.json ("pre_tokenizer": {...} or null) and the byte-level alphabet.
//
// Supported types: Split (String/Regex pattern, all five behaviors, invert), ByteLevel
// (add_prefix_space, use_regex with the GPT-2 pattern), Sequence. Others throw dfl::Error at load.
// Contract: split() turns one normalized segment into the pieces the model sees, exactly as HF's
// PreTokenizedString does: empty pieces are dropped, order is preserved.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "tokenizer/pattern.h"

namespace dfl::tok {

// GPT-2 byte -> printable character table (as UTF-8), and its inverse.
const std::string& byte_to_unicode(unsigned char b);
// Byte for code point `cp` of the byte-level alphabet, or -1 when cp is not in it.
int unicode_to_byte(uint32_t cp);

class PreTokenizer {
 public:
  PreTokenizer() = default;  // identity: the whole segment is one piece
  static PreTokenizer from_json(const nlohmann::json& j);

  // Appends the pieces of `segment` to `out`.
  void split(std::string_view segment, std::vector<std::string>& out) const;

 private:
  enum class Kind { kSplit, kByteLevel };
  enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };
  struct Step {
    Kind kind;
    std::shared_ptr<const Pattern> pattern = nullptr;  // kSplit; kByteLevel when use_regex
    Behavior behavior = Behavior::kIsolated;
    bool invert = false;
    bool add_prefix_space = false;  // kByteLevel
  };
  void parse_into(const nlohmann::json& j, int depth);
  static void split_one(const Step& s, const std::string& piece, std::vector<std::string>& out);
  std::vector<Step> steps_;
};

}  // namespace dfl::tok
