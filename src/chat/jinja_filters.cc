// Built-in filters and tests (see jinja_builtins.h for the list).
#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "chat/jinja_builtins.h"
#include "chat/pystr.h"
#include "core/error.h"

namespace dfl::jinja {
namespace {

bool flag(const CallArgs& a, size_t i, const char* name, bool dflt = false) {
  const Value* v = a.get(i, name);
  return v ? v->truthy() : dflt;
}

// jinja2's make_attrgetter: "a.b.0" walks attributes, numeric parts index.
Value attr_path(const Value& item, const std::string& path) {
  Value cur = item;
  size_t pos = 0;
  while (true) {
    size_t dot = path.find('.', pos);
    std::string part = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    cur = numeric ? get_item(cur, Value(static_cast<int64_t>(std::stoll(part))))
                  : get_item(cur, Value(part));
    if (dot == std::string::npos) return cur;
    pos = dot + 1;
  }
}

Value key_of(const Value& v, const Value* attribute, bool case_sensitive) {
  Value k = attribute && !attribute->is_none() ? attr_path(v, attribute->str()) : v;
  if (!case_sensitive && k.is_string()) return Value(py_lower(k.as_string()));
  return k;
}

int64_t length_of(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return 0;
    case Value::Kind::kString:
      return static_cast<int64_t>(utf8_length(v.as_string()));
    case Value::Kind::kList:
      return static_cast<int64_t>(v.as_list().items.size());
    case Value::Kind::kDict:
      return static_cast<int64_t>(v.as_dict().items.size());
    default:
      throw Error(str("object of type '", v.type_name(), "' has no len()"));
  }
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

Value do_tojson(const Value& v, const CallArgs& a) {
  JsonDumpOptions opt;
  opt.ensure_ascii = flag(a, 0, "ensure_ascii");
  const Value* indent = a.get(1, "indent");
  if (indent && !indent->is_none()) {
    opt.has_indent = true;
    if (indent->is_string()) {
      opt.indent = indent->as_string();
    } else {
      DFL_CHECK(indent->is_int() || indent->is_bool(), "tojson indent must be int or str");
      opt.indent =
          std::string(static_cast<size_t>(std::clamp<int64_t>(indent->as_int(), 0, 64)), ' ');
    }
    opt.item_sep = ",";
  }
  const Value* seps = a.get(2, "separators");
  if (seps && !seps->is_none()) {
    DFL_CHECK(seps->is_list() && seps->as_list().items.size() == 2 &&
                  seps->as_list().items[0].is_string() && seps->as_list().items[1].is_string(),
              "tojson separators must be a (item_sep, key_sep) pair of strings");
    opt.item_sep = seps->as_list().items[0].as_string();
    opt.key_sep = seps->as_list().items[1].as_string();
  }
  opt.sort_keys = flag(a, 3, "sort_keys");
  return Value(py_json_dumps(v, opt));
}

Value do_int(const Value& v, const CallArgs& a) {
  const Value* d = a.get(0, "default");
  Value dflt = d ? *d : Value(0);
  int64_t base = 10;
  if (const Value* b = a.get(1, "base"); b && (b->is_int() || b->is_bool())) base = b->as_int();
  if (v.is_int() || v.is_bool()) return Value(v.as_int());
  if (v.is_float()) {
    if (!std::isfinite(v.as_float())) return dflt;
    return Value(float_to_int(v.as_float()));
  }
  if (!v.is_string()) return dflt;
  std::string s = py_strip(v.as_string(), std::nullopt, true, true);
  std::string clean;
  for (char c : s)
    if (c != '_') clean += c;
  if (!clean.empty() && base >= 2 && base <= 36) {
    char* end = nullptr;
    errno = 0;
    long long r = std::strtoll(clean.c_str(), &end, static_cast<int>(base));
    if (end && *end == '\0' && errno == 0) return Value(static_cast<int64_t>(r));
    double f = std::strtod(clean.c_str(), &end);
    if (end && *end == '\0' && std::isfinite(f)) return Value(float_to_int(f));
  }
  return dflt;
}

Value do_float(const Value& v, const CallArgs& a) {
  const Value* d = a.get(0, "default");
  Value dflt = d ? *d : Value(0.0);
  if (v.is_number()) return Value(v.as_float());
  if (!v.is_string()) return dflt;
  std::string s = py_strip(v.as_string(), std::nullopt, true, true);
  if (s.empty()) return dflt;
  char* end = nullptr;
  double f = std::strtod(s.c_str(), &end);
  return end && *end == '\0' ? Value(f) : dflt;
}

Value do_round(const Value& v, const CallArgs& a) {
  int64_t prec = 0;
  if (const Value* p = a.get(0, "precision")) prec = p->as_int();
  std::string method = "common";
  if (const Value* m = a.get(1, "method")) method = m->str();
  DFL_CHECK(v.is_number(), "round: a number is required, not ", v.type_name());
  prec = std::clamp<int64_t>(prec, -300, 300);
  if (method == "common") {
    if (!v.is_float()) return Value(v.as_int());  // Python: round(int, n) stays an int
    char buf[1024];                               // 309 integer digits + 300 decimals at most
    std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(std::max<int64_t>(prec, 0)),
                  v.as_float());
    double r = prec >= 0
                   ? std::strtod(buf, nullptr)
                   : std::nearbyint(v.as_float() / std::pow(10.0, -prec)) * std::pow(10.0, -prec);
    return Value(r);
  }
  DFL_CHECK(method == "ceil" || method == "floor", "method must be common, ceil or floor");
  double scale = std::pow(10.0, static_cast<double>(prec));
  double x = v.as_float() * scale;
  return Value((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
}

Value do_indent(const Value& v, const CallArgs& a) {
  std::string ind = "    ";
  if (const Value* w = a.get(0, "width"))
    ind = w->is_string()
              ? w->as_string()
              : std::string(static_cast<size_t>(std::clamp<int64_t>(w->as_int(), 0, 256)), ' ');
  bool first = flag(a, 1, "first"), blank = flag(a, 2, "blank");
  if (v.is_undefined()) throw_undefined(v);
  DFL_CHECK(v.is_string(), "indent: a string is required, not ", v.type_name());
  std::vector<std::string> lines = py_splitlines(v.str() + "\n", false);
  std::string rv;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) rv += (i ? "\n" + ind : "") + lines[i];
  } else if (!lines.empty()) {
    rv = lines[0];
    if (lines.size() > 1) {
      rv += "\n";
      for (size_t i = 1; i < lines.size(); ++i)
        rv += (i > 1 ? "\n" : "") + (lines[i].empty() ? lines[i] : ind + lines[i]);
    }
  }
  return Value(first ? ind + rv : rv);
}

std::vector<Value> sorted(std::vector<Value> items, const Value* attribute, bool case_sensitive,
                          bool reverse) {
  std::vector<std::pair<Value, Value>> keyed;
  for (auto& v : items) keyed.emplace_back(key_of(v, attribute, case_sensitive), std::move(v));
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    int c = values_compare(x.first, y.first);
    return reverse ? c > 0 : c < 0;
  });
  std::vector<Value> out;
  for (auto& kv : keyed) out.push_back(std::move(kv.second));
  return out;
}

