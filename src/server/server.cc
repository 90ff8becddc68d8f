#include "server/server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <mutex>
#include <random>
#include <thread>

#include "core/error.h"
#include "server/engine_worker.h"
#include "server/job.h"
#include "server/metrics.h"
#include "server/openai_response.h"
#include "tokenizer/tokenizer.h"

namespace dfl::server {

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kHeartbeat = std::chrono::seconds(5);  // stream silence before a ": ping" comment
constexpr int kListenBacklog = 1024;                   // pending connections (capped by somaxconn)

std::string random_hex(int n) {
  static std::mutex mu;
  static std::mt19937_64 rng{std::random_device{}()};
  std::lock_guard<std::mutex> lk(mu);
  static const char* kHex = "0123456789abcdef";
  std::string s;
  for (int i = 0; i < n; ++i) s += kHex[rng() & 15];
  return s;
}

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  if (e.status == 429) res.set_header("Retry-After", "1");
  if (e.status == 401) res.set_header("WWW-Authenticate", "Bearer");
  res.set_content(dump(error_json(e)), "application/json");
}

const char* default_message(int status) {
  switch (status) {
    case 400: return "malformed HTTP request";
    case 404: return "no such endpoint";
    case 405: return "method not allowed";
    case 413: return "the request body is too large";
    case 414: return "the request URI is too long";
    default: return "HTTP error";
  }
}

// One choice of a job, as its updates arrive.
struct ChoiceAcc {
  std::string text;
  std::vector<TokenLogprob> logprobs;
  bool finished = false;
  FinishReason reason = FinishReason::kNone;
  std::string error;
  std::optional<RequestStats> stats;
  // streaming
  std::optional<ChatOutput> chat;
  int32_t tool_index = 0;
  int64_t text_offset = 0;
};

// A job's progress: shared by the handler and (for streams) the content provider.
struct JobState {
  std::shared_ptr<Job> job;
  ResponseHead head;
  std::string tool_prefix;  // tool-call ids: call_<prefix><choice>_<n>
  Clock::time_point start, deadline;
  Clock::time_point last_write;  // streams: the last bytes sent (for heartbeats)
  int32_t prompt_tokens = 0;
  bool in_think = false;
  bool reasoning = false;  // split <think> blocks out of chat content
  std::vector<ChoiceAcc> choices;
  int32_t n_finished = 0;
  bool ended = false;      // the stream's terminator was written (or the response built)
  std::string end_status = "ok";

  bool all_finished() const { return n_finished == int32_t(choices.size()); }
  void apply(const JobEvent& ev) {
    ChoiceAcc& c = choices[ev.choice];
    const RequestUpdate& u = ev.update;
    c.text += u.text_delta;
    c.logprobs.insert(c.logprobs.end(), u.logprobs.begin(), u.logprobs.end());
    if (u.finished && !c.finished) {
      c.finished = true;
      c.reason = u.reason;
      c.error = u.error;
      c.stats = ev.stats;
      ++n_finished;
    }
  }
  Usage usage() const {
    Usage u;
    u.prompt_tokens = prompt_tokens;
    for (const ChoiceAcc& c : choices)
      if (c.stats) u.completion_tokens += c.stats->generated_tokens;
    return u;
  }
  SpecFigures spec() const {
    SpecFigures f;
    for (const ChoiceAcc& c : choices)
      if (c.stats) f.add(*c.stats);
    return f;
  }
};

}  // namespace

