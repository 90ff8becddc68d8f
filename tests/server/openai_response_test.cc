// Response shapes the official OpenAI clients parse: whole responses, stream chunks, usage,
// speculation metrics, logprobs and error objects.
#include "server/openai_response.h"

#include <gtest/gtest.h>

namespace dfl::server {
namespace {

const TokenText kText = [](int32_t id) { return "t" + std::to_string(id); };

ResponseHead head() { return ResponseHead{"chatcmpl-abc", 1700000000, "tiny"}; }

RequestStats stats() {
  RequestStats s;
  s.prompt_tokens = 5;
  s.generated_tokens = 9;
  s.draft_steps = 3;
  s.drafted_tokens = 12;
  s.accepted_tokens = 6;
  s.committed_in_cycles = 9;
  s.acceptance_histogram = {1, 0, 2};
  return s;
}

TEST(ServerResponse, ChatWhole) {
  ChoiceOut c;
  c.text = "hello";
  c.reasoning = "hmm";
  c.finish_reason = "stop";
  c.want_logprobs = true;
  c.logprobs = {TokenLogprob{7, -0.5f, {{7, -0.5f}, {8, -1.25f}}}};
  SpecFigures f;
  f.add(stats());
  const Json j = whole_response(ApiKind::kChat, head(), {c}, Usage{5, 9}, f, kText);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["id"], "chatcmpl-abc");
  EXPECT_EQ(j["model"], "tiny");
  EXPECT_EQ(j["created"], 1700000000);
  const Json& ch = j["choices"][0];
  EXPECT_EQ(ch["index"], 0);
  EXPECT_EQ(ch["message"]["role"], "assistant");
  EXPECT_EQ(ch["message"]["content"], "hello");
  EXPECT_EQ(ch["message"]["reasoning_content"], "hmm");
  EXPECT_FALSE(ch["message"].contains("tool_calls"));
  EXPECT_EQ(ch["finish_reason"], "stop");
  const Json& lp = ch["logprobs"]["content"][0];
  EXPECT_EQ(lp["token"], "t7");
  EXPECT_DOUBLE_EQ(lp["logprob"].get<double>(), -0.5);
  EXPECT_EQ(lp["bytes"], Json::array({116, 55}));
  EXPECT_EQ(lp["top_logprobs"][1]["token"], "t8");
  EXPECT_DOUBLE_EQ(lp["top_logprobs"][1]["logprob"].get<double>(), -1.25);
  EXPECT_EQ(j["usage"]["prompt_tokens"], 5);
  EXPECT_EQ(j["usage"]["completion_tokens"], 9);
  EXPECT_EQ(j["usage"]["total_tokens"], 14);
  const Json& sd = j["metrics"]["speculative_decoding"];
  EXPECT_EQ(sd["num_spec_steps"], 3);
  EXPECT_EQ(sd["num_draft_tokens"], 12);
  EXPECT_EQ(sd["num_accepted_tokens"], 6);
  EXPECT_DOUBLE_EQ(sd["mean_acceptance_length"].get<double>(), 3.0);
  EXPECT_EQ(sd["acceptance_histogram"], Json::array({1, 0, 2}));
}

TEST(ServerResponse, ChatToolCallsNullContent) {
  ChoiceOut c;
  c.text = "\n";
  c.tool_calls = {ToolCall{"call_x_0", "f", "{\"a\":1}"}};
  c.finish_reason = finish_reason_text(FinishReason::kStop, true);
  const Json j = whole_response(ApiKind::kChat, head(), {c}, Usage{}, SpecFigures{}, kText);
  const Json& m = j["choices"][0]["message"];
  EXPECT_TRUE(m["content"].is_null());
  EXPECT_EQ(m["tool_calls"][0]["id"], "call_x_0");
  EXPECT_EQ(m["tool_calls"][0]["type"], "function");
  EXPECT_EQ(m["tool_calls"][0]["function"]["name"], "f");
  EXPECT_EQ(m["tool_calls"][0]["function"]["arguments"], "{\"a\":1}");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_TRUE(j["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(finish_reason_text(FinishReason::kLength, true), "length");
  EXPECT_EQ(finish_reason_text(FinishReason::kLength, false), "length");
  EXPECT_EQ(finish_reason_text(FinishReason::kStop, false), "stop");
}

TEST(ServerResponse, CompletionWholeAndLogprobs) {
  ChoiceOut c;
  c.text = "t1t22";
  c.finish_reason = "length";
  c.want_logprobs = true;
  c.logprobs = {TokenLogprob{1, -0.1f, {{1, -0.1f}}}, TokenLogprob{22, -std::numeric_limits<float>::infinity(), {}}};
  const Json j = whole_response(ApiKind::kCompletions, ResponseHead{"cmpl-1", 1, "m"}, {c}, Usage{2, 2},
                                SpecFigures{}, kText);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["choices"][0]["text"], "t1t22");
  const Json& lp = j["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"], Json::array({"t1", "t22"}));
  EXPECT_DOUBLE_EQ(lp["token_logprobs"][1].get<double>(), -9999.0);
  EXPECT_EQ(lp["text_offset"], Json::array({0, 2}));
  EXPECT_TRUE(lp["top_logprobs"][0].contains("t1"));
  EXPECT_EQ(j["metrics"]["speculative_decoding"]["num_spec_steps"], 0);
  EXPECT_DOUBLE_EQ(j["metrics"]["speculative_decoding"]["mean_acceptance_length"].get<double>(), 0.0);
}

TEST(ServerResponse, Chunks) {
  const Json role = chat_chunk(head(), 0, true, ChatDelta{}, 0, Json(nullptr), "", nullptr);
  EXPECT_EQ(role["object"], "chat.completion.chunk");
  EXPECT_EQ(role["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(role["choices"][0]["delta"]["content"], "");
  EXPECT_TRUE(role["choices"][0]["finish_reason"].is_null());
  EXPECT_FALSE(role.contains("metrics"));

  ChatDelta d;
  d.content = "hi";
  d.calls = {ToolCall{"call_1", "f", "{}"}};
  const Json c = chat_chunk(head(), 1, false, d, 2, Json(nullptr), "", nullptr);
  EXPECT_EQ(c["choices"][0]["index"], 1);
  EXPECT_FALSE(c["choices"][0]["delta"].contains("role"));
  EXPECT_EQ(c["choices"][0]["delta"]["content"], "hi");
  EXPECT_EQ(c["choices"][0]["delta"]["tool_calls"][0]["index"], 2);

  SpecFigures f;
  f.add(stats());
  const Json fin = chat_chunk(head(), 0, false, ChatDelta{}, 0, Json(nullptr), "length", &f);
  EXPECT_EQ(fin["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(fin["choices"][0]["delta"].empty());
  EXPECT_EQ(fin["metrics"]["speculative_decoding"]["num_draft_tokens"], 12);

  const Json u = usage_chunk(ApiKind::kChat, head(), Usage{3, 4}, f);
  EXPECT_TRUE(u["choices"].empty());
  EXPECT_EQ(u["usage"]["total_tokens"], 7);

  const Json t = completion_chunk(ResponseHead{"cmpl-1", 1, "m"}, 0, "x", Json(nullptr), "", nullptr);
  EXPECT_EQ(t["object"], "text_completion");
  EXPECT_EQ(t["choices"][0]["text"], "x");

  const std::string ev = sse_event(Json{{"a", "\xff"}});
  EXPECT_EQ(ev.substr(0, 6), "data: ");
  EXPECT_EQ(ev.substr(ev.size() - 2), "\n\n");
  EXPECT_NE(ev.find("\xef\xbf\xbd"), std::string::npos);  // invalid UTF-8 → U+FFFD, no throw
  EXPECT_STREQ(kSseDone, "data: [DONE]\n\n");
}

TEST(ServerResponse, Errors) {
  const Json e = error_json(ApiError(400, "'temperature': expected a number", "temperature"));
  EXPECT_EQ(e["error"]["message"], "'temperature': expected a number");
  EXPECT_EQ(e["error"]["type"], "invalid_request_error");
  EXPECT_EQ(e["error"]["param"], "temperature");
  EXPECT_TRUE(e["error"]["code"].is_null());
  EXPECT_EQ(error_json(401, "no")["error"]["type"], "authentication_error");
  EXPECT_EQ(error_json(429, "busy", "", "queue_full")["error"]["code"], "queue_full");
  EXPECT_EQ(error_json(503, "x")["error"]["type"], "service_unavailable");
  EXPECT_TRUE(error_json(503, "x")["error"]["param"].is_null());
}

TEST(ServerResponse, Models) {
  const Json m = models_json("tiny", 5, 2048);
  EXPECT_EQ(m["object"], "list");
  EXPECT_EQ(m["data"][0]["id"], "tiny");
  EXPECT_EQ(m["data"][0]["object"], "model");
  EXPECT_EQ(m["data"][0]["max_model_len"], 2048);
}

}  // namespace
}  // namespace dfl::server
