#include "server/engine_worker.h"

#include <chrono>
#include <cstdio>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace dfl::server {

namespace {

using Clock = std::chrono::steady_clock;

const char* success_label(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "abort";
    default: return "error";
  }
}

ApiError refusal_error(const RequestRefused& r, ApiKind kind) {
  const std::string prompt_param = kind == ApiKind::kChat ? "messages" : "prompt";
  switch (r.kind) {
    case RequestRefused::Kind::kTooLong:
      return ApiError(400, r.message, prompt_param, "context_length_exceeded");
    case RequestRefused::Kind::kNoCapacity:
      return ApiError(400, r.message, prompt_param, "kv_capacity_exceeded");
    case RequestRefused::Kind::kQueueFull: return ApiError(429, r.message, {}, "queue_full");
    case RequestRefused::Kind::kDraining: return ApiError(503, r.message, {}, "draining");
    default: return ApiError(400, r.message);
  }
}

// Whether the last few prompt tokens leave a <think> block open (a template that starts the
// assistant turn inside the reasoning block).
bool prompt_opens_think(const Tokenizer* tok, const std::vector<int32_t>& ids) {
  if (!tok || ids.empty()) return false;
  const size_t n = ids.size() < 8 ? ids.size() : 8;
  const std::string tail = tok->decode(std::vector<int32_t>(ids.end() - n, ids.end()), false);
  const size_t open = tail.rfind("<think>");
  if (open == std::string::npos) return false;
  const size_t close = tail.rfind("</think>");
  return close == std::string::npos || close < open;
}

}  // namespace

EngineWorker::EngineWorker(EngineOptions opts, ServerMetrics& metrics)
    : opts_(std::move(opts)), metrics_(metrics) {}

EngineWorker::~EngineWorker() {
  drain(0);
  join();
}

void EngineWorker::start() { thread_ = std::thread([this] { loop(); }); }

bool EngineWorker::wait_loaded() {
  std::unique_lock<std::mutex> lk(mu_);
  loaded_cv_.wait(lk, [&] { return state_.load() != State::kLoading; });
  return state_.load() != State::kFailed;
}

void EngineWorker::submit(std::shared_ptr<Job> job) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    commands_.push_back({false, std::move(job)});
  }
  cv_.notify_one();
}

void EngineWorker::cancel(std::shared_ptr<Job> job) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    commands_.push_back({true, std::move(job)});
  }
  cv_.notify_one();
}

void EngineWorker::drain(double timeout_s) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (drain_requested_) {
      if (timeout_s < drain_timeout_s_) drain_timeout_s_ = timeout_s;
    } else {
      drain_requested_ = true;
      drain_timeout_s_ = timeout_s;
    }
  }
  cv_.notify_one();
}

void EngineWorker::join() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    release_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void EngineWorker::handle_submit(Engine& e, const std::shared_ptr<Job>& job) {
  const ParsedRequest& pr = job->req;
  auto refuse = [&](ApiError err) {
    JobEvent ev;
    ev.kind = JobEvent::Kind::kRefused;
    ev.error = std::move(err);
    job->channel.push(std::move(ev));
  };
  if (state_.load() != State::kReady) return refuse(ApiError(503, "the server is shutting down", {}, "draining"));
  std::vector<int32_t> ids;
  try {
    ids = e.render_prompt(pr.engine.prompt);
  } catch (const RequestRefused& r) {
    return refuse(refusal_error(r, pr.kind));
  } catch (const std::exception& x) {
    return refuse(ApiError(400, std::string("cannot build the prompt: ") + x.what(),
                           pr.kind == ApiKind::kChat ? "messages" : "prompt"));
  }
  if (ids.empty()) return refuse(ApiError(400, "the prompt has no tokens", pr.kind == ApiKind::kChat ? "messages" : "prompt"));
  const int32_t prompt_tokens = static_cast<int32_t>(ids.size());

  Request base;
  base.prompt.ids = std::move(ids);
  base.max_tokens = pr.max_tokens_set ? pr.engine.max_tokens
                                      : std::max<int32_t>(1, info_.max_context - prompt_tokens);
  base.sampling = pr.engine.sampling;
  base.stop = pr.engine.stop;
  base.stop_ids = pr.engine.stop_ids;
  base.ignore_eos = pr.engine.ignore_eos;
  base.speculative = pr.engine.speculative;
  base.block_size = pr.engine.block_size;
  base.top_logprobs = pr.engine.top_logprobs;
  base.client_id = job->log_id;

  Job* jp = job.get();
  job->ids.clear();
  job->live = 0;
  job->refused = false;
  for (int32_t i = 0; i < pr.n; ++i) {
    Request r = base;
    r.sampling.seed = pr.engine.sampling.seed + uint64_t(i);
    auto last_tokens = std::make_shared<std::optional<Clock::time_point>>();
    r.on_update = [this, jp, i, last_tokens](const RequestUpdate& u) {
      if (!u.new_tokens.empty()) {
        const auto now = Clock::now();
        if (*last_tokens)
          metrics_.observe_token_gap(std::chrono::duration<double>(now - **last_tokens).count(),
                                     int64_t(u.new_tokens.size()));
        *last_tokens = now;
      }
      if (u.finished) {
        if (u.stats) {
          if (u.stats->generated_tokens > 0) metrics_.observe_ttft(u.stats->ttft_s);
          metrics_.observe_finished(u.stats->e2e_s, success_label(u.reason));
        }
        --jp->live;
      }
      if (!jp->refused) {
        JobEvent ev;
        ev.kind = JobEvent::Kind::kUpdate;
        ev.choice = i;
        ev.update = u;
        ev.update.stats = nullptr;
        ev.update.trace = nullptr;
        if (u.finished && u.stats) ev.stats = *u.stats;
        jp->channel.push(std::move(ev));
      }
      if (u.finished && jp->live == 0) live_.erase(jp);  // may drop the last reference: last step
    };
    try {
      job->ids.push_back(e.submit(std::move(r)));
      ++job->live;
      live_[jp] = job;
    } catch (const RequestRefused& rr) {
      job->refused = true;
      const std::vector<RequestId> done = job->ids;
      for (RequestId id : done) e.cancel(id);
      return refuse(refusal_error(rr, pr.kind));
    } catch (const std::exception& x) {
      job->refused = true;
      const std::vector<RequestId> done = job->ids;
      for (RequestId id : done) e.cancel(id);
      return refuse(ApiError(500, std::string("the engine refused the request: ") + x.what()));
    }
  }
  JobEvent ev;
  ev.kind = JobEvent::Kind::kAccepted;
  ev.prompt_tokens = prompt_tokens;
  ev.in_think = prompt_opens_think(tokenizer_, base.prompt.ids);
  job->channel.push(std::move(ev));
}

