// Tree-walking evaluator for jinja.h. Scoping follows jinja2: `if` shares the enclosing scope,
// every for-loop iteration, macro call and `with` body gets a fresh child scope (so a `set` inside
// a loop is invisible to the next iteration and after the loop; namespace() objects are how
// templates carry state out).
#include <ctime>
#include <unordered_map>

#include "chat/jinja.h"
#include "chat/jinja_ast.h"
#include "chat/jinja_builtins.h"
#include "chat/jinja_parser.h"
#include "chat/pystr.h"
#include "core/error.h"

namespace dfl::jinja {
namespace {

// A runtime error already annotated with its template line.
class LocatedError : public Error {
 public:
  using Error::Error;
};

struct Scope {
  std::unordered_map<std::string, Value> vars;
  Scope* parent = nullptr;

  const Value* lookup(const std::string& name) const {
    for (const Scope* s = this; s; s = s->parent) {
      auto it = s->vars.find(name);
      if (it != s->vars.end()) return &it->second;
    }
    return nullptr;
  }
};

enum class Flow { kNormal, kBreak, kContinue };

Value make_namespace(const CallArgs& a) {
  Value ns = Value::dict();
  ns.as_dict().is_namespace = true;
  for (const auto& v : a.args) {
    DFL_CHECK(v.is_dict(), "namespace() positional argument must be a dict");
    for (const auto& kv : v.as_dict().items) ns.as_dict().set(kv.first, kv.second);
  }
  for (const auto& kv : a.kwargs) {
    DFL_CHECK(kv.first.empty() || kv.first[0] != '_',
              "namespace attributes cannot start with an underscore: ", kv.first);
    ns.as_dict().set(Value(kv.first), kv.second);
  }
  return ns;
}

Value builtin_range(const CallArgs& a) {
  DFL_CHECK(!a.args.empty() && a.args.size() <= 3, "range expected 1 to 3 arguments");
  for (const auto& v : a.args)
    DFL_CHECK(v.is_int() || v.is_bool(), "range() arguments must be integers, got ", v.type_name());
  int64_t start = 0, stop, step = 1;
  if (a.args.size() == 1) {
    stop = a.args[0].as_int();
  } else {
    start = a.args[0].as_int();
    stop = a.args[1].as_int();
    if (a.args.size() == 3) step = a.args[2].as_int();
  }
  DFL_CHECK(step != 0, "range() arg 3 must not be zero");
  std::vector<Value> items;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    // Same bound as jinja2's sandbox (MAX_RANGE).
    DFL_CHECK(items.size() < 100000, "range too big: at most 100000 items");
    items.emplace_back(i);
  }
  return Value::list(std::move(items));
}

Value builtin_dict(const CallArgs& a) {
  Value d = Value::dict();
  for (const auto& v : a.args) {
    if (v.is_dict()) {
      for (const auto& kv : v.as_dict().items) d.as_dict().set(kv.first, kv.second);
    } else {
      for (const auto& item : iterate(v)) {
        auto pair = iterate(item);
        DFL_CHECK(pair.size() == 2, "dict() sequence elements must have length 2");
        d.as_dict().set(pair[0], pair[1]);
      }
    }
  }
  for (const auto& kv : a.kwargs) d.as_dict().set(Value(kv.first), kv.second);
  return d;
}

Value builtin_strftime_now(const CallArgs& a) {
  const Value* fmt = a.get(0, "format");
  DFL_CHECK(fmt && fmt->is_string(), "strftime_now(format) needs a format string");
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[512];
  size_t n = std::strftime(buf, sizeof(buf), fmt->as_string().c_str(), &tm);
  return Value(std::string(buf, n));
}

Value builtin_raise_exception(const CallArgs& a) {
  const Value* msg = a.get(0, "message");
  throw Error(msg ? msg->str() : std::string("raise_exception called"));
}

class Interp {
 public:
  Interp(const RenderLimits& limits, std::string* out) : limits_(limits), out_(out) {
    globals_.vars["range"] = Value::function("range", builtin_range);
    globals_.vars["namespace"] = Value::function("namespace", make_namespace);
    globals_.vars["dict"] = Value::function("dict", builtin_dict);
    globals_.vars["raise_exception"] = Value::function("raise_exception", builtin_raise_exception);
    globals_.vars["strftime_now"] = Value::function("strftime_now", builtin_strftime_now);
    root_.parent = &globals_;
  }

