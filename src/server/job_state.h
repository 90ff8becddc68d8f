// A request's progress on the HTTP side: each choice's text, logprobs and stats as its updates
// arrive, rendered either as one whole response or, update by update, as SSE text. Used by one
// HTTP thread at a time (the handler, then the stream's content provider); no locking.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/chat_output.h"
#include "server/job.h"
#include "server/openai_response.h"

namespace dfl::server {

struct ChoiceAcc {
  std::string text;
  std::vector<TokenLogprob> logprobs;
  bool finished = false;
  FinishReason reason = FinishReason::kNone;
  std::string error;
  std::optional<RequestStats> stats;
  // streaming only
  std::optional<ChatOutput> chat;
  int32_t tool_index = 0;   // tool-call index of the next call in this choice
  int64_t text_offset = 0;  // completions logprobs: text_offset of the next token
};

struct JobState {
  using Clock = std::chrono::steady_clock;

  std::shared_ptr<Job> job;
  ResponseHead head;
  std::string tool_prefix;           // tool-call ids: call_<prefix><choice>_<n>
  Clock::time_point start, deadline;
  Clock::time_point last_write;      // streams: when bytes were last sent (heartbeats)
  int32_t prompt_tokens = 0;
  bool in_think = false;             // the prompt opened a <think> block
  bool reasoning = false;            // split <think> blocks out of chat content
  std::vector<ChoiceAcc> choices;
  int32_t n_finished = 0;
  bool ended = false;                // the stream's terminator was produced
  std::string end_status = "ok";     // for the log line: ok | refused | timeout | disconnected | ...

  bool all_finished() const { return n_finished == int32_t(choices.size()); }
  // Records an update (kUpdate events only).
  void apply(const JobEvent& ev);
  Usage usage() const;
  SpecFigures spec() const;

  // The whole response once every choice finished.
  Json whole(const TokenText& text) const;

  // Streaming: begin() sets up the chat parsers and returns the role chunks (chat) — call once;
  // update() returns the SSE text one update adds (and records it); end() the usage chunk (if
  // asked for) and [DONE].
  std::string stream_begin();
  std::string stream_update(const JobEvent& ev, const TokenText& text);
  std::string stream_end();

  // The one log line: "<id> status=… n=… prompt=… completion=… tau=… accepted=a/d finish=…
  // end=… time=…s".
  std::string summary(int status) const;
};

}  // namespace dfl::server
