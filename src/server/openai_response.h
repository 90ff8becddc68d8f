// OpenAI response bodies: whole responses, SSE stream chunks, usage, per-request speculation
// figures, logprobs blocks and error objects. Pure functions of their inputs (no engine, no I/O).
//
// Shapes (what the official clients parse):
//   chat:        {id, object: "chat.completion", created, model, choices: [{index, message:
//                {role: "assistant", content, reasoning_content?, tool_calls?}, logprobs,
//                finish_reason}], usage, metrics}
//   completions: {id, object: "text_completion", created, model, choices: [{index, text,
//                logprobs, finish_reason}], usage, metrics}
//   chunks:      object "chat.completion.chunk" with choices[].delta, or "text_completion" with
//                choices[].text; finish_reason null until the choice's last chunk; an optional
//                last chunk with `choices: []` and `usage`; each is sent as "data: {json}\n\n",
//                the stream ends with "data: [DONE]\n\n".
//   metrics:     {"speculative_decoding": {num_spec_steps, num_draft_tokens,
//                num_accepted_tokens, mean_acceptance_length, acceptance_histogram}} — the
//                figures of vLLM's --per-request-spec-decode-metrics; a choice's last chunk carries
//                its own, the whole response and the usage chunk the sum over choices.
//   errors:      {"error": {message, type, param, code}} (param / code null when empty).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/request.h"
#include "server/api_error.h"
#include "server/chat_output.h"
#include "server/openai_request.h"

namespace dfl::server {

using Json = nlohmann::ordered_json;
// Text of one token id (for logprobs entries).
using TokenText = std::function<std::string(int32_t)>;

struct ResponseHead {
  std::string id;       // "chatcmpl-…" / "cmpl-…"
  int64_t created = 0;  // unix seconds
  std::string model;    // the served model name
};

struct SpecFigures {
  int64_t num_spec_steps = 0, num_draft_tokens = 0, num_accepted_tokens = 0;
  int64_t committed_in_cycles = 0;
  std::vector<int64_t> acceptance_histogram;
  void add(const RequestStats& s);
  double mean_acceptance_length() const {
    return num_spec_steps ? double(committed_in_cycles) / double(num_spec_steps) : 0.0;
  }
};

struct Usage {
  int64_t prompt_tokens = 0, completion_tokens = 0;
};

struct ChoiceOut {
  int32_t index = 0;
  std::string text;                   // chat: content; completions: text
  std::string reasoning;              // chat only; empty → omitted
  std::vector<ToolCall> tool_calls;   // chat only
  bool want_logprobs = false;
  std::vector<TokenLogprob> logprobs;
  std::string finish_reason;          // "stop" | "length" | "tool_calls"
};

// "stop" | "length" | "tool_calls" for a finished choice (cancelled / error map to "stop").
std::string finish_reason_text(FinishReason r, bool tool_calls);

Json spec_metrics_json(const SpecFigures& f);
Json usage_json(const Usage& u);
Json error_json(const ApiError& e);
Json error_json(int status, const std::string& message, const std::string& param = {},
                const std::string& code = {});

// logprobs blocks. chat: {"content": [{token, logprob, bytes, top_logprobs: [...]}]}.
// completions: {tokens, token_logprobs, top_logprobs: [{text: logprob}], text_offset}, offsets
// counted from `text_offset0`.
Json chat_logprobs_json(const std::vector<TokenLogprob>& lp, const TokenText& text);
Json completion_logprobs_json(const std::vector<TokenLogprob>& lp, const TokenText& text,
                              int64_t text_offset0);

Json whole_response(ApiKind kind, const ResponseHead& head, const std::vector<ChoiceOut>& choices,
                    const Usage& usage, const SpecFigures& spec, const TokenText& text);

// One stream chunk for choice `index`. chat: `role` adds delta.role = "assistant"; the delta
// carries reasoning_content / content / tool_calls (tool-call indices start at `tool_index0`).
// `finish_reason` empty → null; `spec` non-null adds the choice's metrics.
Json chat_chunk(const ResponseHead& head, int32_t index, bool role, const ChatDelta& delta,
                int32_t tool_index0, const Json& logprobs, const std::string& finish_reason,
                const SpecFigures* spec);
Json completion_chunk(const ResponseHead& head, int32_t index, const std::string& text,
                      const Json& logprobs, const std::string& finish_reason,
                      const SpecFigures* spec);
// The final `choices: []` chunk with usage (stream_options.include_usage) and summed metrics.
Json usage_chunk(ApiKind kind, const ResponseHead& head, const Usage& usage,
                 const SpecFigures& spec);

// GET /v1/models.
Json models_json(const std::string& name, int64_t created, int32_t max_context);

// "data: <json>\n\n" (invalid UTF-8 replaced by U+FFFD) and the terminator.
std::string sse_event(const Json& j);
inline constexpr const char* kSseDone = "data: [DONE]\n\n";
// Compact JSON text with invalid UTF-8 replaced (never throws).
std::string dump(const Json& j);

}  // namespace dfl::server
