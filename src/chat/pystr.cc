#include "chat/pystr.h"

#include <utf8proc.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "chat/value.h"
#include "core/error.h"

namespace dfl::jinja {

std::u32string utf8_decode(const std::string& s) {
  std::u32string out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(s.data());
  utf8proc_ssize_t left = static_cast<utf8proc_ssize_t>(s.size());
  while (left > 0) {
    utf8proc_int32_t cp;
    utf8proc_ssize_t n = utf8proc_iterate(p, left, &cp);
    if (n <= 0) {  // invalid byte: U+FFFD, skip one byte
      cp = 0xFFFD;
      n = 1;
    }
    out.push_back(static_cast<char32_t>(cp));
    p += n;
    left -= n;
  }
  return out;
}

void utf8_append(std::string& out, char32_t cp) {
  utf8proc_uint8_t buf[4];
  utf8proc_ssize_t n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(cp), buf);
  if (n <= 0) n = utf8proc_encode_char(0xFFFD, buf);
  out.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

std::string utf8_encode(const std::u32string& s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) utf8_append(out, c);
  return out;
}

size_t utf8_length(const std::string& s) {
  size_t n = 0;
  bool ascii = true;
  for (unsigned char c : s) {
    if (c >= 0x80) {
      ascii = false;
      break;
    }
  }
  if (ascii) return s.size();
  n = utf8_decode(s).size();
  return n;
}

bool py_isspace(char32_t c) {
  if (c <= 0x20) return c == 0x20 || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f);
  return c == 0x85 || c == 0xa0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 ||
         c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

std::string py_strip(const std::string& s, const std::optional<std::string>& chars, bool left,
                     bool right) {
  std::u32string u = utf8_decode(s);
  std::u32string set = chars ? utf8_decode(*chars) : std::u32string();
  auto strip_it = [&](char32_t c) {
    return chars ? set.find(c) != std::u32string::npos : py_isspace(c);
  };
  size_t b = 0, e = u.size();
  if (left)
    while (b < e && strip_it(u[b])) ++b;
  if (right)
    while (e > b && strip_it(u[e - 1])) --e;
  return utf8_encode(u.substr(b, e - b));
}

std::vector<std::string> py_split(const std::string& s, const std::optional<std::string>& sep,
                                  int64_t maxsplit, bool from_right) {
  std::vector<std::string> out;
  if (sep) {
    DFL_CHECK(!sep->empty(), "empty separator");
    if (!from_right) {
      size_t pos = 0;
      while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
        size_t f = s.find(*sep, pos);
        if (f == std::string::npos) break;
        out.push_back(s.substr(pos, f - pos));
        pos = f + sep->size();
      }
      out.push_back(s.substr(pos));
    } else {
      size_t end = s.size();
      int64_t n = 0;
      while (maxsplit < 0 || n < maxsplit) {
        if (end < sep->size()) break;
        size_t f = s.rfind(*sep, end - sep->size());
        if (f == std::string::npos) break;
        out.push_back(s.substr(f + sep->size(), end - f - sep->size()));
        end = f;
        ++n;
      }
      out.push_back(s.substr(0, end));
      std::reverse(out.begin(), out.end());
    }
    return out;
  }
  // Whitespace split: runs of whitespace separate, ends ignored.
  std::u32string u = utf8_decode(s);
  if (!from_right) {
    size_t i = 0, n = u.size();
    while (true) {
      while (i < n && py_isspace(u[i])) ++i;
      if (i >= n) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
        size_t e = n;
        while (e > i && py_isspace(u[e - 1])) --e;
        out.push_back(utf8_encode(u.substr(i, e - i)));
        break;
      }
      size_t j = i;
      while (j < n && !py_isspace(u[j])) ++j;
      out.push_back(utf8_encode(u.substr(i, j - i)));
      i = j;
    }
  } else {
    size_t e = u.size();
    while (true) {
      while (e > 0 && py_isspace(u[e - 1])) --e;
      if (e == 0) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
        size_t b = 0;
        while (b < e && py_isspace(u[b])) ++b;
        out.push_back(utf8_encode(u.substr(b, e - b)));
        break;
      }
      size_t b = e;
      while (b > 0 && !py_isspace(u[b - 1])) --b;
      out.push_back(utf8_encode(u.substr(b, e - b)));
      e = b;
    }
    std::reverse(out.begin(), out.end());
  }
  return out;
}

