// `dflash serve`: an OpenAI-compatible HTTP/1.1 server (cpp-httplib) in front of one dfl::Engine.
//
// Threads: ONE engine thread owns the Engine (it constructs it, then loops: take queued submits
// and cancels, Engine::step(), publish the metrics snapshot). HTTP handler threads only parse,
// push commands into a mutex-protected queue and wait on their request's channel, which the
// RequestUpdate callbacks (engine thread) feed. Nothing else touches the Engine.
//
// Endpoints: POST /v1/chat/completions, POST /v1/completions (stream or not), GET /v1/models,
// GET /health (200 while the process runs), GET /ready (200 once loaded; 503 while loading,
// draining or after a failed load), GET /metrics (Prometheus text, server/metrics.h).
// With an api key, /v1/* needs `Authorization: Bearer <key>` (compared in constant time; 401);
// /health, /ready and /metrics stay open (as vLLM).
//
// Errors (OpenAI error objects, server/api_error.h): 400 malformed JSON / wrong types / prompt
// too long (with both numbers) / invalid request; 401; 404 unknown path or model; 413 body over
// max_body_bytes; 429 engine queue full (Retry-After: 1); 503 loading or draining; 504 a request
// past request_timeout_s (it is cancelled; a stream ends with an error event and [DONE]).
//
// Disconnects: a stream whose client went away is cancelled at the next write (its KV is freed in
// the engine thread's next turn, i.e. within one step); a silent stream (queued, long prefill)
// gets an SSE comment ": ping" every 5 s, so a client gone meanwhile is found too. A non-streamed request is bounded by
// request_timeout_s instead (httplib does not report a closed socket while the handler waits).
//
// Shutdown: drain() turns /ready and new requests to 503; running requests get drain_timeout_s
// to finish, then are cancelled; then the listener stops and wait() returns.
//
// n > 1 submits n engine requests with seeds seed, seed+1, … and merges them as choices.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "engine/engine.h"
#include "server/openai_request.h"

namespace dfl::server {

struct ServerOptions {
  EngineOptions engine;
  std::string host = "127.0.0.1";
  int port = 8080;                    // 0: an ephemeral port (see Server::port())
  std::string api_key;                // empty: no auth
  std::string served_model_name;      // empty: the target folder's name
  size_t max_body_bytes = 8u << 20;   // 413 above
  int http_threads = 0;               // concurrent connections served; 0: max(64, 4 × max_seqs) + 8
  int read_timeout_s = 30;            // per socket read (headers, body, keep-alive idle)
  double request_timeout_s = 600;     // per request, submit → finished
  double drain_timeout_s = 30;
  ParseLimits limits;
  bool log_requests = true;           // one line per request on stderr
};

class Server {
 public:
  explicit Server(ServerOptions opts);
  ~Server();  // drains with a zero timeout if still running, joins every thread
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds host:port (throws dfl::Error when it cannot) and starts the HTTP and engine threads.
  // The engine loads on its thread; /ready answers 503 until it is loaded. Returns the port.
  int start();
  // Blocks until the engine has loaded (true) or failed to (false; load_error() says why).
  bool wait_ready();
  const std::string& load_error() const;
  // Starts draining (idempotent; any thread, but not a signal handler).
  void drain();
  // Blocks until the server stopped (after drain(), or a failed load). 0 on a clean drain,
  // 1 when the engine failed to load.
  int wait();
  int port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Constant-time equality of two secrets (time depends only on their lengths).
bool secret_equal(const std::string& a, const std::string& b);

}  // namespace dfl::server
