// Python str semantics over UTF-8 byte strings, for the Jinja interpreter.
//
// Python strings are sequences of code points; ours are UTF-8 bytes. Everything here that
// indexes or counts works on code points. Invalid UTF-8 never crashes: each bad byte decodes to
// U+FFFD (templates and JSON inputs are valid UTF-8, so this only matters for fuzzing).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dfl::jinja {

class Value;

std::u32string utf8_decode(const std::string& s);
std::string utf8_encode(const std::u32string& s);
void utf8_append(std::string& out, char32_t cp);
size_t utf8_length(const std::string& s);

// str.isspace() of one code point (Unicode White_Space plus the \x1c-\x1f separators).
bool py_isspace(char32_t c);

// str.strip/lstrip/rstrip; chars == nullopt strips whitespace.
std::string py_strip(const std::string& s, const std::optional<std::string>& chars, bool left,
                     bool right);
// str.split / str.rsplit; sep == nullopt splits on runs of whitespace. maxsplit < 0: no limit.
// Throws dfl::Error on an empty separator, as Python raises ValueError.
std::vector<std::string> py_split(const std::string& s, const std::optional<std::string>& sep,
                                  int64_t maxsplit, bool from_right);
std::vector<std::string> py_splitlines(const std::string& s, bool keepends);
std::string py_lower(const std::string& s);
std::string py_upper(const std::string& s);
std::string py_capitalize(const std::string& s);  // first upper, rest lower
std::string py_title(const std::string& s);       // str.title() word rule
std::string py_replace(const std::string& s, const std::string& old, const std::string& repl,
                       int64_t count);
// str.find / str.rfind / str.count in code-point units; -1 when absent.
int64_t py_find(const std::string& s, const std::string& sub, bool from_right);
int64_t py_count(const std::string& s, const std::string& sub);

// repr() of a str: single quotes unless the text has ' and no ", escapes like CPython.
std::string py_repr_string(const std::string& s);

// json.dumps(v, ensure_ascii, indent, separators, sort_keys) as CPython writes it. indent: null
// for one line, an int (spaces) or a string. Throws dfl::Error for values JSON cannot hold.
struct JsonDumpOptions {
  bool ensure_ascii = false;
  bool has_indent = false;
  std::string indent;  // the indent unit when has_indent
  std::string item_sep = ", ";
  std::string key_sep = ": ";
  bool sort_keys = false;
};
std::string py_json_dumps(const Value& v, const JsonDumpOptions& opt);

}  // namespace dfl::jinja
