// Qwen3 / Hermes tool calls: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` in the
// generated text → OpenAI `tool_calls` entries (arguments as a JSON string). Streaming-safe: a
// tag split across pieces is held back until decided; a call is emitted once it is complete.
//
// Text outside the tags is content. Whitespace after a parsed call is dropped unless more content
// follows. A block whose body is not a JSON object with a string "name" stays in the content
// verbatim; so does an unterminated block at the end.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dfl::server {

struct ToolCall {
  std::string id;         // "call_<prefix>_<n>"
  std::string name;
  std::string arguments;  // JSON text of the arguments object ("{}" when absent)
};

class ToolCallParser {
 public:
  explicit ToolCallParser(std::string id_prefix);

  struct Out {
    std::string content;
    std::vector<ToolCall> calls;
  };
  void push(std::string_view text, Out& out);
  void finish(Out& out);
  int32_t calls_seen() const { return n_calls_; }

 private:
  void emit_content(std::string_view text, Out& out);
  std::string prefix_;
  std::string buf_;
  std::string pending_ws_;  // whitespace after a call, emitted only if content follows
  bool in_call_ = false;
  int32_t n_calls_ = 0;
};

}  // namespace dfl::server
