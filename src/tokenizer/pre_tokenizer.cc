#include "tokenizer/pre_tokenizer.h"

#include <array>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace dfl::tok {

using json = nlohmann::json;

namespace {

constexpr int kMaxDepth = 32;
constexpr const char* kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

struct ByteTables {
  std::array<std::string, 256> to_unicode;
  std::array<int, 324> to_byte;  // code points used are < 256 + 68
  ByteTables() {
    to_byte.fill(-1);
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      const uint32_t cp = printable ? static_cast<uint32_t>(b) : static_cast<uint32_t>(256 + n++);
      utf8::append(to_unicode[b], cp);
      to_byte[cp] = b;
    }
  }
};

const ByteTables& tables() {
  static const ByteTables t;
  return t;
}

bool optional_bool(const json& j, const char* key, bool dflt) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return dflt;
  DFL_CHECK(it->is_boolean(), "tokenizer.json: pre_tokenizer.", key, " must be a boolean");
  return it->get<bool>();
}

}  // namespace

const std::string& byte_to_unicode(unsigned char b) { return tables().to_unicode[b]; }

int unicode_to_byte(uint32_t cp) {
  return cp < tables().to_byte.size() ? tables().to_byte[cp] : -1;
}

PreTokenizer PreTokenizer::from_json(const json& j) {
  PreTokenizer p;
  if (!j.is_null()) p.parse_into(j, 0);
  return p;
}

void PreTokenizer::parse_into(const json& j, int depth) {
  DFL_CHECK(depth < kMaxDepth, "tokenizer.json: pre_tokenizer nesting is too deep");
  DFL_CHECK(j.is_object(), "tokenizer.json: pre_tokenizer must be an object or null");
  auto t = j.find("type");
  DFL_CHECK(t != j.end() && t->is_string(), "tokenizer.json: pre_tokenizer has no \"type\"");
  const std::string type = t->get<std::string>();
  if (type == "Sequence") {
    auto list = j.find("pretokenizers");
    DFL_CHECK(list != j.end() && list->is_array(),
              "tokenizer.json: Sequence pre_tokenizer needs a \"pretokenizers\" array");
    for (const json& sub : *list) parse_into(sub, depth + 1);
  } else if (type == "Split") {
    Step s{Kind::kSplit};
    auto p = j.find("pattern");
    DFL_CHECK(p != j.end(), "tokenizer.json: Split pre_tokenizer needs a \"pattern\"");
    s.pattern = pattern_from_json(*p, "pre_tokenizer");
    auto b = j.find("behavior");
    DFL_CHECK(b != j.end() && b->is_string(), "tokenizer.json: Split pre_tokenizer needs a \"behavior\"");
    const std::string bs = b->get<std::string>();
    if (bs == "Removed") s.behavior = Behavior::kRemoved;
    else if (bs == "Isolated") s.behavior = Behavior::kIsolated;
    else if (bs == "MergedWithPrevious") s.behavior = Behavior::kMergedWithPrevious;
    else if (bs == "MergedWithNext") s.behavior = Behavior::kMergedWithNext;
    else if (bs == "Contiguous") s.behavior = Behavior::kContiguous;
    else throw Error(str("tokenizer.json: unknown Split behavior '", bs, "'"));
    s.invert = optional_bool(j, "invert", false);
    steps_.push_back(std::move(s));
  } else if (type == "ByteLevel") {
    Step s{Kind::kByteLevel};
    s.add_prefix_space = optional_bool(j, "add_prefix_space", true);
    if (optional_bool(j, "use_regex", true)) {
      s.pattern = std::make_shared<const Pattern>(Pattern::regex(kGpt2Pattern));
    }
    steps_.push_back(std::move(s));
  } else {
    throw Error(str("tokenizer.json: unsupported pre_tokenizer type '", type, "'"));
  }
}

void PreTokenizer::split(std::string_view segment, std::vector<std::string>& out) const {
  if (segment.empty()) return;
  std::vector<std::string> cur{std::string(segment)}, next;
  for (const Step& s : steps_) {
    next.clear();
    for (const std::string& piece : cur) split_one(s, piece, next);
    cur.swap(next);
  }
  for (std::string& p : cur) {
    if (!p.empty()) out.push_back(std::move(p));
  }
}

void PreTokenizer::split_one(const Step& s, const std::string& piece, std::vector<std::string>& out) {
  auto emit = [&out, &piece](size_t b, size_t e) {
    if (e > b) out.emplace_back(piece, b, e - b);
  };
  if (s.kind == Kind::kByteLevel) {
    std::string text = piece;
    if (s.add_prefix_space && (text.empty() || text[0] != ' ')) text.insert(text.begin(), ' ');
    std::vector<Span> parts;
    if (s.pattern) {
      for (const auto& [span, is_match] : s.pattern->find_matches(text)) parts.push_back(span);
    } else {
      parts.push_back({0, text.size()});
    }
    for (const Span& sp : parts) {
      if (sp.second <= sp.first) continue;
      std::string mapped;
      mapped.reserve((sp.second - sp.first) * 2);
      for (size_t i = sp.first; i < sp.second; ++i) {
        mapped += byte_to_unicode(static_cast<unsigned char>(text[i]));
      }
      out.push_back(std::move(mapped));
    }
    return;
  }

  // kSplit: HF NormalizedString::split.
  auto matches = s.pattern->find_matches(piece);
  if (s.invert) {
    for (auto& m : matches) m.second = !m.second;
  }
  switch (s.behavior) {
    case Behavior::kIsolated:
      for (const auto& [sp, m] : matches) emit(sp.first, sp.second);
      break;
    case Behavior::kRemoved:
      for (const auto& [sp, m] : matches) {
        if (!m) emit(sp.first, sp.second);
      }
      break;
    case Behavior::kMergedWithPrevious: {
      std::vector<Span> acc;
      bool prev_match = false;
      for (const auto& [sp, m] : matches) {
        if (m && !prev_match && !acc.empty()) {
          acc.back().second = sp.second;
        } else {
          acc.push_back(sp);
        }
        prev_match = m;
      }
      for (const Span& sp : acc) emit(sp.first, sp.second);
      break;
    }
    case Behavior::kMergedWithNext: {
      std::vector<Span> acc;  // built back to front
      bool prev_match = false;
      for (auto it = matches.rbegin(); it != matches.rend(); ++it) {
        const auto& [sp, m] = *it;
        if (m && !prev_match && !acc.empty()) {
          acc.back().first = sp.first;
        } else {
          acc.push_back(sp);
        }
        prev_match = m;
      }
      for (auto it = acc.rbegin(); it != acc.rend(); ++it) emit(it->first, it->second);
      break;
    }
    case Behavior::kContiguous: {
      std::vector<Span> acc;
      bool prev_match = false;
      for (const auto& [sp, m] : matches) {
        if (m == prev_match && !acc.empty()) {
          acc.back().second = sp.second;
        } else {
          acc.push_back(sp);
        }
        prev_match = m;
      }
      for (const Span& sp : acc) emit(sp.first, sp.second);
      break;
    }
  }
}

}  // namespace dfl::tok
