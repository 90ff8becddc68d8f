// Operators, attribute/item lookup and builtin methods (str, dict, list) for the interpreter.
#include <cmath>
#include <limits>

#include "chat/jinja_builtins.h"
#include "chat/pystr.h"
#include "core/error.h"

namespace dfl::jinja {

namespace {

constexpr size_t kMaxBuiltSize = size_t{256} << 20;  // bound on `*` repetition results

std::string hint_missing(const Value& obj, const std::string& what) {
  return str("'", obj.type_name(), " object' has no attribute ", what);
}

int64_t add_ck(int64_t a, int64_t b) {
  int64_t r;
  DFL_CHECK(!__builtin_add_overflow(a, b, &r), "integer overflow");
  return r;
}
int64_t sub_ck(int64_t a, int64_t b) {
  int64_t r;
  DFL_CHECK(!__builtin_sub_overflow(a, b, &r), "integer overflow");
  return r;
}
int64_t mul_ck(int64_t a, int64_t b) {
  int64_t r;
  DFL_CHECK(!__builtin_mul_overflow(a, b, &r), "integer overflow");
  return r;
}

// Python's PySlice_AdjustIndices: normalized start/stop for `len` items and a step.
void slice_indices(int64_t len, const Value& vstart, const Value& vstop, int64_t step,
                   int64_t* start, int64_t* stop) {
  auto pick = [&](const Value& v, int64_t dflt, bool is_start) {
    if (v.is_none() || v.is_undefined()) return dflt;
    DFL_CHECK(v.is_int() || v.is_bool(), "slice indices must be integers or None");
    int64_t i = v.as_int();
    if (i < 0) {
      i += len;
      if (i < 0) i = step < 0 ? -1 : 0;
    } else if (i >= len) {
      i = step < 0 ? len - 1 : len;
    }
    (void)is_start;
    return i;
  };
  *start = pick(vstart, step < 0 ? len - 1 : 0, true);
  *stop = pick(vstop, step < 0 ? -1 : len, false);
}

const std::string& arg_str(const CallArgs& a, size_t i, const char* name, const char* method) {
  const Value* v = a.get(i, name);
  DFL_CHECK(v && v->is_string(), method, "() argument '", name, "' must be str");
  return v->as_string();
}

std::optional<std::string> opt_str(const CallArgs& a, size_t i, const char* name) {
  const Value* v = a.get(i, name);
  if (!v || v->is_none()) return std::nullopt;
  DFL_CHECK(v->is_string(), "argument '", name, "' must be str or None");
  return v->as_string();
}

int64_t opt_int(const CallArgs& a, size_t i, const char* name, int64_t dflt) {
  const Value* v = a.get(i, name);
  if (!v || v->is_none()) return dflt;
  DFL_CHECK(v->is_int() || v->is_bool(), "argument '", name, "' must be int");
  return v->as_int();
}

Value str_list(std::vector<std::string> parts) {
  std::vector<Value> items;
  items.reserve(parts.size());
  for (auto& p : parts) items.emplace_back(std::move(p));
  return Value::list(std::move(items));
}

bool affix_match(const std::string& s, const Value& affix, bool prefix) {
  auto one = [&](const std::string& x) {
    if (x.size() > s.size()) return false;
    return prefix ? s.compare(0, x.size(), x) == 0
                  : s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (affix.is_string()) return one(affix.as_string());
  DFL_CHECK(affix.is_list(), "startswith/endswith first arg must be str or a tuple of str");
  for (const auto& v : affix.as_list().items) {
    DFL_CHECK(v.is_string(), "tuple for startswith/endswith must only contain str");
    if (one(v.as_string())) return true;
  }
  return false;
}

bool all_chars(const std::string& s, bool (*pred)(char32_t)) {
  if (s.empty()) return false;
  for (char32_t c : utf8_decode(s))
    if (!pred(c)) return false;
  return true;
}

bool is_ascii_digit(char32_t c) { return c >= '0' && c <= '9'; }
bool is_alpha_cp(char32_t c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= 0xC0 && !py_isspace(c));
}
bool is_alnum_cp(char32_t c) { return is_ascii_digit(c) || is_alpha_cp(c); }

// str.format with {} / {0} / {name} fields; format specs and conversions are not supported.
std::string str_format(const std::string& fmt, const CallArgs& a) {
  std::string out;
  size_t auto_idx = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if (c == '{' && i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out += '{';
      ++i;
    } else if (c == '}' && i + 1 < fmt.size() && fmt[i + 1] == '}') {
      out += '}';
      ++i;
    } else if (c == '{') {
      size_t e = fmt.find('}', i);
      DFL_CHECK(e != std::string::npos, "Single '{' encountered in format string");
      std::string field = fmt.substr(i + 1, e - i - 1);
      DFL_CHECK(field.find_first_of(":!") == std::string::npos,
                "format specs are not supported in str.format");
      const Value* v = nullptr;
      if (field.empty()) {
        v = auto_idx < a.args.size() ? &a.args[auto_idx] : nullptr;
        ++auto_idx;
      } else if (std::isdigit(static_cast<unsigned char>(field[0]))) {
        size_t idx = std::stoul(field);
        v = idx < a.args.size() ? &a.args[idx] : nullptr;
      } else {
        for (const auto& kv : a.kwargs)
          if (kv.first == field) v = &kv.second;
      }
      DFL_CHECK(v, "str.format: no argument for field '{", field, "}'");
      out += v->str();
      i = e;
    } else {
      DFL_CHECK(c != '}', "Single '}' encountered in format string");
      out += c;
    }
  }
  return out;
}

std::optional<Value> string_method(const std::string& s, const std::string& name,
                                   const CallArgs& a) {
  if (name == "startswith" || name == "endswith") {
    const Value* affix = a.get(0, "prefix");
    DFL_CHECK(affix, name, "() takes at least 1 argument");
    std::string sub = s;
    if (a.args.size() > 1) {
      std::u32string u = utf8_decode(s);
      int64_t st, en;
      slice_indices(static_cast<int64_t>(u.size()), a.args[1],
                    a.args.size() > 2 ? a.args[2] : Value::none(), 1, &st, &en);
      sub = en > st ? utf8_encode(u.substr(st, en - st)) : std::string();
    }
    return Value(affix_match(sub, *affix, name == "startswith"));
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip")
    return Value(py_strip(s, opt_str(a, 0, "chars"), name != "rstrip", name != "lstrip"));
  if (name == "split" || name == "rsplit")
    return str_list(
        py_split(s, opt_str(a, 0, "sep"), opt_int(a, 1, "maxsplit", -1), name == "rsplit"));
  if (name == "splitlines") {
    const Value* k = a.get(0, "keepends");
    return str_list(py_splitlines(s, k && k->truthy()));
  }
  if (name == "replace")
    return Value(py_replace(s, arg_str(a, 0, "old", "replace"), arg_str(a, 1, "new", "replace"),
                            opt_int(a, 2, "count", -1)));
  if (name == "upper") return Value(py_upper(s));
  if (name == "lower") return Value(py_lower(s));
  if (name == "title") return Value(py_title(s));
  if (name == "capitalize") return Value(py_capitalize(s));
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex") {
    int64_t r = py_find(s, arg_str(a, 0, "sub", name.c_str()), name[0] == 'r');
    DFL_CHECK(r >= 0 || name == "find" || name == "rfind", "substring not found");
    return Value(r);
  }
  if (name == "count") return Value(py_count(s, arg_str(a, 0, "sub", "count")));
  if (name == "join") {
    const Value* it = a.get(0, "iterable");
    DFL_CHECK(it, "join() takes exactly one argument");
    std::string out;
    bool first = true;
    for (const auto& v : iterate(*it)) {
      DFL_CHECK(v.is_string(), "sequence item: expected str instance, ", v.type_name(), " found");
      if (!first) out += s;
      first = false;
      out += v.as_string();
    }
    return Value(out);
  }
  if (name == "isdigit") return Value(all_chars(s, is_ascii_digit));
  if (name == "isalpha") return Value(all_chars(s, is_alpha_cp));
  if (name == "isalnum") return Value(all_chars(s, is_alnum_cp));
  if (name == "isspace") return Value(all_chars(s, py_isspace));
  if (name == "islower" || name == "isupper") {
    std::string low = py_lower(s), up = py_upper(s);
    bool cased = low != up;
    return Value(cased && (name == "islower" ? s == low : s == up));
  }
  if (name == "removeprefix" || name == "removesuffix") {
    const std::string& x = arg_str(a, 0, "affix", name.c_str());
    if (x.size() <= s.size()) {
      if (name == "removeprefix" && s.compare(0, x.size(), x) == 0)
        return Value(s.substr(x.size()));
      if (name == "removesuffix" && s.compare(s.size() - x.size(), x.size(), x) == 0)
        return Value(s.substr(0, s.size() - x.size()));
    }
    return Value(s);
  }
  if (name == "format") return Value(str_format(s, a));
  return std::nullopt;
}

}  // namespace

