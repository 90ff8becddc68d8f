#include "chat/jinja_parser.h"

#include <initializer_list>

#include "core/error.h"

namespace dfl::jinja {
namespace {

constexpr int kMaxDepth = 256;  // nesting bound, keeps hostile templates off the C++ stack

class Parser {
 public:
  explicit Parser(std::vector<Token> toks) : t_(std::move(toks)) {}

  Body parse_all() {
    Body body = parse_body({});
    return body;
  }

 private:
  // ---- token helpers -------------------------------------------------------------------
  const Token& cur() const { return t_[p_]; }
  const Token& peek(size_t k = 1) const { return t_[std::min(p_ + k, t_.size() - 1)]; }
  void next() {
    if (p_ + 1 < t_.size()) ++p_;
  }
  bool is_op(const char* op) const { return cur().kind == TokKind::kOp && cur().text == op; }
  bool is_name(const char* n) const { return cur().kind == TokKind::kName && cur().text == n; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* n) {
    if (!is_name(n)) return false;
    next();
    return true;
  }
  static std::string describe(const Token& t) {
    switch (t.kind) {
      case TokKind::kEof:
        return "end of template";
      case TokKind::kBlockEnd:
        return "end of statement block";
      case TokKind::kVarEnd:
        return "end of print statement";
      case TokKind::kBlockBegin:
        return "begin of statement block";
      case TokKind::kVarBegin:
        return "begin of print statement";
      case TokKind::kData:
        return "template data";
      case TokKind::kString:
        return "string";
      default:
        return "'" + t.text + "'";
    }
  }
  [[noreturn]] void fail(const std::string& msg) const { throw_syntax_error(cur().line, msg); }
  void expect_op(const char* op) {
    if (!skip_op(op)) fail(str("expected '", op, "', got ", describe(cur())));
  }
  std::string expect_name() {
    if (cur().kind != TokKind::kName) fail(str("expected a name, got ", describe(cur())));
    std::string n = cur().text;
    next();
    return n;
  }
  void expect_block_end() {
    if (cur().kind != TokKind::kBlockEnd)
      fail(str("expected end of statement block, got ", describe(cur())));
    next();
  }
  ExprPtr make(ExprKind k) { return std::make_unique<Expr>(k, cur().line); }

  struct DepthGuard {
    explicit DepthGuard(Parser* p) : p(p) {
      if (++p->depth_ > kMaxDepth) p->fail("template nested too deeply");
    }
    ~DepthGuard() { --p->depth_; }
    Parser* p;
  };

  // ---- statements ----------------------------------------------------------------------
  // Parses until "{% <one of end_names>": leaves the cursor on that name token.
  Body parse_body(std::initializer_list<const char*> end_names) {
    DepthGuard g(this);
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.kind == TokKind::kEof) {
        if (end_names.size() == 0) return body;
        std::string want;
        for (const char* n : end_names)
          want += (want.empty() ? "'" : " or '") + std::string(n) + "'";
        fail("unexpected end of template; expected " + want);
      }
      if (t.kind == TokKind::kData) {
        auto s = std::make_unique<Stmt>(StmtKind::kData, t.line);
        s->text = t.text;
        body.push_back(std::move(s));
        next();
      } else if (t.kind == TokKind::kVarBegin) {
        auto s = std::make_unique<Stmt>(StmtKind::kOutput, t.line);
        next();
        s->expr = parse_tuple(true, {}, false);
        if (cur().kind != TokKind::kVarEnd)
          fail(str("expected end of print statement, got ", describe(cur())));
        next();
        body.push_back(std::move(s));
      } else if (t.kind == TokKind::kBlockBegin) {
        next();
        if (cur().kind == TokKind::kName) {
          for (const char* n : end_names)
            if (cur().text == n) return body;
        }
        body.push_back(parse_statement());
      } else {
        fail(str("unexpected ", describe(t)));
      }
    }
  }

  // Consumes "{% name %}" where the cursor is on `name`.
  void end_tag(const char* name) {
    if (!skip_name(name)) fail(str("expected '", name, "'"));
    expect_block_end();
  }

