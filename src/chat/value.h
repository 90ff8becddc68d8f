// Dynamic values of the Jinja interpreter, with Python semantics.
//
// A Value is one of: undefined (jinja2's default Undefined: renders as "", is falsy, iterates as
// empty, errors on attribute access), none, bool, int (int64), float (double), string (UTF-8),
// list (also used for tuples, flagged), dict (insertion-ordered; keys are Values, normally
// strings) and function (a builtin or a macro). Lists, dicts and functions are shared by
// reference like Python objects; every other kind is a plain value.
//
// str()/repr() follow CPython: True/False/None, float repr (shortest round-trip, "1.0",
// "1e+16"), list/dict repr with quoted strings. Strings are byte strings holding UTF-8; indexing,
// slicing and length work on code points (see pystr.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace dfl::jinja {

class Value;

struct List {
  std::vector<Value> items;
  bool is_tuple = false;
  // A Python generator (what select/map/unique/... return in jinja2): always truthy, not
  // subscriptable, prints as "<generator object>". Iterating, |list, |length work as for lists.
  bool is_generator = false;
};

// Insertion-ordered mapping. Lookup is a linear scan: template dicts are small (messages, tool
// schemas); an index would cost more than it saves.
struct Dict {
  std::vector<std::pair<Value, Value>> items;
  bool is_namespace = false;  // jinja2 namespace(): attribute assignment allowed, repr differs

  const Value* find(const Value& key) const;
  const Value* find(const std::string& key) const;
  void set(Value key, Value value);  // replaces in place or appends
};

// Positional and keyword arguments of a call.
struct CallArgs {
  std::vector<Value> args;
  std::vector<std::pair<std::string, Value>> kwargs;

  // Argument `pos` or keyword `name`; nullptr when neither was given.
  const Value* get(size_t pos, const char* name) const;
};

using NativeFn = std::function<Value(const CallArgs&)>;

struct Function {
  std::string name;
  NativeFn fn;
};

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kFunction };

  Value() = default;  // undefined
  static Value undefined(std::string hint = {});
  static Value none();
  Value(bool b) : kind_(Kind::kBool), i_(b) {}
  Value(int v) : kind_(Kind::kInt), i_(v) {}
  Value(int64_t v) : kind_(Kind::kInt), i_(v) {}
  Value(double v) : kind_(Kind::kFloat), f_(v) {}
  Value(std::string s) : kind_(Kind::kString), s_(std::move(s)) {}
  Value(const char* s) : kind_(Kind::kString), s_(s) {}
  Value(std::shared_ptr<List> l) : kind_(Kind::kList), list_(std::move(l)) {}
  Value(std::shared_ptr<Dict> d) : kind_(Kind::kDict), dict_(std::move(d)) {}
  Value(std::shared_ptr<Function> f) : kind_(Kind::kFunction), fn_(std::move(f)) {}

  static Value list(std::vector<Value> items = {}, bool is_tuple = false);
  static Value generator(std::vector<Value> items);
  static Value dict();
  static Value function(std::string name, NativeFn fn);
  // JSON → Value; ordered_json keeps object key order (as Python dicts do), json sorts keys.
  static Value from_json(const nlohmann::json& j);
  static Value from_json(const nlohmann::ordered_json& j);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_function() const { return kind_ == Kind::kFunction; }

  bool as_bool() const { return i_ != 0; }
  int64_t as_int() const { return i_; }  // also valid for bool
  double as_float() const { return is_float() ? f_ : static_cast<double>(i_); }
  const std::string& as_string() const { return s_; }
  const std::string& undefined_hint() const { return s_; }
  List& as_list() const { return *list_; }
  Dict& as_dict() const { return *dict_; }
  const Function& as_function() const { return *fn_; }
  const std::shared_ptr<List>& list_ptr() const { return list_; }
  const std::shared_ptr<Dict>& dict_ptr() const { return dict_; }

  bool truthy() const;
  // Python str(): what {{ value }} prints (undefined prints "").
  std::string str() const;
  // Python repr(): strings quoted, used inside list/dict reprs; undefined is "Undefined".
  std::string repr() const;
  nlohmann::ordered_json to_json() const;  // throws dfl::Error for undefined/functions
  const char* type_name() const;           // Python-ish type name for error messages

 private:
  Kind kind_ = Kind::kUndefined;
  int64_t i_ = 0;
  double f_ = 0;
  std::string s_;  // string payload, or the undefined variable's name (hint)
  std::shared_ptr<List> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<Function> fn_;
};

// Python ==: numbers compare across int/float/bool, lists elementwise, dicts as unordered maps,
// undefined equals undefined only.
bool values_equal(const Value& a, const Value& b);
// Python <, <=, >, >= via a three-way result; throws dfl::Error for unorderable types.
int values_compare(const Value& a, const Value& b);
// int(x) of a float: truncates toward zero; throws dfl::Error when it does not fit in int64
// (Python would make a big integer) or is inf/nan.
int64_t float_to_int(double x);
// Python's repr of a float: shortest round-trip digits, exponent outside [-4, 16).
std::string python_float_repr(double v);

}  // namespace dfl::jinja