// select/reject/selectattr/rejectattr: args after `skip` are (test name, test args...).
Value do_select(const Value& v, const CallArgs& a, bool want, bool by_attr) {
  size_t skip = by_attr ? 1 : 0;
  std::string attr;
  if (by_attr) {
    DFL_CHECK(!a.args.empty(), "selectattr/rejectattr need an attribute name");
    attr = a.args[0].str();
  }
  bool has_test = a.args.size() > skip;
  std::string test = has_test ? a.args[skip].str() : "";
  CallArgs targs;
  if (has_test) targs.args.assign(a.args.begin() + static_cast<long>(skip) + 1, a.args.end());
  std::vector<Value> out;
  for (const auto& item : iterate(v)) {
    Value x = by_attr ? attr_path(item, attr) : item;
    bool r = has_test ? apply_test(test, x, targs) : x.truthy();
    if (r == want) out.push_back(item);
  }
  return Value::generator(std::move(out));
}

Value do_map(const Value& v, const CallArgs& a) {
  std::vector<Value> out;
  const Value* attribute = nullptr;
  const Value* dflt = nullptr;
  for (const auto& kv : a.kwargs) {
    if (kv.first == "attribute") attribute = &kv.second;
    if (kv.first == "default") dflt = &kv.second;
  }
  if (attribute) {
    for (const auto& item : iterate(v)) {
      Value x = attr_path(item, attribute->str());
      out.push_back(x.is_undefined() && dflt ? *dflt : x);
    }
    return Value::generator(std::move(out));
  }
  DFL_CHECK(!a.args.empty(), "map: a filter name or attribute= is required");
  std::string filter = a.args[0].str();
  CallArgs fargs;
  fargs.args.assign(a.args.begin() + 1, a.args.end());
  fargs.kwargs = a.kwargs;
  for (const auto& item : iterate(v)) out.push_back(apply_filter(filter, item, fargs));
  return Value::generator(std::move(out));
}

