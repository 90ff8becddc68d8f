// The request parser: every field of the chat and completions APIs, and a 400 naming the field
// for each wrong type or range.
#include "server/openai_request.h"

#include <gtest/gtest.h>

namespace dfl::server {
namespace {

ParsedRequest chat(const std::string& body) { return parse_openai_request(ApiKind::kChat, body); }
ParsedRequest comp(const std::string& body) { return parse_openai_request(ApiKind::kCompletions, body); }

// The ApiError of a body that must be refused.
ApiError refused(ApiKind kind, const std::string& body) {
  try {
    parse_openai_request(kind, body);
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "accepted: " << body;
  return ApiError(0, "");
}

TEST(ServerRequest, ChatAllFields) {
  const ParsedRequest r = chat(R"({
    "model": "m", "messages": [{"role": "system", "content": "be brief"},
                               {"role": "user", "content": [{"type": "text", "text": "hi "},
                                                            {"type": "text", "text": "there"}]},
                               {"role": "assistant", "content": null,
                                "tool_calls": [{"id": "c1", "type": "function",
                                                "function": {"name": "f", "arguments": "{}"}}]},
                               {"role": "tool", "content": "42", "tool_call_id": "c1"}],
    "max_completion_tokens": 7, "temperature": 0.5, "top_p": 0.9, "top_k": 20, "min_p": 0.05,
    "seed": 11, "stop": ["a", "bb"], "n": 2, "logprobs": true, "top_logprobs": 3,
    "stream": true, "stream_options": {"include_usage": true},
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
    "tool_choice": "auto", "chat_template_kwargs": {"enable_thinking": true},
    "ignore_eos": true, "speculative": {"enabled": false, "block_size": 8},
    "presence_penalty": 0, "user": "ignored", "some_future_field": {"x": 1}})");
  EXPECT_EQ(r.model, "m");
  ASSERT_EQ(r.engine.prompt.messages.size(), 4u);
  EXPECT_EQ(r.engine.prompt.messages[1]["content"], "hi there");
  EXPECT_EQ(r.engine.prompt.messages[2]["content"], "");
  EXPECT_TRUE(r.engine.prompt.messages[2]["tool_calls"].is_array());
  EXPECT_EQ(r.engine.prompt.messages[3]["tool_call_id"], "c1");
  EXPECT_EQ(r.engine.max_tokens, 7);
  EXPECT_TRUE(r.max_tokens_set);
  EXPECT_FLOAT_EQ(r.engine.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.engine.sampling.top_p, 0.9f);
  EXPECT_EQ(r.engine.sampling.top_k, 20);
  EXPECT_FLOAT_EQ(r.engine.sampling.min_p, 0.05f);
  EXPECT_EQ(r.engine.sampling.seed, 11u);
  EXPECT_EQ(r.engine.stop, (std::vector<std::string>{"a", "bb"}));
  EXPECT_EQ(r.n, 2);
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.engine.top_logprobs, 3);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_TRUE(r.parse_tool_calls);
  EXPECT_TRUE(r.engine.prompt.tools.is_array());
  EXPECT_EQ(r.engine.prompt.template_kwargs["enable_thinking"], true);
  EXPECT_EQ(r.enable_thinking, 1);
  EXPECT_TRUE(r.engine.ignore_eos);
  EXPECT_FALSE(r.engine.speculative);
  EXPECT_EQ(r.engine.block_size, 8);
}

TEST(ServerRequest, ChatDefaults) {
  const ParsedRequest r = chat(R"({"messages": [{"role": "user", "content": "x"}]})");
  EXPECT_FALSE(r.max_tokens_set);
  EXPECT_EQ(r.n, 1);
  EXPECT_FALSE(r.stream);
  EXPECT_FALSE(r.logprobs);
  EXPECT_EQ(r.engine.top_logprobs, -1);
  EXPECT_TRUE(r.engine.speculative);
  EXPECT_EQ(r.engine.block_size, kBlockDefault);
  EXPECT_EQ(r.enable_thinking, -1);
  EXPECT_FALSE(r.parse_tool_calls);
  EXPECT_TRUE(r.engine.prompt.tools.is_null());
  EXPECT_EQ(chat(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true})").engine.top_logprobs, 0);
  EXPECT_EQ(chat(R"({"messages": [{"role": "developer", "content": "x"}]})").engine.prompt.messages[0]["role"], "system");
  EXPECT_EQ(chat(R"({"messages": [{"role": "user", "content": "x"}], "top_k": -1})").engine.sampling.top_k, 0);
  EXPECT_EQ(chat(R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 5.0, "temperature": null})").engine.max_tokens, 5);
  EXPECT_EQ(chat(R"({"messages": [{"role": "user", "content": "x"}], "speculative": {"block_size": "auto"}})").engine.block_size, kBlockAuto);
}

TEST(ServerRequest, ToolChoiceNoneHidesTools) {
  const ParsedRequest r = chat(R"({"messages": [{"role": "user", "content": "x"}],
      "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "none"})");
  EXPECT_FALSE(r.parse_tool_calls);
  EXPECT_TRUE(r.engine.prompt.tools.is_null());
  const ParsedRequest f = chat(R"({"messages": [{"role": "user", "content": "x"}],
      "tools": [{"type": "function", "function": {"name": "f"}}],
      "tool_choice": {"type": "function", "function": {"name": "f"}}})");
  EXPECT_TRUE(f.parse_tool_calls);
}

