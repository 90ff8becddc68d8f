#include "tokenizer/utf8.h"

namespace dfl::utf8 {

namespace {

// Length of the maximal prefix of s[i..] that could start a well-formed sequence (Unicode
// Table 3-7), and the full length the lead byte announces. Used by both validation and lossy
// conversion so they agree on every byte.
struct Probe {
  size_t good;  // bytes that form a valid prefix (>= 1 when the lead byte is valid)
  size_t need;  // total length announced by the lead byte (0 for an invalid lead byte)
};

Probe probe(std::string_view s, size_t i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) return {1, 1};
  size_t need = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {0, 0};
  }
  size_t good = 1;
  for (size_t k = 1; k < need; ++k) {
    if (i + k >= s.size()) break;
    const auto b = static_cast<unsigned char>(s[i + k]);
    const unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (b < l || b > h) break;
    ++good;
  }
  return {good, need};
}

}  // namespace

size_t valid_seq_len(std::string_view s, size_t i) {
  if (i >= s.size()) return 0;
  const Probe p = probe(s, i);
  return p.need != 0 && p.good == p.need ? p.need : 0;
}

bool is_valid(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const size_t n = valid_seq_len(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const Probe p = probe(s, i);
    if (p.need != 0 && p.good == p.need) {
      out.append(s.substr(i, p.need));
      i += p.need;
    } else {
      out.append(kReplacement);
      i += p.good == 0 ? 1 : p.good;  // the maximal subpart is replaced by one U+FFFD
    }
  }
  return out;
}

void append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

uint32_t next(std::string_view s, size_t& i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  const size_t n = char_len(b0);
  uint32_t cp = n == 1 ? b0 : n == 2 ? (b0 & 0x1F) : n == 3 ? (b0 & 0x0F) : (b0 & 0x07);
  for (size_t k = 1; k < n && i + k < s.size(); ++k) {
    cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  }
  i += n;
  return cp;
}

}  // namespace dfl::utf8
