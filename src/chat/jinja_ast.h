// Jinja syntax tree: expressions and statements as produced by the parser (jinja_parser.h) and
// walked by the interpreter (jinja.h). Nodes own their children; every node records the template
// line it came from for error messages.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/value.h"

namespace dfl::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class ExprKind {
  kConst,     // literal
  kName,      // variable lookup: name
  kList,      // [items...]
  kTuple,     // (items...)
  kDict,      // {keys[i]: items[i]}
  kGetattr,   // a.name
  kGetitem,   // a[b]
  kSlice,     // a[b:c:d], absent parts null
  kCall,      // a(args, kwargs)
  kFilter,    // a | name(args, kwargs); a null inside {% filter %}
  kTest,      // a is [not] name(args)  (negate)
  kUnary,     // op a: "not", "-", "+"
  kBinary,    // a op b: + - * / // % ** ~ and or in "not in"
  kCompare,   // a op0 b0 op1 b1 ... (chained)
  kCondExpr,  // a if b else c (c may be null → undefined)
};

struct Expr {
  ExprKind kind;
  int line = 0;
  Value value;       // kConst
  std::string name;  // kName, kGetattr attr, kFilter/kTest name, kUnary/kBinary op
  ExprPtr a, b, c, d;
  std::vector<ExprPtr> items;                           // list/tuple items, call args, dict values
  std::vector<ExprPtr> keys;                            // dict keys
  std::vector<std::pair<std::string, ExprPtr>> kwargs;  // call/filter/test keyword args
  std::vector<std::pair<std::string, ExprPtr>> ops;     // kCompare: (op, rhs)
  bool negate = false;                                  // kTest: "is not"

  Expr(ExprKind k, int l) : kind(k), line(l) {}
};

// Assignment target of for/set: a name, a tuple of targets, or ns.attr (set only).
struct Target {
  std::string name;              // plain name, or the namespace variable for ns.attr
  std::string attr;              // non-empty for ns.attr
  std::vector<Target> elements;  // non-empty for tuple unpacking
  bool is_tuple = false;
};

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // may be null
};

enum class StmtKind {
  kData,         // literal text
  kOutput,       // {{ expr }}
  kIf,           // branches: (cond, body)...; else_body
  kFor,          // for target in expr [if cond] body [else else_body]
  kSet,          // set target = expr
  kSetBlock,     // set target [| filters] ... endset
  kMacro,        // macro name(params) body
  kCallBlock,    // call [(params)] expr body: caller() renders body
  kFilterBlock,  // filter f ... endfilter (expr is a kFilter chain with a null innermost operand)
  kWith,         // with a=1, b=2 ... endwith
  kBreak,
  kContinue,
  kScope,  // a body rendered as-is (e.g. {% generation %})
};

struct Stmt {
  StmtKind kind;
  int line = 0;
  std::string text;  // kData; kMacro name
  ExprPtr expr;      // output / for iterable / set value / call expr / filter chain
  ExprPtr cond;      // for-loop inline filter
  Target target;
  std::vector<std::pair<ExprPtr, Body>> branches;  // kIf
  Body body, else_body;
  std::vector<MacroParam> params;                        // kMacro, kCallBlock
  std::vector<std::pair<std::string, ExprPtr>> assigns;  // kWith
  bool recursive = false;                                // for ... recursive

  Stmt(StmtKind k, int l) : kind(k), line(l) {}
};

}  // namespace dfl::jinja
