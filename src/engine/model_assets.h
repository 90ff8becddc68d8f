// The non-weight files of a checkpoint folder that generation needs: tokenizer.json,
// tokenizer_config.json (chat template, special tokens) and generation_config.json (eos ids).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace dfl {

struct ModelAssets {
  std::string dir;
  std::optional<Tokenizer> tokenizer;       // absent when the folder has no tokenizer.json
  std::optional<ChatTemplate> chat;         // absent when tokenizer_config has no chat_template
  std::vector<int32_t> eos_ids;             // generation_config eos_token_id(s) + tokenizer eos
  std::string eos_token;                    // tokenizer_config eos_token text ("" if none)

  // Reads whatever of the three files exists; malformed files are a dfl::Error naming them.
  static ModelAssets load(const std::string& dir);
  // The tokenizer, or a dfl::Error telling the user the folder has none.
  const Tokenizer& require_tokenizer() const;
};

}  // namespace dfl