void EngineWorker::handle_cancel(Engine& e, const std::shared_ptr<Job>& job) {
  if (!live_.count(job.get())) return;
  const std::vector<RequestId> ids = job->ids;
  for (RequestId id : ids) e.cancel(id);
}

void EngineWorker::cancel_all(Engine& e) {
  std::vector<std::shared_ptr<Job>> jobs;
  for (auto& [p, j] : live_) jobs.push_back(j);
  for (auto& j : jobs) handle_cancel(e, j);
}

void EngineWorker::loop() {
  std::unique_ptr<Engine> engine;
  try {
    engine = std::make_unique<Engine>(opts_);
    info_ = engine->info();
    tokenizer_ = engine->tokenizer();
    default_thinking_ = opts_.default_enable_thinking;
    metrics_.set_engine(engine->metrics());
  } catch (const std::exception& x) {
    engine.reset();
    load_error_ = x.what();
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    state_ = engine ? State::kReady : State::kFailed;
  }
  loaded_cv_.notify_all();

  if (engine) {
    Engine& e = *engine;
    Clock::time_point drain_deadline{};
    for (;;) {
      std::vector<Command> cmds;
      bool drain = false;
      double drain_timeout = 0;
      {
        std::unique_lock<std::mutex> lk(mu_);
        if (commands_.empty() && e.idle())
          cv_.wait_for(lk, std::chrono::milliseconds(50),
                       [&] { return !commands_.empty() || drain_requested_; });
        cmds.swap(commands_);
        drain = drain_requested_;
        drain_timeout = drain_timeout_s_;
      }
      if (drain) {
        const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                 std::chrono::duration<double>(drain_timeout));
        if (state_.load() == State::kReady) {
          state_ = State::kDraining;
          drain_deadline = deadline;
        } else if (deadline < drain_deadline) {
          drain_deadline = deadline;  // a second drain() with a shorter timeout
        }
      }
      for (const Command& c : cmds) {
        if (c.cancel) handle_cancel(e, c.job);
        else handle_submit(e, c.job);
      }
      if (state_.load() == State::kDraining && Clock::now() >= drain_deadline && !live_.empty())
        cancel_all(e);
      if (!e.idle()) {
        try {
          e.step();
        } catch (const std::exception& x) {
          std::fprintf(stderr, "[serve] engine step failed: %s; cancelling every request\n", x.what());
          cancel_all(e);
        }
      }
      metrics_.set_engine(e.metrics());
      if (state_.load() == State::kDraining && live_.empty() && e.idle()) {
        std::lock_guard<std::mutex> lk(mu_);
        if (commands_.empty()) break;
      }
    }
    state_ = State::kStopped;
  }
  // Refuse whatever was queued after the end, then keep the engine (and its tokenizer, which
  // HTTP threads may still use for logprob texts) alive until join().
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    for (Command& c : commands_) {
      if (c.cancel) continue;
      JobEvent ev;
      ev.kind = JobEvent::Kind::kRefused;
      ev.error = ApiError(503, state_.load() == State::kFailed ? "the model failed to load"
                                                               : "the server is shutting down",
                          {}, "draining");
      c.job->channel.push(std::move(ev));
    }
    commands_.clear();
    if (release_) break;
    cv_.wait(lk);
  }
  lk.unlock();
  engine.reset();
}

}  // namespace dfl::server
