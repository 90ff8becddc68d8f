// UTF-8 helpers shared by the tokenizer stages.
//
// Contract: every function accepts arbitrary bytes (never reads past the view) and never throws.
// "Lossy" conversion follows Rust's String::from_utf8_lossy exactly (the Unicode "maximal
// subpart" policy): each maximal ill-formed subsequence becomes one U+FFFD. HF `tokenizers` uses
// that function when it turns decoded bytes into text, so decode() must match it byte for byte.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace dfl::utf8 {

inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Length of the well-formed UTF-8 sequence starting at s[i], or 0 when s[i..] does not start
// with one (bad lead byte, bad continuation, overlong, surrogate, > U+10FFFF or truncated).
size_t valid_seq_len(std::string_view s, size_t i);

// True when the whole view is well-formed UTF-8.
bool is_valid(std::string_view s);

// Well-formed copy of `bytes`: ill-formed subsequences replaced by U+FFFD (Rust semantics).
std::string lossy(std::string_view bytes);

// Appends code point `cp` (must be <= 0x10FFFF and not a surrogate) as UTF-8.
void append(std::string& out, uint32_t cp);

// Decodes the code point at s[i] of a well-formed string and advances i past it.
uint32_t next(std::string_view s, size_t& i);

// Byte length of the character whose lead byte is `lead` in a well-formed string.
inline size_t char_len(unsigned char lead) {
  return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}

}  // namespace dfl::utf8
