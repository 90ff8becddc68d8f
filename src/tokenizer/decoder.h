// Decoders of tokenizer.json ("decoder": {...} or null), flattened into a chain of steps.
//
// Supported types: ByteLevel, Replace, ByteFallback, Fuse, Strip, Sequence. Others throw
// dfl::Error at load. Contract (HF Decoder::decode): every step maps the list of token strings to
// a new list; the result is their concatenation. Without a decoder, tokens are joined with " ".
// Output is always well-formed UTF-8 (invalid bytes become U+FFFD exactly as HF does).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "tokenizer/pattern.h"

namespace dfl::tok {

class Decoder {
 public:
  Decoder() = default;  // no decoder: join with spaces
  static Decoder from_json(const nlohmann::json& j);

  std::string decode(std::vector<std::string> tokens) const;

 private:
  enum class Kind { kByteLevel, kReplace, kByteFallback, kFuse, kStrip };
  struct Step {
    Kind kind;
    std::shared_ptr<const Pattern> pattern = nullptr;  // kReplace
    std::string content = {};  // kReplace; kStrip: the character to strip
    size_t start = 0, stop = 0;              // kStrip
  };
  void parse_into(const nlohmann::json& j, int depth);
  bool present_ = false;
  std::vector<Step> steps_;
};

}  // namespace dfl::tok
