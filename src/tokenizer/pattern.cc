#include "tokenizer/pattern.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace dfl::tok {

namespace {

// Unicode White_Space, written as the inside of a character class.
constexpr std::string_view kWhiteSpaceBody =
    "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}"
    "\\x{202F}\\x{205F}\\x{3000}";

}  // namespace

std::string rewrite_whitespace_classes(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 64);
  bool in_class = false;
  bool in_quote = false;  // inside \Q...\E
  size_t i = 0;
  while (i < p.size()) {
    const char c = p[i];
    if (in_quote) {
      if (c == '\\' && i + 1 < p.size() && p[i + 1] == 'E') {
        in_quote = false;
        out.append("\\E");
        i += 2;
      } else {
        out.push_back(c);
        ++i;
      }
      continue;
    }
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[i + 1];
      if (e == 'Q') {
        in_quote = true;
        out.append("\\Q");
      } else if (e == 's') {
        if (in_class) {
          out.append(kWhiteSpaceBody);
        } else {
          out.append("[").append(kWhiteSpaceBody).append("]");
        }
      } else if (e == 'S' && !in_class) {
        out.append("[^").append(kWhiteSpaceBody).append("]");
      } else {
        out.push_back(c);
        out.push_back(e);
      }
      i += 2;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out.push_back(c);
      ++i;
      // A ']' right after '[' or '[^' is a literal member, not the end of the class.
      if (i < p.size() && p[i] == '^') out.push_back(p[i++]);
      if (i < p.size() && p[i] == ']') out.push_back(p[i++]);
      continue;
    }
    if (in_class && c == '[' && i + 1 < p.size() && p[i + 1] == ':') {
      const size_t end = p.find(":]", i + 2);  // POSIX class [:alpha:] inside a class
      if (end != std::string_view::npos) {
        out.append(p.substr(i, end + 2 - i));
        i = end + 2;
        continue;
      }
    }
    if (in_class && c == ']') in_class = false;
    out.push_back(c);
    ++i;
  }
  return out;
}

struct Regex::Impl {
  pcre2_code* code = nullptr;
  bool jit = false;
};

Regex::Regex(const std::string& pattern) : impl_(std::make_unique<Impl>()) {
  const std::string rewritten = rewrite_whitespace_classes(pattern);
  int err = 0;
  PCRE2_SIZE err_off = 0;
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(rewritten.data()), rewritten.size(),
                              PCRE2_UTF | PCRE2_UCP, &err, &err_off, nullptr);
  if (impl_->code == nullptr) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    throw Error(str("tokenizer.json: cannot compile regex '", pattern, "': ",
                    reinterpret_cast<const char*>(msg), " (at offset ", err_off, ")"));
  }
  impl_->jit = pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE) == 0;
}

Regex::~Regex() {
  if (impl_ && impl_->code) pcre2_code_free(impl_->code);
}

std::vector<Span> Regex::find_all(std::string_view s) const {
  std::vector<Span> out;
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(impl_->code, nullptr);
  DFL_CHECK(md != nullptr, "tokenizer: out of memory creating regex match data");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  size_t pos = 0;
  bool have_last = false;
  size_t last_end = 0;
  while (pos <= s.size()) {
    // Subjects are validated once by the tokenizer, so PCRE2 need not re-check them per call.
    int rc = pcre2_match(impl_->code, subject, s.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      // Deep backtracking on a long run: the interpreter keeps its frames on the heap.
      rc = pcre2_match(impl_->code, subject, s.size(), pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT,
                       md, nullptr);
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      pcre2_match_data_free(md);
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof(msg));
      throw Error(str("tokenizer: regex match failed: ", reinterpret_cast<const char*>(msg)));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t b = ov[0], e = ov[1];
    if (b == e && have_last && e == last_end) {
      // Empty match glued to the previous one: skip one character and search again.
      if (pos >= s.size()) break;
      pos += utf8::char_len(static_cast<unsigned char>(s[pos]));
      continue;
    }
    out.emplace_back(b, e);
    have_last = true;
    last_end = e;
    pos = e;
  }
  pcre2_match_data_free(md);
  return out;
}

Pattern Pattern::literal(std::string s) {
  Pattern p;
  p.literal_ = std::move(s);
  return p;
}

Pattern Pattern::regex(const std::string& re) {
  Pattern p;
  p.regex_ = std::make_shared<const Regex>(re);
  return p;
}

std::vector<Span> Pattern::find_all(std::string_view s) const {
  if (regex_) return regex_->find_all(s);
  std::vector<Span> out;
  if (literal_.empty()) return out;
  size_t pos = 0;
  while (pos <= s.size()) {
    const size_t at = s.find(literal_, pos);
    if (at == std::string_view::npos) break;
    out.emplace_back(at, at + literal_.size());
    pos = at + literal_.size();
  }
  return out;
}

std::vector<std::pair<Span, bool>> Pattern::find_matches(std::string_view s) const {
  std::vector<std::pair<Span, bool>> out;
  if (s.empty()) {
    out.push_back({{0, 0}, false});
    return out;
  }
  size_t prev = 0;
  for (const Span& m : find_all(s)) {
    if (prev != m.first) out.push_back({{prev, m.first}, false});
    out.push_back({m, true});
    prev = m.second;
  }
  if (prev != s.size()) out.push_back({{prev, s.size()}, false});
  return out;
}

std::shared_ptr<const Pattern> pattern_from_json(const nlohmann::json& j, const char* where) {
  const char* shape = ".pattern must be {\"String\": ...} or {\"Regex\": ...}";
  DFL_CHECK(j.is_object() && j.size() == 1, "tokenizer.json: ", where, shape);
  if (auto s = j.find("String"); s != j.end()) {
    DFL_CHECK(s->is_string(), "tokenizer.json: ", where, ".pattern.String must be a string");
    return std::make_shared<const Pattern>(Pattern::literal(s->get<std::string>()));
  }
  auto r = j.find("Regex");
  DFL_CHECK(r != j.end(), "tokenizer.json: ", where, shape);
  DFL_CHECK(r->is_string(), "tokenizer.json: ", where, ".pattern.Regex must be a string");
  return std::make_shared<const Pattern>(Pattern::regex(r->get<std::string>()));
}

}  // namespace dfl::tok