[[noreturn]] void throw_undefined(const Value& v) {
  throw Error(v.undefined_hint().empty() ? std::string("value is undefined") : v.undefined_hint());
}

std::optional<Value> call_method(const Value& obj, const std::string& name, const CallArgs& a) {
  if (obj.is_string()) return string_method(obj.as_string(), name, a);
  if (obj.is_dict() && !obj.as_dict().is_namespace) {
    const Dict& d = obj.as_dict();
    if (name == "items" || name == "keys" || name == "values") {
      std::vector<Value> out;
      for (const auto& kv : d.items) {
        if (name == "items") {
          out.push_back(Value::list({kv.first, kv.second}, true));
        } else {
          out.push_back(name == "keys" ? kv.first : kv.second);
        }
      }
      return Value::list(std::move(out));
    }
    if (name == "get") {
      const Value* key = a.get(0, "key");
      DFL_CHECK(key, "get expected at least 1 argument");
      if (const Value* v = d.find(*key)) return *v;
      const Value* dflt = a.get(1, "default");
      return dflt ? *dflt : Value::none();
    }
    if (name == "update" || name == "pop" || name == "popitem" || name == "setdefault" ||
        name == "clear")
      throw Error(str("access to unsafe method dict.", name, " (the sandbox is immutable)"));
    return std::nullopt;
  }
  if (obj.is_list()) {
    const auto& items = obj.as_list().items;
    if (name == "index" || name == "count") {
      const Value* x = a.get(0, "value");
      DFL_CHECK(x, name, "() takes exactly one argument");
      int64_t n = 0;
      for (size_t i = 0; i < items.size(); ++i) {
        if (!values_equal(items[i], *x)) continue;
        if (name == "index") return Value(static_cast<int64_t>(i));
        ++n;
      }
      DFL_CHECK(name == "count", "value is not in list");
      return Value(n);
    }
    if (name == "append" || name == "extend" || name == "insert" || name == "pop" ||
        name == "remove" || name == "reverse" || name == "sort" || name == "clear")
      throw Error(str("access to unsafe method list.", name, " (the sandbox is immutable)"));
  }
  return std::nullopt;
}

