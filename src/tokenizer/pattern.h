// Split patterns: a literal string or a regular expression, with HF `tokenizers` match semantics.
//
// HF compiles regexes with Oniguruma; we use PCRE2 (UTF + UCP, JIT when available). The two agree
// on the constructs tokenizer files use (\p{L}, \p{N}, (?i:...), lookahead, possessive-free
// alternations) except `\s`: PCRE2 10.42 counts U+180E as space, Oniguruma uses the Unicode
// White_Space property. Patterns are therefore rewritten so `\s`/`\S` spell out White_Space.
//
// Iteration semantics (Oniguruma's find_iter as used by HF): non-overlapping matches left to
// right; an empty match right where the previous match ended is skipped and the search moves on
// by one character. Subjects must be well-formed UTF-8 (the tokenizer sanitizes input first).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace dfl::tok {

using Span = std::pair<size_t, size_t>;  // [begin, end) byte offsets

class Regex {
 public:
  // Compiles `pattern`; throws dfl::Error naming the pattern and PCRE2's message on failure.
  explicit Regex(const std::string& pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // All matches in `subject` (see the iteration semantics above).
  std::vector<Span> find_all(std::string_view subject) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A literal (non-empty) or a regex, as in tokenizer.json {"String": ...} / {"Regex": ...}.
class Pattern {
 public:
  static Pattern literal(std::string s);
  static Pattern regex(const std::string& re);

  // Matches of the pattern; an empty literal never matches.
  std::vector<Span> find_all(std::string_view subject) const;

  // HF Pattern::find_matches: spans covering all of `subject` in order, each flagged as match or
  // not. An empty subject gives one empty non-match span.
  std::vector<std::pair<Span, bool>> find_matches(std::string_view subject) const;

 private:
  std::string literal_;
  std::shared_ptr<const Regex> regex_;
};

// Parses {"String": "..."} or {"Regex": "..."}; `where` names the owner in error messages.
std::shared_ptr<const Pattern> pattern_from_json(const nlohmann::json& j, const char* where);

// Exposed for tests: the `\s` / `\S` rewrite applied before compiling.
std::string rewrite_whitespace_classes(std::string_view pattern);

}  // namespace dfl::tok
