// One HTTP request as the engine thread sees it: the parsed request (n choices) and the channel
// its events come back on. Shared between the HTTP handler thread (which waits on the channel)
// and the engine thread (which submits, cancels and feeds the channel from RequestUpdate
// callbacks).
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <vector>

#include "engine/request.h"
#include "server/api_error.h"
#include "server/openai_request.h"

namespace dfl::server {

struct JobEvent {
  enum class Kind : uint8_t { kAccepted, kRefused, kUpdate } kind = Kind::kUpdate;
  // kAccepted
  int32_t prompt_tokens = 0;
  bool in_think = false;  // the rendered prompt ends inside an open <think> block
  // kRefused
  std::optional<ApiError> error;
  // kUpdate (of choice `choice`)
  int32_t choice = 0;
  RequestUpdate update;                // update.stats / .trace are null here: see `stats`
  std::optional<RequestStats> stats;   // copied when update.finished
};

class JobChannel {
 public:
  void push(JobEvent e) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      q_.push_back(std::move(e));
    }
    cv_.notify_one();
  }
  // Next event, or nullopt once `deadline` passes.
  std::optional<JobEvent> pop(std::chrono::steady_clock::time_point deadline) {
    std::unique_lock<std::mutex> lk(mu_);
    if (!cv_.wait_until(lk, deadline, [&] { return !q_.empty(); })) return std::nullopt;
    JobEvent e = std::move(q_.front());
    q_.pop_front();
    return e;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<JobEvent> q_;
};

struct Job {
  ParsedRequest req;
  std::string log_id;  // response id, for logs and Request::client_id
  JobChannel channel;
  // Engine thread only:
  std::vector<RequestId> ids;  // one per submitted choice
  int32_t live = 0;            // choices submitted and not yet finished
  bool refused = false;        // a later choice was refused: events are no longer sent
};

}  // namespace dfl::server
