// dflash serve: the OpenAI-compatible HTTP server (src/server/server.h). Flags map to
// EngineOptions and ServerOptions; SIGTERM / SIGINT drain (see ServerOptions::drain_timeout_s).
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <iostream>
#include <thread>

#include "args.h"
#include "commands.h"
#include "core/error.h"
#include "core/threadpool.h"
#include "pipeline_cli.h"
#include "run_common.h"
#include "server/server.h"

namespace dfl::cli {

namespace {
const std::vector<FlagSpec> kFlags = with_pipeline_flags({
    {"--model", "DIR", "target model folder (config.json + safetensors + tokenizer.json)"},
    {"--draft", "DIR", "DFlash drafter folder, or ngram[:N] (prompt lookup): speculative decoding "
                       "for every request (a request turns it off with \"speculative\": "
                       "{\"enabled\": false})"},
    {"--host", "ADDR", "address to listen on (default 127.0.0.1)"},
    {"--port", "N", "port (default 8080; 0 = any free port, printed on stderr)"},
    {"--api-key", "K", "require 'Authorization: Bearer K' on /v1/* (default: no auth)"},
    {"--served-model-name", "N", "model name in /v1/models and responses (default: the folder name)"},
    {"--kv-memory", "B", "KV-cache budget in bytes, suffixes K M G allowed (default: enough for "
                         "--max-seqs full contexts)"},
    {"--kv-dtype", "T", "KV-cache element type: bf16 (default) | f32, as for dflash run"},
    {"--max-seqs", "M", "sequences running at once (default 16)"},
    {"--max-batch-tokens", "N", "rows per target forward, the chunked-prefill budget (default 512)"},
    {"--max-queue", "N", "waiting requests before 429 (default 4096)"},
    {"--ctx-size", "N", "context limit per sequence in tokens (default 4096, clamped to the model's)"},
    {"--block-size", "B", "default speculative block size incl. the anchor, or 'auto' (default: the "
                          "drafter's)"},
    {"--weights", "FMT", "bf16 (default) | stored | q8, as for dflash run"},
    ggml_act_flag(),
    {"--think", "", "chat requests default to enable_thinking=true"},
    {"--threads", "N", "worker threads (default: all cores)"},
    {"--drain-timeout", "S", "on SIGTERM/SIGINT, seconds running requests get to finish (default 30)"},
    {"--request-timeout", "S", "seconds a request may take before it is cancelled (default 600)"},
    {"--max-body", "B", "largest request body in bytes, suffixes K M G allowed (default 8M)"},
    {"--http-threads", "N", "connections served at once (default max(64, 4 x max-seqs) + 8)"},
    {"--quiet", "", "no per-request log lines"},
    {"--help", "", "show this help"},
});

int64_t parse_bytes(const std::string& flag, const std::string& v) {
  DFL_CHECK(!v.empty(), flag, " needs a size");
  int64_t mult = 1;
  std::string digits = v;
  const char last = v.back();
  if (last == 'K' || last == 'k') mult = int64_t(1) << 10;
  if (last == 'M' || last == 'm') mult = int64_t(1) << 20;
  if (last == 'G' || last == 'g') mult = int64_t(1) << 30;
  if (mult != 1) digits.pop_back();
  char* end = nullptr;
  const double x = std::strtod(digits.c_str(), &end);
  DFL_CHECK(!digits.empty() && end && *end == '\0' && x >= 0 && x * double(mult) < 9e18, flag,
            ": '", v, "' is not a size (e.g. 4G, 512M, 1048576)");
  return static_cast<int64_t>(x * double(mult));
}
}  // namespace

int cmd_serve(int argc, char** argv) {
  Args args(kFlags, argc, argv, 2);
  if (args.has("--help")) {
    std::cout << usage("dflash serve --model DIR [--draft DIR] [--host 127.0.0.1] [--port 8080] "
                       "[--api-key K] [flags]",
                       kFlags);
    return 0;
  }
  DFL_CHECK(args.positional().empty(), "unexpected argument '",
            args.positional().empty() ? "" : args.positional()[0], "'");
  DFL_CHECK(args.has("--model"), "--model DIR is required");
  apply_ggml_act(args);

  server::ServerOptions so;
  EngineOptions& eo = so.engine;
  eo.model_dir = args.str("--model");
  eo.draft_dir = args.str("--draft");
  eo.threads = static_cast<int32_t>(args.integer("--threads", 0));
  DFL_CHECK(eo.threads >= 0 && eo.threads <= 1024, "--threads must be in [1, 1024]");
  eo.max_context = static_cast<int32_t>(args.integer("--ctx-size", 4096));
  DFL_CHECK(eo.max_context >= 2, "--ctx-size must be at least 2");
  eo.max_seqs = static_cast<int32_t>(args.integer("--max-seqs", 16));
  DFL_CHECK(eo.max_seqs >= 1 && eo.max_seqs <= 4096, "--max-seqs must be in [1, 4096]");
  eo.max_batch_tokens = static_cast<int32_t>(args.integer("--max-batch-tokens", 512));
  DFL_CHECK(eo.max_batch_tokens >= 1, "--max-batch-tokens must be positive");
  eo.max_queue = static_cast<int32_t>(args.integer("--max-queue", 4096));
  DFL_CHECK(eo.max_queue >= 0, "--max-queue must be >= 0");
  if (args.has("--kv-memory")) eo.kv_memory_bytes = parse_bytes("--kv-memory", args.str("--kv-memory"));
  eo.kv_dtype = parse_kv_dtype(args);
  const std::string bs = args.str("--block-size");
  if (bs == "auto") {
    DFL_CHECK(!eo.draft_dir.empty(), "--block-size auto needs --draft");
    eo.default_block_size = kBlockAuto;
  } else {
    eo.default_block_size = static_cast<int32_t>(args.integer("--block-size", kBlockDefault));
    DFL_CHECK(eo.default_block_size >= 0 && eo.default_block_size <= 256, "--block-size must be in [1, 256] or 'auto'");
  }
  const std::string wfmt = args.str("--weights", "bf16");
  DFL_CHECK(wfmt == "bf16" || wfmt == "q8" || wfmt == "stored",
            "--weights must be bf16, stored or q8, got '", wfmt, "'");
  if (wfmt == "q8") eo.weights_format = WeightsFormat::kQ8;
  eo.prepack = wfmt != "stored";
  eo.default_enable_thinking = args.has("--think");
  add_pipeline_target(args, eo);
  if (run_pipeline_worker(args, eo.threads > 0 ? eo.threads : hardware_threads())) return 0;

  so.host = args.str("--host", "127.0.0.1");
  so.port = static_cast<int>(args.integer("--port", 8080));
  DFL_CHECK(so.port >= 0 && so.port <= 65535, "--port must be in [0, 65535]");
  so.api_key = args.str("--api-key");
  so.served_model_name = args.str("--served-model-name");
  so.drain_timeout_s = args.number("--drain-timeout", 30);
  DFL_CHECK(so.drain_timeout_s >= 0, "--drain-timeout must be >= 0");
  so.request_timeout_s = args.number("--request-timeout", 600);
  DFL_CHECK(so.request_timeout_s > 0, "--request-timeout must be positive");
  so.max_body_bytes = static_cast<size_t>(parse_bytes("--max-body", args.str("--max-body", "8M")));
  DFL_CHECK(so.max_body_bytes >= 1024, "--max-body must be at least 1K");
  so.http_threads = static_cast<int>(args.integer("--http-threads", 0));
  DFL_CHECK(so.http_threads >= 0 && so.http_threads <= 4096, "--http-threads must be in [1, 4096]");
  so.log_requests = !args.has("--quiet");

  // Signals: blocked in every thread (threads inherit the mask) and taken by one sigwait thread,
  // which starts the drain. A broken client socket must not kill the process.
  ::signal(SIGPIPE, SIG_IGN);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  server::Server srv(so);
  const int port = srv.start();
  std::fprintf(stderr, "[serve] listening on http://%s:%d (loading the model)\n", so.host.c_str(), port);
  std::thread signals([&] {
    int sig = 0;
    if (sigwait(&set, &sig) == 0 && sig != 0) {
      std::fprintf(stderr, "[serve] %s: draining (up to %.0f s)\n", sig == SIGINT ? "SIGINT" : "SIGTERM",
                   so.drain_timeout_s);
      srv.drain();
    }
  });
  const int rc = srv.wait();
  pthread_kill(signals.native_handle(), SIGTERM);  // wakes the sigwait thread if no signal came
  signals.join();
  if (rc != 0) throw Error("the model failed to load: " + srv.load_error());
  std::fprintf(stderr, "[serve] stopped\n");
  return 0;
}

}  // namespace dfl::cli
