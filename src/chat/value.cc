#include "chat/value.h"

#include <charconv>
#include <cmath>

#include "chat/pystr.h"
#include "core/error.h"

namespace dfl::jinja {

const Value* Dict::find(const Value& key) const {
  for (const auto& kv : items)
    if (values_equal(kv.first, key)) return &kv.second;
  return nullptr;
}

const Value* Dict::find(const std::string& key) const {
  for (const auto& kv : items)
    if (kv.first.is_string() && kv.first.as_string() == key) return &kv.second;
  return nullptr;
}

void Dict::set(Value key, Value value) {
  for (auto& kv : items) {
    if (values_equal(kv.first, key)) {
      kv.second = std::move(value);
      return;
    }
  }
  items.emplace_back(std::move(key), std::move(value));
}

const Value* CallArgs::get(size_t pos, const char* name) const {
  if (pos < args.size()) return &args[pos];
  if (name) {
    for (const auto& kv : kwargs)
      if (kv.first == name) return &kv.second;
  }
  return nullptr;
}

Value Value::undefined(std::string hint) {
  Value v;
  v.s_ = std::move(hint);
  return v;
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value Value::list(std::vector<Value> items, bool is_tuple) {
  auto l = std::make_shared<List>();
  l->items = std::move(items);
  l->is_tuple = is_tuple;
  return Value(std::move(l));
}

Value Value::generator(std::vector<Value> items) {
  Value v = list(std::move(items));
  v.list_->is_generator = true;
  return v;
}

Value Value::dict() { return Value(std::make_shared<Dict>()); }

Value Value::function(std::string name, NativeFn fn) {
  auto f = std::make_shared<Function>();
  f->name = std::move(name);
  f->fn = std::move(fn);
  return Value(std::move(f));
}

namespace {

template <typename Json>
Value value_from_json(const Json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      return Value::none();
    case nlohmann::json::value_t::boolean:
      return Value(j.template get<bool>());
    case nlohmann::json::value_t::number_integer:
      return Value(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned:
      return Value(static_cast<int64_t>(j.template get<uint64_t>()));
    case nlohmann::json::value_t::number_float:
      return Value(j.template get<double>());
    case nlohmann::json::value_t::string:
      return Value(j.template get<std::string>());
    case nlohmann::json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(value_from_json(e));
      return Value::list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      Value d = Value::dict();
      for (auto it = j.begin(); it != j.end(); ++it)
        d.as_dict().items.emplace_back(Value(it.key()), value_from_json(it.value()));
      return d;
    }
    default:
      return Value::none();  // binary / discarded: not produced by JSON parsing
  }
}

}  // namespace

Value Value::from_json(const nlohmann::json& j) { return value_from_json(j); }
Value Value::from_json(const nlohmann::ordered_json& j) { return value_from_json(j); }

bool Value::truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
    case Kind::kInt:
      return i_ != 0;
    case Kind::kFloat:
      return f_ != 0.0;
    case Kind::kString:
      return !s_.empty();
    case Kind::kList:
      return list_->is_generator || !list_->items.empty();
    case Kind::kDict:
      return !dict_->items.empty();
    case Kind::kFunction:
      return true;
  }
  return false;
}

int64_t float_to_int(double x) {
  DFL_CHECK(std::isfinite(x), "cannot convert float ", python_float_repr(x), " to integer");
  // 2^63 is exactly representable; anything at or beyond it does not fit.
  DFL_CHECK(x > -9223372036854775808.0 - 1.0 && x < 9223372036854775808.0,
            "integer too large: ", python_float_repr(x));
  return static_cast<int64_t>(x);
}

std::string python_float_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  // sci looks like "-1.2345e+05": split sign, digits and exponent.
  bool neg = sci[0] == '-';
  size_t epos = sci.find('e');
  std::string mant = sci.substr(neg ? 1 : 0, epos - (neg ? 1 : 0));
  int exp = std::stoi(sci.substr(epos + 1));
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  std::string out = neg ? "-" : "";
  if (exp >= -4 && exp < 16) {
    if (exp < 0) {
      out += "0." + std::string(-exp - 1, '0') + digits;
    } else if (static_cast<size_t>(exp) + 1 >= digits.size()) {
      out += digits + std::string(exp + 1 - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
    }
  } else {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof(eb), "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    out += eb;
  }
  return out;
}

