// Streaming tag scanning shared by the reasoning and tool-call parsers: text arrives in arbitrary
// pieces, so a tag such as "</think>" may be split across pieces; what could still become a tag
// is held back until the next piece decides it.
#pragma once

#include <string_view>

namespace dfl::server {

// Length of the longest proper prefix of `tag` that `text` ends with (0 if none): those bytes
// must be held back. Tags are ASCII, so the cut never splits a UTF-8 character.
inline size_t partial_tag_suffix(std::string_view text, std::string_view tag) {
  const size_t max = tag.size() - 1 < text.size() ? tag.size() - 1 : text.size();
  for (size_t n = max; n > 0; --n)
    if (text.substr(text.size() - n) == tag.substr(0, n)) return n;
  return 0;
}

}  // namespace dfl::server