  void run(const Body& body, const Value& context) {
    if (context.is_dict()) {
      for (const auto& kv : context.as_dict().items) root_.vars[kv.first.str()] = kv.second;
    }
    exec_body(body, root_);
  }

 private:
  void step() {
    if (++steps_ > limits_.max_steps) throw Error("template exceeded its step limit");
  }

  void emit(const std::string& s) {
    out_->append(s);
    if (out_->size() > limits_.max_output_bytes) throw Error("template output exceeds the limit");
  }

  Flow exec_body(const Body& body, Scope& scope) {
    for (const auto& s : body) {
      Flow f = exec(*s, scope);
      if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
  }

  Flow exec(const Stmt& s, Scope& scope) {
    step();
    try {
      return exec_inner(s, scope);
    } catch (const LocatedError&) {
      throw;
    } catch (const Error& e) {
      throw LocatedError(str("template error (line ", s.line, "): ", e.what()));
    }
  }

  // Renders `body` into a string instead of the output.
  std::string capture(const Body& body, Scope& scope) {
    std::string buf;
    std::string* saved = out_;
    out_ = &buf;
    try {
      exec_body(body, scope);
    } catch (...) {
      out_ = saved;
      throw;
    }
    out_ = saved;
    return buf;
  }

  void assign(const Target& t, const Value& v, Scope& scope) {
    if (!t.attr.empty()) {
      DFL_CHECK(t.attr[0] != '_', "namespace attributes cannot start with an underscore: ", t.attr);
      const Value* ns = scope.lookup(t.name);
      DFL_CHECK(ns && ns->is_dict() && ns->as_dict().is_namespace,
                "cannot assign attribute on non-namespace object '", t.name, "'");
      ns->as_dict().set(Value(t.attr), v);
      return;
    }
    if (!t.is_tuple) {
      scope.vars[t.name] = v;
      return;
    }
    std::vector<Value> items = iterate(v);
    DFL_CHECK(items.size() == t.elements.size(), "cannot unpack ", items.size(), " values into ",
              t.elements.size(), " names");
    for (size_t i = 0; i < items.size(); ++i) assign(t.elements[i], items[i], scope);
  }

  Flow exec_inner(const Stmt& s, Scope& scope) {
    switch (s.kind) {
      case StmtKind::kData:
        emit(s.text);
        return Flow::kNormal;
      case StmtKind::kOutput:
        emit(eval(*s.expr, scope).str());
        return Flow::kNormal;
      case StmtKind::kIf:
        for (const auto& br : s.branches) {
          if (eval(*br.first, scope).truthy()) return exec_body(br.second, scope);
        }
        return exec_body(s.else_body, scope);
      case StmtKind::kFor:
        return exec_for(s, scope);
      case StmtKind::kSet:
        assign(s.target, eval(*s.expr, scope), scope);
        return Flow::kNormal;
      case StmtKind::kSetBlock: {
        Value v(capture(s.body, scope));
        if (s.expr) v = apply_filter_chain(*s.expr, v, scope);
        assign(s.target, v, scope);
        return Flow::kNormal;
      }
      case StmtKind::kMacro:
        scope.vars[s.text] = make_macro(s);
        return Flow::kNormal;
      case StmtKind::kCallBlock: {
        // `caller` renders in this scope, which dies with this statement: a caller smuggled out
        // (e.g. stored on a namespace) must fail instead of touching a dead scope.
        auto alive = std::make_shared<bool>(true);
        const Stmt* stmt = &s;
        Scope* def_scope = &scope;
        Value caller = Value::function("caller", [this, stmt, def_scope, alive](const CallArgs& a) {
          DFL_CHECK(*alive, "caller() used outside of its call block");
          return call_macro(*stmt, *def_scope, a, nullptr);
        });
        Value r;
        try {
          r = eval_call(*s.expr, scope, &caller);
        } catch (...) {
          *alive = false;
          throw;
        }
        *alive = false;
        emit(r.str());
        return Flow::kNormal;
      }
      case StmtKind::kFilterBlock: {
        Value v(capture(s.body, scope));
        emit(apply_filter_chain(*s.expr, v, scope).str());
        return Flow::kNormal;
      }
      case StmtKind::kWith: {
        Scope inner;
        inner.parent = &scope;
        for (const auto& kv : s.assigns) inner.vars[kv.first] = eval(*kv.second, scope);
        return exec_body(s.body, inner);
      }
      case StmtKind::kBreak:
        return Flow::kBreak;
      case StmtKind::kContinue:
        return Flow::kContinue;
      case StmtKind::kScope:
        return exec_body(s.body, scope);
    }
    return Flow::kNormal;
  }

  Flow exec_for(const Stmt& s, Scope& scope) {
    std::vector<Value> items = iterate(eval(*s.expr, scope));
    if (s.cond) {
      std::vector<Value> kept;
      for (auto& item : items) {
        step();
        Scope probe;
        probe.parent = &scope;
        assign(s.target, item, probe);
        if (eval(*s.cond, probe).truthy()) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      exec_body(s.else_body, scope);
      return Flow::kNormal;
    }
    const int64_t depth = 1;  // recursive loops are not supported
    const int64_t n = static_cast<int64_t>(items.size());
    auto changed_state = std::make_shared<std::pair<bool, Value>>(false, Value());
    for (int64_t i = 0; i < n; ++i) {
      step();
      Scope inner;
      inner.parent = &scope;
      Value loop = Value::dict();
      Dict& d = loop.as_dict();
      d.set("index", Value(i + 1));
      d.set("index0", Value(i));
      d.set("revindex", Value(n - i));
      d.set("revindex0", Value(n - i - 1));
      d.set("first", Value(i == 0));
      d.set("last", Value(i == n - 1));
      d.set("length", Value(n));
      d.set("depth", Value(depth));
      d.set("depth0", Value(depth - 1));
      d.set("previtem", i > 0 ? items[i - 1] : Value::undefined("there is no previous item"));
      d.set("nextitem", i + 1 < n ? items[i + 1] : Value::undefined("there is no next item"));
      d.set("cycle", Value::function("loop.cycle", [i](const CallArgs& a) {
              DFL_CHECK(!a.args.empty(), "no items for cycling given");
              return a.args[static_cast<size_t>(i) % a.args.size()];
            }));
      d.set("changed", Value::function("loop.changed", [changed_state](const CallArgs& a) {
              Value cur = Value::list(a.args);
              if (changed_state->first && values_equal(changed_state->second, cur))
                return Value(false);
              changed_state->first = true;
              changed_state->second = cur;
              return Value(true);
            }));
      inner.vars["loop"] = loop;
      assign(s.target, items[i], inner);
      Flow f = exec_body(s.body, inner);
      if (f == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  // A macro as a callable value. It renders its body in a fresh scope whose parent is the
  // template's root scope, as jinja2 macros see the template globals.
  Value make_macro(const Stmt& s) {
    const Stmt* stmt = &s;
    return Value::function(
        s.text, [this, stmt](const CallArgs& a) { return call_macro(*stmt, root_, a, nullptr); });
  }

  Value call_macro(const Stmt& s, Scope& parent, const CallArgs& a, const Value* caller) {
    DFL_CHECK(call_depth_ < limits_.max_call_depth, "macro recursion too deep");
    Scope inner;
    inner.parent = &parent;
    std::vector<Value> varargs;
    for (size_t i = 0; i < a.args.size(); ++i) {
      if (i < s.params.size()) {
        inner.vars[s.params[i].name] = a.args[i];
      } else {
        varargs.push_back(a.args[i]);
      }
    }
    Value kwargs = Value::dict();
    for (const auto& kv : a.kwargs) {
      bool known = false;
      for (const auto& p : s.params) known |= p.name == kv.first;
      if (known) {
        inner.vars[kv.first] = kv.second;
      } else if (kv.first == "caller") {
        inner.vars["caller"] = kv.second;
      } else {
        kwargs.as_dict().set(Value(kv.first), kv.second);
      }
    }
    for (const auto& p : s.params) {
      if (inner.vars.count(p.name)) continue;
      inner.vars[p.name] = p.default_value
                               ? eval(*p.default_value, inner)
                               : Value::undefined(str("parameter '", p.name, "' was not provided"));
    }
    inner.vars["varargs"] = Value::list(std::move(varargs));
    inner.vars["kwargs"] = kwargs;
    if (caller) inner.vars["caller"] = *caller;
    ++call_depth_;
    std::string out;
    try {
      out = capture(s.body, inner);
    } catch (...) {
      --call_depth_;
      throw;
    }
    --call_depth_;
    return Value(std::move(out));
  }

  CallArgs eval_args(const Expr& e, Scope& scope) {
    CallArgs a;
    for (const auto& x : e.items) a.args.push_back(eval(*x, scope));
    for (const auto& kv : e.kwargs) a.kwargs.emplace_back(kv.first, eval(*kv.second, scope));
    return a;
  }

  // Applies a {% filter %}/{% set | f %} chain whose innermost operand is null to `v`.
  Value apply_filter_chain(const Expr& e, const Value& v, Scope& scope) {
    Value inner = e.a ? apply_filter_chain(*e.a, v, scope) : v;
    return apply_filter(e.name, inner, eval_args(e, scope));
  }

  Value call_value(const Value& f, const CallArgs& a) {
    if (f.is_undefined()) throw_undefined(f);
    DFL_CHECK(f.is_function(), "'", f.type_name(), "' object is not callable");
    return f.as_function().fn(a);
  }

  Value eval_call(const Expr& e, Scope& scope, const Value* caller) {
    CallArgs a = eval_args(e, scope);
    if (caller) a.kwargs.emplace_back("caller", *caller);
    if (e.a->kind == ExprKind::kGetattr) {
      Value obj = eval(*e.a->a, scope);
      if (obj.is_undefined()) throw_undefined(obj);
      if (auto r = call_method(obj, e.a->name, a)) return *r;
      return call_value(get_attr(obj, e.a->name), a);
    }
    return call_value(eval(*e.a, scope), a);
  }

  Value eval(const Expr& e, Scope& scope) {
    switch (e.kind) {
      case ExprKind::kConst:
        return e.value;
      case ExprKind::kName: {
        const Value* v = scope.lookup(e.name);
        return v ? *v : Value::undefined(str("'", e.name, "' is undefined"));
      }
      case ExprKind::kList:
      case ExprKind::kTuple: {
        std::vector<Value> items;
        items.reserve(e.items.size());
        for (const auto& x : e.items) items.push_back(eval(*x, scope));
        return Value::list(std::move(items), e.kind == ExprKind::kTuple);
      }
      case ExprKind::kDict: {
        Value d = Value::dict();
        for (size_t i = 0; i < e.keys.size(); ++i)
          d.as_dict().set(eval(*e.keys[i], scope), eval(*e.items[i], scope));
        return d;
      }
      case ExprKind::kGetattr:
        return get_attr(eval(*e.a, scope), e.name);
      case ExprKind::kGetitem:
        return get_item(eval(*e.a, scope), eval(*e.b, scope));
      case ExprKind::kSlice: {
        auto part = [&](const ExprPtr& p) { return p ? eval(*p, scope) : Value::none(); };
        return get_slice(eval(*e.a, scope), part(e.b), part(e.c), part(e.d));
      }
      case ExprKind::kCall:
        return eval_call(e, scope, nullptr);
      case ExprKind::kFilter:
        return apply_filter(e.name, eval(*e.a, scope), eval_args(e, scope));
      case ExprKind::kTest: {
        bool r = apply_test(e.name, eval(*e.a, scope), eval_args(e, scope));
        return Value(e.negate ? !r : r);
      }
      case ExprKind::kUnary: {
        Value v = eval(*e.a, scope);
        if (e.name == "not") return Value(!v.truthy());
        if (v.is_undefined()) throw_undefined(v);
        DFL_CHECK(v.is_number(), "bad operand type for unary ", e.name, ": '", v.type_name(), "'");
        if (e.name == "+") return v.is_float() ? v : Value(v.as_int());
        return v.is_float() ? Value(-v.as_float()) : Value(-v.as_int());
      }
      case ExprKind::kBinary: {
        if (e.name == "and") {
          Value a = eval(*e.a, scope);
          return a.truthy() ? eval(*e.b, scope) : a;
        }
        if (e.name == "or") {
          Value a = eval(*e.a, scope);
          return a.truthy() ? a : eval(*e.b, scope);
        }
        Value a = eval(*e.a, scope);
        return binary_op(e.name, a, eval(*e.b, scope));
      }
      case ExprKind::kCompare: {
        Value left = eval(*e.a, scope);
        for (const auto& [op, rhs] : e.ops) {
          Value right = eval(*rhs, scope);
          bool ok;
          if (op == "==") {
            ok = values_equal(left, right);
          } else if (op == "!=") {
            ok = !values_equal(left, right);
          } else if (op == "in") {
            ok = contains(right, left);
          } else if (op == "not in") {
            ok = !contains(right, left);
          } else {
            if (left.is_undefined()) throw_undefined(left);
            if (right.is_undefined()) throw_undefined(right);
            int c = values_compare(left, right);
            ok = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
          }
          if (!ok) return Value(false);
          left = std::move(right);
        }
        return Value(true);
      }
      case ExprKind::kCondExpr: {
        if (eval(*e.b, scope).truthy()) return eval(*e.a, scope);
        return e.c ? eval(*e.c, scope)
                   : Value::undefined(
                         "the inline if-expression evaluated to false and no else "
                         "section was defined");
      }
    }
    return Value();
  }

  RenderLimits limits_;
  std::string* out_;
  Scope globals_;
  Scope root_;
  int64_t steps_ = 0;
  int call_depth_ = 0;
};

// jinja2 resolves filter and test names when it compiles, so an unknown one is an error even
// in a branch that never runs.
void check_names(const Expr* e) {
  if (!e) return;
  if (e->kind == ExprKind::kFilter && !is_known_filter(e->name))
    throw_syntax_error(e->line, str("no filter named '", e->name, "'"));
  if (e->kind == ExprKind::kTest && !is_known_test(e->name))
    throw_syntax_error(e->line, str("no test named '", e->name, "'"));
  for (const Expr* x : {e->a.get(), e->b.get(), e->c.get(), e->d.get()}) check_names(x);
  for (const auto& x : e->items) check_names(x.get());
  for (const auto& x : e->keys) check_names(x.get());
  for (const auto& kv : e->kwargs) check_names(kv.second.get());
  for (const auto& kv : e->ops) check_names(kv.second.get());
}

void check_names(const Body& body) {
  for (const auto& s : body) {
    check_names(s->expr.get());
    check_names(s->cond.get());
    for (const auto& br : s->branches) {
      check_names(br.first.get());
      check_names(br.second);
    }
    check_names(s->body);
    check_names(s->else_body);
    for (const auto& p : s->params) check_names(p.default_value.get());
    for (const auto& kv : s->assigns) check_names(kv.second.get());
  }
}

}  // namespace

Template::Template(const std::string& source, const LexOptions& opt) {
  auto body = std::make_shared<Body>(parse_template(source, opt));
  check_names(*body);
  body_ = std::move(body);
}

std::string Template::render(const Value& context, const RenderLimits& limits) const {
  std::string out;
  Interp interp(limits, &out);
  interp.run(*body_, context);
  return out;
}

}  // namespace dfl::jinja