Value get_attr(const Value& obj, const std::string& attr) {
  if (obj.is_undefined()) throw_undefined(obj);
  if (obj.is_dict()) {
    if (const Value* v = obj.as_dict().find(attr)) return *v;
  }
  return Value::undefined(hint_missing(obj, "'" + attr + "'"));
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) throw_undefined(obj);
  if (obj.is_dict()) {
    if (const Value* v = obj.as_dict().find(key)) return *v;
    return Value::undefined(hint_missing(obj, key.repr()));
  }
  if (obj.is_list() && obj.as_list().is_generator)
    return Value::undefined("'generator' object is not subscriptable");
  if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t i = key.as_int();
    if (obj.is_list()) {
      const auto& items = obj.as_list().items;
      int64_t n = static_cast<int64_t>(items.size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return items[static_cast<size_t>(i)];
    } else {
      std::u32string u = utf8_decode(obj.as_string());
      int64_t n = static_cast<int64_t>(u.size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) {
        std::string out;
        utf8_append(out, u[static_cast<size_t>(i)]);
        return Value(out);
      }
    }
    return Value::undefined(str(obj.type_name(), " object has no element ", key.as_int()));
  }
  if (key.is_string()) return get_attr(obj, key.as_string());
  return Value::undefined(str("'", obj.type_name(), " object' has no element ", key.repr()));
}

