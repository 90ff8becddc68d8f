#include "tokenizer/normalizer.h"

#include <utf8proc.h>

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace dfl::tok {

using json = nlohmann::json;

namespace {

constexpr int kMaxDepth = 32;  // nesting limit for Sequence (guards the parser's recursion)

bool is_ascii(std::string_view s) {
  for (unsigned char c : s) {
    if (c >= 0x80) return false;
  }
  return true;
}

bool is_white_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

}  // namespace

std::string unicode_normalize(std::string_view text, std::string_view form) {
  if (is_ascii(text)) return std::string(text);  // every form is the identity on ASCII
  int options = UTF8PROC_STABLE;
  if (form == "NFC") options |= UTF8PROC_COMPOSE;
  else if (form == "NFD") options |= UTF8PROC_DECOMPOSE;
  else if (form == "NFKC") options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
  else options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                   static_cast<utf8proc_ssize_t>(text.size()), &out,
                   static_cast<utf8proc_option_t>(options));
  DFL_CHECK(n >= 0, "tokenizer: unicode normalization failed: ", utf8proc_errmsg(n));
  std::string result(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  std::free(out);
  return result;
}

Normalizer Normalizer::from_json(const json& j) {
  Normalizer n;
  if (!j.is_null()) n.parse_into(j, 0);
  return n;
}

void Normalizer::parse_into(const json& j, int depth) {
  DFL_CHECK(depth < kMaxDepth, "tokenizer.json: normalizer nesting is too deep");
  DFL_CHECK(j.is_object(), "tokenizer.json: normalizer must be an object or null");
  auto t = j.find("type");
  DFL_CHECK(t != j.end() && t->is_string(), "tokenizer.json: normalizer has no \"type\"");
  const std::string type = t->get<std::string>();
  if (type == "Sequence") {
    auto list = j.find("normalizers");
    DFL_CHECK(list != j.end() && list->is_array(),
              "tokenizer.json: Sequence normalizer needs a \"normalizers\" array");
    for (const json& sub : *list) parse_into(sub, depth + 1);
  } else if (type == "NFC") {
    steps_.push_back({Kind::kNfc, nullptr, {}});
  } else if (type == "NFD") {
    steps_.push_back({Kind::kNfd, nullptr, {}});
  } else if (type == "NFKC") {
    steps_.push_back({Kind::kNfkc, nullptr, {}});
  } else if (type == "NFKD") {
    steps_.push_back({Kind::kNfkd, nullptr, {}});
  } else if (type == "Lowercase") {
    steps_.push_back({Kind::kLowercase, nullptr, {}});
  } else if (type == "Replace") {
    auto p = j.find("pattern");
    auto c = j.find("content");
    DFL_CHECK(p != j.end() && c != j.end() && c->is_string(),
              "tokenizer.json: Replace normalizer needs \"pattern\" and a string \"content\"");
    steps_.push_back({Kind::kReplace, pattern_from_json(*p, "normalizer"), c->get<std::string>()});
  } else if (type == "Prepend") {
    auto p = j.find("prepend");
    DFL_CHECK(p != j.end() && p->is_string(),
              "tokenizer.json: Prepend normalizer needs a string \"prepend\"");
    steps_.push_back({Kind::kPrepend, nullptr, p->get<std::string>()});
  } else if (type == "Strip") {
    Step s{Kind::kStrip, nullptr, {}};
    auto l = j.find("strip_left");
    auto r = j.find("strip_right");
    s.left = l != j.end() && l->is_boolean() && l->get<bool>();
    s.right = r != j.end() && r->is_boolean() && r->get<bool>();
    steps_.push_back(std::move(s));
  } else {
    throw Error(str("tokenizer.json: unsupported normalizer type '", type, "'"));
  }
}

std::string Normalizer::apply(std::string_view text) const {
  std::string cur(text);
  // Chained Replace/Prepend steps of a hostile file could grow the text exponentially.
  const size_t limit = 64 * text.size() + (size_t{1} << 16);
  for (const Step& s : steps_) {
    DFL_CHECK(cur.size() <= limit, "tokenizer: normalizer output grew past ", limit,
              " bytes (runaway Replace/Prepend in tokenizer.json)");
    switch (s.kind) {
      case Kind::kNfc: cur = unicode_normalize(cur, "NFC"); break;
      case Kind::kNfd: cur = unicode_normalize(cur, "NFD"); break;
      case Kind::kNfkc: cur = unicode_normalize(cur, "NFKC"); break;
      case Kind::kNfkd: cur = unicode_normalize(cur, "NFKD"); break;
      case Kind::kReplace: {
        std::string out;
        size_t prev = 0;
        for (const Span& m : s.pattern->find_all(cur)) {
          out.append(cur, prev, m.first - prev);
          out.append(s.content);
          prev = m.second;
        }
        out.append(cur, prev, std::string::npos);
        cur = std::move(out);
        break;
      }
      case Kind::kPrepend:
        if (!cur.empty()) cur = s.content + cur;  // HF prepends only to non-empty strings
        break;
      case Kind::kLowercase: {
        // Simple (1:1) lowercase mapping; HF uses Rust's full mapping, which differs only for
        // a handful of characters (e.g. U+0130).
        std::string out;
        out.reserve(cur.size());
        size_t i = 0;
        while (i < cur.size()) utf8::append(out, static_cast<uint32_t>(utf8proc_tolower(
                                                     static_cast<utf8proc_int32_t>(utf8::next(cur, i)))));
        cur = std::move(out);
        break;
      }
      case Kind::kStrip: {
        size_t b = 0, e = cur.size();
        if (s.left) {
          while (b < e) {
            size_t k = b;
            if (!is_white_space(utf8::next(cur, k))) break;
            b = k;
          }
        }
        if (s.right) {
          while (e > b) {
            size_t k = e - 1;
            while (k > b && (static_cast<unsigned char>(cur[k]) & 0xC0) == 0x80) --k;
            size_t kk = k;
            if (!is_white_space(utf8::next(cur, kk))) break;
            e = k;
          }
        }
        cur = cur.substr(b, e - b);
        break;
      }
    }
  }
  return cur;
}

}  // namespace dfl::tok
