// The server in-process on an ephemeral loopback port, on the tiny default fixture pair: every
// endpoint, every error code, streaming vs whole responses, speculation on / off, n > 1,
// disconnects (the KV is freed), the metrics text, and draining.
#include "server/server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <httplib.h>

#include <chrono>
#include <future>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/golden.h"

namespace dfl::server {
namespace {

using Json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

ServerOptions options(bool draft) {
  ServerOptions o;
  o.engine.model_dir = test::fixture("default/target");
  if (draft) o.engine.draft_dir = test::fixture("default/draft");
  o.engine.threads = 2;
  o.engine.max_context = 512;
  o.engine.max_seqs = 4;
  o.engine.calibrate = false;
  o.host = "127.0.0.1";
  o.port = 0;
  o.api_key = "sekret";
  o.served_model_name = "tiny";
  o.max_body_bytes = 64 * 1024;
  o.log_requests = false;
  return o;
}

class Running {
 public:
  explicit Running(ServerOptions o) : srv_(std::move(o)) {
    port_ = srv_.start();
    EXPECT_TRUE(srv_.wait_ready()) << srv_.load_error();
  }
  ~Running() {
    srv_.drain();
    srv_.wait();
  }
  Server& server() { return srv_; }
  int port() const { return port_; }
  httplib::Client client(bool auth = true) const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(60, 0);
    if (auth) c.set_bearer_token_auth("sekret");
    return c;
  }
  httplib::Result post(const std::string& path, const Json& body, bool auth = true) const {
    return client(auth).Post(path.c_str(), body.dump(), "application/json");
  }

