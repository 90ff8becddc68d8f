#include "server/tool_calls.h"

#include <nlohmann/json.hpp>

#include "server/text_tags.h"

namespace dfl::server {

namespace {
constexpr std::string_view kOpen = "<tool_call>";
constexpr std::string_view kClose = "</tool_call>";
}  // namespace

ToolCallParser::ToolCallParser(std::string id_prefix) : prefix_(std::move(id_prefix)) {}

void ToolCallParser::emit_content(std::string_view text, Out& out) {
  if (text.empty()) return;
  if (n_calls_ > 0 && text.find_first_not_of(" \t\r\n") == std::string_view::npos) {
    pending_ws_.append(text);
    return;
  }
  out.content += pending_ws_;
  pending_ws_.clear();
  out.content.append(text);
}

void ToolCallParser::push(std::string_view text, Out& out) {
  buf_.append(text);
  for (;;) {
    if (!in_call_) {
      const size_t at = buf_.find(kOpen);
      if (at == std::string::npos) {
        const size_t hold = partial_tag_suffix(buf_, kOpen);
        emit_content(std::string_view(buf_).substr(0, buf_.size() - hold), out);
        buf_.erase(0, buf_.size() - hold);
        return;
      }
      emit_content(std::string_view(buf_).substr(0, at), out);
      buf_.erase(0, at + kOpen.size());
      in_call_ = true;
    }
    const size_t end = buf_.find(kClose);
    if (end == std::string::npos) return;  // the call is not complete yet
    const std::string body = buf_.substr(0, end);
    buf_.erase(0, end + kClose.size());
    in_call_ = false;
    const auto j = nlohmann::ordered_json::parse(body, nullptr, /*allow_exceptions=*/false);
    const auto name = j.is_object() ? j.find("name") : j.end();
    if (!j.is_object() || name == j.end() || !name->is_string()) {
      emit_content(std::string(kOpen) + body + std::string(kClose), out);
      continue;
    }
    ToolCall c;
    c.id = "call_" + prefix_ + "_" + std::to_string(n_calls_);
    c.name = name->get<std::string>();
    const auto args = j.find("arguments");
    if (args == j.end() || args->is_null()) c.arguments = "{}";
    else if (args->is_string()) c.arguments = args->get<std::string>();
    else c.arguments = args->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    out.calls.push_back(std::move(c));
    ++n_calls_;
    pending_ws_.clear();
  }
}

void ToolCallParser::finish(Out& out) {
  if (in_call_) emit_content(std::string(kOpen) + buf_, out);
  else emit_content(buf_, out);
  buf_.clear();
  in_call_ = false;
  pending_ws_.clear();
}

}  // namespace dfl::server