TEST(ServerRequest, CompletionPrompts) {
  EXPECT_EQ(comp(R"({"prompt": "hello"})").engine.prompt.text, "hello");
  EXPECT_EQ(comp(R"({"prompt": ["hello"]})").engine.prompt.text, "hello");
  EXPECT_EQ(comp(R"({"prompt": [1, 2, 3]})").engine.prompt.ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(comp(R"({"prompt": [[4, 5]]})").engine.prompt.ids, (std::vector<int32_t>{4, 5}));
  const ParsedRequest r = comp(R"({"prompt": "x", "logprobs": 2, "max_tokens": 3, "echo": false})");
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.engine.top_logprobs, 2);
  EXPECT_EQ(r.engine.max_tokens, 3);
  EXPECT_TRUE(r.engine.prompt.messages.is_null());
}

TEST(ServerRequest, ErrorsNameTheField) {
  struct Case {
    ApiKind kind;
    const char* body;
    const char* param;  // "" → no param (body-level)
  };
  const char* u = R"("messages": [{"role": "user", "content": "x"}])";
  auto C = [&](const std::string& extra) { return "{" + std::string(u) + ", " + extra + "}"; };
  const std::vector<std::pair<std::string, std::string>> chat_cases = {
      {C(R"("temperature": "hot")"), "temperature"},
      {C(R"("temperature": 3)"), "temperature"},
      {C(R"("top_p": 0)"), "top_p"},
      {C(R"("max_tokens": 0)"), "max_tokens"},
      {C(R"("max_tokens": 1.5)"), "max_tokens"},
      {C(R"("max_completion_tokens": "9")"), "max_completion_tokens"},
      {C(R"("n": 0)"), "n"},
      {C(R"("n": 1000)"), "n"},
      {C(R"("stream": "yes")"), "stream"},
      {C(R"("stream_options": {"include_usage": 1})"), "stream_options.include_usage"},
      {C(R"("stop": 5)"), "stop"},
      {C(R"("stop": ["a", 2])"), "stop[1]"},
      {C(R"("logprobs": 1)"), "logprobs"},
      {C(R"("logprobs": true, "top_logprobs": 99)"), "top_logprobs"},
      {C(R"("top_logprobs": 2)"), "top_logprobs"},
      {C(R"("seed": "s")"), "seed"},
      {C(R"("tools": {})"), "tools"},
      {C(R"("tools": [{"type": "function"}])"), "tools[0].function"},
      {C(R"("tool_choice": "sometimes")"), "tool_choice"},
      {C(R"("chat_template_kwargs": [])"), "chat_template_kwargs"},
      {C(R"("chat_template_kwargs": {"enable_thinking": "no"})"), "chat_template_kwargs.enable_thinking"},
      {C(R"("ignore_eos": 0)"), "ignore_eos"},
      {C(R"("speculative": true)"), "speculative"},
      {C(R"("speculative": {"enabled": "no"})"), "speculative.enabled"},
      {C(R"("speculative": {"block_size": 0})"), "speculative.block_size"},
      {C(R"("speculative": {"block_size": "big"})"), "speculative.block_size"},
      {C(R"("model": 3)"), "model"},
      {R"({})", "messages"},
      {R"({"messages": []})", "messages"},
      {R"({"messages": "hi"})", "messages"},
      {R"({"messages": [3]})", "messages[0]"},
      {R"({"messages": [{"content": "x"}]})", "messages[0].role"},
      {R"({"messages": [{"role": "robot", "content": "x"}]})", "messages[0].role"},
      {R"({"messages": [{"role": "user"}]})", "messages[0].content"},
      {R"({"messages": [{"role": "user", "content": 5}]})", "messages[0].content"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", "messages[0].content[0].type"},
      {R"({"messages": [{"role": "user", "content": [{"type": "text", "text": 1}]}]})", "messages[0].content[0].text"},
      {R"({"messages": [{"role": "assistant", "content": "", "tool_calls": 1}]})", "messages[0].tool_calls"},
  };
  // Media parts: the same 400 with a message saying the model is text-only.
  for (const char* type : {"image_url", "image", "input_image", "input_audio", "video_url"}) {
    const std::string body = std::string(R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "x"}, {"type": ")") +
                             type + R"("}]}]})";
    const ApiError e = refused(ApiKind::kChat, body);
    EXPECT_EQ(e.status, 400) << body;
    EXPECT_EQ(e.param, "messages[0].content[1].type") << body;
    EXPECT_NE(std::string(e.what()).find("input is not supported: this is a text-only model"), std::string::npos)
        << e.what();
  }
  for (const auto& [body, param] : chat_cases) {
    const ApiError e = refused(ApiKind::kChat, body);
    EXPECT_EQ(e.status, 400) << body;
    EXPECT_EQ(e.param, param) << body << " → " << e.what();
    EXPECT_EQ(e.type, "invalid_request_error");
  }
  const std::vector<std::pair<std::string, std::string>> comp_cases = {
      {R"({})", "prompt"},
      {R"({"prompt": 5})", "prompt"},
      {R"({"prompt": ""})", "prompt"},
      {R"({"prompt": []})", "prompt"},
      {R"({"prompt": ["a", "b"]})", "prompt"},
      {R"({"prompt": [1, -2]})", "prompt[1]"},
      {R"({"prompt": [1, "x"]})", "prompt[1]"},
      {R"({"prompt": [[1, 99999999999]]})", "prompt[0][1]"},
      {R"({"prompt": "x", "logprobs": true})", "logprobs"},
      {R"({"prompt": "x", "logprobs": 50})", "logprobs"},
  };
  for (const auto& [body, param] : comp_cases) {
    const ApiError e = refused(ApiKind::kCompletions, body);
    EXPECT_EQ(e.status, 400) << body;
    EXPECT_EQ(e.param, param) << body << " → " << e.what();
  }
}