std::vector<std::string> py_splitlines(const std::string& s, bool keepends) {
  std::u32string u = utf8_decode(s);
  std::vector<std::string> out;
  size_t i = 0, start = 0, n = u.size();
  auto is_break = [](char32_t c) {
    return c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || (c >= 0x1c && c <= 0x1e) ||
           c == 0x85 || c == 0x2028 || c == 0x2029;
  };
  while (i < n) {
    if (is_break(u[i])) {
      size_t e = i + 1;
      if (u[i] == '\r' && e < n && u[e] == '\n') ++e;
      out.push_back(utf8_encode(u.substr(start, (keepends ? e : i) - start)));
      start = i = e;
    } else {
      ++i;
    }
  }
  if (start < n) out.push_back(utf8_encode(u.substr(start)));
  return out;
}

namespace {

template <typename F>
std::string map_chars(const std::string& s, F f) {
  bool ascii = std::all_of(s.begin(), s.end(), [](char c) { return (c & 0x80) == 0; });
  if (ascii) {
    std::string out = s;
    for (char& c : out) c = static_cast<char>(f(static_cast<unsigned char>(c)));
    return out;
  }
  std::u32string u = utf8_decode(s);
  for (char32_t& c : u) c = static_cast<char32_t>(f(c));
  return utf8_encode(u);
}

char32_t lower_cp(char32_t c) { return static_cast<char32_t>(utf8proc_tolower(c)); }
char32_t upper_cp(char32_t c) { return static_cast<char32_t>(utf8proc_toupper(c)); }
char32_t title_cp(char32_t c) { return static_cast<char32_t>(utf8proc_totitle(c)); }

bool is_cased(char32_t c) {
  auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
}

}  // namespace

std::string py_lower(const std::string& s) { return map_chars(s, lower_cp); }
std::string py_upper(const std::string& s) { return map_chars(s, upper_cp); }

std::string py_capitalize(const std::string& s) {
  std::u32string u = utf8_decode(s);
  for (size_t i = 0; i < u.size(); ++i) u[i] = i == 0 ? title_cp(u[i]) : lower_cp(u[i]);
  return utf8_encode(u);
}

std::string py_title(const std::string& s) {
  std::u32string u = utf8_decode(s);
  bool prev_cased = false;
  for (char32_t& c : u) {
    if (is_cased(c)) {
      c = prev_cased ? lower_cp(c) : title_cp(c);
      prev_cased = true;
    } else {
      prev_cased = false;
    }
  }
  return utf8_encode(u);
}

std::string py_replace(const std::string& s, const std::string& old, const std::string& repl,
                       int64_t count) {
  std::string out;
  if (old.empty()) {
    // Python inserts repl before every code point and at the end.
    std::u32string u = utf8_decode(s);
    int64_t n = 0;
    for (char32_t c : u) {
      if (count < 0 || n < count) {
        out += repl;
        ++n;
      }
      utf8_append(out, c);
    }
    if (count < 0 || n < count) out += repl;
    return out;
  }
  size_t pos = 0;
  int64_t n = 0;
  while (count < 0 || n < count) {
    size_t f = s.find(old, pos);
    if (f == std::string::npos) break;
    out.append(s, pos, f - pos);
    out += repl;
    pos = f + old.size();
    ++n;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

int64_t py_find(const std::string& s, const std::string& sub, bool from_right) {
  size_t f = from_right ? s.rfind(sub) : s.find(sub);
  if (f == std::string::npos) return -1;
  return static_cast<int64_t>(utf8_length(s.substr(0, f)));
}

int64_t py_count(const std::string& s, const std::string& sub) {
  if (sub.empty()) return static_cast<int64_t>(utf8_length(s)) + 1;
  int64_t n = 0;
  for (size_t pos = s.find(sub); pos != std::string::npos; pos = s.find(sub, pos + sub.size())) ++n;
  return n;
}

namespace {

bool py_isprintable(char32_t c) {
  if (c < 0x80) return c >= 0x20 && c < 0x7f;
  auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  switch (cat) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS:
      return false;
    default:
      return true;
  }
}

void append_hex(std::string& out, const char* prefix, uint32_t v, int width) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%s%0*x", prefix, width, v);
  out += buf;
}

}  // namespace

std::string py_repr_string(const std::string& s) {
  char quote = '\'';
  if (s.find('\'') != std::string::npos && s.find('"') == std::string::npos) quote = '"';
  std::string out(1, quote);
  for (char32_t c : utf8_decode(s)) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (py_isprintable(c)) {
      utf8_append(out, c);
    } else if (c < 0x100) {
      append_hex(out, "\\x", c, 2);
    } else if (c < 0x10000) {
      append_hex(out, "\\u", c, 4);
    } else {
      append_hex(out, "\\U", c, 8);
    }
  }
  out += quote;
  return out;
}

