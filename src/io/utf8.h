// Strict UTF-8 validation shared by the file readers (names in safetensors headers, pickle
// strings).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace dfl {

// Offset of the first byte that is not part of well-formed UTF-8 (RFC 3629: no overlong forms, no
// surrogates U+D800..DFFF, nothing above U+10FFFF, no truncated sequences); s.size() when valid.
inline size_t utf8_error_offset(std::string_view s) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const auto* end = p + s.size();
  while (p < end) {
    const uint8_t c = *p;
    const auto at = static_cast<size_t>(p - reinterpret_cast<const uint8_t*>(s.data()));
    if (c < 0x80) {
      ++p;
      continue;
    }
    int n;
    uint32_t cp;
    if ((c & 0xe0) == 0xc0) {
      n = 1;
      cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      n = 2;
      cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      n = 3;
      cp = c & 0x07;
    } else {
      return at;
    }
    if (end - p <= n) return at;
    for (int i = 1; i <= n; ++i) {
      if ((p[i] & 0xc0) != 0x80) return at;
      cp = (cp << 6) | (p[i] & 0x3f);
    }
    static constexpr uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return at;
    p += n + 1;
  }
  return s.size();
}

inline bool is_valid_utf8(std::string_view s) { return utf8_error_offset(s) == s.size(); }

}  // namespace dfl