bool secret_equal(const std::string& a, const std::string& b) {
  const size_t n = a.size() > b.size() ? a.size() : b.size();
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

struct Server::Impl {
  ServerOptions opts;
  std::string model_name;
  std::string model_folder_name;
  ServerMetrics metrics;
  EngineWorker worker;
  httplib::Server http;
  std::thread http_thread;
  int port = 0;
  std::atomic<bool> draining{false};
  std::atomic<int> in_flight{0};  // POST handlers and open streams
  std::mutex drain_mu;
  std::thread drain_thread;
  std::atomic<bool> stopped{false};
  std::mutex stop_mu;
  std::condition_variable stop_cv;
  int64_t created = std::time(nullptr);

  explicit Impl(ServerOptions o)
      : opts(std::move(o)),
        model_name(!opts.served_model_name.empty()
                       ? opts.served_model_name
                       : std::filesystem::path(opts.engine.model_dir).filename().string()),
        model_folder_name(std::filesystem::path(opts.engine.model_dir).filename().string()),
        metrics(model_name),
        worker(opts.engine, metrics) {
    if (model_name.empty()) model_name = model_folder_name = "model";
  }

  std::string token_text(int32_t id) const {
    const Tokenizer* t = worker.tokenizer();
    return t ? t->decode(std::vector<int32_t>{id}, false) : std::to_string(id);
  }

  bool authorized(const httplib::Request& req) const {
    if (opts.api_key.empty()) return true;
    const std::string h = req.get_header_value("Authorization");
    const std::string want = "Bearer " + opts.api_key;
    return secret_equal(h, want);
  }

  // 503 unless the engine is ready and the server is not draining.
  std::optional<ApiError> unavailable() const {
    switch (worker.state()) {
      case EngineWorker::State::kLoading: return ApiError(503, "the model is still loading", {}, "loading");
      case EngineWorker::State::kFailed: return ApiError(503, "the model failed to load: " + worker.load_error(), {}, "load_failed");
      case EngineWorker::State::kReady:
        if (!draining.load()) return std::nullopt;
        [[fallthrough]];
      default: return ApiError(503, "the server is shutting down", {}, "draining");
    }
  }

  void log(const JobState& s, int status) const {
    if (!opts.log_requests) return;
    const Usage u = s.usage();
    const SpecFigures f = s.spec();
    std::string finish;
    for (const ChoiceAcc& c : s.choices)
      finish += std::string(finish.empty() ? "" : ",") + (c.finished ? finish_reason_name(c.reason) : "unfinished");
    std::fprintf(stderr,
                 "[serve] %s status=%d n=%zu prompt=%lld completion=%lld tau=%.2f accepted=%lld/%lld "
                 "finish=%s end=%s time=%.3fs\n",
                 s.head.id.c_str(), status, s.choices.size(), (long long)u.prompt_tokens,
                 (long long)u.completion_tokens, f.mean_acceptance_length(),
                 (long long)f.num_accepted_tokens, (long long)f.num_draft_tokens, finish.c_str(),
                 s.end_status.c_str(),
                 std::chrono::duration<double>(Clock::now() - s.start).count());
  }

  ChoiceOut choice_out(const JobState& s, int32_t i) const {
    const ChoiceAcc& c = s.choices[i];
    ChoiceOut o;
    o.index = i;
    o.want_logprobs = s.job->req.logprobs;
    o.logprobs = c.logprobs;
    bool tools = false;
    if (s.job->req.kind == ApiKind::kChat) {
      ChatOutput out(s.reasoning, s.in_think, s.job->req.parse_tool_calls, s.tool_prefix + std::to_string(i));
      ChatDelta a = out.push(c.text), b = out.finish();
      o.text = a.content + b.content;
      o.reasoning = a.reasoning + b.reasoning;
      o.tool_calls = std::move(a.calls);
      for (auto& t : b.calls) o.tool_calls.push_back(std::move(t));
      tools = out.saw_tool_calls();
    } else {
      o.text = c.text;
    }
    o.finish_reason = finish_reason_text(c.reason, tools);
    return o;
  }

  // Stream text for one update of choice ev.choice (may be empty).
  std::string stream_update(JobState& s, const JobEvent& ev) const {
    ChoiceAcc& c = s.choices[ev.choice];
    const RequestUpdate& u = ev.update;
    const bool chat = s.job->req.kind == ApiKind::kChat;
    const bool lp = s.job->req.logprobs && !u.logprobs.empty();
    auto text = [this](int32_t id) { return token_text(id); };
    std::string out;
    if (chat) {
      ChatDelta d = c.chat->push(u.text_delta);
      if (u.finished) {
        ChatDelta f = c.chat->finish();
        d.reasoning += f.reasoning;
        d.content += f.content;
        for (auto& t : f.calls) d.calls.push_back(std::move(t));
      }
      if (!d.empty() || lp) {
        out += sse_event(chat_chunk(s.head, ev.choice, false, d, c.tool_index,
                                    lp ? chat_logprobs_json(u.logprobs, text) : Json(nullptr), "", nullptr));
        c.tool_index += int32_t(d.calls.size());
      }
    } else if (!u.text_delta.empty() || lp) {
      out += sse_event(completion_chunk(s.head, ev.choice, u.text_delta,
                                        lp ? completion_logprobs_json(u.logprobs, text, c.text_offset) : Json(nullptr),
                                        "", nullptr));
      c.text_offset += int64_t(u.text_delta.size());
    }
    s.apply(ev);
    if (u.finished) {
      if (u.reason == FinishReason::kError || u.reason == FinishReason::kCancelled) {
        const std::string msg = u.reason == FinishReason::kError ? "generation failed: " + u.error
                                                                 : "the request was cancelled (server shutting down)";
        out += sse_event(error_json(u.reason == FinishReason::kError ? 500 : 503, msg));
        s.end_status = u.reason == FinishReason::kError ? "error" : "cancelled";
      }
      SpecFigures f;
      if (ev.stats) f.add(*ev.stats);
      const std::string fr = finish_reason_text(u.reason, chat && c.chat->saw_tool_calls());
      out += sse_event(chat ? chat_chunk(s.head, ev.choice, false, ChatDelta{}, 0, Json(nullptr), fr, &f)
                            : completion_chunk(s.head, ev.choice, "", Json(nullptr), fr, &f));
    }
    return out;
  }

  std::string stream_end(JobState& s) const {
    std::string out;
    if (s.job->req.include_usage) out += sse_event(usage_chunk(s.job->req.kind, s.head, s.usage(), s.spec()));
    out += kSseDone;
    s.ended = true;
    return out;
  }

  void handle_generate(ApiKind kind, const httplib::Request& req, httplib::Response& res) {
    if (!authorized(req)) return send_error(res, ApiError(401, "invalid or missing API key (Authorization: Bearer <key>)", {}, "invalid_api_key"));
    if (auto e = unavailable()) return send_error(res, *e);
    ParsedRequest pr;
    try {
      pr = parse_openai_request(kind, req.body, opts.limits);
    } catch (const ApiError& e) {
      return send_error(res, e);
    }
    if (!pr.model.empty() && pr.model != model_name && pr.model != model_folder_name)
      return send_error(res, ApiError(404, "the model '" + pr.model + "' does not exist; this server serves '" + model_name + "'", "model", "model_not_found"));

    auto st = std::make_shared<JobState>();
    st->job = std::make_shared<Job>();
    st->job->req = std::move(pr);
    const ParsedRequest& p = st->job->req;
    st->head.id = (kind == ApiKind::kChat ? "chatcmpl-" : "cmpl-") + random_hex(24);
    st->tool_prefix = random_hex(8);
    st->head.created = std::time(nullptr);
    st->head.model = model_name;
    st->job->log_id = st->head.id;
    st->start = st->last_write = Clock::now();
    st->deadline = st->start + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(opts.request_timeout_s));
    st->choices.resize(size_t(p.n));

    ++in_flight;
    struct Guard {
      std::atomic<int>* n;
      ~Guard() { if (n) --*n; }
    };
    auto guard = std::make_shared<Guard>(Guard{&in_flight});

    worker.submit(st->job);
    std::optional<JobEvent> first = st->job->channel.pop(st->deadline);
    if (!first) {
      worker.cancel(st->job);
      st->end_status = "timeout";
      log(*st, 504);
      return send_error(res, ApiError(504, "the request timed out before it was scheduled", {}, "timeout"));
    }
    if (first->kind == JobEvent::Kind::kRefused) {
      st->end_status = "refused";
      log(*st, first->error->status);
      return send_error(res, *first->error);
    }
    st->prompt_tokens = first->prompt_tokens;
    st->in_think = first->in_think;
    const int8_t think = p.enable_thinking;
    st->reasoning = kind == ApiKind::kChat &&
                    (think == 1 || (think == -1 && worker.default_thinking()) || st->in_think);

    if (!p.stream) return finish_whole(*st, res);

    if (kind == ApiKind::kChat)
      for (int32_t i = 0; i < p.n; ++i)
        st->choices[i].chat.emplace(st->reasoning, st->in_think, p.parse_tool_calls,
                                    st->tool_prefix + std::to_string(i));
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    auto started = std::make_shared<bool>(false);
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, st, started](size_t, httplib::DataSink& sink) -> bool {
          std::string out;
          if (!*started) {
            *started = true;
            if (st->job->req.kind == ApiKind::kChat)
              for (int32_t i = 0; i < int32_t(st->choices.size()); ++i)
                out += sse_event(chat_chunk(st->head, i, true, ChatDelta{}, 0, Json(nullptr), "", nullptr));
          }
          auto wait_until = std::min(st->deadline, Clock::now() + std::chrono::milliseconds(250));
          std::optional<JobEvent> ev = st->job->channel.pop(wait_until);
          while (ev) {
            out += stream_update(*st, *ev);
            if (st->all_finished()) break;
            ev = st->job->channel.pop(Clock::now());  // whatever else is already there
          }
          if (!st->all_finished() && Clock::now() >= st->deadline) {
            worker.cancel(st->job);
            out += sse_event(error_json(504, "the request timed out", {}, "timeout"));
            st->end_status = "timeout";
            out += stream_end(*st);
          } else if (st->all_finished()) {
            out += stream_end(*st);
          }
          // An SSE comment after a silence (queued, long prefill): clients ignore it, and a
          // client that went away is found (and cancelled) by the failing write.
          if (out.empty() && Clock::now() - st->last_write >= kHeartbeat) out = ": ping\n\n";
          if (!out.empty()) st->last_write = Clock::now();
          if (!out.empty() && !sink.write(out.data(), out.size())) {
            st->end_status = "disconnected";
            return false;  // the releaser cancels
          }
          if (st->ended) {
            log(*st, 200);
            sink.done();
          }
          return true;
        },
        [this, st, guard](bool) {
          if (!st->all_finished() && !st->ended) {
            worker.cancel(st->job);
            if (st->end_status == "ok") st->end_status = "disconnected";
            log(*st, 200);
          }
        });
  }

  void finish_whole(JobState& s, httplib::Response& res) {
    while (!s.all_finished()) {
      std::optional<JobEvent> ev = s.job->channel.pop(s.deadline);
      if (!ev) {
        worker.cancel(s.job);
        s.end_status = "timeout";
        log(s, 504);
        return send_error(res, ApiError(504, "the request timed out", {}, "timeout"));
      }
      if (ev->kind == JobEvent::Kind::kUpdate) s.apply(*ev);
    }
    for (const ChoiceAcc& c : s.choices) {
      if (c.reason == FinishReason::kError) {
        s.end_status = "error";
        log(s, 500);
        return send_error(res, ApiError(500, "generation failed: " + c.error));
      }
      if (c.reason == FinishReason::kCancelled) {
        s.end_status = "cancelled";
        log(s, 503);
        return send_error(res, ApiError(503, "the request was cancelled (server shutting down)", {}, "draining"));
      }
    }
    std::vector<ChoiceOut> out;
    for (int32_t i = 0; i < int32_t(s.choices.size()); ++i) out.push_back(choice_out(s, i));
    auto text = [this](int32_t id) { return token_text(id); };
    res.set_content(dump(whole_response(s.job->req.kind, s.head, out, s.usage(), s.spec(), text)),
                    "application/json");
    log(s, 200);
  }

  void routes() {
    http.Post("/v1/chat/completions", [this](const httplib::Request& q, httplib::Response& r) {
      handle_generate(ApiKind::kChat, q, r);
    });
    http.Post("/v1/completions", [this](const httplib::Request& q, httplib::Response& r) {
      handle_generate(ApiKind::kCompletions, q, r);
    });
    http.Get("/v1/models", [this](const httplib::Request& q, httplib::Response& r) {
      if (!authorized(q)) return send_error(r, ApiError(401, "invalid or missing API key", {}, "invalid_api_key"));
      const int32_t ctx = worker.state() == EngineWorker::State::kLoading ||
                                  worker.state() == EngineWorker::State::kFailed
                              ? opts.engine.max_context
                              : worker.info().max_context;
      r.set_content(dump(models_json(model_name, created, ctx)), "application/json");
    });
    http.Get("/health", [](const httplib::Request&, httplib::Response& r) {
      r.set_content("{\"status\":\"ok\"}", "application/json");
    });
    http.Get("/ready", [this](const httplib::Request&, httplib::Response& r) {
      if (auto e = unavailable()) {
        r.status = 503;
        r.set_content(dump(Json{{"status", e->code}, {"message", e->what()}}), "application/json");
        return;
      }
      r.set_content("{\"status\":\"ready\"}", "application/json");
    });
    http.Get("/metrics", [this](const httplib::Request&, httplib::Response& r) {
      r.set_content(metrics.render(), "text/plain; version=0.0.4; charset=utf-8");
    });
    http.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& q, httplib::Response& r) {
      if (!r.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
      std::string msg = default_message(r.status);
      if (r.status == 404) msg += ": " + q.method + " " + q.path;
      r.set_content(dump(error_json(r.status, msg)), "application/json");
      return httplib::Server::HandlerResponse::Handled;
    }));
    http.set_exception_handler([](const httplib::Request&, httplib::Response& r, std::exception_ptr ep) {
      std::string msg = "internal error";
      try {
        if (ep) std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        msg += std::string(": ") + e.what();
      } catch (...) {
      }
      r.status = 500;
      r.set_content(dump(error_json(500, msg)), "application/json");
    });
  }
};

