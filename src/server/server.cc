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
#include "server/job_state.h"
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
  std::thread drain_thread;
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
    if (opts.log_requests) std::fprintf(stderr, "[serve] %s\n", s.summary(status).c_str());
  }

  TokenText token_texts() const {
    return [this](int32_t id) { return token_text(id); };
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

    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    auto started = std::make_shared<bool>(false);
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, st, started](size_t, httplib::DataSink& sink) -> bool {
          std::string out;
          if (!*started) {
            *started = true;
            out = st->stream_begin();
          }
          auto wait_until = std::min(st->deadline, Clock::now() + std::chrono::milliseconds(250));
          std::optional<JobEvent> ev = st->job->channel.pop(wait_until);
          while (ev) {
            out += st->stream_update(*ev, token_texts());
            if (st->all_finished()) break;
            ev = st->job->channel.pop(Clock::now());  // whatever else is already there
          }
          if (!st->all_finished() && Clock::now() >= st->deadline) {
            worker.cancel(st->job);
            out += sse_event(error_json(504, "the request timed out", {}, "timeout"));
            st->end_status = "timeout";
            out += st->stream_end();
          } else if (st->all_finished()) {
            out += st->stream_end();
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
    res.set_content(dump(s.whole(token_texts())), "application/json");
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
