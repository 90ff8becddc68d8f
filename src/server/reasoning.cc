#include "server/reasoning.h"

#include "server/text_tags.h"

namespace dfl::server {

namespace {
constexpr std::string_view kOpen = "<think>";
constexpr std::string_view kClose = "</think>";
}  // namespace

ReasoningParser::ReasoningParser(bool in_think)
    : state_(in_think ? State::kThink : State::kStart), strip_nl_(in_think) {}

void ReasoningParser::emit(std::string_view text, std::string& to) {
  if (strip_nl_) {
    const size_t k = text.find_first_not_of('\n');
    if (k == std::string_view::npos) return;
    text.remove_prefix(k);
    strip_nl_ = false;
  }
  to.append(text);
}

void ReasoningParser::push(std::string_view text, Out& out) {
  if (state_ == State::kContent) {
    emit(text, out.content);
    return;
  }
  buf_.append(text);
  if (state_ == State::kStart) {
    const size_t k = buf_.find_first_not_of(" \t\r\n");
    if (k == std::string::npos) return;  // only whitespace so far: undecided
    const std::string_view rest = std::string_view(buf_).substr(k);
    if (rest.size() < kOpen.size() && kOpen.substr(0, rest.size()) == rest) return;  // undecided
    if (rest.substr(0, kOpen.size()) != kOpen) {
      state_ = State::kContent;
      std::string all = std::move(buf_);
      buf_.clear();
      emit(all, out.content);
      return;
    }
    buf_.erase(0, k + kOpen.size());
    state_ = State::kThink;
    strip_nl_ = true;
  }
  // kThink
  const size_t end = buf_.find(kClose);
  if (end != std::string::npos) {
    emit(std::string_view(buf_).substr(0, end), out.reasoning);
    std::string rest = buf_.substr(end + kClose.size());
    buf_.clear();
    state_ = State::kContent;
    strip_nl_ = true;
    emit(rest, out.content);
    return;
  }
  const size_t hold = partial_tag_suffix(buf_, kClose);
  emit(std::string_view(buf_).substr(0, buf_.size() - hold), out.reasoning);
  buf_.erase(0, buf_.size() - hold);
}

void ReasoningParser::finish(Out& out) {
  if (state_ == State::kStart) emit(buf_, out.content);
  else if (state_ == State::kThink) emit(buf_, out.reasoning);
  buf_.clear();
}

}  // namespace dfl::server
