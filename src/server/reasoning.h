// Qwen3-style thinking output → reasoning_content: the text inside <think>…</think> is reasoning,
// what follows is content. Streaming-safe: a tag split across pieces is held back until decided.
//
// Two starts: the model opens the block itself (the output begins with "<think>", leading
// whitespace allowed), or the prompt already opened it (`in_think`: the chat template ended with
// "<think>\n"), so the output is reasoning up to "</think>". Newlines right after <think> and
// right after </think> are dropped. An output that does not start with <think> (and did not
// start inside one) is all content. An unterminated block is all reasoning.
#pragma once

#include <string>
#include <string_view>

namespace dfl::server {

class ReasoningParser {
 public:
  explicit ReasoningParser(bool in_think);

  struct Out {
    std::string reasoning, content;
  };
  // Appends what `text` settles to `out` (it may hold back up to a tag's length).
  void push(std::string_view text, Out& out);
  // End of output: flushes whatever was held back.
  void finish(Out& out);

 private:
  enum class State { kStart, kThink, kContent };
  void emit(std::string_view text, std::string& to);
  State state_;
  std::string buf_;
  bool strip_nl_;  // drop newlines at the start of the current section
};

}  // namespace dfl::server
