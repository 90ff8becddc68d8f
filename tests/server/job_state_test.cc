// A request's response state fed with scripted engine updates: the streamed SSE text and the
// whole response agree (content, reasoning, tool calls, finish reasons, usage, metrics) for chat
// and completions, n > 1, logprobs, and a cancelled choice.
#include "server/job_state.h"

#include <gtest/gtest.h>

namespace dfl::server {
namespace {

const TokenText kText = [](int32_t id) { return "<" + std::to_string(id) + ">"; };

JobState make(ApiKind kind, int32_t n, bool tools, bool reasoning, bool logprobs) {
  JobState s;
  s.job = std::make_shared<Job>();
  s.job->req.kind = kind;
  s.job->req.n = n;
  s.job->req.parse_tool_calls = tools;
  s.job->req.logprobs = logprobs;
  s.job->req.include_usage = true;
  s.head = ResponseHead{kind == ApiKind::kChat ? "chatcmpl-x" : "cmpl-x", 1, "m"};
  s.tool_prefix = "p";
  s.reasoning = reasoning;
  s.prompt_tokens = 5;
  s.start = JobState::Clock::now();
  s.choices.resize(size_t(n));
  return s;
}

JobEvent update(int32_t choice, const std::string& text, std::vector<int32_t> ids, bool finished = false,
                FinishReason reason = FinishReason::kNone) {
  JobEvent e;
  e.choice = choice;
  e.update.text_delta = text;
  e.update.new_tokens = ids;
  for (int32_t id : ids) e.update.logprobs.push_back(TokenLogprob{id, -1.0f, {{id, -1.0f}}});
  e.update.finished = finished;
  e.update.reason = reason;
  if (finished) {
    RequestStats st;
    st.generated_tokens = 7;
    st.draft_steps = 2;
    st.drafted_tokens = 8;
    st.accepted_tokens = 3;
    st.committed_in_cycles = 5;
    st.acceptance_histogram = {1, 0, 0, 1};
    e.stats = st;
  }
  return e;
}

std::vector<Json> events(const std::string& sse, bool* done) {
  std::vector<Json> out;
  *done = false;
  size_t at = 0;
  while (at < sse.size()) {
    const size_t end = sse.find("\n\n", at);
    const std::string ev = sse.substr(at, end - at);
    at = end + 2;
    if (ev == "data: [DONE]") {
      *done = true;
      continue;
    }
    out.push_back(Json::parse(ev.substr(6)));
  }
  return out;
}

TEST(ServerJobState, ChatStreamEqualsWhole) {
  const std::vector<std::string> pieces = {"<thi", "nk>\nplan</th", "ink>\n\nSure. <tool_",
                                           "call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call>", "\n"};
  JobState whole = make(ApiKind::kChat, 1, true, true, true);
  JobState stream = make(ApiKind::kChat, 1, true, true, true);
  std::string sse = stream.stream_begin();
  for (size_t i = 0; i < pieces.size(); ++i) {
    const bool last = i + 1 == pieces.size();
    const JobEvent e = update(0, pieces[i], {int32_t(i)}, last, FinishReason::kStop);
    whole.apply(e);
    sse += stream.stream_update(e, kText);
  }
  ASSERT_TRUE(stream.all_finished());
  sse += stream.stream_end();
  const Json w = whole.whole(kText);
  const Json& m = w["choices"][0]["message"];
  EXPECT_EQ(m["reasoning_content"], "plan");
  EXPECT_EQ(m["content"], "Sure. ");
  ASSERT_EQ(m["tool_calls"].size(), 1u);
  EXPECT_EQ(m["tool_calls"][0]["function"]["arguments"], "{\"x\":1}");
  EXPECT_EQ(m["tool_calls"][0]["id"], "call_p0_0");
  EXPECT_EQ(w["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(w["choices"][0]["logprobs"]["content"].size(), pieces.size());
  EXPECT_EQ(w["usage"]["completion_tokens"], 7);
  EXPECT_EQ(w["metrics"]["speculative_decoding"]["num_accepted_tokens"], 3);

  bool done = false;
  const std::vector<Json> evs = events(sse, &done);
  EXPECT_TRUE(done);
  std::string reasoning, content, finish;
  Json calls = Json::array();
  size_t lps = 0;
  for (const Json& e : evs) {
    if (e["choices"].empty()) {
      EXPECT_EQ(e["usage"], w["usage"]);
      EXPECT_EQ(e["metrics"], w["metrics"]);
      continue;
    }
    const Json& c = e["choices"][0];
    const Json& d = c["delta"];
    if (d.contains("reasoning_content")) reasoning += d["reasoning_content"].get<std::string>();
    if (d.contains("content")) content += d["content"].get<std::string>();
    if (d.contains("tool_calls"))
      for (const Json& t : d["tool_calls"]) calls.push_back(t);
    if (c["logprobs"].is_object()) lps += c["logprobs"]["content"].size();
    if (c["finish_reason"].is_string()) finish = c["finish_reason"];
  }
  EXPECT_EQ(reasoning, "plan");
  EXPECT_EQ(content, "Sure. ");
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0]["index"], 0);
  EXPECT_EQ(calls[0]["function"], m["tool_calls"][0]["function"]);
  EXPECT_EQ(lps, pieces.size());
  EXPECT_EQ(finish, "tool_calls");
  EXPECT_EQ(evs.front()["choices"][0]["delta"]["role"], "assistant");
}

TEST(ServerJobState, CompletionsTwoChoicesAndCancel) {
  JobState s = make(ApiKind::kCompletions, 2, false, false, true);
  std::string sse = s.stream_begin();
  EXPECT_TRUE(sse.empty());  // completions have no role chunk
  sse += s.stream_update(update(0, "ab", {1, 2}), kText);
  sse += s.stream_update(update(1, "xy", {3}), kText);
  sse += s.stream_update(update(0, "c", {4}, true, FinishReason::kLength), kText);
  EXPECT_FALSE(s.all_finished());
  sse += s.stream_update(update(1, "", {}, true, FinishReason::kCancelled), kText);
  ASSERT_TRUE(s.all_finished());
  EXPECT_EQ(s.end_status, "cancelled");
  sse += s.stream_end();
  bool done = false;
  const std::vector<Json> evs = events(sse, &done);
  EXPECT_TRUE(done);
  std::string t0, t1;
  std::vector<int64_t> offsets;
  bool saw_error = false;
  for (const Json& e : evs) {
    if (e.contains("error")) {
      saw_error = true;
      EXPECT_EQ(e["error"]["type"], "service_unavailable");
      continue;
    }
    for (const Json& c : e["choices"]) {
      (c["index"] == 0 ? t0 : t1) += c["text"].get<std::string>();
      if (c["index"] == 0 && c["logprobs"].is_object())
        for (const Json& o : c["logprobs"]["text_offset"]) offsets.push_back(o.get<int64_t>());
    }
  }
  EXPECT_TRUE(saw_error);
  EXPECT_EQ(t0, "abc");
  EXPECT_EQ(t1, "xy");
  EXPECT_EQ(offsets, (std::vector<int64_t>{0, 3, 6}));  // token texts "<1>" "<2>" "<4>"
  EXPECT_EQ(s.usage().completion_tokens, 14);
  EXPECT_NE(s.summary(200).find("status=200 n=2 prompt=5 completion=14"), std::string::npos) << s.summary(200);
  EXPECT_NE(s.summary(200).find("finish=length,cancelled"), std::string::npos) << s.summary(200);
}

}  // namespace
}  // namespace dfl::server