namespace {

void json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  auto escape_cp = [&](char32_t c) {
    switch (c) {
      case '"':
        out += "\\\"";
        return;
      case '\\':
        out += "\\\\";
        return;
      case '\n':
        out += "\\n";
        return;
      case '\r':
        out += "\\r";
        return;
      case '\t':
        out += "\\t";
        return;
      case '\b':
        out += "\\b";
        return;
      case '\f':
        out += "\\f";
        return;
      default:
        break;
    }
    if (c < 0x20 || (ensure_ascii && c >= 0x7f)) {
      if (c >= 0x10000) {
        char32_t v = c - 0x10000;
        append_hex(out, "\\u", 0xd800 | (v >> 10), 4);
        append_hex(out, "\\u", 0xdc00 | (v & 0x3ff), 4);
      } else {
        append_hex(out, "\\u", c, 4);
      }
      return;
    }
    utf8_append(out, c);
  };
  bool ascii = std::all_of(s.begin(), s.end(), [](char c) { return (c & 0x80) == 0; });
  if (ascii) {
    for (char c : s) escape_cp(static_cast<unsigned char>(c));
  } else {
    for (char32_t c : utf8_decode(s)) escape_cp(c);
  }
  out += '"';
}

std::string json_float(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v < 0 ? "-Infinity" : "Infinity";
  return python_float_repr(v);
}

std::string json_key(const Value& k) {
  switch (k.kind()) {
    case Value::Kind::kString:
      return k.as_string();
    case Value::Kind::kBool:
      return k.as_bool() ? "true" : "false";
    case Value::Kind::kNone:
      return "null";
    case Value::Kind::kInt:
      return std::to_string(k.as_int());
    case Value::Kind::kFloat:
      return json_float(k.as_float());
    default:
      throw Error(str("keys must be str, int, float, bool or None, not ", k.type_name()));
  }
}

void dump(std::string& out, const Value& v, const JsonDumpOptions& opt, int depth) {
  DFL_CHECK(depth < 512, "tojson: value nested too deeply");
  auto newline = [&](int d) {
    out += '\n';
    for (int i = 0; i < d; ++i) out += opt.indent;
  };
  switch (v.kind()) {
    case Value::Kind::kNone:
      out += "null";
      return;
    case Value::Kind::kBool:
      out += v.as_bool() ? "true" : "false";
      return;
    case Value::Kind::kInt:
      out += std::to_string(v.as_int());
      return;
    case Value::Kind::kFloat:
      out += json_float(v.as_float());
      return;
    case Value::Kind::kString:
      json_string(out, v.as_string(), opt.ensure_ascii);
      return;
    case Value::Kind::kList: {
      DFL_CHECK(!v.as_list().is_generator, "Object of type generator is not JSON serializable");
      const auto& items = v.as_list().items;
      if (items.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += opt.item_sep;
        if (opt.has_indent) newline(depth + 1);
        dump(out, items[i], opt, depth + 1);
      }
      if (opt.has_indent) newline(depth);
      out += ']';
      return;
    }
    case Value::Kind::kDict: {
      if (v.as_dict().is_namespace)
        throw Error("Object of type Namespace is not JSON serializable");
      std::vector<const std::pair<Value, Value>*> items;
      for (const auto& kv : v.as_dict().items) items.push_back(&kv);
      if (items.empty()) {
        out += "{}";
        return;
      }
      if (opt.sort_keys) {
        std::stable_sort(items.begin(), items.end(), [](const auto* a, const auto* b) {
          return values_compare(a->first, b->first) < 0;
        });
      }
      out += '{';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += opt.item_sep;
        if (opt.has_indent) newline(depth + 1);
        json_string(out, json_key(items[i]->first), opt.ensure_ascii);
        out += opt.key_sep;
        dump(out, items[i]->second, opt, depth + 1);
      }
      if (opt.has_indent) newline(depth);
      out += '}';
      return;
    }
    default:
      throw Error(str("Object of type ", v.type_name(), " is not JSON serializable"));
  }
}

}  // namespace

std::string py_json_dumps(const Value& v, const JsonDumpOptions& opt) {
  std::string out;
  dump(out, v, opt, 0);
  return out;
}

}  // namespace dfl::jinja