Value get_slice(const Value& obj, const Value& vstart, const Value& vstop, const Value& vstep) {
  if (obj.is_undefined()) throw_undefined(obj);
  int64_t step = 1;
  if (!vstep.is_none() && !vstep.is_undefined()) {
    DFL_CHECK(vstep.is_int() || vstep.is_bool(), "slice indices must be integers or None");
    step = vstep.as_int();
  }
  DFL_CHECK(step != 0, "slice step cannot be zero");
  auto pick = [&](int64_t len, std::vector<size_t>* idx) {
    int64_t start, stop;
    slice_indices(len, vstart, vstop, step, &start, &stop);
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
      idx->push_back(static_cast<size_t>(i));
  };
  std::vector<size_t> idx;
  if (obj.is_list() && !obj.as_list().is_generator) {
    const auto& items = obj.as_list().items;
    pick(static_cast<int64_t>(items.size()), &idx);
    std::vector<Value> out;
    out.reserve(idx.size());
    for (size_t i : idx) out.push_back(items[i]);
    return Value::list(std::move(out), obj.as_list().is_tuple);
  }
  if (obj.is_string()) {
    std::u32string u = utf8_decode(obj.as_string());
    pick(static_cast<int64_t>(u.size()), &idx);
    std::u32string out;
    for (size_t i : idx) out.push_back(u[i]);
    return Value(utf8_encode(out));
  }
  // jinja2 turns a failed subscript into undefined, except where Python raises a TypeError that
  // escapes its lookup (a dict cannot hash a slice).
  DFL_CHECK(!obj.is_dict(), "unhashable type: 'slice'");
  return Value::undefined(str("'", obj.type_name(), "' object is not subscriptable"));
}

std::vector<Value> iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return {};
    case Value::Kind::kList:
      return v.as_list().items;
    case Value::Kind::kDict: {
      std::vector<Value> keys;
      for (const auto& kv : v.as_dict().items) keys.push_back(kv.first);
      return keys;
    }
    case Value::Kind::kString: {
      std::vector<Value> out;
      for (char32_t c : utf8_decode(v.as_string())) {
        std::string s;
        utf8_append(s, c);
        out.emplace_back(std::move(s));
      }
      return out;
    }
    default:
      throw Error(str("'", v.type_name(), "' object is not iterable"));
  }
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined:
      return false;
    case Value::Kind::kString:
      if (item.is_undefined()) throw_undefined(item);
      DFL_CHECK(item.is_string(), "'in <string>' requires string as left operand, not ",
                item.type_name());
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::kList:
      for (const auto& v : container.as_list().items)
        if (values_equal(v, item)) return true;
      return false;
    case Value::Kind::kDict:
      return container.as_dict().find(item) != nullptr;
    default:
      throw Error(str("argument of type '", container.type_name(), "' is not iterable"));
  }
}