const char* const kFilters[] = {
    "abs",     "attr",     "batch",  "capitalize", "center",     "count",      "d",
    "default", "dictsort", "e",      "escape",     "first",      "float",      "format",
    "indent",  "int",      "items",  "join",       "last",       "length",     "list",
    "lower",   "map",      "max",    "min",        "reject",     "rejectattr", "replace",
    "reverse", "round",    "safe",   "select",     "selectattr", "sort",       "string",
    "sum",     "title",    "tojson", "trim",       "unique",     "upper",      "wordcount"};
const char* const kTests[] = {
    "defined",  "undefined", "none",    "boolean",     "true",     "false",       "integer",
    "float",    "number",    "string",  "mapping",     "iterable", "sequence",    "callable",
    "sameas",   "eq",        "equalto", "==",          "ne",       "!=",          "lt",
    "lessthan", "<",         "le",      "<=",          "gt",       "greaterthan", ">",
    "ge",       ">=",        "in",      "divisibleby", "even",     "odd",         "lower",
    "upper",    "escaped"};

}  // namespace

bool is_known_filter(const std::string& name) {
  return std::find(std::begin(kFilters), std::end(kFilters), name) != std::end(kFilters);
}

bool is_known_test(const std::string& name) {
  return std::find(std::begin(kTests), std::end(kTests), name) != std::end(kTests);
}

