#include "tokenizer/decoder.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/utf8.h"

namespace dfl::tok {

using json = nlohmann::json;

namespace {

constexpr int kMaxDepth = 32;

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Byte of a "<0xNN>" token, or -1. Mirrors Rust's u8::from_str_radix(&t[3..5], 16), which also
// accepts a leading '+' ("<0x+A>").
int byte_token_value(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  if (t[3] == '+') return hex_value(t[4]);
  const int hi = hex_value(t[3]), lo = hex_value(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

size_t optional_size(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return 0;
  DFL_CHECK(it->is_number_unsigned() || (it->is_number_integer() && it->get<int64_t>() >= 0),
            "tokenizer.json: decoder.", key, " must be a non-negative integer");
  return it->get<size_t>();
}

}  // namespace

Decoder Decoder::from_json(const json& j) {
  Decoder d;
  if (!j.is_null()) {
    d.present_ = true;
    d.parse_into(j, 0);
  }
  return d;
}

void Decoder::parse_into(const json& j, int depth) {
  DFL_CHECK(depth < kMaxDepth, "tokenizer.json: decoder nesting is too deep");
  DFL_CHECK(j.is_object(), "tokenizer.json: decoder must be an object or null");
  auto t = j.find("type");
  DFL_CHECK(t != j.end() && t->is_string(), "tokenizer.json: decoder has no \"type\"");
  const std::string type = t->get<std::string>();
  if (type == "Sequence") {
    auto list = j.find("decoders");
    DFL_CHECK(list != j.end() && list->is_array(),
              "tokenizer.json: Sequence decoder needs a \"decoders\" array");
    for (const json& sub : *list) parse_into(sub, depth + 1);
  } else if (type == "ByteLevel") {
    steps_.push_back({Kind::kByteLevel});
  } else if (type == "ByteFallback") {
    steps_.push_back({Kind::kByteFallback});
  } else if (type == "Fuse") {
    steps_.push_back({Kind::kFuse});
  } else if (type == "Replace") {
    auto p = j.find("pattern");
    auto c = j.find("content");
    DFL_CHECK(p != j.end() && c != j.end() && c->is_string(),
              "tokenizer.json: Replace decoder needs \"pattern\" and a string \"content\"");
    steps_.push_back({Kind::kReplace, pattern_from_json(*p, "decoder"), c->get<std::string>()});
  } else if (type == "Strip") {
    auto c = j.find("content");
    DFL_CHECK(c != j.end() && c->is_string() && !c->get<std::string>().empty() &&
                  utf8::char_len(static_cast<unsigned char>(c->get<std::string>()[0])) ==
                      c->get<std::string>().size(),
              "tokenizer.json: Strip decoder needs a one-character \"content\"");
    steps_.push_back({Kind::kStrip, nullptr, c->get<std::string>(), optional_size(j, "start"),
                      optional_size(j, "stop")});
  } else {
    throw Error(str("tokenizer.json: unsupported decoder type '", type, "'"));
  }
}

std::string Decoder::decode(std::vector<std::string> tokens) const {
  if (!present_) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i) out += ' ';
      out += tokens[i];
    }
    return out;
  }
  size_t in_bytes = 0;
  for (const std::string& t : tokens) in_bytes += t.size();
  const size_t limit = 64 * in_bytes + (size_t{1} << 16);  // see Normalizer::apply
  for (const Step& s : steps_) {
    size_t cur_bytes = 0;
    for (const std::string& t : tokens) cur_bytes += t.size();
    DFL_CHECK(cur_bytes <= limit, "tokenizer: decoder output grew past ", limit,
              " bytes (runaway Replace in tokenizer.json)");
    switch (s.kind) {
      case Kind::kByteLevel: {
        // Tokens made only of byte-level characters become their bytes; any other token keeps
        // its own UTF-8. The whole byte string is then decoded lossily into one token.
        std::string bytes;
        for (const std::string& t : tokens) {
          std::string mapped;
          bool all = true;
          size_t i = 0;
          while (i < t.size()) {
            const int b = unicode_to_byte(utf8::next(t, i));
            if (b < 0) {
              all = false;
              break;
            }
            mapped.push_back(static_cast<char>(b));
          }
          bytes += all ? mapped : t;
        }
        tokens.assign(1, utf8::lossy(bytes));
        break;
      }
      case Kind::kReplace:
        for (std::string& t : tokens) {
          std::string out;
          size_t prev = 0;
          for (const Span& m : s.pattern->find_all(t)) {
            out.append(t, prev, m.first - prev);
            out.append(s.content);
            prev = m.second;
          }
          out.append(t, prev, std::string::npos);
          t = std::move(out);
        }
        break;
      case Kind::kByteFallback: {
        std::vector<std::string> out;
        std::string pending;  // consecutive <0xNN> bytes
        auto flush = [&]() {
          if (pending.empty()) return;
          if (utf8::is_valid(pending)) {
            out.push_back(pending);
          } else {
            for (size_t k = 0; k < pending.size(); ++k) out.emplace_back(utf8::kReplacement);
          }
          pending.clear();
        };
        for (std::string& t : tokens) {
          const int b = byte_token_value(t);
          if (b >= 0) {
            pending.push_back(static_cast<char>(b));
          } else {
            flush();
            out.push_back(std::move(t));
          }
        }
        flush();
        tokens = std::move(out);
        break;
      }
      case Kind::kFuse: {
        std::string all;
        for (const std::string& t : tokens) all += t;
        tokens.assign(1, std::move(all));
        break;
      }
      case Kind::kStrip:
        for (std::string& t : tokens) {
          // Work on character boundaries, as HF does on a Vec<char>.
          std::vector<size_t> starts;
          for (size_t i = 0; i < t.size(); i += utf8::char_len(static_cast<unsigned char>(t[i]))) {
            starts.push_back(i);
          }
          const size_t n = starts.size();
          auto char_at = [&](size_t k) {
            const size_t e = k + 1 < n ? starts[k + 1] : t.size();
            return std::string_view(t).substr(starts[k], e - starts[k]);
          };
          size_t cut_b = 0, cut_e = n;
          for (size_t k = 0; k < s.start && k < n && char_at(k) == s.content; ++k) cut_b = k + 1;
          for (size_t k = 0; k < s.stop && k < n && char_at(n - 1 - k) == s.content; ++k) {
            cut_e = n - 1 - k;
          }
          if (cut_e < cut_b) cut_e = cut_b;
          const size_t b = cut_b < n ? starts[cut_b] : t.size();
          const size_t e = cut_e < n ? starts[cut_e] : t.size();
          t = t.substr(b, e - b);
        }
        break;
    }
  }
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

}  // namespace dfl::tok
