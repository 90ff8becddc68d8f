// Fuzzes the tokenizer.json loader and, when a file loads, encode / decode / streaming decode.
//
// Input layout: <tokenizer.json bytes> [ "\n\x00\n" <text to encode> ]. Without the separator a
// fixed text with special-token strings, emoji and invalid UTF-8 is encoded. Any input must
// either load or throw dfl::Error; a loaded tokenizer must encode and decode without crashing,
// and decode / every streamed chunk must be well-formed UTF-8 (abort otherwise).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace {

constexpr std::string_view kSeparator("\n\0\n", 3);
constexpr std::string_view kDefaultText =
    "Hello <|im_start|>world<|im_end|> <bos>  \t\n\n 123456 caf\xC3\xA9 e\xCC\x81 \xF0\x9F\x91\xA9"
    "\xE2\x80\x8D\xF0\x9F\x92\xBB \xE4\xB8\xAD\xE6\x96\x87 \xFF\xFE it's <0x41> \xE2\x96\x81\xE2\x96\x81";

void check_utf8(const std::string& s) {
  if (!dfl::utf8::is_valid(s)) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t sep = input.find(kSeparator);
  const std::string_view json = sep == std::string_view::npos ? input : input.substr(0, sep);
  const std::string_view text =
      sep == std::string_view::npos ? kDefaultText : input.substr(sep + kSeparator.size());
  try {
    const dfl::Tokenizer tok = dfl::Tokenizer::from_json_string(json);
    std::vector<int32_t> ids = tok.encode(text, /*add_special_tokens=*/true);
    check_utf8(tok.decode(ids));
    check_utf8(tok.decode(ids, /*skip_special_tokens=*/true));
    // Ids derived from the input bytes, including ones without a token.
    const int32_t n = tok.vocab_size() + 3;
    for (size_t i = 0; i < text.size() && i < 64; ++i) {
      ids.push_back(static_cast<int32_t>((static_cast<uint32_t>(static_cast<uint8_t>(text[i])) * 2654435761u) %
                                         static_cast<uint32_t>(n > 0 ? n : 1)));
    }
    ids.push_back(-1);
    dfl::StreamDecoder stream(tok);
    for (int32_t id : ids) check_utf8(stream.push(id));
    check_utf8(stream.flush());
    (void)tok.id_to_piece(ids.empty() ? 0 : ids[0]);
    (void)tok.piece_to_id(text);
    (void)tok.is_special(0);
  } catch (const dfl::Error&) {
    // Expected for malformed or unsupported tokenizer.json (and runaway definitions).
  }
  return 0;
}
