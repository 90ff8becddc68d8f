// A Jinja2 interpreter for the subset that chat templates use.
//
// Compile once with Template(source), render many times with a context dict. Semantics follow
// jinja2 3.1 as Hugging Face transformers configures it for chat templates:
// ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with the loopcontrols
// extension, default Undefined (prints "", falsy, attribute access on it is an error), no
// autoescaping, and HF's globals: raise_exception(msg), strftime_now(fmt), namespace(...),
// dict(...), plus jinja's range(). HF's tojson (json.dumps with ensure_ascii=False, optional
// indent/separators/sort_keys) replaces jinja's HTML-safe one.
//
// Supported: text, {{ }}, {% %}, {# #}, whitespace control, if/elif/else, for (loop.*, else,
// tuple unpacking, inline if, break/continue), set (incl. ns.attr and block set), macro + call,
// filter blocks, with, raw; Python-like expressions, string/dict/list methods, common filters
// and tests (see jinja_builtins.h).
//
// Errors: syntax errors throw dfl::Error("template syntax error (line N): ...") from the
// constructor; runtime errors (undefined attribute access, type errors, raise_exception) throw
// dfl::Error("template error (line N): ...") from render(). A Template is immutable and may be
// rendered from several threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "chat/jinja_lexer.h"
#include "chat/value.h"

namespace dfl::jinja {

struct Stmt;

// Bounds that keep a hostile template from running away (fuzzing, untrusted Hub templates).
struct RenderLimits {
  size_t max_output_bytes = size_t{256} << 20;
  int64_t max_steps = 100'000'000;  // statements executed + loop iterations
  int max_call_depth = 100;         // nested macro calls
};

class Template {
 public:
  // Parses `source`; throws dfl::Error with the line on a syntax error.
  explicit Template(const std::string& source, const LexOptions& opt = {});

  // Renders with `context` (a dict Value: variable name → value). Context entries shadow the
  // globals (range, namespace, dict, raise_exception, strftime_now).
  std::string render(const Value& context, const RenderLimits& limits = {}) const;

 private:
  std::shared_ptr<const std::vector<std::unique_ptr<Stmt>>> body_;
};

}  // namespace dfl::jinja
