// Built-in filters, tests, methods and operators of the Jinja interpreter (internal to dfl_chat).
//
// Filters: abs, attr, batch, capitalize, center, count, d/default, dictsort, e/escape, first,
//   float, format, indent, int, items, join, last, length, list, lower, map, max, min, reject,
//   rejectattr, replace, reverse, round, safe, select, selectattr, sort, string, sum, title,
//   tojson (HF: json.dumps, ensure_ascii=False), trim, unique, upper, wordcount.
// Tests: defined, undefined, none, boolean, true, false, integer, float, number, string, mapping,
//   iterable, sequence, callable, sameas, eq/equalto/==, ne/!=, lt/lessthan/<, le/<=,
//   gt/greaterthan/>, ge/>=, in, divisibleby, even, odd, lower, upper.
// Methods: str (startswith endswith strip lstrip rstrip split rsplit splitlines replace upper
//   lower title capitalize find rfind index rindex count join isdigit isalpha isalnum isspace
//   isupper islower removeprefix removesuffix format), dict (items keys values get),
//   list (index count).
// Every function throws dfl::Error on misuse (wrong types, undefined operands).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "chat/value.h"

namespace dfl::jinja {

Value apply_filter(const std::string& name, const Value& v, const CallArgs& args);
// Whether a filter / test of that name exists (jinja2 rejects unknown ones at compile time).
bool is_known_filter(const std::string& name);
bool is_known_test(const std::string& name);
bool apply_test(const std::string& name, const Value& v, const CallArgs& args);
// obj.name(args) for builtin methods; nullopt when `obj` has no method `name`.
std::optional<Value> call_method(const Value& obj, const std::string& name, const CallArgs& args);

// obj.attr / obj[key] with jinja2's lookup order; missing → undefined; undefined obj → error.
Value get_attr(const Value& obj, const std::string& attr);
Value get_item(const Value& obj, const Value& key);
Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

// Operators. op is one of + - * / // % ** ~ for binary_op.
Value binary_op(const std::string& op, const Value& a, const Value& b);
bool contains(const Value& container, const Value& item);  // Python `item in container`
// Items a for-loop visits: list items, dict keys, string characters; undefined → none.
std::vector<Value> iterate(const Value& v);
// Throws the error an undefined value raises when used (its hint names the missing variable).
[[noreturn]] void throw_undefined(const Value& v);
// printf-style `fmt % args` (%s %r %d %i %f %x %%), as Python str.__mod__ for the common cases.
std::string percent_format(const std::string& fmt, const Value& args);

}  // namespace dfl::jinja
