// Reasoning and tool-call parsing of generated chat text: the same result whether the text comes
// whole or split at every possible byte, partial tags held back, malformed calls kept as content.
#include "server/chat_output.h"

#include <gtest/gtest.h>

namespace dfl::server {
namespace {

struct Split {
  std::string reasoning, content;
  std::vector<ToolCall> calls;
};

Split run(ChatOutput out, const std::vector<std::string>& pieces) {
  Split s;
  auto add = [&](ChatDelta d) {
    s.reasoning += d.reasoning;
    s.content += d.content;
    for (auto& c : d.calls) s.calls.push_back(c);
  };
  for (const std::string& p : pieces) add(out.push(p));
  add(out.finish());
  return s;
}

// Every way of cutting `text` into two pieces, plus byte by byte, gives the whole-text result.
void expect_split_invariant(bool reasoning, bool in_think, bool tools, const std::string& text) {
  const Split whole = run(ChatOutput(reasoning, in_think, tools, "t"), {text});
  std::vector<std::string> bytes;
  for (char c : text) bytes.emplace_back(1, c);
  std::vector<std::vector<std::string>> cuts = {bytes};
  for (size_t i = 1; i < text.size(); ++i) cuts.push_back({text.substr(0, i), text.substr(i)});
  for (const auto& pieces : cuts) {
    const Split s = run(ChatOutput(reasoning, in_think, tools, "t"), pieces);
    EXPECT_EQ(s.reasoning, whole.reasoning) << text;
    EXPECT_EQ(s.content, whole.content) << text;
    ASSERT_EQ(s.calls.size(), whole.calls.size()) << text;
    for (size_t i = 0; i < s.calls.size(); ++i) {
      EXPECT_EQ(s.calls[i].name, whole.calls[i].name);
      EXPECT_EQ(s.calls[i].arguments, whole.calls[i].arguments);
      EXPECT_EQ(s.calls[i].id, whole.calls[i].id);
    }
  }
}

TEST(ServerReasoning, ModelOpensThink) {
  const Split s = run(ChatOutput(true, false, false, "t"), {"<think>\nI think.\n</think>\n\nAnswer."});
  EXPECT_EQ(s.reasoning, "I think.\n");
  EXPECT_EQ(s.content, "Answer.");
  expect_split_invariant(true, false, false, "<think>\nI think.\n</think>\n\nAnswer.");
  expect_split_invariant(true, false, false, "  <think>a<b</think>c</think>");
}

TEST(ServerReasoning, TemplateOpenedThink) {
  const Split s = run(ChatOutput(true, true, false, "t"), {"\nmulling</think>\n\nDone"});
  EXPECT_EQ(s.reasoning, "mulling");
  EXPECT_EQ(s.content, "Done");
  expect_split_invariant(true, true, false, "\nmulling</think>\n\nDone");
}

TEST(ServerReasoning, NoThinkIsContent) {
  const Split s = run(ChatOutput(true, false, false, "t"), {"<thin", "g>plain"});
  EXPECT_EQ(s.reasoning, "");
  EXPECT_EQ(s.content, "<thing>plain");
  expect_split_invariant(true, false, false, "<thing>plain");
  expect_split_invariant(true, false, false, "plain < text");
  // Unterminated: all reasoning.
  EXPECT_EQ(run(ChatOutput(true, false, false, "t"), {"<think>abc</th"}).reasoning, "abc</th");
  // Reasoning off: tags are content.
  EXPECT_EQ(run(ChatOutput(false, false, false, "t"), {"<think>x</think>y"}).content, "<think>x</think>y");
}

TEST(ServerToolCalls, QwenCalls) {
  const std::string text =
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"n\": 2}}\n"
      "</tool_call>\n<tool_call>\n{\"name\": \"now\"}\n</tool_call>\n";
  const Split s = run(ChatOutput(false, false, true, "ab"), {text});
  EXPECT_EQ(s.content, "Let me check.\n");
  ASSERT_EQ(s.calls.size(), 2u);
  EXPECT_EQ(s.calls[0].name, "get_weather");
  EXPECT_EQ(s.calls[0].arguments, "{\"city\":\"Paris\",\"n\":2}");
  EXPECT_EQ(s.calls[0].id, "call_ab_0");
  EXPECT_EQ(s.calls[1].name, "now");
  EXPECT_EQ(s.calls[1].arguments, "{}");
  EXPECT_EQ(s.calls[1].id, "call_ab_1");
  expect_split_invariant(false, false, true, text);
}

TEST(ServerToolCalls, MalformedStaysContent) {
  const std::string bad = "<tool_call>{not json}</tool_call> after";
  const Split s = run(ChatOutput(false, false, true, "t"), {bad});
  EXPECT_TRUE(s.calls.empty());
  EXPECT_EQ(s.content, bad);
  expect_split_invariant(false, false, true, bad);
  const Split u = run(ChatOutput(false, false, true, "t"), {"x <tool_call>{\"name\": \"f\""});
  EXPECT_TRUE(u.calls.empty());
  EXPECT_EQ(u.content, "x <tool_call>{\"name\": \"f\"");
  EXPECT_EQ(run(ChatOutput(false, false, true, "t"), {"<tool_call>[1]</tool_call>"}).content, "<tool_call>[1]</tool_call>");
  // Without tools the tags are plain content.
  EXPECT_EQ(run(ChatOutput(false, false, false, "t"), {"<tool_call>{\"name\":\"f\"}</tool_call>"}).calls.size(), 0u);
}

TEST(ServerToolCalls, AfterReasoning) {
  const std::string text = "<think>need a tool</think>\n\n<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>";
  const Split s = run(ChatOutput(true, false, true, "t"), {text});
  EXPECT_EQ(s.reasoning, "need a tool");
  EXPECT_EQ(s.content, "");
  ASSERT_EQ(s.calls.size(), 1u);
  EXPECT_EQ(s.calls[0].name, "f");
  expect_split_invariant(true, false, true, text);
}

TEST(ServerToolCalls, UnicodeContentIntact) {
  expect_split_invariant(true, false, true, "héllo <tool_call>{\"name\": \"ü\"}</tool_call> 日本");
}

}  // namespace
}  // namespace dfl::server