 private:
  Server srv_;
  int port_ = 0;
};

// A server shared by the tests that do not change its state.
Running& shared() {
  static Running* r = new Running(options(true));
  return *r;
}

Json chat_body(const std::string& user, int max_tokens = 12) {
  return Json{{"model", "tiny"},
              {"messages", Json::array({Json{{"role", "user"}, {"content", user}}})},
              {"max_tokens", max_tokens},
              {"temperature", 0}};
}

Json completion_body(const std::string& prompt, int max_tokens = 12) {
  return Json{{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}};
}

// The JSON objects of an SSE body, in order; `done` tells whether [DONE] ended it.
std::vector<Json> sse_events(const std::string& body, bool* done) {
  std::vector<Json> out;
  *done = false;
  size_t at = 0;
  while (at < body.size()) {
    const size_t end = body.find("\n\n", at);
    if (end == std::string::npos) break;
    const std::string ev = body.substr(at, end - at);
    at = end + 2;
    EXPECT_EQ(ev.rfind("data: ", 0), 0u) << ev;
    const std::string data = ev.substr(6);
    if (data == "[DONE]") {
      *done = true;
      EXPECT_EQ(at, body.size()) << "events after [DONE]";
      break;
    }
    out.push_back(Json::parse(data));
  }
  return out;
}

// Concatenated text of choice `index` in a stream (chat: delta.content, completions: text).
std::string stream_text(const std::vector<Json>& evs, int index = 0) {
  std::string s;
  for (const Json& e : evs)
    for (const Json& c : e["choices"])
      if (c["index"] == index) {
        if (c.contains("delta")) {
          if (c["delta"].contains("content") && c["delta"]["content"].is_string()) s += c["delta"]["content"].get<std::string>();
        } else {
          s += c["text"].get<std::string>();
        }
      }
  return s;
}

double metric(const std::string& text, const std::string& name) {
  const size_t at = text.find("\n" + name + "{");
  if (at == std::string::npos) return -1;
  const size_t sp = text.find("} ", at);
  return std::stod(text.substr(sp + 2, text.find('\n', sp) - sp - 2));
}

// Polls /metrics until nothing runs and no KV is in use (or `s` seconds pass).
bool wait_idle_metrics(const Running& r, double s = 5) {
  const auto until = Clock::now() + std::chrono::duration<double>(s);
  while (Clock::now() < until) {
    auto res = r.client(false).Get("/metrics");
    if (res && res->status == 200 && metric(res->body, "dflash:num_requests_running") == 0 &&
        metric(res->body, "dflash:num_requests_waiting") == 0 &&
        metric(res->body, "dflash:kv_cache_usage_perc") == 0)
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

void expect_error(const httplib::Result& res, int status, const std::string& param = "") {
  ASSERT_TRUE(res) << "no response";
  EXPECT_EQ(res->status, status) << res->body;
  const Json j = Json::parse(res->body, nullptr, false);
  ASSERT_TRUE(j.is_object()) << res->body;
  ASSERT_TRUE(j.contains("error")) << res->body;
  EXPECT_TRUE(j["error"]["message"].is_string());
  EXPECT_TRUE(j["error"]["type"].is_string());
  if (!param.empty()) {
    EXPECT_EQ(j["error"]["param"], param) << res->body;
  }
}

TEST(Server, HealthReadyModels) {
  Running& r = shared();
  auto h = r.client(false).Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  auto ready = r.client(false).Get("/ready");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 200);
  expect_error(r.client(false).Get("/v1/models"), 401);
  auto m = r.client().Get("/v1/models");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->status, 200);
  const Json j = Json::parse(m->body);
  EXPECT_EQ(j["data"][0]["id"], "tiny");
}

TEST(Server, ChatWholeEqualsStreamed) {
  Running& r = shared();
  auto whole = r.post("/v1/chat/completions", chat_body("Hello there"));
  ASSERT_TRUE(whole);
  ASSERT_EQ(whole->status, 200) << whole->body;
  const Json w = Json::parse(whole->body);
  EXPECT_EQ(w["object"], "chat.completion");
  EXPECT_EQ(w["model"], "tiny");
  EXPECT_EQ(w["choices"][0]["message"]["role"], "assistant");
  const std::string text = w["choices"][0]["message"]["content"];
  const int completion = w["usage"]["completion_tokens"];
  EXPECT_GT(completion, 0);
  EXPECT_LE(completion, 12);
  EXPECT_GT(w["usage"]["prompt_tokens"].get<int>(), 0);
  EXPECT_EQ(w["usage"]["total_tokens"], w["usage"]["prompt_tokens"].get<int>() + completion);
  EXPECT_TRUE(w["metrics"]["speculative_decoding"]["num_spec_steps"].is_number_integer());
  const std::string fr = w["choices"][0]["finish_reason"];
  EXPECT_TRUE(fr == "stop" || fr == "length") << fr;

  Json sb = chat_body("Hello there");
  sb["stream"] = true;
  sb["stream_options"] = {{"include_usage", true}};
  auto streamed = r.post("/v1/chat/completions", sb);
  ASSERT_TRUE(streamed);
  ASSERT_EQ(streamed->status, 200) << streamed->body;
  EXPECT_NE(streamed->get_header_value("Content-Type").find("text/event-stream"), std::string::npos);
  bool done = false;
  const std::vector<Json> evs = sse_events(streamed->body, &done);
  EXPECT_TRUE(done);
  ASSERT_GE(evs.size(), 3u);
  EXPECT_EQ(evs.front()["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(stream_text(evs), text);
  // The finish chunk, then the usage chunk with no choices.
  EXPECT_EQ(evs[evs.size() - 2]["choices"][0]["finish_reason"], fr);
  EXPECT_TRUE(evs.back()["choices"].empty());
  EXPECT_EQ(evs.back()["usage"], w["usage"]);
  EXPECT_EQ(evs.back()["metrics"], w["metrics"]);
}

TEST(Server, CompletionsAndSpeculationOff) {
  Running& r = shared();
  auto on = r.post("/v1/completions", completion_body("The quick brown fox", 16));
  ASSERT_TRUE(on);
  ASSERT_EQ(on->status, 200) << on->body;
  const Json a = Json::parse(on->body);
  EXPECT_EQ(a["object"], "text_completion");
  EXPECT_GT(a["metrics"]["speculative_decoding"]["num_spec_steps"].get<int>(), 0);

  Json off = completion_body("The quick brown fox", 16);
  off["speculative"] = {{"enabled", false}};
  auto res = r.post("/v1/completions", off);
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const Json b = Json::parse(res->body);
  EXPECT_EQ(b["choices"][0]["text"], a["choices"][0]["text"]);  // lossless at T = 0
  EXPECT_EQ(b["usage"], a["usage"]);
  EXPECT_EQ(b["metrics"]["speculative_decoding"]["num_draft_tokens"], 0);

  Json st = completion_body("The quick brown fox", 16);
  st["stream"] = true;
  auto s = r.post("/v1/completions", st);
  ASSERT_TRUE(s);
  bool done = false;
  const std::vector<Json> evs = sse_events(s->body, &done);
  EXPECT_TRUE(done);
  EXPECT_EQ(stream_text(evs), a["choices"][0]["text"].get<std::string>());

  // Token-id prompts.
  Json ids = Json{{"prompt", Json::array({1, 2, 3, 4})}, {"max_tokens", 5}, {"temperature", 0}, {"ignore_eos", true}};
  auto ri = r.post("/v1/completions", ids);
  ASSERT_TRUE(ri);
  ASSERT_EQ(ri->status, 200) << ri->body;
  const Json ji = Json::parse(ri->body);
  EXPECT_EQ(ji["usage"]["prompt_tokens"], 4);
  EXPECT_EQ(ji["usage"]["completion_tokens"], 5);
  EXPECT_EQ(ji["choices"][0]["finish_reason"], "length");
}

TEST(Server, NChoicesAndLogprobs) {
  Running& r = shared();
  Json b = chat_body("Count", 8);
  b["n"] = 2;
  b["logprobs"] = true;
  b["top_logprobs"] = 2;
  auto res = r.post("/v1/chat/completions", b);
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const Json j = Json::parse(res->body);
  ASSERT_EQ(j["choices"].size(), 2u);
  EXPECT_EQ(j["choices"][0]["index"], 0);
  EXPECT_EQ(j["choices"][1]["index"], 1);
  EXPECT_EQ(j["choices"][0]["message"]["content"], j["choices"][1]["message"]["content"]);  // T = 0
  const Json& lp = j["choices"][0]["logprobs"]["content"];
  ASSERT_FALSE(lp.empty());
  EXPECT_EQ(lp[0]["top_logprobs"].size(), 2u);
  EXPECT_LE(lp[0]["logprob"].get<double>(), 0.0);
  // Speculation does not change the target's logprobs at T = 0.
  b["speculative"] = {{"enabled", false}};
  b["n"] = 1;
  auto off = r.post("/v1/chat/completions", b);
  ASSERT_TRUE(off);
  const Json k = Json::parse(off->body);
  const Json& lq = k["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(lq.size(), lp.size());
  for (size_t i = 0; i < lp.size(); ++i) {
    EXPECT_EQ(lq[i]["token"], lp[i]["token"]);
    EXPECT_NEAR(lq[i]["logprob"].get<double>(), lp[i]["logprob"].get<double>(), 1e-4);
  }
}

TEST(Server, ThinkingAndToolsStreamEqualsWhole) {
  Running& r = shared();
  Json b = chat_body("Think about the weather in Paris", 24);
  b["chat_template_kwargs"] = {{"enable_thinking", true}};
  b["tools"] = Json::array({Json{{"type", "function"},
                                 {"function", {{"name", "get_weather"}, {"parameters", {{"type", "object"}}}}}}});
  auto whole = r.post("/v1/chat/completions", b);
  ASSERT_TRUE(whole);
  ASSERT_EQ(whole->status, 200) << whole->body;
  const Json w = Json::parse(whole->body);
  const Json& m = w["choices"][0]["message"];
  b["stream"] = true;
  auto streamed = r.post("/v1/chat/completions", b);
  ASSERT_TRUE(streamed);
  bool done = false;
  const std::vector<Json> evs = sse_events(streamed->body, &done);
  EXPECT_TRUE(done);
  std::string reasoning, content;
  size_t calls = 0;
  for (const Json& e : evs)
    for (const Json& c : e["choices"]) {
      const Json& d = c["delta"];
      if (d.contains("reasoning_content")) reasoning += d["reasoning_content"].get<std::string>();
      if (d.contains("content") && d["content"].is_string()) content += d["content"].get<std::string>();
      if (d.contains("tool_calls")) calls += d["tool_calls"].size();
    }
  EXPECT_EQ(reasoning, m.value("reasoning_content", std::string()));
  EXPECT_EQ(content, m["content"].is_string() ? m["content"].get<std::string>() : std::string());
  EXPECT_EQ(calls, m.contains("tool_calls") ? m["tool_calls"].size() : 0u);
}

TEST(Server, StopStrings) {
  Running& r = shared();
  auto base = r.post("/v1/completions", completion_body("Stop me", 24));
  ASSERT_TRUE(base);
  const std::string text = Json::parse(base->body)["choices"][0]["text"];
  size_t k = 1;
  while (k < text.size() && !std::isalpha(static_cast<unsigned char>(text[k]))) ++k;
  if (k >= text.size()) GTEST_SKIP() << "no ASCII letter in the output to stop on: " << text;
  const std::string stop = text.substr(k, 1);
  Json b = completion_body("Stop me", 24);
  b["stop"] = Json::array({stop});
  auto res = r.post("/v1/completions", b);
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const Json j = Json::parse(res->body);
  EXPECT_EQ(j["choices"][0]["text"], text.substr(0, text.find(stop))) << "stop '" << stop << "' in " << text;
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
}

TEST(Server, ErrorCodes) {
  Running& r = shared();
  expect_error(r.post("/v1/chat/completions", chat_body("x"), false), 401);
  {
    auto c = r.client(false);
    c.set_bearer_token_auth("sekreT");
    expect_error(c.Post("/v1/chat/completions", chat_body("x").dump(), "application/json"), 401);
  }
  expect_error(r.client().Post("/v1/chat/completions", "{not json", "application/json"), 400);
  Json bad = chat_body("x");
  bad["temperature"] = "hot";
  expect_error(r.post("/v1/chat/completions", bad), 400, "temperature");
  Json unk = chat_body("x");
  unk["model"] = "gpt-9";
  expect_error(r.post("/v1/chat/completions", unk), 404, "model");
  expect_error(r.client().Get("/v1/nothing"), 404);
  expect_error(r.client().Post("/v1/embeddings", "{}", "application/json"), 404);
  expect_error(r.client().Post("/v1/completions", std::string(100 * 1024, ' '), "application/json"), 413);
  // A prompt longer than the context: 400 naming both numbers.
  Json lng = Json{{"prompt", Json::array()}, {"max_tokens", 4}};
  for (int i = 0; i < 600; ++i) lng["prompt"].push_back(5);
  auto res = r.post("/v1/completions", lng);
  expect_error(res, 400);
  ASSERT_TRUE(res);
  EXPECT_NE(res->body.find("600"), std::string::npos) << res->body;
  EXPECT_NE(res->body.find("512"), std::string::npos) << res->body;
  // A token id out of the vocabulary.
  expect_error(r.post("/v1/completions", Json{{"prompt", Json::array({1, 99999})}}), 400);
  // An image content part on a text-only model: 400 naming the part, with a clear message.
  Json img = chat_body("x");
  img["messages"] = Json::array({Json{{"role", "user"},
                                      {"content", Json::array({Json{{"type", "text"}, {"text", "what is it?"}},
                                                               Json{{"type", "image_url"},
                                                                    {"image_url", {{"url", "data:image/png;base64,AAAA"}}}}})}}});
  res = r.post("/v1/chat/completions", img);
  expect_error(res, 400, "messages[0].content[1].type");
  ASSERT_TRUE(res);
  EXPECT_NE(res->body.find("image input is not supported"), std::string::npos) << res->body;
}

TEST(Server, QueueFull429) {
  ServerOptions o = options(false);
  o.engine.max_seqs = 1;
  o.engine.max_queue = 1;
  Running r(o);
  Json b = completion_body("Busy", 64);
  b["ignore_eos"] = true;
  std::vector<std::future<httplib::Result>> fs;
  for (int i = 0; i < 6; ++i)
    fs.push_back(std::async(std::launch::async, [&] { return r.post("/v1/completions", b); }));
  int ok = 0, busy = 0;
  for (auto& f : fs) {
    auto res = f.get();
    ASSERT_TRUE(res);
    if (res->status == 200) ++ok;
    if (res->status == 429) {
      ++busy;
      EXPECT_EQ(res->get_header_value("Retry-After"), "1");
      expect_error(res, 429);
    }
  }
  EXPECT_GE(ok, 1);
  EXPECT_GE(busy, 1);
  EXPECT_EQ(ok + busy, 6);
  EXPECT_TRUE(wait_idle_metrics(r));
}

// Opens a raw connection, sends a streaming request, reads until the first token event, closes.
void disconnect_mid_stream(int port, const std::string& body) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  const std::string req = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sekret\r\n"
                          "Content-Type: application/json\r\nContent-Length: " +
                          std::to_string(body.size()) + "\r\n\r\n" + body;
  ASSERT_EQ(::send(fd, req.data(), req.size(), 0), ssize_t(req.size()));
  std::string got;
  char buf[4096];
  while (got.find("\"text\":\"") == std::string::npos || got.find("data: ", got.find("data: ") + 1) == std::string::npos) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    got.append(buf, size_t(n));
  }
  EXPECT_NE(got.find("200 OK"), std::string::npos) << got;
  ::close(fd);
}

TEST(Server, DisconnectFreesKv) {
  Running& r = shared();
  Json b = completion_body("Long story", 400);
  b["ignore_eos"] = true;
  b["stream"] = true;
  disconnect_mid_stream(r.port(), b.dump());
  EXPECT_TRUE(wait_idle_metrics(r));
  auto m = r.client(false).Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_NE(m->body.find("finished_reason=\"abort\"} 1"), std::string::npos) << m->body;
  // The server still serves.
  auto ok = r.post("/v1/completions", completion_body("after", 4));
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
}

TEST(Server, MetricsText) {
  Running& r = shared();
  ASSERT_TRUE(r.post("/v1/completions", completion_body("metrics please", 8)));
  // The snapshot is published after the engine step that finished the request: let it land.
  EXPECT_TRUE(wait_idle_metrics(r));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto m = r.client(false).Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->status, 200);
  for (const char* name :
       {"dflash:num_requests_running", "dflash:num_requests_waiting", "dflash:kv_cache_usage_perc",
        "dflash:prompt_tokens_total", "dflash:generation_tokens_total", "dflash:spec_decode_num_drafts_total",
        "dflash:spec_decode_num_draft_tokens_total", "dflash:spec_decode_num_accepted_tokens_total",
        "dflash:time_to_first_token_seconds_bucket", "dflash:inter_token_latency_seconds_count",
        "dflash:e2e_request_latency_seconds_sum", "dflash:request_success_total"})
    EXPECT_NE(m->body.find(std::string("\n") + name + "{"), std::string::npos) << name;
  EXPECT_GT(metric(m->body, "dflash:prompt_tokens_total"), 0);
  EXPECT_GT(metric(m->body, "dflash:generation_tokens_total"), 0);
  EXPECT_GT(metric(m->body, "dflash:spec_decode_num_drafts_total"), 0);
  EXPECT_TRUE(wait_idle_metrics(r));
}

TEST(Server, DrainFinishesRunningThenStops) {
  ServerOptions o = options(false);
  o.drain_timeout_s = 30;
  auto r = std::make_unique<Running>(o);
  Json b = completion_body("drain me", 400);
  b["ignore_eos"] = true;
  b["stream"] = true;
  auto running = std::async(std::launch::async, [&] { return r->post("/v1/completions", b); });
  // Drain once it runs (it may even have finished already on a fast machine: then the 503
  // checks below find the listener closed, which they allow). No short cap on the wait: on a
  // loaded machine the request can take over a second to be admitted, and a drain before that
  // refuses it (fresh-clone CI beside a compiler, 2026-12-06: "got no response: Read").
  for (int i = 0; i < 15000; ++i) {
    if (running.wait_for(std::chrono::seconds(0)) == std::future_status::ready) break;
    auto m = r->client(false).Get("/metrics");
    if (m && metric(m->body, "dflash:num_requests_running") >= 1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  r->server().drain();
  // /ready and new requests answer 503 while the running one finishes.
  auto ready = r->client(false).Get("/ready");
  if (ready) {
    EXPECT_EQ(ready->status, 503);
  }
  auto late = r->post("/v1/completions", completion_body("late", 4));
  if (late) {
    expect_error(late, 503);
  }
  auto res = running.get();
  ASSERT_TRUE(res) << "the running request got no response: " << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  bool done = false;
  const std::vector<Json> evs = sse_events(res->body, &done);
  EXPECT_TRUE(done);
  ASSERT_GE(evs.size(), 2u);
  EXPECT_EQ(evs.back()["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(r->server().wait(), 0);
}

TEST(Server, DrainTimeoutCancels) {
  ServerOptions o = options(false);
  o.drain_timeout_s = 0.2;
  Running r(o);
  Json b = completion_body("forever", 400);
  b["ignore_eos"] = true;
  auto running = std::async(std::launch::async, [&] { return r.post("/v1/completions", b); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto t0 = Clock::now();
  r.server().drain();
  EXPECT_EQ(r.server().wait(), 0);
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 10.0);
  auto res = running.get();
  if (res) {
    EXPECT_TRUE(res->status == 200 || res->status == 503) << res->status;
  }
}

TEST(Server, LoadFailureStops) {
  ServerOptions o = options(false);
  o.engine.model_dir = "/nonexistent/model";
  Server s(o);
  s.start();
  EXPECT_FALSE(s.wait_ready());
  EXPECT_FALSE(s.load_error().empty());
  EXPECT_EQ(s.wait(), 1);
}

TEST(Server, SecretEqual) {
  EXPECT_TRUE(secret_equal("abc", "abc"));
  EXPECT_FALSE(secret_equal("abc", "abd"));
  EXPECT_FALSE(secret_equal("abc", "abcd"));
  EXPECT_FALSE(secret_equal("", "a"));
  EXPECT_TRUE(secret_equal("", ""));
}

}  // namespace
}  // namespace dfl::server
