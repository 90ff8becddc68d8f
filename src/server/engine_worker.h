// The engine thread: constructs the dfl::Engine, then loops — apply queued submits and cancels,
// Engine::step(), publish EngineMetrics to ServerMetrics — until drained. Every Engine call of the
// server happens here; other threads only queue commands (submit / cancel) and read the
// immutable facts published once the engine has loaded (info, tokenizer).
//
// Submitting a Job: the prompt is rendered once (Engine::render_prompt: template + tokenizer),
// then n engine requests run on those ids, choice i with seed + i. The Job's channel receives
// kAccepted (prompt length, whether the prompt opened a <think> block) or kRefused (an ApiError:
// 400 invalid / too long, 429 queue full, 503 draining), then kUpdate events per choice, the last
// one with update.finished. A cancel of a finished or unknown job is ignored.
//
// Draining: drain(timeout) refuses new submits (503) and lets running jobs finish; those still
// running after the timeout are cancelled. The thread exits once no job is left.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/engine.h"
#include "server/job.h"
#include "server/metrics.h"

namespace dfl::server {

class EngineWorker {
 public:
  enum class State : uint8_t { kLoading, kReady, kDraining, kStopped, kFailed };

  EngineWorker(EngineOptions opts, ServerMetrics& metrics);
  ~EngineWorker();  // drains with a zero timeout and joins
  EngineWorker(const EngineWorker&) = delete;
  EngineWorker& operator=(const EngineWorker&) = delete;

  void start();
  State state() const { return state_.load(); }
  // Blocks until loaded (true) or failed (false).
  bool wait_loaded();
  const std::string& load_error() const { return load_error_; }
  // Valid once wait_loaded() returned true.
  const ModelInfo& info() const { return info_; }
  const Tokenizer* tokenizer() const { return tokenizer_; }
  bool default_thinking() const { return default_thinking_; }

  void submit(std::shared_ptr<Job> job);
  void cancel(std::shared_ptr<Job> job);
  void drain(double timeout_s);
  void join();

 private:
  struct Command {
    bool cancel = false;
    std::shared_ptr<Job> job;
  };
  void loop();
  void handle_submit(Engine& e, const std::shared_ptr<Job>& job);
  void handle_cancel(Engine& e, const std::shared_ptr<Job>& job);
  void cancel_all(Engine& e);

  EngineOptions opts_;
  ServerMetrics& metrics_;
  std::thread thread_;
  std::atomic<State> state_{State::kLoading};
  std::string load_error_;
  ModelInfo info_;
  const Tokenizer* tokenizer_ = nullptr;
  bool default_thinking_ = false;

  std::mutex mu_;  // guards commands_, drain_*; loaded_cv_ waits on state_
  std::condition_variable cv_, loaded_cv_;
  std::vector<Command> commands_;
  bool drain_requested_ = false;
  bool release_ = false;  // join(): the engine may be destroyed
  double drain_timeout_s_ = 0;

  // Engine thread only.
  std::unordered_map<Job*, std::shared_ptr<Job>> live_;
};

}  // namespace dfl::server
