// Normalizers of tokenizer.json ("normalizer": {...} or null), flattened into a list of steps.
//
// Supported types: NFC, NFD, NFKC, NFKD (utf8proc), Replace (String or Regex pattern), Prepend,
// Lowercase, Strip, Sequence. Anything else throws dfl::Error at load, naming the type.
// Contract: apply() takes and returns well-formed UTF-8; it throws dfl::Error only when a hostile
// file makes the text grow without bound (chained Replace steps), never for ordinary input.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "tokenizer/pattern.h"

namespace dfl::tok {

class Normalizer {
 public:
  Normalizer() = default;  // identity
  // Parses the "normalizer" value (object or null); throws dfl::Error when malformed.
  static Normalizer from_json(const nlohmann::json& j);

  bool empty() const { return steps_.empty(); }
  std::string apply(std::string_view text) const;

 private:
  enum class Kind { kNfc, kNfd, kNfkc, kNfkd, kReplace, kPrepend, kLowercase, kStrip };
  struct Step {
    Kind kind;
    std::shared_ptr<const Pattern> pattern;  // kReplace
    std::string content;                     // kReplace, kPrepend
    bool left = false, right = false;        // kStrip
  };
  void parse_into(const nlohmann::json& j, int depth);
  std::vector<Step> steps_;
};

// Unicode normalization with utf8proc; form is one of "NFC", "NFD", "NFKC", "NFKD".
std::string unicode_normalize(std::string_view text, std::string_view form);

}  // namespace dfl::tok
