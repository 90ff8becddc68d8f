// The generated text of one chat choice, split the way the chat API returns it: reasoning
// (ReasoningParser, when thinking is on), then tool calls out of the content (ToolCallParser,
// when the request has tools). The same object serves streamed and whole responses: push the
// text deltas as they come, then finish().
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/reasoning.h"
#include "server/tool_calls.h"

namespace dfl::server {

struct ChatDelta {
  std::string reasoning;
  std::string content;
  std::vector<ToolCall> calls;
  bool empty() const { return reasoning.empty() && content.empty() && calls.empty(); }
};

class ChatOutput {
 public:
  // reasoning: split <think> blocks; in_think: the prompt already opened one;
  // tools: parse <tool_call> blocks; id_prefix: tool-call ids are "call_<id_prefix>_<n>".
  ChatOutput(bool reasoning, bool in_think, bool tools, std::string id_prefix);
  ChatDelta push(std::string_view text);
  ChatDelta finish();
  bool saw_tool_calls() const { return tools_ && tools_->calls_seen() > 0; }

 private:
  void content(std::string_view text, bool last, ChatDelta& d);
  std::optional<ReasoningParser> reasoning_;
  std::optional<ToolCallParser> tools_;
};

}  // namespace dfl::server