Value apply_filter(const std::string& name, const Value& v, const CallArgs& a) {
  if (name == "default" || name == "d") {
    const Value* d = a.get(0, "default_value");
    bool boolean = flag(a, 1, "boolean");
    if (v.is_undefined() || (boolean && !v.truthy())) return d ? *d : Value("");
    return v;
  }
  if (name == "length" || name == "count") return Value(length_of(v));
  if (name == "tojson") return do_tojson(v, a);
  if (name == "safe") return v.is_string() ? v : Value(v.str());
  if (name == "string") return v.is_string() ? v : Value(v.str());
  if (name == "trim") {
    const Value* chars = a.get(0, "chars");
    return Value(py_strip(v.str(),
                          chars && !chars->is_none() ? std::optional(chars->str()) : std::nullopt,
                          true, true));
  }
  if (name == "lower") return Value(py_lower(v.str()));
  if (name == "upper") return Value(py_upper(v.str()));
  if (name == "capitalize") return Value(py_capitalize(v.str()));
  if (name == "title") return Value(py_title(v.str()));
  if (name == "escape" || name == "e") return Value(html_escape(v.str()));
  if (name == "replace") {
    const Value* old = a.get(0, "old");
    const Value* repl = a.get(1, "new");
    DFL_CHECK(old && repl, "replace needs old and new");
    const Value* count = a.get(2, "count");
    return Value(py_replace(v.str(), old->str(), repl->str(),
                            count && !count->is_none() ? count->as_int() : -1));
  }
  if (name == "join") {
    const Value* sep = a.get(0, "d");
    const Value* attribute = a.get(1, "attribute");
    std::string out;
    bool first = true;
    for (const auto& item : iterate(v)) {
      if (!first) out += sep ? sep->str() : "";
      first = false;
      out += (attribute && !attribute->is_none() ? attr_path(item, attribute->str()) : item).str();
    }
    return Value(out);
  }
  if (name == "first" || name == "last") {
    std::vector<Value> items = iterate(v);
    if (items.empty()) return Value::undefined(str("No ", name, " item, sequence was empty."));
    return name == "first" ? items.front() : items.back();
  }
  if (name == "items") {
    if (v.is_undefined()) return Value::generator({});
    DFL_CHECK(v.is_dict(), "items filter: can only get item pairs from a mapping");
    return Value::generator(call_method(v, "items", CallArgs{})->as_list().items);
  }
  if (name == "list") return Value::list(iterate(v));
  if (name == "reverse") {
    if (v.is_string()) {
      std::u32string u = utf8_decode(v.as_string());
      std::reverse(u.begin(), u.end());
      return Value(utf8_encode(u));
    }
    std::vector<Value> items = iterate(v);
    std::reverse(items.begin(), items.end());
    return Value::generator(std::move(items));  // Python's reversed() iterator
  }
  if (name == "int") return do_int(v, a);
  if (name == "float") return do_float(v, a);
  if (name == "abs") {
    DFL_CHECK(v.is_number(), "bad operand type for abs(): '", v.type_name(), "'");
    return v.is_float() ? Value(std::fabs(v.as_float()))
                        : Value(static_cast<int64_t>(std::llabs(v.as_int())));
  }
  if (name == "round") return do_round(v, a);
  if (name == "indent") return do_indent(v, a);
  if (name == "format") {
    std::vector<Value> args = a.args;
    return Value(percent_format(v.str(), Value::list(std::move(args), true)));
  }
  if (name == "sort") {
    return Value::list(sorted(iterate(v), a.get(2, "attribute"), flag(a, 1, "case_sensitive"),
                              flag(a, 0, "reverse")));
  }
  if (name == "dictsort") {
    DFL_CHECK(v.is_dict(), "dictsort: a mapping is required");
    bool cs = flag(a, 0, "case_sensitive");
    const Value* by = a.get(1, "by");
    size_t pos = by && by->str() == "value" ? 1 : 0;
    Value attr(static_cast<int64_t>(pos));
    std::vector<Value> items = call_method(v, "items", CallArgs{})->as_list().items;
    std::vector<std::pair<Value, Value>> keyed;
    for (auto& it : items) keyed.emplace_back(key_of(it.as_list().items[pos], nullptr, cs), it);
    bool rev = flag(a, 2, "reverse");
    std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
      int c = values_compare(x.first, y.first);
      return rev ? c > 0 : c < 0;
    });
    std::vector<Value> out;
    for (auto& kv : keyed) out.push_back(kv.second);
    return Value::list(std::move(out));
  }
  if (name == "unique") {
    bool cs = flag(a, 0, "case_sensitive");
    const Value* attribute = a.get(1, "attribute");
    std::vector<Value> out, seen;
    for (const auto& item : iterate(v)) {
      Value k = key_of(item, attribute, cs);
      if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return values_equal(s, k); }))
        continue;
      seen.push_back(k);
      out.push_back(item);
    }
    return Value::generator(std::move(out));
  }
  if (name == "min" || name == "max") {
    std::vector<Value> items = iterate(v);
    if (items.empty()) return Value::undefined(str("No ", name, " item, sequence was empty."));
    bool cs = flag(a, 0, "case_sensitive");
    const Value* attribute = a.get(1, "attribute");
    size_t best = 0;
    for (size_t i = 1; i < items.size(); ++i) {
      int c = values_compare(key_of(items[i], attribute, cs), key_of(items[best], attribute, cs));
      if (name == "min" ? c < 0 : c > 0) best = i;
    }
    return items[best];
  }
  if (name == "sum") {
    const Value* attribute = a.get(0, "attribute");
    const Value* start = a.get(1, "start");
    Value acc = start ? *start : Value(0);
    for (const auto& item : iterate(v))
      acc = binary_op(
          "+", acc, attribute && !attribute->is_none() ? attr_path(item, attribute->str()) : item);
    return acc;
  }
  if (name == "map") return do_map(v, a);
  if (name == "select") return do_select(v, a, true, false);
  if (name == "reject") return do_select(v, a, false, false);
  if (name == "selectattr") return do_select(v, a, true, true);
  if (name == "rejectattr") return do_select(v, a, false, true);
  if (name == "attr") {
    const Value* n = a.get(0, "name");
    DFL_CHECK(n, "attr needs a name");
    // Python getattr only: dict keys are not attributes, namespace entries are.
    if (v.is_dict() && v.as_dict().is_namespace) return get_attr(v, n->str());
    if (v.is_undefined()) throw_undefined(v);
    return Value::undefined(str("'", v.type_name(), " object' has no attribute '", n->str(), "'"));
  }
  if (name == "batch") {
    const Value* n = a.get(0, "linecount");
    DFL_CHECK(n && n->is_int() && n->as_int() > 0, "batch needs a positive count");
    const Value* fill = a.get(1, "fill_with");
    std::vector<Value> out, cur;
    for (const auto& item : iterate(v)) {
      cur.push_back(item);
      if (static_cast<int64_t>(cur.size()) == n->as_int()) {
        out.push_back(Value::list(std::move(cur)));
        cur.clear();
      }
    }
    if (!cur.empty()) {
      if (fill && !fill->is_none())
        while (static_cast<int64_t>(cur.size()) < n->as_int()) cur.push_back(*fill);
      out.push_back(Value::list(std::move(cur)));
    }
    return Value::generator(std::move(out));
  }
  if (name == "center") {
    const Value* w = a.get(0, "width");
    int64_t width = w ? w->as_int() : 80;
    std::string s = v.str();
    int64_t len = static_cast<int64_t>(utf8_length(s));
    if (width <= len) return Value(s);
    int64_t pad = std::min<int64_t>(width - len, 1 << 20);
    int64_t left = pad / 2 + (pad & width & 1);
    return Value(std::string(static_cast<size_t>(left), ' ') + s +
                 std::string(static_cast<size_t>(pad - left), ' '));
  }
  if (name == "wordcount") {  // len(re.findall(r"\w+", s))
    int64_t n = 0;
    bool in_word = false;
    for (char32_t c : utf8_decode(v.str())) {
      bool w = c == '_' || (c < 0x80 ? std::isalnum(static_cast<int>(c)) != 0 : !py_isspace(c));
      if (w && !in_word) ++n;
      in_word = w;
    }
    return Value(n);
  }
  throw Error(str("no filter named '", name, "'"));
}

