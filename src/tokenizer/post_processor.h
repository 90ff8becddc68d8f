// Post-processors of tokenizer.json ("post_processor": {...} or null), single-sequence case.
//
// Supported types: TemplateProcessing (the "single" template), BertProcessing and
// RobertaProcessing ([cls] A [sep]), ByteLevel (ids unchanged), Sequence. Others throw
// dfl::Error at load. apply() is what HF does to the ids of one sequence when
// add_special_tokens=true.
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace dfl::tok {

class PostProcessor {
 public:
  PostProcessor() = default;  // identity
  static PostProcessor from_json(const nlohmann::json& j);

  std::vector<int32_t> apply(std::vector<int32_t> ids) const;

 private:
  // One template: pieces that are either the sequence itself or fixed special ids.
  struct Piece {
    bool is_sequence;
    std::vector<int32_t> ids;
  };
  using Template = std::vector<Piece>;
  void parse_into(const nlohmann::json& j, int depth);
  std::vector<Template> templates_;  // applied in order
};

}  // namespace dfl::tok
