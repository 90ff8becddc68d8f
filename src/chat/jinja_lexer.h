// Jinja lexer: template source → tokens, applying jinja2's whitespace rules.
//
// Matches jinja2 3.1's Lexer for the default delimiters: newlines are normalized to "\n" and one
// trailing newline is dropped (keep_trailing_newline=False); "{%-"/"{{-"/"{#-" strip all
// whitespace before the tag, "-%}"/"-}}"/"-#}" all whitespace after it; trim_blocks removes one
// "\n" after a block or comment tag; lstrip_blocks removes spaces/tabs between the start of a line
// and a block or comment tag ("{%+" opts out). {% raw %}…{% endraw %} becomes data. Comments
// produce no tokens.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dfl::jinja {

enum class TokKind {
  kData,        // literal template text (already whitespace-processed)
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,  // text holds the unescaped value
  kInt,
  kFloat,
  kOp,  // text holds the operator, e.g. "//", "==", "("
  kEof,
};

struct Token {
  TokKind kind = TokKind::kEof;
  std::string text;
  int64_t ival = 0;
  double fval = 0;
  int line = 1;
};

struct LexOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
  bool keep_trailing_newline = false;
};

// Throws dfl::Error("template syntax error (line N): ...") on malformed input.
std::vector<Token> tokenize(const std::string& source, const LexOptions& opt);

// Throws the syntax error used by the lexer and parser.
[[noreturn]] void throw_syntax_error(int line, const std::string& msg);

}  // namespace dfl::jinja