std::string Value::str() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "";
    case Kind::kString:
      return s_;
    default:
      return repr();
  }
}

std::string Value::repr() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "Undefined";  // repr(jinja2.Undefined()); str() is ""
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return i_ ? "True" : "False";
    case Kind::kInt:
      return std::to_string(i_);
    case Kind::kFloat:
      return python_float_repr(f_);
    case Kind::kString:
      return py_repr_string(s_);
    case Kind::kList: {
      const auto& l = *list_;
      if (l.is_generator) return "<generator object>";
      std::string out = l.is_tuple ? "(" : "[";
      for (size_t i = 0; i < l.items.size(); ++i) {
        if (i) out += ", ";
        out += l.items[i].repr();
      }
      if (l.is_tuple && l.items.size() == 1) out += ",";
      out += l.is_tuple ? ")" : "]";
      return out;
    }
    case Kind::kDict: {
      std::string out = dict_->is_namespace ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& kv : dict_->items) {
        if (!first) out += ", ";
        first = false;
        out += kv.first.repr() + ": " + kv.second.repr();
      }
      out += dict_->is_namespace ? "}>" : "}";
      return out;
    }
    case Kind::kFunction:
      return "<function " + fn_->name + ">";
  }
  return "";
}

nlohmann::ordered_json Value::to_json() const {
  switch (kind_) {
    case Kind::kNone:
      return nullptr;
    case Kind::kBool:
      return i_ != 0;
    case Kind::kInt:
      return i_;
    case Kind::kFloat:
      return f_;
    case Kind::kString:
      return s_;
    case Kind::kList: {
      if (list_->is_generator) throw Error("Object of type generator is not JSON serializable");
      auto arr = nlohmann::ordered_json::array();
      for (const auto& e : list_->items) arr.push_back(e.to_json());
      return arr;
    }
    case Kind::kDict: {
      auto obj = nlohmann::ordered_json::object();
      for (const auto& kv : dict_->items) obj[kv.first.str()] = kv.second.to_json();
      return obj;
    }
    default:
      throw Error(dfl::str("value of type ", type_name(), " is not JSON serializable"));
  }
}

const char* Value::type_name() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return list_->is_generator ? "generator" : (list_->is_tuple ? "tuple" : "list");
    case Kind::kDict:
      return dict_->is_namespace ? "Namespace" : "dict";
    case Kind::kFunction:
      return "function";
  }
  return "?";
}

bool values_equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.as_string() == b.as_string();
    case Value::Kind::kList: {
      if (a.as_list().is_generator || b.as_list().is_generator) return a.list_ptr() == b.list_ptr();
      const auto& x = a.as_list().items;
      const auto& y = b.as_list().items;
      if (a.as_list().is_tuple != b.as_list().is_tuple || x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i)
        if (!values_equal(x[i], y[i])) return false;
      return true;
    }
    case Value::Kind::kDict: {
      const auto& x = a.as_dict();
      const auto& y = b.as_dict();
      if (x.items.size() != y.items.size()) return false;
      for (const auto& kv : x.items) {
        const Value* other = y.find(kv.first);
        if (!other || !values_equal(kv.second, *other)) return false;
      }
      return true;
    }
    case Value::Kind::kFunction:
      return &a.as_function() == &b.as_function();
    default:
      return false;
  }
}

int values_compare(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      double x = a.as_float(), y = b.as_float();
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    return a.as_int() < b.as_int() ? -1 : (a.as_int() > b.as_int() ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    int c = a.as_string().compare(b.as_string());  // UTF-8 byte order == code point order
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_list() && b.is_list() && a.as_list().is_tuple == b.as_list().is_tuple) {
    const auto& x = a.as_list().items;
    const auto& y = b.as_list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (values_equal(x[i], y[i])) continue;
      return values_compare(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  throw Error(str("'<' not supported between instances of '", a.type_name(), "' and '",
                  b.type_name(), "'"));
}

}  // namespace dfl::jinja