bool apply_test(const std::string& name, const Value& v, const CallArgs& a) {
  auto arg = [&]() -> const Value& {
    DFL_CHECK(!a.args.empty(), "test '", name, "' needs an argument");
    return a.args[0];
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "number") return v.is_number();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict() && !v.as_dict().is_namespace;
  if (name == "iterable" || name == "sequence")
    return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
  if (name == "callable") return v.is_function();
  if (name == "sameas") {
    const Value& o = arg();
    if (v.is_list() && o.is_list()) return v.list_ptr() == o.list_ptr();
    if (v.is_dict() && o.is_dict()) return v.dict_ptr() == o.dict_ptr();
    return v.kind() == o.kind() && values_equal(v, o);
  }
  if (name == "eq" || name == "equalto" || name == "==") return values_equal(v, arg());
  if (name == "ne" || name == "!=") return !values_equal(v, arg());
  if (name == "lt" || name == "lessthan" || name == "<") return values_compare(v, arg()) < 0;
  if (name == "le" || name == "<=") return values_compare(v, arg()) <= 0;
  if (name == "gt" || name == "greaterthan" || name == ">") return values_compare(v, arg()) > 0;
  if (name == "ge" || name == ">=") return values_compare(v, arg()) >= 0;
  if (name == "in") return contains(arg(), v);
  if (name == "divisibleby") {
    Value r = binary_op("%", v, arg());
    return r.is_number() && r.as_float() == 0.0;
  }
  if (name == "even" || name == "odd") {
    Value r = binary_op("%", v, Value(2));
    return r.is_number() && r.as_float() == (name == "even" ? 0.0 : 1.0);
  }
  if (name == "lower" || name == "upper")  // str.islower() / str.isupper()
    return call_method(Value(v.str()), name == "lower" ? "islower" : "isupper", CallArgs{})
        ->truthy();
  if (name == "escaped") return false;
  throw Error(str("no test named '", name, "'"));
}

}  // namespace dfl::jinja
