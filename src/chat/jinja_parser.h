// Jinja parser: tokens → statement list, following jinja2 3.1's grammar and precedence:
//   condexpr: or ['if' or ['else' condexpr]]
//   or/and/not; compare (== != < <= > >= in, not in; chained); + -; ~; * / // %; ** ;
//   unary - +; primary with postfix .attr [sub] [a:b:c] (call); then | filter, is test, (call).
// Statements: if/elif/else, for (tuple targets, inline if, else, recursive), set (incl. ns.attr
// and block set), macro, call, filter, with, break/continue (loopcontrols), raw (lexer),
// print, generation (HF's assistant-mask extension; rendered as its body).
// Errors are dfl::Error("template syntax error (line N): ...").
#pragma once

#include <string>

#include "chat/jinja_ast.h"
#include "chat/jinja_lexer.h"

namespace dfl::jinja {

Body parse_template(const std::string& source, const LexOptions& opt);

}  // namespace dfl::jinja