  StmtPtr parse_statement() {
    if (cur().kind != TokKind::kName) fail("tag name expected");
    std::string tag = cur().text;
    int line = cur().line;
    next();
    if (tag == "if") return parse_if(line);
    if (tag == "for") return parse_for(line);
    if (tag == "set") return parse_set(line);
    if (tag == "macro") return parse_macro(line);
    if (tag == "call") return parse_call_block(line);
    if (tag == "filter") {
      auto s = std::make_unique<Stmt>(StmtKind::kFilterBlock, line);
      s->expr = parse_filter(nullptr, true);
      expect_block_end();
      s->body = parse_body({"endfilter"});
      end_tag("endfilter");
      return s;
    }
    if (tag == "with") {
      auto s = std::make_unique<Stmt>(StmtKind::kWith, line);
      while (cur().kind != TokKind::kBlockEnd) {
        if (!s->assigns.empty()) expect_op(",");
        std::string n = expect_name();
        expect_op("=");
        s->assigns.emplace_back(n, parse_expression(true));
      }
      expect_block_end();
      s->body = parse_body({"endwith"});
      end_tag("endwith");
      return s;
    }
    if (tag == "print") {
      auto s = std::make_unique<Stmt>(StmtKind::kOutput, line);
      s->expr = parse_tuple(true, {}, false);
      expect_block_end();
      return s;
    }
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) throw_syntax_error(line, str("'", tag, "' outside of a loop"));
      expect_block_end();
      return std::make_unique<Stmt>(tag == "break" ? StmtKind::kBreak : StmtKind::kContinue, line);
    }
    if (tag == "generation") {
      auto s = std::make_unique<Stmt>(StmtKind::kScope, line);
      expect_block_end();
      s->body = parse_body({"endgeneration"});
      end_tag("endgeneration");
      return s;
    }
    throw_syntax_error(line, str("Encountered unknown tag '", tag, "'"));
  }

  StmtPtr parse_if(int line) {
    auto s = std::make_unique<Stmt>(StmtKind::kIf, line);
    while (true) {
      ExprPtr cond = parse_tuple(false, {}, false);
      expect_block_end();
      Body body = parse_body({"elif", "else", "endif"});
      s->branches.emplace_back(std::move(cond), std::move(body));
      if (skip_name("elif")) continue;
      if (skip_name("else")) {
        expect_block_end();
        s->else_body = parse_body({"endif"});
      }
      end_tag("endif");
      return s;
    }
  }

  StmtPtr parse_for(int line) {
    auto s = std::make_unique<Stmt>(StmtKind::kFor, line);
    s->target = parse_target(false);
    if (!skip_name("in")) fail(str("expected 'in', got ", describe(cur())));
    s->expr = parse_tuple(false, {"recursive"}, false);
    if (skip_name("if")) s->cond = parse_expression(true);
    if (skip_name("recursive")) s->recursive = true;
    expect_block_end();
    ++loop_depth_;
    s->body = parse_body({"endfor", "else"});
    --loop_depth_;
    if (skip_name("else")) {
      expect_block_end();
      s->else_body = parse_body({"endfor"});
    }
    end_tag("endfor");
    return s;
  }

  StmtPtr parse_set(int line) {
    Target target = parse_target(true);
    if (skip_op("=")) {
      auto s = std::make_unique<Stmt>(StmtKind::kSet, line);
      s->target = std::move(target);
      s->expr = parse_tuple(true, {}, false);
      expect_block_end();
      return s;
    }
    auto s = std::make_unique<Stmt>(StmtKind::kSetBlock, line);
    s->target = std::move(target);
    if (is_op("|")) s->expr = parse_filter(nullptr, false);
    expect_block_end();
    int saved = loop_depth_;
    loop_depth_ = 0;
    s->body = parse_body({"endset"});
    loop_depth_ = saved;
    end_tag("endset");
    return s;
  }

  void parse_params(std::vector<MacroParam>& params) {
    expect_op("(");
    while (!is_op(")")) {
      if (!params.empty()) expect_op(",");
      if (is_op(")")) break;
      MacroParam p;
      p.name = expect_name();
      if (skip_op("=")) p.default_value = parse_expression(true);
      params.push_back(std::move(p));
    }
    expect_op(")");
  }

  StmtPtr parse_macro(int line) {
    auto s = std::make_unique<Stmt>(StmtKind::kMacro, line);
    s->text = expect_name();
    parse_params(s->params);
    expect_block_end();
    int saved = loop_depth_;
    loop_depth_ = 0;
    s->body = parse_body({"endmacro"});
    loop_depth_ = saved;
    end_tag("endmacro");
    return s;
  }

  StmtPtr parse_call_block(int line) {
    auto s = std::make_unique<Stmt>(StmtKind::kCallBlock, line);
    if (is_op("(")) parse_params(s->params);
    s->expr = parse_expression(true);
    if (s->expr->kind != ExprKind::kCall) throw_syntax_error(line, "expected call");
    expect_block_end();
    int saved = loop_depth_;
    loop_depth_ = 0;
    s->body = parse_body({"endcall"});
    loop_depth_ = saved;
    end_tag("endcall");
    return s;
  }

  // name | ns.attr (with_namespace) | tuple of names, optionally parenthesized.
  Target parse_target(bool with_namespace) {
    if (with_namespace && cur().kind == TokKind::kName && peek().kind == TokKind::kOp &&
        peek().text == ".") {
      Target t;
      t.name = expect_name();
      next();  // "."
      t.attr = expect_name();
      return t;
    }
    Target first = parse_target_atom();
    if (!is_op(",")) return first;
    Target tup;
    tup.is_tuple = true;
    tup.elements.push_back(std::move(first));
    while (skip_op(",")) {
      if (cur().kind != TokKind::kName && !is_op("(")) break;
      tup.elements.push_back(parse_target_atom());
    }
    return tup;
  }

  Target parse_target_atom() {
    DepthGuard g(this);
    if (skip_op("(")) {
      Target tup;
      tup.is_tuple = true;
      while (!is_op(")")) {
        if (!tup.elements.empty()) expect_op(",");
        if (is_op(")")) break;
        tup.elements.push_back(parse_target_atom());
      }
      expect_op(")");
      return tup;
    }
    Target t;
    if (cur().kind != TokKind::kName) fail(str("can't assign to ", describe(cur())));
    t.name = expect_name();
    return t;
  }

  // ---- expressions ---------------------------------------------------------------------
  bool is_tuple_end(std::initializer_list<const char*> extra_end) const {
    if (cur().kind == TokKind::kVarEnd || cur().kind == TokKind::kBlockEnd ||
        cur().kind == TokKind::kEof || is_op(")"))
      return true;
    for (const char* n : extra_end)
      if (is_name(n)) return true;
    return false;
  }

  ExprPtr parse_tuple(bool with_condexpr, std::initializer_list<const char*> extra_end,
                      bool explicit_parens) {
    int line = cur().line;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (is_tuple_end(extra_end)) break;
      items.push_back(parse_expression(with_condexpr));
      if (is_op(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens) fail(str("expected an expression, got ", describe(cur())));
    }
    auto e = std::make_unique<Expr>(ExprKind::kTuple, line);
    e->items = std::move(items);
    return e;
  }

  ExprPtr parse_expression(bool with_condexpr) {
    DepthGuard g(this);
    if (!with_condexpr) return parse_or();
    ExprPtr e = parse_or();
    while (is_name("if")) {
      auto c = make(ExprKind::kCondExpr);
      next();
      c->b = parse_or();
      c->a = std::move(e);
      if (skip_name("else")) c->c = parse_expression(true);
      e = std::move(c);
    }
    return e;
  }

  ExprPtr binary(const std::string& op, ExprPtr a, ExprPtr b, int line) {
    auto e = std::make_unique<Expr>(ExprKind::kBinary, line);
    e->name = op;
    e->a = std::move(a);
    e->b = std::move(b);
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (is_name("or")) {
      int line = cur().line;
      next();
      e = binary("or", std::move(e), parse_and(), line);
    }
    return e;
  }

  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (is_name("and")) {
      int line = cur().line;
      next();
      e = binary("and", std::move(e), parse_not(), line);
    }
    return e;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard g(this);
      auto e = make(ExprKind::kUnary);
      next();
      e->name = "not";
      e->a = parse_not();
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    int line = cur().line;
    ExprPtr e = parse_math1();
    std::vector<std::pair<std::string, ExprPtr>> ops;
    while (true) {
      std::string op;
      if (cur().kind == TokKind::kOp &&
          (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == "<=" ||
           cur().text == ">" || cur().text == ">=")) {
        op = cur().text;
        next();
      } else if (is_name("in")) {
        op = "in";
        next();
      } else if (is_name("not") && peek().kind == TokKind::kName && peek().text == "in") {
        op = "not in";
        next();
        next();
      } else {
        break;
      }
      ops.emplace_back(op, parse_math1());
    }
    if (ops.empty()) return e;
    auto c = std::make_unique<Expr>(ExprKind::kCompare, line);
    c->a = std::move(e);
    c->ops = std::move(ops);
    return c;
  }

  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    while (is_op("+") || is_op("-")) {
      std::string op = cur().text;
      int line = cur().line;
      next();
      e = binary(op, std::move(e), parse_concat(), line);
    }
    return e;
  }

  ExprPtr parse_concat() {
    ExprPtr e = parse_math2();
    while (is_op("~")) {
      int line = cur().line;
      next();
      e = binary("~", std::move(e), parse_math2(), line);
    }
    return e;
  }

  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      std::string op = cur().text;
      int line = cur().line;
      next();
      e = binary(op, std::move(e), parse_pow(), line);
    }
    return e;
  }

  ExprPtr parse_pow() {
    ExprPtr e = parse_unary(true);
    while (is_op("**")) {
      int line = cur().line;
      next();
      e = binary("**", std::move(e), parse_unary(true), line);
    }
    return e;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard g(this);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      e = make(ExprKind::kUnary);
      e->name = cur().text;
      next();
      e->a = parse_unary(false);
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    DepthGuard g(this);
    const Token& t = cur();
    if (t.kind == TokKind::kName) {
      auto e = make(ExprKind::kConst);
      if (t.text == "true" || t.text == "True") {
        e->value = Value(true);
      } else if (t.text == "false" || t.text == "False") {
        e->value = Value(false);
      } else if (t.text == "none" || t.text == "None") {
        e->value = Value::none();
      } else {
        e->kind = ExprKind::kName;
        e->name = t.text;
      }
      next();
      return e;
    }
    if (t.kind == TokKind::kString) {
      auto e = make(ExprKind::kConst);
      std::string s;
      while (cur().kind == TokKind::kString) {
        s += cur().text;
        next();
      }
      e->value = Value(std::move(s));
      return e;
    }
    if (t.kind == TokKind::kInt || t.kind == TokKind::kFloat) {
      auto e = make(ExprKind::kConst);
      e->value = t.kind == TokKind::kInt ? Value(t.ival) : Value(t.fval);
      next();
      return e;
    }
    if (skip_op("(")) {
      ExprPtr e = parse_tuple(true, {}, true);
      expect_op(")");
      return e;
    }
    if (is_op("[")) {
      auto e = make(ExprKind::kList);
      next();
      while (!is_op("]")) {
        if (!e->items.empty()) expect_op(",");
        if (is_op("]")) break;
        e->items.push_back(parse_expression(true));
      }
      expect_op("]");
      return e;
    }
    if (is_op("{")) {
      auto e = make(ExprKind::kDict);
      next();
      while (!is_op("}")) {
        if (!e->items.empty()) expect_op(",");
        if (is_op("}")) break;
        e->keys.push_back(parse_expression(true));
        expect_op(":");
        e->items.push_back(parse_expression(true));
      }
      expect_op("}");
      return e;
    }
    fail(str("unexpected ", describe(t)));
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      if (is_op(".") || is_op("[")) {
        e = parse_subscript(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      if (is_op("|")) {
        e = parse_filter(std::move(e), false);
      } else if (is_name("is")) {
        e = parse_test(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    DepthGuard g(this);
    if (skip_op(".")) {
      if (cur().kind == TokKind::kName) {
        auto e = make(ExprKind::kGetattr);
        e->name = cur().text;
        e->a = std::move(node);
        next();
        return e;
      }
      if (cur().kind == TokKind::kInt) {
        auto e = make(ExprKind::kGetitem);
        e->a = std::move(node);
        e->b = make(ExprKind::kConst);
        e->b->value = Value(cur().ival);
        next();
        return e;
      }
      fail("expected name or number");
    }
    int line = cur().line;
    expect_op("[");
    std::vector<ExprPtr> args;
    while (!is_op("]")) {
      if (!args.empty()) expect_op(",");
      args.push_back(parse_subscribed());
    }
    expect_op("]");
    if (args.empty()) throw_syntax_error(line, "expected a subscript");
    ExprPtr arg;
    if (args.size() == 1) {
      arg = std::move(args[0]);
    } else {
      for (const auto& x : args)
        if (x->kind == ExprKind::kSlice)
          throw_syntax_error(line, "multi-dimensional slices are not supported");
      arg = std::make_unique<Expr>(ExprKind::kTuple, line);
      arg->items = std::move(args);
    }
    if (arg->kind == ExprKind::kSlice) {
      arg->a = std::move(node);
      return arg;
    }
    auto e = std::make_unique<Expr>(ExprKind::kGetitem, line);
    e->a = std::move(node);
    e->b = std::move(arg);
    return e;
  }

  // One subscript: an expression or a slice start:stop:step (node.a is filled by the caller).
  ExprPtr parse_subscribed() {
    auto sl = make(ExprKind::kSlice);
    if (skip_op(":")) {
      // start omitted
    } else {
      ExprPtr e = parse_expression(true);
      if (!is_op(":")) return e;
      next();
      sl->b = std::move(e);
    }
    if (!is_op("]") && !is_op(",") && !is_op(":")) sl->c = parse_expression(true);
    if (skip_op(":")) {
      if (!is_op("]") && !is_op(",")) sl->d = parse_expression(true);
    }
    return sl;
  }

  void parse_call_args(Expr* e) {
    expect_op("(");
    while (!is_op(")")) {
      if (!e->items.empty() || !e->kwargs.empty()) {
        expect_op(",");
        if (is_op(")")) break;
      }
      if (is_op("*") || is_op("**")) fail("*args / **kwargs are not supported");
      if (cur().kind == TokKind::kName && peek().kind == TokKind::kOp && peek().text == "=") {
        std::string key = cur().text;
        next();
        next();
        e->kwargs.emplace_back(key, parse_expression(true));
      } else {
        if (!e->kwargs.empty()) fail("positional argument after keyword argument");
        e->items.push_back(parse_expression(true));
      }
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr node) {
    DepthGuard g(this);
    auto e = make(ExprKind::kCall);
    e->a = std::move(node);
    parse_call_args(e.get());
    return e;
  }

  std::string dotted_name() {
    std::string n = expect_name();
    while (is_op(".")) {
      next();
      n += '.';
      n += expect_name();
    }
    return n;
  }

  ExprPtr parse_filter(ExprPtr node, bool start_inline) {
    while (is_op("|") || start_inline) {
      DepthGuard g(this);
      if (!start_inline) next();
      start_inline = false;
      auto e = make(ExprKind::kFilter);
      e->name = dotted_name();
      e->a = std::move(node);
      if (is_op("(")) parse_call_args(e.get());
      node = std::move(e);
    }
    return node;
  }

  ExprPtr parse_test(ExprPtr node) {
    DepthGuard g(this);
    auto e = make(ExprKind::kTest);
    next();  // "is"
    e->negate = skip_name("not");
    e->name = dotted_name();
    e->a = std::move(node);
    const Token& t = cur();
    if (is_op("(")) {
      parse_call_args(e.get());
    } else if ((t.kind == TokKind::kName || t.kind == TokKind::kString || t.kind == TokKind::kInt ||
                t.kind == TokKind::kFloat || is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail("You cannot chain multiple tests with is");
      e->items.push_back(parse_postfix(parse_primary()));
    }
    return e;
  }

  std::vector<Token> t_;
  size_t p_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

Body parse_template(const std::string& source, const LexOptions& opt) {
  return Parser(tokenize(source, opt)).parse_all();
}

}  // namespace dfl::jinja