TEST(ServerRequest, MalformedBodies) {
  for (const std::string body : {"", "{", "[]", "null", "\"x\"", "{\"messages\": [}", "{} trailing"}) {
    const ApiError e = refused(ApiKind::kChat, body);
    EXPECT_EQ(e.status, 400) << body;
    EXPECT_EQ(e.param, "") << body;
  }
  const std::string deep = std::string(1000, '[') + std::string(1000, ']');
  EXPECT_EQ(refused(ApiKind::kChat, "{\"x\": " + deep + "}").status, 400);
  // Brackets inside strings do not count as nesting.
  EXPECT_NO_THROW(chat(R"({"messages": [{"role": "user", "content": ")" + std::string(500, '[') + R"("}]})"));
}

TEST(ServerRequest, StopLimits) {
  ParseLimits lim;
  lim.max_stop = 2;
  lim.max_stop_len = 4;
  auto body = [](const std::string& stop) {
    return R"({"messages": [{"role": "user", "content": "x"}], "stop": )" + stop + "}";
  };
  EXPECT_NO_THROW(parse_openai_request(ApiKind::kChat, body(R"(["ab", "cd"])"), lim));
  EXPECT_THROW(parse_openai_request(ApiKind::kChat, body(R"(["a", "b", "c"])"), lim), ApiError);
  EXPECT_THROW(parse_openai_request(ApiKind::kChat, body(R"("abcde")"), lim), ApiError);
  EXPECT_THROW(parse_openai_request(ApiKind::kChat, body(R"("")"), lim), ApiError);
}

}  // namespace
}  // namespace dfl::server
