#include "server/chat_output.h"

namespace dfl::server {

ChatOutput::ChatOutput(bool reasoning, bool in_think, bool tools, std::string id_prefix) {
  if (reasoning || in_think) reasoning_.emplace(in_think);
  if (tools) tools_.emplace(std::move(id_prefix));
}

void ChatOutput::content(std::string_view text, bool last, ChatDelta& d) {
  if (!tools_) {
    d.content.append(text);
    return;
  }
  ToolCallParser::Out o;
  tools_->push(text, o);
  if (last) tools_->finish(o);
  d.content += o.content;
  for (auto& c : o.calls) d.calls.push_back(std::move(c));
}

ChatDelta ChatOutput::push(std::string_view text) {
  ChatDelta d;
  if (!reasoning_) {
    content(text, false, d);
    return d;
  }
  ReasoningParser::Out o;
  reasoning_->push(text, o);
  d.reasoning = std::move(o.reasoning);
  content(o.content, false, d);
  return d;
}

ChatDelta ChatOutput::finish() {
  ChatDelta d;
  std::string rest;
  if (reasoning_) {
    ReasoningParser::Out o;
    reasoning_->finish(o);
    d.reasoning = std::move(o.reasoning);
    rest = std::move(o.content);
  }
  content(rest, true, d);
  return d;
}

}  // namespace dfl::server