Server::Server(ServerOptions opts) : impl_(std::make_unique<Impl>(std::move(opts))) {}

Server::~Server() {
  Impl& s = *impl_;
  if (s.http_thread.joinable() || s.drain_thread.joinable()) {
    s.draining = true;
    s.worker.drain(0);
    wait();
  }
}

int Server::start() {
  Impl& s = *impl_;
  const int threads = s.opts.http_threads > 0 ? s.opts.http_threads
                                              : std::max(64, 4 * s.opts.engine.max_seqs) + 8;
  s.http.new_task_queue = [threads] { return new httplib::ThreadPool(size_t(threads)); };
  s.http.set_payload_max_length(s.opts.max_body_bytes);
  s.http.set_read_timeout(s.opts.read_timeout_s, 0);
  s.http.set_write_timeout(s.opts.read_timeout_s, 0);
  s.http.set_keep_alive_timeout(5);
  s.http.set_keep_alive_max_count(100);
  s.routes();
  // httplib 0.11 listens with a backlog of 5 (compiled into Debian's library): keep the socket
  // and raise it after bind, so a burst of clients is queued rather than refused.
  auto listen_fd = std::make_shared<int>(-1);
  s.http.set_socket_options([listen_fd](int sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    *listen_fd = int(sock);
  });
  if (s.opts.port == 0) {
    s.port = s.http.bind_to_any_port(s.opts.host);
    DFL_CHECK(s.port > 0, "cannot listen on ", s.opts.host, " (any port)");
  } else {
    DFL_CHECK(s.http.bind_to_port(s.opts.host, s.opts.port), "cannot listen on ", s.opts.host, ":",
              s.opts.port, " (in use, or not an address of this machine)");
    s.port = s.opts.port;
  }
  if (*listen_fd >= 0) ::listen(*listen_fd, kListenBacklog);
  s.worker.start();
  s.http_thread = std::thread([&s] { s.http.listen_after_bind(); });
  // A failed load stops the server (wait() returns 1).
  s.drain_thread = std::thread([&s] {
    if (!s.worker.wait_loaded()) {
      std::fprintf(stderr, "[serve] the model failed to load: %s\n", s.worker.load_error().c_str());
      s.draining = true;
    } else {
      std::fprintf(stderr, "[serve] ready: model '%s' on http://%s:%d\n", s.model_name.c_str(),
                   s.opts.host.c_str(), s.port);
      std::unique_lock<std::mutex> lk(s.stop_mu);
      s.stop_cv.wait(lk, [&] { return s.draining.load(); });
    }
    // Draining: the engine finishes (or cancels) what runs; then let open streams write their
    // ends before the listener stops (httplib aborts chunked writes once stopped).
    s.worker.drain(s.opts.drain_timeout_s);
    while (s.worker.state() != EngineWorker::State::kStopped &&
           s.worker.state() != EngineWorker::State::kFailed)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const auto until = Clock::now() + std::chrono::seconds(5);
    while (s.in_flight.load() > 0 && Clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    // httplib's stop() is a no-op until the listener thread has started (it would then accept
    // forever): wait for it first.
    for (int i = 0; i < 500 && !s.http.is_running(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    s.http.stop();
    s.stopped = true;
    s.stop_cv.notify_all();
  });
  return s.port;
}

bool Server::wait_ready() { return impl_->worker.wait_loaded(); }
const std::string& Server::load_error() const { return impl_->worker.load_error(); }
int Server::port() const { return impl_->port; }

void Server::drain() {
  Impl& s = *impl_;
  {
    std::lock_guard<std::mutex> lk(s.stop_mu);
    s.draining = true;
  }
  s.stop_cv.notify_all();
}

int Server::wait() {
  Impl& s = *impl_;
  if (s.drain_thread.joinable()) s.drain_thread.join();
  if (s.http_thread.joinable()) s.http_thread.join();
  s.worker.join();
  return s.worker.state() == EngineWorker::State::kFailed ? 1 : 0;
}

}  // namespace dfl::server