Value binary_op(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") return Value(a.str() + b.str());
  if (a.is_undefined()) throw_undefined(a);
  if (b.is_undefined()) throw_undefined(b);
  auto type_error = [&]() -> Value {
    throw Error(str("unsupported operand type(s) for ", op, ": '", a.type_name(), "' and '",
                    b.type_name(), "'"));
  };
  const bool ints = (a.is_int() || a.is_bool()) && (b.is_int() || b.is_bool());
  const bool nums = a.is_number() && b.is_number();
  if (op == "+") {
    if (ints) return Value(add_ck(a.as_int(), b.as_int()));
    if (nums) return Value(a.as_float() + b.as_float());
    if (a.is_string() && b.is_string()) return Value(a.as_string() + b.as_string());
    if (a.is_list() && b.is_list() && a.as_list().is_tuple == b.as_list().is_tuple) {
      std::vector<Value> items = a.as_list().items;
      items.insert(items.end(), b.as_list().items.begin(), b.as_list().items.end());
      return Value::list(std::move(items), a.as_list().is_tuple);
    }
    return type_error();
  }
  if (op == "-") {
    if (ints) return Value(sub_ck(a.as_int(), b.as_int()));
    if (nums) return Value(a.as_float() - b.as_float());
    return type_error();
  }
  if (op == "*") {
    if (ints) return Value(mul_ck(a.as_int(), b.as_int()));
    if (nums) return Value(a.as_float() * b.as_float());
    const Value* seq =
        a.is_string() || a.is_list() ? &a : (b.is_string() || b.is_list() ? &b : nullptr);
    const Value* cnt = seq == &a ? &b : &a;
    if (!seq || !(cnt->is_int() || cnt->is_bool())) return type_error();
    int64_t n = std::max<int64_t>(cnt->as_int(), 0);
    size_t unit = seq->is_string() ? seq->as_string().size() : seq->as_list().items.size();
    DFL_CHECK(unit == 0 || static_cast<uint64_t>(n) <= kMaxBuiltSize / unit,
              "repetition result too large");
    if (seq->is_string()) {
      std::string out;
      for (int64_t i = 0; i < n; ++i) out += seq->as_string();
      return Value(out);
    }
    std::vector<Value> out;
    for (int64_t i = 0; i < n; ++i)
      out.insert(out.end(), seq->as_list().items.begin(), seq->as_list().items.end());
    return Value::list(std::move(out), seq->as_list().is_tuple);
  }
  if (op == "/") {
    if (!nums) return type_error();
    DFL_CHECK(b.as_float() != 0.0, "division by zero");
    return Value(a.as_float() / b.as_float());
  }
  if (op == "//" || op == "%") {
    if (op == "%" && a.is_string()) return Value(percent_format(a.as_string(), b));
    if (!nums) return type_error();
    if (ints) {
      int64_t x = a.as_int(), y = b.as_int();
      DFL_CHECK(y != 0, "integer division or modulo by zero");
      DFL_CHECK(!(x == std::numeric_limits<int64_t>::min() && y == -1), "integer overflow");
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {
        q -= 1;
        m += y;
      }
      return op == "//" ? Value(q) : Value(m);
    }
    double x = a.as_float(), y = b.as_float();
    DFL_CHECK(y != 0.0, "float division by zero");
    if (op == "//") return Value(std::floor(x / y));
    double m = std::fmod(x, y);
    if (m != 0 && ((m < 0) != (y < 0))) m += y;
    return Value(m);
  }
  if (op == "**") {
    if (!nums) return type_error();
    if (ints && b.as_int() >= 0) {
      int64_t base = a.as_int(), e = b.as_int(), acc = 1;
      while (e > 0) {
        if (e & 1) acc = mul_ck(acc, base);
        e >>= 1;
        if (e > 0) base = mul_ck(base, base);
      }
      return Value(acc);
    }
    return Value(std::pow(a.as_float(), b.as_float()));
  }
  throw Error(str("unknown operator ", op));
}

std::string percent_format(const std::string& fmt, const Value& args) {
  std::vector<Value> list =
      args.is_list() && args.as_list().is_tuple ? args.as_list().items : std::vector<Value>{args};
  std::string out;
  size_t next = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    DFL_CHECK(i + 1 < fmt.size(), "incomplete format");
    char c = fmt[++i];
    if (c == '%') {
      out += '%';
      continue;
    }
    DFL_CHECK(next < list.size(), "not enough arguments for format string");
    const Value& v = list[next++];
    switch (c) {
      case 's':
        out += v.str();
        break;
      case 'r':
        out += v.repr();
        break;
      case 'd':
      case 'i':
        DFL_CHECK(v.is_number(), "%d format: a real number is required, not ", v.type_name());
        out += std::to_string(v.is_float() ? float_to_int(v.as_float()) : v.as_int());
        break;
      case 'f': {
        DFL_CHECK(v.is_number(), "%f format: a real number is required");
        char buf[64];
        std::snprintf(buf, sizeof(buf), "%f", v.as_float());
        out += buf;
        break;
      }
      case 'x': {
        DFL_CHECK(v.is_int() || v.is_bool(), "%x format: an integer is required");
        char buf[32];
        std::snprintf(buf, sizeof(buf), "%llx", static_cast<unsigned long long>(v.as_int()));
        out += buf;
        break;
      }
      default:
        throw Error(str("unsupported format character '", c, "'"));
    }
  }
  // Python: leftover arguments are an error, except for a single non-tuple argument that
  // supports indexing (list, dict: treated as a mapping for %(name)s).
  bool mapping_like = args.is_dict() || (args.is_list() && !args.as_list().is_tuple);
  DFL_CHECK(next >= list.size() || (mapping_like && next == 0),
            "not all arguments converted during string formatting");
  return out;
}

}  // namespace dfl::jinja
